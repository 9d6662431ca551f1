"""`SyncSparkDispatchClient`: the async REST client (rest_client.py) for callers that are not
async (Airflow operators, the CLI), its core run on a private event loop in a background thread."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from sparkdispatch.client.loop_thread import LoopThread
from sparkdispatch.client.rest_client import SparkDispatchClient, SubmittedJob
from sparkdispatch.model.job_result import JobResult
from sparkdispatch.model.repair import RepairAnswer
from sparkdispatch.model.rest_shapes import (
    AttemptLog,
    JobDetails,
    JobList,
    JobProgress,
    JobSummary,
    Overview,
    TaskManager,
    TaskManagerList,
    VertexOutcome,
)

T = TypeVar("T")


class SyncSparkDispatchClient:
    """The async client, called from synchronous code.

    The async core runs on a private event loop in a daemon thread, so calls may come from any
    thread (an operator's `on_kill` while `execute` waits) and from code that already has a
    running loop.
    """

    def __init__(self, client: SparkDispatchClient) -> None:
        self.async_client = client
        self._loop = LoopThread("sparkdispatch-client")

    @classmethod
    def create(cls, **kwargs: Any) -> SyncSparkDispatchClient:
        """Build the async client from `kwargs` and wrap it."""
        return cls(SparkDispatchClient(**kwargs))

    def __enter__(self) -> SyncSparkDispatchClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run one coroutine of the async client to its end and return its value."""
        return self._loop.run(coroutine)

    # One line each: the async core does the work.

    @property
    def leader_address(self) -> str | None:
        return self.async_client.leader_address

    def job_url(self, job_id: str) -> str:
        return self.async_client.job_url(job_id)

    def leader(self) -> str:
        return self.run(self.async_client.leader())

    def overview(self) -> Overview:
        return self.run(self.async_client.overview())

    def taskmanagers(self) -> list[TaskManager]:
        return self.run(self.async_client.taskmanagers())

    def jobs(self) -> list[JobSummary]:
        return self.run(self.async_client.jobs())

    def jobs_page(self, *, limit: int | None = None, after: str | None = None) -> JobList:
        return self.run(self.async_client.jobs_page(limit=limit, after=after))

    def taskmanagers_page(self, *, limit: int | None = None, after: str | None = None) -> TaskManagerList:
        return self.run(self.async_client.taskmanagers_page(limit=limit, after=after))

    def job(self, job_id: str) -> JobDetails:
        return self.run(self.async_client.job(job_id))

    def vertex(self, job_id: str, vertex_id: str) -> VertexOutcome:
        return self.run(self.async_client.vertex(job_id, vertex_id))

    def job_progress(self, job_id: str) -> JobProgress:
        return self.run(self.async_client.job_progress(job_id))

    def vertex_log(
        self, job_id: str, vertex_id: str, *, subtask: int = 0, attempt: int | None = None, offset: int = 0
    ) -> AttemptLog:
        return self.run(
            self.async_client.vertex_log(job_id, vertex_id, subtask=subtask, attempt=attempt, offset=offset)
        )

    def submit(self, graph: Mapping[str, Any]) -> SubmittedJob:
        return self.run(self.async_client.submit(graph))

    def execution_result(self, job_id: str) -> JobResult | None:
        return self.run(self.async_client.execution_result(job_id))

    def wait_for_result(
        self, job_id: str, *, poll_interval: float = 2.0, on_poll: Callable[[], Awaitable[None]] | None = None
    ) -> JobResult:
        """`on_poll` runs on this client's loop: it uses `async_client`, not this client."""
        return self.run(self.async_client.wait_for_result(job_id, poll_interval=poll_interval, on_poll=on_poll))

    def cancel(self, job_id: str) -> None:
        self.run(self.async_client.cancel(job_id))

    def repair(self, job_id: str, vertices: Sequence[str]) -> RepairAnswer:
        return self.run(self.async_client.repair(job_id, vertices))

    def upload_artifact(self, path: str | os.PathLike[str]) -> str:
        return self.run(self.async_client.upload_artifact(path))

    def close(self) -> None:
        if self._loop.closed:
            return
        try:
            self.run(self.async_client.close())
        finally:
            self._loop.close()
