"""The strict marshmallow base every JSON form of sparkdispatch is defined on, and its loader.

A schema refuses unknown fields (`StrictSchema`); `load` turns marshmallow's nested error
messages into one flat map, dotted field path → plain reasons (`vertices[1].id: duplicate ...`),
and raises the caller's own error class with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from marshmallow import RAISE, Schema, ValidationError

from sparkdispatch.errors import SparkDispatchError

T = TypeVar("T")
FieldErrors = dict[str, list[str]]
ErrorFactory = Callable[[FieldErrors], SparkDispatchError]


class StrictSchema(Schema):
    """A schema that refuses fields it does not declare."""

    class Meta:
        unknown = RAISE


def load(schema: Schema, data: object, result: type[T], error: ErrorFactory) -> T:
    """`data` loaded by `schema` into a `result`; `error(field_errors)` is raised when it is refused."""
    if not isinstance(data, Mapping):
        raise error({"body": [f"expected a JSON object, got {type(data).__name__}"]})
    try:
        value = schema.load(data)
    except ValidationError as exc:
        raise error(flatten_errors(exc.messages)) from None
    if not isinstance(value, result):
        raise TypeError(f"{type(schema).__name__} loads a {type(value).__name__}, not a {result.__name__}")
    return value


def dump(schema: Schema, value: object) -> dict[str, Any]:
    """`value`'s JSON form as `schema` defines it."""
    return cast(dict[str, Any], schema.dump(value))


def drop_none(data: dict[str, Any], *names: str) -> dict[str, Any]:
    """`data` without those of `names` whose value is None (a dump hook's compact form)."""
    for name in names:
        if data.get(name) is None:
            data.pop(name, None)
    return data


def flatten_errors(messages: Any, prefix: str = "") -> FieldErrors:
    """marshmallow's nested messages as dotted field path → reasons (`body` for the whole value)."""
    flat: FieldErrors = {}
    if isinstance(messages, Mapping):
        for key, value in messages.items():
            if key == "_schema":
                name = prefix or "body"
            elif isinstance(key, int):
                name = f"{prefix}[{key}]"
            else:
                name = f"{prefix}.{key}" if prefix else str(key)
            for sub, reasons in flatten_errors(value, name).items():
                flat.setdefault(sub, []).extend(reasons)
    elif isinstance(messages, list) and all(isinstance(m, str) for m in messages):
        flat[prefix or "body"] = [_plain(m) for m in messages]
    elif isinstance(messages, list):
        for item in messages:
            for sub, reasons in flatten_errors(item, prefix).items():
                flat.setdefault(sub, []).extend(reasons)
    else:
        flat[prefix or "body"] = [_plain(str(messages))]
    return flat


def _plain(message: str) -> str:
    if message == "Unknown field.":
        return "unknown field"
    if message == "Missing data for required field.":
        return "missing required field"
    return message
