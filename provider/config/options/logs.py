"""The options of the configuration docs' section "Logging" (see the package's docstring)."""

from __future__ import annotations

from typing import Final, Literal, get_args

from sparkdispatch.config.option import ConfigOption, Section

LogFormat = Literal["text", "json"]

SECTION: Final = Section("Logging")

LOG_FORMAT: Final[ConfigOption[LogFormat]] = SECTION.choice(
    "log.format",
    get_args(LogFormat),
    "text",
    "How master and TaskExecutor processes log to stderr: `text` lines, or `json`, an object per line for log "
    "shippers; both name the job, vertex, subtask and attempt a line is about.",
)
