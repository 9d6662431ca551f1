"""`ConfigOption[T]`: one configuration key, declared once with its type, default, unit and description.

Flink's `ConfigOption<T>` is the model. An option knows how to read its value from what a YAML
file or `-D key=value` gives (`parse`) and how to write it back (`format`); `Configuration.get`
returns the option's `T`, so mypy sees the type of every value a component reads. The value
types are the module's constants: `STRING`, `INTEGER`, `NUMBER`, `BOOLEAN`, `DURATION` (float
seconds) and `SIZE` (int bytes); a choice is a string restricted to its `choices`.

A declaration that contradicts itself (a default of another type, below its minimum, not one of
its choices, or that does not read back as itself) raises `TypeError` when it is made, so a
wrong default stops the import of the options module, not a master at run time.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType
from typing import Any, Generic, TypeVar, cast

from sparkdispatch.config.units import format_duration, format_size, parse_duration, parse_size

T = TypeVar("T")
C = TypeVar("C", bound=str)

_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})
_WHOLE_NUMBER = re.compile(r"\s*-?[0-9]+\s*")
_KEY = re.compile(r"[a-z0-9]+([.-][a-z0-9]+)*")


@dataclass(frozen=True)
class ValueType(Generic[T]):
    """How values of one type are read from a file or `-D` and written back."""

    name: str  # as the docs name the type
    python_type: type  # what a parsed value (and so a default) is an instance of
    parse: Callable[[object], T]
    format: Callable[[T], str]
    unit: str | None = None  # what a parsed value counts: "s" for durations, "bytes" for sizes


def _parse_string(raw: object) -> str:
    return "" if raw is None else str(raw)


def _parse_bool(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text not in _TRUE | _FALSE:
        raise ValueError(f"{raw!r} is not true or false")
    return text in _TRUE


def _parse_int(raw: object) -> int:
    if isinstance(raw, bool) or not _WHOLE_NUMBER.fullmatch(str(raw)):
        raise ValueError(f"{raw!r} is not a whole number")
    return int(str(raw))


def _parse_float(raw: object) -> float:
    try:
        if isinstance(raw, (int, float, str)):
            return float(raw)
    except ValueError:
        pass
    raise ValueError(f"{raw!r} is not a number")


def _parse_choice(raw: object) -> str:
    return str(raw).strip()


STRING: ValueType[str] = ValueType("string", str, _parse_string, str)
INTEGER: ValueType[int] = ValueType("integer", int, _parse_int, str)
NUMBER: ValueType[float] = ValueType("number", float, _parse_float, str)
BOOLEAN: ValueType[bool] = ValueType("true/false", bool, _parse_bool, lambda value: "true" if value else "false")
DURATION: ValueType[float] = ValueType("duration", float, parse_duration, format_duration, unit="s")
SIZE: ValueType[int] = ValueType("size", int, parse_size, format_size, unit="bytes")
CHOICE: ValueType[str] = ValueType("choice", str, _parse_choice, str)


@dataclass(frozen=True, eq=False)
class ConfigOption(Generic[T]):
    """One configuration key: its type, default, bounds and what it does.

    Options compare by identity: the one declared in `sparkdispatch.config.options` is the key
    a `Configuration` is read with.
    """

    key: str
    type: ValueType[T]
    default: T
    description: str
    minimum: T | None = None
    choices: tuple[T, ...] = ()
    default_doc: str | None = None  # how the default reads in the docs, where it is computed

    def __post_init__(self) -> None:
        if not _KEY.fullmatch(self.key):
            raise TypeError(f"configuration key {self.key!r} is not lower-case words joined by dots and dashes")
        default = self.default
        if type(default) is not self.type.python_type:
            raise TypeError(
                f"configuration option {self.key!r}: its default {default!r} is not of its type "
                f"({self.type.name}, a Python {self.type.python_type.__name__})"
            )
        try:
            written = self.parse(self.format(default))
        except ValueError as exc:
            raise TypeError(f"configuration option {self.key!r}: its default is refused: {exc}") from None
        if written != default:
            raise TypeError(f"configuration option {self.key!r}: its default {default!r} reads back as {written!r}")

    @property
    def unit(self) -> str | None:
        """What a value counts (`s`, `bytes`), or None for a value without a unit."""
        return self.type.unit

    def parse(self, raw: object) -> T:
        """The value `raw` (from a YAML file or `-D`) stands for; `ValueError` saying why it cannot be one."""
        value = self.type.parse(raw)
        if self.choices and value not in self.choices:
            raise ValueError(f"{raw!r} is not one of {', '.join(str(c) for c in self.choices)}")
        minimum = self.minimum
        if isinstance(minimum, (int, float)) and isinstance(value, (int, float)) and value < minimum:
            raise ValueError(f"{raw!r} is below the minimum {minimum:g}")
        return value

    def format(self, value: T) -> str:
        """`value` as a YAML file or `-D` writes it; `parse` reads it back as the same value."""
        return self.type.format(value)

    @property
    def default_text(self) -> str:
        """How the default reads in the docs."""
        return self.default_doc if self.default_doc is not None else self.format(self.default)

    def __repr__(self) -> str:
        return f"ConfigOption({self.key!r}, {self.type.name}, default={self.default_text!r})"


AnyOption = ConfigOption[Any]


@dataclass(frozen=True)
class KeyPrefix:
    """Keys under `prefix` that are not declared options pass through as they are (`spark.*`)."""

    prefix: str
    description: str

    def matches(self, key: str) -> bool:
        return key.startswith(self.prefix) and len(key) > len(self.prefix)


class Section:
    """Options the docs show under one heading, in the order they are declared.

    Its methods declare an option of each type and keep it in the section; a duration is declared
    as a `timedelta` and read as float seconds, a size as bytes.
    """

    def __init__(self, title: str) -> None:
        self.title = title
        self._options: list[AnyOption] = []
        self._prefixes: list[KeyPrefix] = []

    @property
    def options(self) -> tuple[AnyOption, ...]:
        return tuple(self._options)

    @property
    def prefixes(self) -> tuple[KeyPrefix, ...]:
        return tuple(self._prefixes)

    def _add(self, option: ConfigOption[T]) -> ConfigOption[T]:
        self._options.append(option)
        return option

    def string(self, key: str, default: str, description: str) -> ConfigOption[str]:
        return self._add(ConfigOption(key, STRING, default, description))

    def integer(
        self, key: str, default: int, description: str, *, minimum: int | None = None, default_doc: str | None = None
    ) -> ConfigOption[int]:
        return self._add(ConfigOption(key, INTEGER, default, description, minimum=minimum, default_doc=default_doc))

    def number(
        self, key: str, default: float, description: str, *, minimum: float | None = None
    ) -> ConfigOption[float]:
        return self._add(ConfigOption(key, NUMBER, default, description, minimum=minimum))

    def boolean(self, key: str, default: bool, description: str) -> ConfigOption[bool]:
        return self._add(ConfigOption(key, BOOLEAN, default, description))

    def duration(
        self, key: str, default: timedelta, description: str, *, minimum: timedelta | None = None
    ) -> ConfigOption[float]:
        if not isinstance(default, timedelta) or not isinstance(minimum, (timedelta, type(None))):
            raise TypeError(f"configuration option {key!r}: a duration's default and minimum are timedeltas")
        return self._add(
            ConfigOption(
                key,
                DURATION,
                default.total_seconds(),
                description,
                minimum=None if minimum is None else minimum.total_seconds(),
            )
        )

    def size(self, key: str, default: int, description: str, *, minimum: int | None = None) -> ConfigOption[int]:
        return self._add(ConfigOption(key, SIZE, default, description, minimum=minimum))

    def choice(self, key: str, choices: tuple[C, ...], default: C, description: str) -> ConfigOption[C]:
        return self._add(ConfigOption(key, cast(ValueType[C], CHOICE), default, description, choices=choices))

    def prefix(self, prefix: str, description: str) -> KeyPrefix:
        """Keys under `prefix` pass through undeclared (declared keys under it are still options)."""
        passthrough = KeyPrefix(prefix, description)
        self._prefixes.append(passthrough)
        return passthrough


def index_by_key(options: Iterable[AnyOption]) -> Mapping[str, AnyOption]:
    """The options by key; `TypeError` naming a key declared twice."""
    index: dict[str, AnyOption] = {}
    for option in options:
        if option.key in index:
            raise TypeError(f"configuration key {option.key!r} is declared twice")
        index[option.key] = option
    return MappingProxyType(index)
