"""What the JobMaster needs of the components around it (docs/internals.md), as Protocols.

The JobMaster depends on these shapes only, so unit tests pass small fakes and the real
ResourceManager, Celery TaskExecutorGateway and ProgressStore fit without an import.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from typing import Protocol

from sparkdispatch.jobgraph import ExecutionState, TaskDeploymentDescriptor


class AllocatedSlot(Protocol):
    """A slot the ResourceManager gave to a job (`sparkdispatch.resourcemanager.AllocatedSlot`)."""

    @property
    def allocation_id(self) -> str: ...

    @property
    def task_executor_id(self) -> str: ...

    @property
    def slot_index(self) -> int: ...

    @property
    def queue(self) -> str: ...

    @property
    def hostname(self) -> str: ...


class ExecutionReport(Protocol):
    """One execution a TaskExecutor's heartbeat lists (`sparkdispatch.resourcemanager.ExecutionReport`)."""

    @property
    def job_id(self) -> str: ...

    @property
    def execution_id(self) -> str: ...

    @property
    def state(self) -> ExecutionState: ...


class SlotListener(Protocol):
    """The ResourceManager's callbacks into a job; plain methods, called on the master's loop."""

    def slots_allocated(self, slots: Sequence[AllocatedSlot]) -> None: ...

    def slot_request_failed(self, error: BaseException) -> None: ...

    def task_executor_lost(self, task_executor_id: str, allocation_ids: Sequence[str], reason: str) -> None: ...

    def task_executor_heartbeat(self, task_executor_id: str, executions: Sequence[ExecutionReport]) -> None: ...


class ResourceManagerGateway(Protocol):
    """The ResourceManager calls a JobMaster makes; each may be a plain method or a coroutine."""

    def declare_requirements(self, job_id: str, slots: int, listener: SlotListener) -> None | Awaitable[None]: ...

    def release_slot(self, job_id: str, allocation_id: str) -> None | Awaitable[None]: ...


class TaskExecutorGateway(Protocol):
    """Master → TaskExecutor over Celery; blocking, so the JobMaster calls it in a thread."""

    def deploy(self, slot: AllocatedSlot, tdd: TaskDeploymentDescriptor, session_id: str) -> None: ...

    def cancel(self, task_executor_hostname: str, execution_id: str) -> object: ...


class SubtaskProgress(Protocol):
    """A FINISHED subtask as the ProgressStore keeps it."""

    @property
    def result_path(self) -> str | None: ...

    @property
    def rows(self) -> int | None: ...


class JobProgress(Protocol):
    """A job's finished subtasks: `finished[vertex_id][subtask_index]`."""

    @property
    def finished(self) -> Mapping[str, Mapping[int, SubtaskProgress]]: ...


class ProgressStore(Protocol):
    """The HA store of finished subtasks; writes are fenced by the leader session id."""

    async def record_subtask(self, session_id: str, job_id: str, vertex_id: str, subtask_index: int,
                             result_path: str | None, rows: int | None) -> None: ...
