"""The options of the configuration docs' section "Cleanup of finished jobs" (see the package's docstring)."""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from sparkdispatch.config.option import Section

SECTION: Final = Section("Cleanup of finished jobs")

CLEANUP_INITIAL_BACKOFF: Final = SECTION.duration(
    "cleanup-strategy.initial-backoff",
    timedelta(seconds=1),
    "First pause before a failed cleanup of a finished job is retried (retries never end; FLINK-26652).",
    minimum=timedelta(milliseconds=1),
)
CLEANUP_MAX_BACKOFF: Final = SECTION.duration(
    "cleanup-strategy.max-backoff",
    timedelta(minutes=1),
    "Longest pause between cleanup retries.",
    minimum=timedelta(milliseconds=1),
)
