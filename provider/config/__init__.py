"""Configuration: typed options, declared once, and the frozen `Configuration` built from them.

- `options`: every key as a `ConfigOption[T]` (type, default, unit, bounds, description), by
  section; the one place a key is written as a string.
- `option`: `ConfigOption[T]`, its value types and the `Section` that declares them.
- `units`: durations as Flink writes them (`500ms`, `4s`, `1min`; a bare number is
  milliseconds) read as float seconds, sizes (`10mb`) as bytes.
- `configuration`: `Configuration.load(...)` reads a YAML file of flat dotted keys and `-D
  key=value` overrides; `config.get(option)` returns the option's `T`.
- `docs`: docs/configuration.md, generated from the declarations.
"""

from sparkdispatch.config.configuration import (
    CONFIG_ENV_VAR,
    SPARK_PREFIX,
    TOKEN_ENV_VAR,
    Configuration,
    parse_overrides,
    read_yaml_file,
)
from sparkdispatch.config.docs import configuration_page
from sparkdispatch.config.option import ConfigOption
from sparkdispatch.config.units import format_duration, format_size, parse_duration, parse_size

__all__ = [
    "CONFIG_ENV_VAR",
    "SPARK_PREFIX",
    "TOKEN_ENV_VAR",
    "ConfigOption",
    "Configuration",
    "configuration_page",
    "format_duration",
    "format_size",
    "parse_duration",
    "parse_overrides",
    "parse_size",
    "read_yaml_file",
]
