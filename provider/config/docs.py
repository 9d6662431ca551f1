"""docs/configuration.md, generated from the declared options: `sparkdispatch config-docs > docs/configuration.md`.

The page is the introduction below and one table per section of `sparkdispatch.config.options`,
in declaration order; tests/unit/test_config_docs.py fails when the file differs from it.
"""

from __future__ import annotations

from sparkdispatch.config.option import AnyOption, KeyPrefix, Section
from sparkdispatch.config.options import SECTIONS

REGENERATE = "sparkdispatch config-docs > docs/configuration.md"

_INTRO = """# Configuration

<!-- Generated from provider/config/options/ (a module per section): edit the declarations there, then
write the output of `sparkdispatch config-docs` over this file. -->

One YAML file of flat dotted keys (`--config FILE` or `SPARKDISPATCH_CONF`), each key
overridable with `-D key=value`. Durations are written as Flink writes them (`500ms`, `4s`,
`1min`; a bare number is milliseconds), sizes as `64kb`, `10mb`. An unknown key or a bad value
stops the process with a message naming it.

A key's type says how to write its value: a *duration* as above (also `2h`, `7d`), a *size* in
`b`, `kb`, `mb`, `gb` or `tb` (powers of 1024; a bare number is bytes), *true/false* also as
`yes`/`no`, `on`/`off` or `1`/`0`; a lower bound follows the type.
"""


def configuration_page() -> str:
    """The whole of docs/configuration.md."""
    return "\n".join([_INTRO, *(_section(section) for section in SECTIONS)])


def _section(section: Section) -> str:
    rows = [f"## {section.title}", "", "| key | type | default | description |", "| --- | --- | --- | --- |"]
    rows += [f"| `{o.key}` | {_type(o)} | {o.default_text or '(empty)'} | {o.description} |" for o in section.options]
    rows += [_prefix_row(prefix) for prefix in section.prefixes]
    return "\n".join(rows) + "\n"


def _type(option: AnyOption) -> str:
    if option.choices:
        return "one of " + ", ".join(f"`{choice}`" for choice in option.choices)
    if option.minimum is None:
        return option.type.name
    return f"{option.type.name}, ≥ {option.format(option.minimum)}"


def _prefix_row(prefix: KeyPrefix) -> str:
    return f"| `{prefix.prefix}*` | string | (none) | {prefix.description} |"
