"""What the Dispatcher and the JobMasters report for the master's metrics (metrics.py implements it)."""

from __future__ import annotations

from typing import Protocol


class JobEvents(Protocol):
    """What the Dispatcher reports."""

    def job_submitted(self) -> None: ...

    def job_finished(self, status: str) -> None: ...


class TaskEvents(Protocol):
    """What a JobMaster reports."""

    def task_deployed(self) -> None: ...

    def task_ended(self, state: str, seconds: float | None) -> None:
        """An attempt ended in `state`, `seconds` after its deployment (None: it was never deployed)."""


class NoEvents:
    """Counts nothing: components made without a master (tests, tools)."""

    def job_submitted(self) -> None:
        pass

    def job_finished(self, status: str) -> None:
        pass

    def task_deployed(self) -> None:
        pass

    def task_ended(self, state: str, seconds: float | None) -> None:
        pass


NO_EVENTS = NoEvents()
