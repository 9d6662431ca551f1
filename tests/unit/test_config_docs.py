"""docs/configuration.md is what the option declarations generate, and the command that regenerates it prints it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkdispatch.config import configuration_page
from sparkdispatch.config.docs import REGENERATE
from sparkdispatch.config.options import OPTIONS, SECTIONS
from sparkdispatch.entrypoint.cli import main

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_docs_page_is_what_the_declarations_generate() -> None:
    assert DOCS.read_text(encoding="utf-8") == configuration_page(), (
        f"docs/configuration.md differs from provider/config/options/: regenerate it with `{REGENERATE}`"
    )


def test_config_docs_prints_the_page(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config-docs"]) == 0
    assert capsys.readouterr().out == configuration_page()


def test_the_page_has_a_row_for_every_key_under_its_section() -> None:
    page = configuration_page()
    for section in SECTIONS:
        heading = page.index(f"\n## {section.title}\n")
        for option in section.options:
            row = page.index(f"\n| `{option.key}` | ")
            assert row > heading, f"{option.key} is not under {section.title}"
    assert sum(line.startswith("| `") for line in page.splitlines()) == len(OPTIONS) + 1  # and `spark.*`


def test_a_row_gives_the_type_bound_and_default_as_written_in_a_file() -> None:
    page = configuration_page()
    assert "| `heartbeat.interval` | duration, ≥ 50ms | 5s | " in page
    assert "| `rest.max-body-size` | size, ≥ 1kb | 10mb | " in page
    assert "| `high-availability.mode` | one of `none`, `zookeeper` | none | " in page
    assert "| `taskexecutor.slots` | integer, ≥ 1 | number of CPU cores | " in page
    assert "| `rest.bind-address` | string | (empty) | " in page
    assert "| `spark.*` | string | (none) | " in page
