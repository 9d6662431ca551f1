"""The JobMaster's public Protocol, and the TaskExecutorGateway it deploys through.

`JobMasterGateway` is what the Dispatcher and the TaskExecutors' REST routes call on a
JobMaster, on the master's loop. `TaskExecutorGateway` is the master's sender to the
TaskExecutors (over Celery); its calls block, so the JobMaster makes them in a thread.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeAlias

from sparkdispatch.ha.progress_store import Finished, JobProgress
from sparkdispatch.model.states import JobStatus
from sparkdispatch.model.job_graph import JobGraph
from sparkdispatch.model.job_result import JobResult, VertexResult
from sparkdispatch.model.protocol import ExecutionStateUpdate, TaskDeploymentDescriptor
from sparkdispatch.resourcemanager import AllocatedSlot
from sparkdispatch.model.snapshot import JobOverview, JobSnapshot


class JobMasterGateway(Protocol):
    """One job's master, as the Dispatcher and the REST routes use it."""

    @property
    @abstractmethod
    def status(self) -> JobStatus: ...

    @property
    @abstractmethod
    def result_future(self) -> asyncio.Future[JobResult]:
        """Resolves to the JobResult once the job is globally terminal; cancelled on `suspend()`."""

    @abstractmethod
    def start(self) -> None:
        """Run the job on the loop; returns at once."""

    @abstractmethod
    async def cancel(self) -> None:
        """Cancel the job; idempotent for a cancelled one, `JobAlreadyTerminated` otherwise."""

    @abstractmethod
    def suspend(self) -> None:
        """Leadership lost: stop without touching HA data."""

    @abstractmethod
    def update_execution_state(self, update: ExecutionStateUpdate) -> None:
        """A TaskExecutor's report on one attempt (fenced by the JobMaster id)."""

    @abstractmethod
    def overview(self) -> JobOverview:
        """The job's status, times and subtasks per state, as of now."""

    @abstractmethod
    def snapshot(self) -> JobSnapshot:
        """The job with its vertices and subtasks, as of now."""

    @abstractmethod
    def vertex_result(self, vertex_id: str) -> VertexResult | None:
        """One vertex's outcome so far (state, attempts, rows and partitions of its finished
        subtasks); None if the job has no such vertex."""

    @abstractmethod
    def finished(self) -> Finished:
        """Every FINISHED subtask's result partition and rows, as of now."""

    @abstractmethod
    def snapshot_off_loop(self) -> Awaitable[JobSnapshot]:
        """`snapshot()` as of the call, built off the loop (a large job's takes tens of ms)."""


JobMasterFactory: TypeAlias = Callable[[JobGraph, JobProgress | None], Awaitable[JobMasterGateway]]
"""A new JobMaster for a graph, with the progress a former leader recorded (None for a new job); a
large job's ExecutionGraph is built off the loop meanwhile, so the loop answers while it is."""


class TaskExecutorGateway(Protocol):
    """Master → TaskExecutor: blocking calls on the broker (`ServiceUnavailable` when it is down)."""

    @abstractmethod
    def deploy(self, slot: AllocatedSlot, tdd: TaskDeploymentDescriptor, session_id: str) -> None:
        """Send a task to the slot's TaskExecutor."""

    @abstractmethod
    def cancel(self, task_executor_hostname: str, execution_id: str) -> bool:
        """Ask one TaskExecutor to cancel an execution; True if it runs it. Raises if it does not answer."""

    @abstractmethod
    def release_results(self, task_executor_hostname: str, job_id: str, vertex_id: str | None) -> bool:
        """Ask one TaskExecutor to delete the results it keeps of a job's vertex (None: of the
        whole job); True once it answered, False if it did not in time."""

    @abstractmethod
    def close(self) -> None:
        """Release the broker connection (at master shutdown)."""
