"""The root of sparkdispatch's errors: `SparkDispatchError`, how a class declares its REST fields, and
the registry every class joins as it is defined."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType, NoneType, UnionType
from typing import Any, ClassVar, Self

JSONObject = dict[str, Any]

_REGISTRY: dict[str, type[SparkDispatchError]] = {}


class SparkDispatchError(Exception):
    """Root of sparkdispatch's own errors.

    A subclass's class-level annotations are the fields of its REST body, beside `errors` and
    `type`; each is an attribute of the error. Rebuilding one from a body (`from_fields`) calls
    its constructor: a parameter named `message` gets the body's first message, `details` the
    others, and a parameter named after a field that field, checked against its annotation (a
    field whose type admits None may be missing).
    """

    http_status: int = 500
    #: whether a task failing with this error may succeed when run again (the JobMaster restarts
    #: it under the job's restart strategy); a job whose task fails with one that may not fails at once
    restartable: ClassVar[bool] = True
    #: the REST body's fields, name → type, in body order (derived from the annotations)
    field_types: ClassVar[Mapping[str, object]] = MappingProxyType({})

    def __init__(self, message: str, *, details: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.details = list(details)

    def __init_subclass__(cls, *, own_fields_only: bool = False, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        hints = typing.get_type_hints(cls)
        own = {
            name: hints[name]
            for name in cls.__dict__.get("__annotations__", {})
            if typing.get_origin(hints[name]) is not ClassVar
        }
        base = next(b for b in cls.__bases__ if issubclass(b, SparkDispatchError))
        cls.field_types = MappingProxyType(own if own_fields_only else {**base.field_types, **own})
        if cls.__module__.partition(".")[0] == __name__.partition(".")[0]:
            if _REGISTRY.setdefault(cls.__name__, cls) is not cls:
                raise TypeError(f"two error classes are named {cls.__name__}")

    def messages(self) -> list[str]:
        """The message first, then any details, as the REST `errors` list."""
        return [self.message, *self.details]

    def fields(self) -> JSONObject:
        """This class's fields in its REST body, beside `errors` and `type`."""
        return {name: getattr(self, name) for name in self.field_types}

    def to_body(self) -> JSONObject:
        """The REST error body: `{"errors": [...], "type": "<class name>", ...fields}`."""
        return {"errors": self.messages(), "type": type(self).__name__, **self.fields()}

    def http_headers(self) -> dict[str, str]:
        """HTTP headers the REST answer of this error carries (e.g. `Retry-After`)."""
        return {}

    @classmethod
    def from_fields(cls, messages: Sequence[str], fields: Mapping[str, object]) -> Self:
        """Rebuild the error from a body's messages and fields; `KeyError` or `ValueError` when a
        field its constructor needs is missing or of another type."""
        parameters = inspect.signature(cls).parameters
        arguments: dict[str, Any] = {}
        if "message" in parameters:
            arguments["message"] = messages[0]
        if "details" in parameters:
            arguments["details"] = messages[1:]
        for name, hint in cls.field_types.items():
            if name not in parameters:
                continue  # derived by the constructor from the others
            if name in fields:
                arguments[name] = _checked(fields[name], hint, name)
            elif _admits_none(hint):
                arguments[name] = None
            elif parameters[name].default is inspect.Parameter.empty:
                raise KeyError(name)
        return cls(**arguments)


_REGISTRY[SparkDispatchError.__name__] = SparkDispatchError


def _admits_none(hint: object) -> bool:
    return isinstance(hint, UnionType) and NoneType in typing.get_args(hint)


def _checked(value: object, hint: object, name: str) -> object:
    """`value` if it is of the field type `hint` (str, int, bool, None, unions, list[...] and
    dict[str, ...] of them), else `ValueError` naming the field."""
    if isinstance(hint, UnionType):
        for member in typing.get_args(hint):
            try:
                return _checked(value, member, name)
            except ValueError:
                continue
        raise ValueError(f"{name} must be {hint}")
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin is list and isinstance(value, list):
        return [_checked(item, arguments[0], name) for item in value]
    if origin is dict and isinstance(value, dict):
        return {_checked(key, arguments[0], name): _checked(item, arguments[1], name) for key, item in value.items()}
    if hint is NoneType and value is None:
        return value
    if (
        isinstance(hint, type)
        and origin is None
        and isinstance(value, hint)
        and not (isinstance(value, bool) and hint is not bool)
    ):
        return value
    raise ValueError(f"{name} must be {getattr(hint, '__name__', hint)}")


ERROR_TYPES: Mapping[str, type[SparkDispatchError]] = MappingProxyType(_REGISTRY)
"""The registry: class name (a body's `type`) → class, every class of this package (they register
themselves as they are defined)."""
