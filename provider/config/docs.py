"""The table of every configuration key in docs/configuration.md, generated from the declared options."""

from __future__ import annotations

from sparkdispatch.config.option import KeyPrefix
from sparkdispatch.config.options import SECTIONS


def options_table() -> str:
    """The Markdown table of every key, its default and what it does (docs/configuration.md)."""
    rows = ["| key | default | description |", "| --- | --- | --- |"]
    prefixes: list[KeyPrefix] = []
    for section in SECTIONS:
        for option in section.options:
            default = option.default_text
            if option.choices:
                default = f"{default} (one of {', '.join('`' + c + '`' for c in option.choices)})"
            rows.append(f"| `{option.key}` | {default or '(empty)'} | {option.description} |")
        prefixes += section.prefixes
    for prefix in prefixes:
        rows.append(f"| `{prefix.prefix}*` | (none) | {prefix.description} |")
    return "\n".join(rows) + "\n"
