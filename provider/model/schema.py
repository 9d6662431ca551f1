"""The strict marshmallow base every JSON form of sparkdispatch is defined on, and its loader.

A schema refuses unknown fields (`StrictSchema`); `load` turns marshmallow's nested error
messages into one flat map, dotted field path → plain reasons (`vertices[1].id: duplicate ...`),
and raises the caller's own error class with it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from marshmallow import RAISE, Schema, ValidationError, validate

from sparkdispatch.errors import SparkDispatchError

T = TypeVar("T")
FieldErrors = dict[str, list[str]]
ErrorFactory = Callable[[FieldErrors], SparkDispatchError]


class StrictSchema(Schema):
    """A schema that refuses fields it does not declare."""

    class Meta:
        unknown = RAISE


class WholeMatch(validate.Regexp):
    """marshmallow's `Regexp`, matched against the whole value (`fullmatch`).

    The id patterns keep their `^...$` anchors for the OpenAPI document (JSON Schema patterns are
    not anchored), but Python's `$` also matches before a final newline: `re.match` would let
    `"<id>\\n"` pass.
    """

    def __call__(self, value: Any) -> Any:
        if self.regex.fullmatch(value) is None:
            raise ValidationError(self._format_error(value))
        return value


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


def parse_json(text: str | bytes) -> Any:
    """`text` (bytes in UTF-8) parsed as strict JSON; `ValueError` saying why it is not JSON.

    Python's `NaN`, `Infinity` and `-Infinity` are refused (they are not JSON, and would go on
    to clients as such), and so are strings with an unpaired surrogate (no UTF-8 text holds one)
    and nesting deeper than the parser's recursion allows.
    """
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        value = json.loads(text, parse_constant=_refuse_constant)
        # `\ud800`-`\udfff` escapes are rare: only then is every string looked at
        if _SURROGATE_ESCAPE.search(text):
            json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeError:
        raise ValueError("not valid JSON: not UTF-8 text (or a string holds an unpaired surrogate)") from None
    except ValueError as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise ValueError("not valid JSON: nested too deeply") from None
    return value


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def dump_many(schema: Schema, values: Sequence[object]) -> list[dict[str, Any]]:
    """The JSON forms of `values` as `schema` (built with `many=True`) defines them."""
    return cast(list[dict[str, Any]], schema.dump(values))


def json_type(value: object) -> str:
    """The JSON type name of a parsed JSON value (`object`, `array`, `string`, ...), for messages."""
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return "string" if isinstance(value, str) else "null" if value is None else type(value).__name__


def drop_none(data: dict[str, Any], *names: str) -> dict[str, Any]:
    """`data` without those of `names` whose value is None (a dump hook's compact form)."""
    for name in names:
        if data.get(name) is None:
            data.pop(name, None)
    return data


def drop_empty(data: dict[str, Any], *names: str) -> dict[str, Any]:
    """`data` without those of `names` whose list is empty, the others as lists (a dump hook's compact form)."""
    for name in names:
        if data.get(name):
            data[name] = list(data[name])
        else:
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
