"""JSON forms derived from type hints: a frozen dataclass declares a shape once, and its JSON form,
its marshmallow schema (so its OpenAPI schema) and its parser all follow from that declaration.

    @dataclass(frozen=True)
    class JobSummary(Shape):
        id: str
        status: JobStatus
        end_time: int | None
        start_time: int = field(metadata=wire("start-time"))

A field's type says its JSON form: `str`, `int`, `float`, `bool`; an `Enum` (its value); a
`Literal` of strings; `X | None` (`null`); `tuple[X, ...]` (an array); `Mapping[str, X]` (an
object); another `Shape`; or a model class whose JSON form has a hand-written schema
(`register_schema`). `wire(...)` in a field's metadata gives its JSON name, a description, a
pattern its text must match, or `omit_none` (the key is left out while the value is None, and may
be missing when parsed; its default is None). Every other field is always written, `null`
included, and required when parsed unless it has a default (a field added later, which an older
master's answer lacks, then takes it); an unknown field is refused.

`to_dict()` writes the JSON form by a plan made once per class (the hot path of the REST answers:
no schema runs); `from_dict()` parses through the schema (`schema_of`), raising `InvalidShape`
naming each field.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import typing
from collections.abc import Callable, Mapping
from types import NoneType, UnionType
from typing import Any, ClassVar, Self, cast

from marshmallow import RAISE, Schema, fields, post_dump, post_load, validate

from sparkdispatch.errors import InvalidShape
from sparkdispatch.model.schema import FieldErrors, StrictSchema, WholeMatch, load


def wire(
    name: str | None = None,
    *,
    description: str | None = None,
    pattern: re.Pattern[str] | None = None,
    omit_none: bool = False,
) -> dict[str, object]:
    """A field's metadata (`field(metadata=wire(...))`): its JSON `name` when it differs from the
    attribute's, a `description` for the OpenAPI document, a `pattern` its whole text must match,
    and `omit_none` to leave the key out while the value is None."""
    return {"wire": _Wire(name, description, pattern, omit_none)}


@dataclasses.dataclass(frozen=True)
class _Wire:
    name: str | None = None
    description: str | None = None
    pattern: re.Pattern[str] | None = None
    omit_none: bool = False


class Shape:
    """A frozen dataclass whose JSON form is derived from its fields (see the module docstring)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (an object of JSON values, ready for `json.dumps`)."""
        return _plan(type(self))(self)

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Parse a JSON form; `InvalidShape` naming each field that does not fit."""

        def refused(field_errors: FieldErrors) -> InvalidShape:
            return InvalidShape(cls.__name__, field_errors)

        return load(_schema_instance(cls), data, cls, refused)


_REGISTERED: dict[type, type[Schema]] = {}
# made once per class, on first use
_SCHEMAS: dict[type, type[Schema]] = {}
_INSTANCES: dict[type, Schema] = {}
_PLANS: dict[type, Callable[[object], dict[str, Any]]] = {}


def register_schema(cls: type, schema: type[Schema]) -> None:
    """Declare that `cls`'s JSON form is the one `schema` (hand-written) dumps and loads, so a
    shape may hold a `cls`."""
    _REGISTERED[cls] = schema


def schema_of(cls: type) -> type[Schema]:
    """The marshmallow schema of a shape (or the one registered for a model class); named
    `<class>Schema`, so apispec names its OpenAPI schema after the class."""
    if cls in _REGISTERED:
        return _REGISTERED[cls]
    if cls not in _SCHEMAS:
        _SCHEMAS[cls] = _make_schema(cls)
    return _SCHEMAS[cls]


