"""Pages of a REST list (`GET /jobs`, `GET /taskmanagers`): `?limit=N&after=<cursor>`.

A list is answered a page at a time, at most `rest.list.page-size` entries (also what `limit` may
ask for), with `next`: the cursor of the following page, or null on the last one. The cursor is
the sort key of the page's last entry, opaque to the client, so paging is stable while the list
changes: an entry added or expired meanwhile does not shift the pages after it, and a cursor
whose entry is gone still finds its place.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from aiohttp import web

from sparkdispatch.errors import InvalidRequest
from sparkdispatch.rest.inputs import query_int

T = TypeVar("T")
#: a sort key: what an entry is ordered by, e.g. (start time, job id)
SortKey = tuple[int | str, ...]

_MAX_CURSOR = 512


@dataclass(frozen=True)
class PageRequest:
    """What a list request asks for: at most `limit` entries after the entry whose key is `after`."""

    limit: int
    after: SortKey | None = None

    @classmethod
    def of(cls, request: web.Request, *, page_size: int) -> PageRequest:
        """The request's `limit` (default and most: `page_size`) and `after`; `InvalidRequest` naming
        the query parameter that is malformed or over the limit."""
        limit = query_int(request, "limit")
        if limit is not None and not 1 <= limit <= page_size:
            raise InvalidRequest(
                "request query", {"limit": [f"must be 1-{page_size} (rest.list.page-size), got {limit}"]}
            )
        cursor = request.query.get("after")
        return cls(limit=limit or page_size, after=None if cursor is None else decode_cursor(cursor))


@dataclass(frozen=True)
class Page(Generic[T]):
    """The entries of one page and the cursor of the next (None on the last page)."""

    entries: Sequence[T]
    next: str | None


def page_of(entries: Sequence[T], key: Callable[[T], SortKey], request: PageRequest, *, descending: bool) -> Page[T]:
    """The page `request` asks for, of `entries` already sorted by `key` (descending or not)."""
    start = 0
    if request.after is not None:
        after = request.after
        try:
            start = next(
                (
                    index
                    for index, entry in enumerate(entries)
                    if (key(entry) < after if descending else key(entry) > after)
                ),
                len(entries),
            )
        except TypeError:  # a key of other parts than this list's: not a cursor it gave
            raise _foreign_cursor() from None
    page = entries[start : start + request.limit]
    more = start + request.limit < len(entries)
    return Page(page, encode_cursor(key(page[-1])) if more and page else None)


def encode_cursor(key: SortKey) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(key), separators=(",", ":")).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> SortKey:
    """The sort key a cursor holds; `InvalidRequest` naming `after` for one this master did not give."""
    try:
        if len(cursor) > _MAX_CURSOR:
            raise ValueError("too long")
        key = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(key, list) or not key or not all(isinstance(part, int | str) for part in key):
            raise ValueError("not a key")
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise _foreign_cursor() from None
    return tuple(key)


def _foreign_cursor() -> InvalidRequest:
    return InvalidRequest("request query", {"after": ["must be the `next` cursor of a previous page of this list"]})
