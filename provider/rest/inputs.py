"""What a REST request brings, checked before anything uses it: the ids in its path and its body.

An id from the path must match its pattern (a job id is 32 lowercase hex characters), so no
malformed id ever reaches a store or the file system (`GET /jobs/..%2F..%2Fx` is refused with
`400` `InvalidRequest` naming `job_id`). A JSON body must come as `application/json` (`415`
otherwise, unread: a page of another site can send a `text/plain` or form body without asking).
A body is read in chunks, each within `rest.body-timeout` (connections.py), and refused with
`413` as soon as it passes the limit, before it is parsed; a large one is parsed (and a JobGraph
validated) in a thread, so the master's loop keeps answering meanwhile; a large JobGraph is kept
out of the garbage collector's walks while it lives (`LONG_LIVED_GRAPHS.keep`).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from aiohttp import web

from sparkdispatch.errors import InvalidRequest, RequestTooLarge, UnsupportedMediaType
from sparkdispatch.model.job_graph import JOB_ID_PATTERN, VERTEX_ID_PATTERN, JobGraph
from sparkdispatch.jobmaster.long_lived import LONG_LIVED_GRAPHS
from sparkdispatch.model.protocol import TASK_EXECUTOR_ID_PATTERN
from sparkdispatch.rest.connections import read_within
from sparkdispatch.model.schema import json_type, parse_json

JSON_CONTENT_TYPE = "application/json"

# an execution id is the master's own 32 hex digits; a TaskExecutor's report of an unknown one is
# answered as stale (409), so anything id-like passes here
EXECUTION_ID_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")

PATH_IDS: dict[str, tuple[re.Pattern[str], str]] = {
    "job_id": (JOB_ID_PATTERN, "must be 32 lowercase hex characters"),
    "task_executor_id": (
        TASK_EXECUTOR_ID_PATTERN,
        "must be 1-200 letters, digits or '_.@:-', not starting with '.@:-'",
    ),
    "execution_id": (
        EXECUTION_ID_PATTERN,
        "must be 1-128 letters, digits, '_', '.' or '-', not starting with '.' or '-'",
    ),
    "vertex_id": (VERTEX_ID_PATTERN, "must be 1-128 letters, digits, '_', '.' or '-', not starting with '.' or '-'"),
}

# bodies above this size are parsed in a thread; below it, a thread costs more than the parse
PARSE_IN_THREAD_ABOVE = 64 * 1024


def path_id(request: web.Request, name: str) -> str:
    """The id `name` of the request's path; `InvalidRequest` naming it if it does not match its pattern."""
    return checked_id(name, request.match_info[name])


#: A query integer (an offset, an attempt) has at most this many digits: 10^18 bytes is no offset.
MAX_QUERY_INT_DIGITS = 18


def query_int(request: web.Request, name: str) -> int | None:
    """The query parameter `name` as a non-negative integer, None when absent; else `InvalidRequest`."""
    value = request.query.get(name)
    if value is None:
        return None
    # ASCII digits only (str.isdigit admits '²', which int() refuses), and few enough for int()
    if not (value.isascii() and value.isdigit()) or len(value) > MAX_QUERY_INT_DIGITS:
        raise InvalidRequest(
            "request query",
            {name: [f"must be a non-negative integer of at most {MAX_QUERY_INT_DIGITS} digits, got {value[:64]!r}"]},
        )
    return int(value)


def checked_id(name: str, value: str) -> str:
    """`value`, if it is a well-formed id of kind `name` (a key of `PATH_IDS`); else `InvalidRequest`."""
    pattern, rule = PATH_IDS[name]
    if not pattern.fullmatch(value):
        shown = value if len(value) <= 64 else value[:61] + "..."
        raise InvalidRequest("request path", {name: [f"{rule}, got {shown!r}"]})
    return value


async def read_body(request: web.Request, *, limit: int, what: str, limit_name: str = "rest.max-body-size") -> bytes:
    """The request's body, refused with `RequestTooLarge` once it is over `limit` bytes (before it
    is read, when `Content-Length` says so; `limit_name` names the limit), or with `RequestTimeout`
    when it stalls (`read_within`)."""
    declared = request.content_length
    if declared is not None and declared > limit:
        raise RequestTooLarge(f"the {what} is {declared} bytes; {limit_name} allows {limit}")
    body = bytearray()
    while chunk := await read_within(request, request.content.readany(), what=what):
        body += chunk
        if len(body) > limit:
            raise RequestTooLarge(f"the {what} is larger than the {limit} bytes {limit_name} allows")
    return bytes(body)


def require_json(request: web.Request, what: str) -> None:
    """`UnsupportedMediaType` unless the request's body is declared `application/json`."""
    if request.content_type != JSON_CONTENT_TYPE:
        sent = request.headers.get("Content-Type")
        instead = f", not {sent!r}" if sent else ""
        raise UnsupportedMediaType(
            f"{request.method} {request.path}: the {what} must be sent with Content-Type: {JSON_CONTENT_TYPE}{instead}"
        )


async def read_json(request: web.Request, *, limit: int, what: str) -> Any:
    """The request's JSON body (None when empty), read as `read_body` does; `UnsupportedMediaType`
    if it is not declared JSON, `InvalidRequest` if it is not JSON."""
    require_json(request, what)
    body = await read_body(request, limit=limit, what=what)
    if not body:
        return None
    if len(body) > PARSE_IN_THREAD_ABOVE:
        return await asyncio.to_thread(_parse_json, body, what)
    return _parse_json(body, what)


def _parse_json(body: bytes, what: str) -> Any:
    try:
        return parse_json(body)
    except ValueError as exc:
        raise InvalidRequest(what, {"body": [str(exc)]}) from None


async def read_job_graph(request: web.Request, *, limit: int) -> JobGraph:
    """The JobGraph in the request's body, validated (and serialised for storage) off the loop when large."""
    require_json(request, "JobGraph")
    body = await read_body(request, limit=limit, what="JobGraph")
    if len(body) > PARSE_IN_THREAD_ABOVE:
        return await asyncio.to_thread(LONG_LIVED_GRAPHS.keep, lambda: _job_graph(body))
    return _job_graph(body)


def _job_graph(body: bytes) -> JobGraph:
    return JobGraph.from_json(body).prepare()


def json_object(value: Any, what: str) -> dict[str, Any]:
    """`value` if it is a JSON object; `InvalidRequest` naming its type otherwise."""
    if not isinstance(value, dict):
        raise InvalidRequest(what, {"body": [f"expected a JSON object, got {json_type(value)}"]})
    return value


def repair_vertices(body: Any) -> list[str]:
    """The vertex ids of a repair request's body `{"vertices": ["id", ...]}`; else `InvalidRequest`."""
    vertices = json_object(body, "repair request").get("vertices")
    if not isinstance(vertices, list) or not vertices or not all(isinstance(v, str) for v in vertices):
        raise InvalidRequest(
            "repair request", {"vertices": [f"expected a non-empty list of vertex ids, got {json_type(vertices)}"]}
        )
    for vertex_id in vertices:
        checked_id("vertex_id", vertex_id)
    return vertices
