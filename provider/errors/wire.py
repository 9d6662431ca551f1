"""An error on the wire: the `/v1/` error header, and the error an HTTP error answer stands for."""

from __future__ import annotations

import json
from typing import Any

from sparkdispatch.errors.base import ERROR_TYPES, SparkDispatchError

_MAX_TEXT = 500

#: Under `/v1/` (Flink's REST prefix) an error body is Flink's `{"errors": [...]}` alone; the rest
#: of `to_body()` (`type` and the class's fields, as compact JSON) travels in this header.
ERROR_HEADER = "X-SparkDispatch-Error"
_MAX_HEADER = 4096


def error_header(error: SparkDispatchError) -> str:
    """The `ERROR_HEADER` value of `error`: its type and fields, or its type alone when they are long."""
    value = json.dumps({"type": type(error).__name__, **error.fields()}, separators=(",", ":"))
    return value if len(value) <= _MAX_HEADER else json.dumps({"type": type(error).__name__})


def error_from_body(status: int, text: str, *, header: str | None = None) -> SparkDispatchError:
    """The error an HTTP error answer stands for: the class its body's `type` names, with its fields.

    `header` is the answer's `ERROR_HEADER` (a `/v1/` answer), whose type and fields complete a
    body that has none. A body that is not JSON, names no registered class or lacks a field of
    its class becomes a `SparkDispatchError` carrying the answer's status and its messages (or text).
    """
    try:
        body = json.loads(text) if text.strip() else None
    except ValueError:
        body = None
    messages = _body_messages(body)
    error: SparkDispatchError | None = None
    if isinstance(body, dict) and messages:
        if "type" not in body and header:
            body = {**_header_fields(header), **body}
        cls = ERROR_TYPES.get(str(body.get("type")))
        if cls is not None:
            try:
                error = cls.from_fields(messages, body)
            except (KeyError, TypeError, ValueError):
                error = None
    if error is None:
        fallback = messages or [text.strip()[:_MAX_TEXT] or f"HTTP {status} without a body"]
        error = SparkDispatchError(fallback[0], details=fallback[1:])
    if error.http_status != status:
        error.http_status = status
    return error


def _header_fields(header: str) -> dict[str, Any]:
    try:
        fields = json.loads(header)
    except ValueError:
        return {}
    return fields if isinstance(fields, dict) else {}


def _body_messages(body: object) -> list[str]:
    listed = body.get("errors") if isinstance(body, dict) else None
    if isinstance(listed, list) and listed:
        return [str(message) for message in listed]
    return []
