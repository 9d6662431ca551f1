"""The option declarations: each key declared once, with a default of its type that reads back as
itself, and read back typed, by its declaration only.

Some lines carry `# type: ignore[code]`: mypy runs over the tests with `warn_unused_ignores`, so
each such comment is an assertion that mypy reports that error there (a wrong-typed default, a
read by a key string, a value used as another type, a misspelt choice).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from datetime import timedelta
from typing import get_args

import pytest

from sparkdispatch.config import ConfigOption, Configuration
from sparkdispatch.config import options
from sparkdispatch.config.option import DURATION, INTEGER, STRING, Section, index_by_key
from sparkdispatch.config.options import HA_MODE, OPTIONS, OPTIONS_BY_KEY, REST_PORT, HaMode
from sparkdispatch.errors import ConfigurationError

_SHORT_PREFIXES = (("high-availability.", "ha."), ("restart-strategy.", "restart."), ("cleanup-strategy.", "cleanup."))


def _constant_name(key: str) -> str:
    for prefix, short in _SHORT_PREFIXES:
        if key.startswith(prefix):
            key = short + key[len(prefix) :]
    return re.sub(r"[.-]", "_", key).upper()


def test_every_default_reads_back_as_itself() -> None:
    for option in OPTIONS:
        assert option.parse(option.format(option.default)) == option.default, option.key
        if option.default_doc is None:  # the docs show what a file would hold
            assert option.parse(option.default_text) == option.default, option.key
    written = Configuration.from_mapping({option.key: option.format(option.default) for option in OPTIONS})
    assert written == Configuration.from_mapping({}) and written.to_flat() == {}


def test_every_value_is_of_its_options_type() -> None:
    config = Configuration.from_mapping({})
    for option in OPTIONS:
        assert type(config.get(option)) is option.type.python_type, option.key


def test_each_key_is_declared_once() -> None:
    keys = [option.key for option in OPTIONS]
    assert len(keys) == len(set(keys)) == len(OPTIONS_BY_KEY)


def test_a_key_declared_twice_is_refused() -> None:
    first = ConfigOption("a.b", INTEGER, 1, "one")
    with pytest.raises(TypeError, match="'a.b' is declared twice"):
        index_by_key([first, ConfigOption("a.b", STRING, "x", "two")])


def test_every_declared_constant_stands_in_a_section_and_is_named_after_its_key() -> None:
    declared = {name: value for name, value in vars(options).items() if isinstance(value, ConfigOption)}
    assert {id(option) for option in declared.values()} == {id(option) for option in OPTIONS}, (
        "an option outside every section of SECTIONS, or a constant bound twice"
    )
    for name, option in declared.items():
        assert name == _constant_name(option.key)


def _wrong_type() -> object:
    return ConfigOption[int]("a.b", INTEGER, "8081", "a port written as a string")  # type: ignore[arg-type]


def _bool_for_int() -> object:
    return ConfigOption("a.b", INTEGER, True, "a bool is an int to Python, not to us")


def _seconds_for_duration() -> object:
    return Section("s").duration("a.b", 5, "seconds where a timedelta belongs")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("declare", "words"),
    [
        (_wrong_type, "its default '8081' is not of its type (integer, a Python int)"),
        (_bool_for_int, "its default True is not of its type (integer, a Python int)"),
        (_seconds_for_duration, "a duration's default and minimum are timedeltas"),
        (lambda: ConfigOption("a.b", INTEGER, 0, "d", minimum=1), "below the minimum 1"),
        (lambda: Section("s").choice("a.b", ("x", "y"), "z", "d"), "'z' is not one of x, y"),
        (lambda: ConfigOption("a.b", DURATION, 0.0004, "below a millisecond"), "reads back as 0.0"),
        (lambda: ConfigOption("a_b", STRING, "", "d"), "is not lower-case words"),
    ],
    ids=["str-for-int", "bool-for-int", "int-for-duration", "below-minimum", "not-a-choice", "not-whole-ms", "key"],
)
def test_a_declaration_that_contradicts_itself_is_refused_when_made(declare: Callable[[], object], words: str) -> None:
    with pytest.raises(TypeError, match=re.escape(words)):
        declare()


def test_a_section_declares_durations_as_timedeltas_read_as_seconds_and_sizes_as_bytes() -> None:
    section = Section("s")
    timeout = section.duration("a.timeout", timedelta(minutes=1), "d", minimum=timedelta(milliseconds=10))
    limit = section.size("a.limit", 64 << 10, "d", minimum=1)
    assert (timeout.default, timeout.minimum, timeout.unit, timeout.default_text) == (60.0, 0.01, "s", "1min")
    assert (limit.default, limit.unit, limit.default_text) == (65536, "bytes", "64kb")
    assert section.options == (timeout, limit)


def test_an_option_is_read_by_its_declaration_not_by_a_key_string() -> None:
    config = Configuration.from_mapping({"rest.port": "9000"})
    assert config.get(REST_PORT) == 9000
    with pytest.raises(TypeError, match="read by a ConfigOption of sparkdispatch.config.options"):
        config.get("rest.port")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not subscriptable"):
        _ = config["rest.port"]  # type: ignore[index]


def test_an_option_not_declared_is_refused() -> None:
    config = Configuration.from_mapping({})
    stray = ConfigOption("rest.prot", INTEGER, 1, "a misspelt key, declared nowhere")
    with pytest.raises(ConfigurationError, match="'rest.prot' is not one declared in sparkdispatch.config.options"):
        config.get(stray)
    copy = dataclasses.replace(REST_PORT, default=1)  # the declared key, another declaration
    with pytest.raises(ConfigurationError, match="'rest.port' is not one declared"):
        config.get(copy)


def test_mypy_sees_the_type_of_each_value() -> None:
    config = Configuration.from_mapping({"high-availability.mode": "zookeeper", "rest.port": "9000"})
    mode: HaMode = config.get(HA_MODE)
    assert mode in get_args(HaMode)
    assert mode != "zookeper"  # type: ignore[comparison-overlap]
    port: str = config.get(REST_PORT)  # type: ignore[assignment]
    assert isinstance(port, int)  # for mypy, what follows is unreachable: keep this last