def _make_schema(cls: type) -> type[Schema]:
    if not (issubclass(cls, Shape) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"{cls!r} is neither a Shape dataclass nor a class with a registered schema")
    hints = typing.get_type_hints(cls)
    attributes: dict[str, object] = {}
    tuples: list[str] = []
    omitted: list[str] = []
    for field in dataclasses.fields(cls):
        declared = _declared(field)
        marshmallow_field = _field(hints[field.name], f"{cls.__name__}.{field.name}")
        if declared.name is not None:
            marshmallow_field.data_key = declared.name
        if declared.description is not None:
            marshmallow_field.metadata = {**marshmallow_field.metadata, "description": declared.description}
        if declared.pattern is not None:
            marshmallow_field.validators = [*marshmallow_field.validators, WholeMatch(declared.pattern)]
        if declared.omit_none:  # never `null` on the wire: absent, and then the field's default
            if field.default is not None:
                raise TypeError(f"{cls.__name__}.{field.name}: a field left out while None defaults to None")
            marshmallow_field.required = False
            marshmallow_field.allow_none = False
            omitted.append(declared.name or field.name)
        elif field.default is not dataclasses.MISSING:  # added later: an older master's answer lacks it
            marshmallow_field.required = False
        attributes[field.name] = marshmallow_field
        if typing.get_origin(_without_none(hints[field.name])) is tuple:
            tuples.append(field.name)
    attributes["shape"] = cls
    attributes["tuples"] = tuple(tuples)
    attributes["omitted"] = tuple(omitted)
    attributes["Meta"] = type("Meta", (), {"unknown": RAISE, "register": False})
    return type(f"{cls.__name__}Schema", (_ShapeSchema,), attributes)


