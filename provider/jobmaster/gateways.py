"""What the JobMaster needs of the components around it (docs/internals.md), as Protocols.

The JobMaster depends on these shapes only, so unit tests pass small fakes and the real
ResourceManager, Celery TaskExecutorGateway and ProgressStore fit without an import.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Awaitable, Mapping, Sequence
from typing import Protocol

from sparkdispatch.jobgraph import ExecutionState, TaskDeploymentDescriptor


class AllocatedSlot(Protocol):
    """A slot the ResourceManager gave to a job (`sparkdispatch.resourcemanager.AllocatedSlot`)."""

    @property
    @abstractmethod
    def allocation_id(self) -> str: ...

    @property
    @abstractmethod
    def task_executor_id(self) -> str: ...

    @property
    @abstractmethod
    def slot_index(self) -> int: ...

    @property
    @abstractmethod
    def queue(self) -> str: ...

    @property
    @abstractmethod
    def hostname(self) -> str: ...


class ExecutionReport(Protocol):
    """One execution a TaskExecutor's heartbeat lists (`sparkdispatch.resourcemanager.ExecutionReport`)."""

    @property
    @abstractmethod
    def job_id(self) -> str: ...

    @property
    @abstractmethod
    def execution_id(self) -> str: ...

    @property
    @abstractmethod
    def state(self) -> ExecutionState: ...


class SlotListener(Protocol):
    """The ResourceManager's callbacks into a job; plain methods, called on the master's loop."""

    @abstractmethod
    def slots_allocated(self, slots: Sequence[AllocatedSlot]) -> None: ...

    @abstractmethod
    def slot_request_failed(self, error: BaseException) -> None: ...

    @abstractmethod
    def task_executor_lost(self, task_executor_id: str, allocation_ids: Sequence[str], reason: str) -> None: ...

    @abstractmethod
    def task_executor_heartbeat(self, task_executor_id: str, executions: Sequence[ExecutionReport]) -> None: ...


class ResourceManagerGateway(Protocol):
    """The ResourceManager calls a JobMaster makes; each may be a plain method or a coroutine."""

    @abstractmethod
    def declare_requirements(self, job_id: str, slots: int, listener: SlotListener) -> None | Awaitable[None]: ...

    @abstractmethod
    def release_slot(self, job_id: str, allocation_id: str) -> None | Awaitable[None]: ...


class TaskExecutorGateway(Protocol):
    """Master → TaskExecutor over Celery; blocking, so the JobMaster calls it in a thread."""

    @abstractmethod
    def deploy(self, slot: AllocatedSlot, tdd: TaskDeploymentDescriptor, session_id: str) -> None: ...

    @abstractmethod
    def cancel(self, task_executor_hostname: str, execution_id: str) -> object: ...


class SubtaskProgress(Protocol):
    """A FINISHED subtask as the ProgressStore keeps it."""

    @property
    @abstractmethod
    def result_path(self) -> str | None: ...

    @property
    @abstractmethod
    def rows(self) -> int | None: ...


class JobProgress(Protocol):
    """A job's finished subtasks: `finished[vertex_id][subtask_index]`."""

    @property
    @abstractmethod
    def finished(self) -> Mapping[str, Mapping[int, SubtaskProgress]]: ...


class ProgressStore(Protocol):
    """The HA store of finished subtasks; writes are fenced by the leader session id."""

    @abstractmethod
    async def record_subtask(self, session_id: str, job_id: str, vertex_id: str, subtask_index: int,
                             result_path: str | None, rows: int | None) -> None: ...
