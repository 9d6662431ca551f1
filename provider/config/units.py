"""Durations and sizes as configuration files write them: `500ms`, `4s`, `1min`; `64kb`, `10mb`.

Durations are read as float seconds (a bare number is milliseconds, as in Flink), sizes as bytes
(powers of 1024; a bare number is bytes). `format_duration` and `format_size` write a value back
in the largest unit that keeps it whole, so that what they write parses to the same value.
"""

from __future__ import annotations

import re

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

_DURATION_UNITS = {
    "ns": 1e-9,
    "nano": 1e-9,
    "nanos": 1e-9,
    "nanosecond": 1e-9,
    "nanoseconds": 1e-9,
    "us": 1e-6,
    "micro": 1e-6,
    "micros": 1e-6,
    "microsecond": 1e-6,
    "microseconds": 1e-6,
    "ms": 1e-3,
    "milli": 1e-3,
    "millis": 1e-3,
    "millisecond": 1e-3,
    "milliseconds": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
}
_SIZE_UNITS = {
    "b": 1,
    "bytes": 1,
    "k": KiB,
    "kb": KiB,
    "m": MiB,
    "mb": MiB,
    "g": GiB,
    "gb": GiB,
    "t": 1 << 40,
    "tb": 1 << 40,
}
_NUMBER_WITH_UNIT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_duration(text: object) -> float:
    """`500ms`, `4s`, `1min`, `2h` → seconds; a bare number is milliseconds, as in Flink."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a duration")
    if isinstance(text, (int, float)):
        return float(text) / 1000.0
    match = _NUMBER_WITH_UNIT.fullmatch(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a duration (write it as 500ms, 4s, 1min, 2h)")
    number, unit = float(match.group(1)), match.group(2).lower()
    if not unit:
        return number / 1000.0
    if unit not in _DURATION_UNITS:
        raise ValueError(f"{text!r} has an unknown time unit {unit!r} (use ms, s, min, h or d)")
    return number * _DURATION_UNITS[unit]


def parse_size(text: object) -> int:
    """`10mb`, `64kb`, `1g` → bytes (powers of 1024); a bare number is bytes."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a size")
    if isinstance(text, int):
        return text
    match = _NUMBER_WITH_UNIT.fullmatch(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a size (write it as 512kb, 10mb, 1gb)")
    number, unit = float(match.group(1)), match.group(2).lower() or "b"
    if unit not in _SIZE_UNITS:
        raise ValueError(f"{text!r} has an unknown size unit {unit!r} (use b, kb, mb, gb or tb)")
    return int(number * _SIZE_UNITS[unit])


def format_duration(seconds: float) -> str:
    """The inverse of `parse_duration`, in the largest unit that keeps the value whole."""
    ms = round(seconds * 1000)
    for unit, factor in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms and ms % factor == 0:
            return f"{ms // factor}{unit}"
    return f"{ms}ms"


def format_size(size: int) -> str:
    """The inverse of `parse_size`, in the largest unit that keeps the value whole (`10mb`, `64kb`)."""
    for unit, factor in (("tb", 1 << 40), ("gb", GiB), ("mb", MiB), ("kb", KiB)):
        if size and size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)