class _ShapeSchema(StrictSchema):
    shape: ClassVar[type]
    tuples: ClassVar[tuple[str, ...]]  # fields loaded as lists, held as tuples (the shapes are frozen)
    omitted: ClassVar[tuple[str, ...]]  # JSON names left out while None

    @post_dump
    def omit(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        for name in self.omitted:
            if data.get(name) is None:
                data.pop(name, None)
        return data

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> object:
        for name in self.tuples:
            if data.get(name) is not None:
                data[name] = tuple(data[name])
        return self.shape(**data)


def _schema_instance(cls: type) -> Schema:
    if cls not in _INSTANCES:
        _INSTANCES[cls] = schema_of(cls)()
    return _INSTANCES[cls]


def _declared(field: dataclasses.Field[object]) -> _Wire:
    declared = field.metadata.get("wire", _Wire())
    if not isinstance(declared, _Wire):
        raise TypeError(f"field {field.name}: metadata 'wire' is made by wire()")
    return declared


def _field(hint: object, where: str) -> fields.Field[Any]:
    """The marshmallow field of a type hint; required, and nullable when the hint admits None."""
    field = _field_of(_without_none(hint, where), where)
    field.required = True
    field.allow_none = isinstance(hint, UnionType) and NoneType in typing.get_args(hint)
    return field


def _field_of(hint: object, where: str) -> fields.Field[Any]:
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if hint is bool:
        return fields.Boolean()
    if hint is int:
        return fields.Integer(strict=True)
    if hint is float:
        return fields.Float()
    if hint is str:
        return fields.String()
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return fields.Enum(hint, by_value=fields.String)
    if origin is typing.Literal and all(isinstance(value, str) for value in arguments):
        return fields.String(validate=validate.OneOf(arguments))
    if (
        origin is tuple
        and len(arguments) == 2
        and arguments[1] is Ellipsis
        and typing.get_origin(arguments[0]) is not tuple
    ):  # a tuple of tuples would load as lists
        return fields.List(_field(arguments[0], where))
    if origin is Mapping and arguments[0] is str:
        return fields.Dict(keys=fields.String(), values=_field(arguments[1], where))
    if isinstance(hint, type):
        return fields.Nested(schema_of(hint))
    raise TypeError(f"{where}: no JSON form for {hint!r}")


def _without_none(hint: object, where: str = "") -> object:
    """`X` of `X | None`; any other hint as it is."""
    if not isinstance(hint, UnionType):
        return hint
    others = [member for member in typing.get_args(hint) if member is not NoneType]
    if len(others) != 1:
        raise TypeError(f"{where}: a union other than `X | None` has no JSON form")
    return others[0]


# -- writing ----------------------------------------------------------------------------------
# A shape's writer is Python source made from its fields and compiled once, as `dataclasses` makes
# `__init__`: one dict display per object, nested shapes and lists of them inlined. A GET /jobs/{id}
# of 100,000 subtasks writes that many objects; a call and a loop over the fields for each was
# several times slower.


def _plan(cls: type) -> Callable[[object], dict[str, Any]]:
    """The function that writes a `cls`'s JSON form, made from its fields once."""
    if cls not in _PLANS:
        _PLANS[cls] = _make_plan(cls)
    return _PLANS[cls]


def _make_plan(cls: type) -> Callable[[object], dict[str, Any]]:
    schema_of(cls)  # refuse a field without a JSON form here too
    source = _Source()
    body = source.shape(cls, "value", depth=0, path=(cls,))
    steps = [f"    body = {body[0]}"] + [f"    {line}" for line in body[1]]
    text = "def write(value):\n" + "\n".join(steps) + "\n    return body\n"
    namespace = dict(source.names)
    exec(compile(text, f"<JSON writer of {cls.__qualname__}>", "exec"), namespace)
    return cast(Callable[[object], dict[str, Any]], namespace["write"])


class _Source:
    """Python expressions that write JSON values, and the names they use."""

    def __init__(self) -> None:
        self.names: dict[str, object] = {}

    def shape(self, cls: type, value: str, *, depth: int, path: tuple[type, ...]) -> tuple[str, list[str]]:
        """A dict display of `value`'s always-written fields, and the statements that add the fields
        left out while None to `body` (at the top level only: nested shapes have none)."""
        hints = typing.get_type_hints(cls)
        entries: list[str] = []
        statements: list[str] = []
        for field in dataclasses.fields(cls):
            declared = _declared(field)
            key = repr(declared.name or field.name)
            item = f"{value}.{field.name}"
            hint = hints[field.name]
            written = self.value(_without_none(hint), item, depth=depth, path=path)
            if isinstance(hint, UnionType) and written != item:
                written = f"(None if {item} is None else {written})"
            if declared.omit_none:  # a shape that has such a field is never inlined (`_omits`)
                statements.append(f"if {item} is not None: body[{key}] = {written}")
            else:
                entries.append(f"{key}: {written}")
        return "{" + ", ".join(entries) + "}", statements

    def value(self, hint: object, value: str, *, depth: int, path: tuple[type, ...]) -> str:
        """An expression of the JSON form of `value`, of type `hint`."""
        origin, arguments = typing.get_origin(hint), typing.get_args(hint)
        if hint in (bool, int, float, str) or origin is typing.Literal:
            return value
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return f"{value}.value"
        if isinstance(hint, UnionType):  # `X | None` inside a container
            return f"(None if {value} is None else {self.value(_without_none(hint), value, depth=depth, path=path)})"
        item = f"item{depth}"
        if origin is tuple:
            written = self.value(arguments[0], item, depth=depth + 1, path=path)
            return f"list({value})" if written == item else f"[{written} for {item} in {value}]"
        if origin is Mapping:
            written = self.value(arguments[1], item, depth=depth + 1, path=path)
            if written == item:
                return f"dict({value})"
            return f"{{k{depth}: {written} for k{depth}, {item} in {value}.items()}}"
        if isinstance(hint, type) and hint in _REGISTERED:
            return f"{self.name(_schema_instance(hint).dump)}({value})"
        if isinstance(hint, type) and not _omits(hint) and hint not in path:
            display, _ = self.shape(hint, value, depth=depth + 1, path=(*path, hint))
            return display
        if isinstance(hint, type):
            return f"{self.name(_plan(hint))}({value})"
        raise TypeError(f"no JSON form for {hint!r}")

    def name(self, thing: object) -> str:
        name = f"_f{len(self.names)}"
        self.names[name] = thing
        return name


def _omits(cls: type) -> bool:
    """Whether a shape leaves a field out while None (it is then written by its own writer)."""
    return any(_declared(field).omit_none for field in dataclasses.fields(cls))
