"""What the Dispatcher and the JobMasters report for the master's metrics (metrics.py implements it)."""

from __future__ import annotations

from collections import Counter
from typing import Protocol


class JobEvents(Protocol):
    """What the Dispatcher reports."""

    def job_submitted(self) -> None:
        """A job was accepted under a new job id."""

    def job_finished(self, status: str) -> None:
        """A job reached the globally terminal `status`."""


class TaskEvents(Protocol):
    """What a JobMaster reports."""

    def task_deployed(self) -> None:
        """An attempt was deployed to a slot."""

    def task_ended(self, state: str, seconds: float | None) -> None:
        """An attempt ended in `state`, `seconds` after its deployment (None: it was never deployed)."""


class EventCounts:
    """The events counted in memory, by name: what components made without a master (tests,
    tools) report to. Implements `JobEvents` and `TaskEvents`."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def job_submitted(self) -> None:
        self.counts["job_submitted"] += 1

    def job_finished(self, status: str) -> None:
        self.counts[f"job_finished:{status}"] += 1

    def task_deployed(self) -> None:
        self.counts["task_deployed"] += 1

    def task_ended(self, state: str, seconds: float | None) -> None:
        self.counts[f"task_ended:{state}"] += 1
