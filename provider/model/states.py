"""A job's and an attempt's lifecycles, as Flink's JobStatus and ExecutionState."""

from __future__ import annotations

import enum

from sparkdispatch.errors import IllegalStateTransition


class JobStatus(str, enum.Enum):
    """A job's state, as Flink's JobStatus; FINISHED, FAILED and CANCELED are globally terminal."""

    INITIALIZING = "INITIALIZING"
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    FAILING = "FAILING"
    FAILED = "FAILED"
    CANCELLING = "CANCELLING"
    CANCELED = "CANCELED"
    FINISHED = "FINISHED"
    RESTARTING = "RESTARTING"
    SUSPENDED = "SUSPENDED"
    RECONCILING = "RECONCILING"

    @property
    def is_globally_terminal(self) -> bool:
        return self in _GLOBALLY_TERMINAL_JOB

    @property
    def is_terminal(self) -> bool:
        """Globally terminal, or SUSPENDED (this master stopped leading; the job lives on)."""
        return self in _GLOBALLY_TERMINAL_JOB or self is JobStatus.SUSPENDED

    def can_become(self, target: JobStatus) -> bool:
        return target in _JOB_TRANSITIONS[self]

    def transition(self, target: JobStatus) -> JobStatus:
        """`target`, if Flink's lifecycle allows this → target; else `IllegalStateTransition`."""
        if not self.can_become(target):
            raise IllegalStateTransition(f"a job cannot go from {self.value} to {target.value}")
        return target


_GLOBALLY_TERMINAL_JOB = frozenset({JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED})
_JOB_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.INITIALIZING: frozenset({JobStatus.CREATED, JobStatus.FAILED, JobStatus.CANCELED, JobStatus.SUSPENDED}),
    JobStatus.CREATED: frozenset(
        {
            JobStatus.RUNNING,
            JobStatus.RECONCILING,
            JobStatus.CANCELLING,
            JobStatus.CANCELED,
            JobStatus.FAILED,
            JobStatus.SUSPENDED,
        }
    ),
    JobStatus.RECONCILING: frozenset(
        {JobStatus.RUNNING, JobStatus.FAILING, JobStatus.CANCELLING, JobStatus.FAILED, JobStatus.SUSPENDED}
    ),
    JobStatus.RUNNING: frozenset(
        {JobStatus.FINISHED, JobStatus.FAILING, JobStatus.RESTARTING, JobStatus.CANCELLING, JobStatus.SUSPENDED}
    ),
    JobStatus.FAILING: frozenset({JobStatus.FAILED, JobStatus.RESTARTING, JobStatus.CANCELLING, JobStatus.SUSPENDED}),
    JobStatus.RESTARTING: frozenset(
        {
            JobStatus.RUNNING,
            JobStatus.CREATED,
            JobStatus.CANCELLING,
            JobStatus.CANCELED,
            JobStatus.FAILED,
            JobStatus.SUSPENDED,
        }
    ),
    JobStatus.CANCELLING: frozenset({JobStatus.CANCELED, JobStatus.SUSPENDED}),
    JobStatus.FINISHED: frozenset(),
    JobStatus.FAILED: frozenset(),
    JobStatus.CANCELED: frozenset(),
    JobStatus.SUSPENDED: frozenset(),
}


class ExecutionState(str, enum.Enum):
    """One attempt of one subtask, as Flink's ExecutionState."""

    CREATED = "CREATED"
    SCHEDULED = "SCHEDULED"
    DEPLOYING = "DEPLOYING"
    INITIALIZING = "INITIALIZING"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    CANCELING = "CANCELING"
    CANCELED = "CANCELED"
    FAILED = "FAILED"
    RECONCILING = "RECONCILING"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL_EXECUTION

    def can_become(self, target: ExecutionState) -> bool:
        return target in _EXECUTION_TRANSITIONS[self]

    def transition(self, target: ExecutionState) -> ExecutionState:
        if not self.can_become(target):
            raise IllegalStateTransition(f"an execution cannot go from {self.value} to {target.value}")
        return target


_TERMINAL_EXECUTION = frozenset({ExecutionState.FINISHED, ExecutionState.CANCELED, ExecutionState.FAILED})
_EXECUTION_TRANSITIONS: dict[ExecutionState, frozenset[ExecutionState]] = {
    ExecutionState.CREATED: frozenset(
        {ExecutionState.SCHEDULED, ExecutionState.RECONCILING, ExecutionState.CANCELED, ExecutionState.FAILED}
    ),
    ExecutionState.SCHEDULED: frozenset(
        {ExecutionState.DEPLOYING, ExecutionState.CANCELING, ExecutionState.CANCELED, ExecutionState.FAILED}
    ),
    ExecutionState.DEPLOYING: frozenset(
        {ExecutionState.INITIALIZING, ExecutionState.CANCELING, ExecutionState.CANCELED, ExecutionState.FAILED}
    ),
    ExecutionState.INITIALIZING: frozenset(
        {ExecutionState.RUNNING, ExecutionState.CANCELING, ExecutionState.CANCELED, ExecutionState.FAILED}
    ),
    ExecutionState.RUNNING: frozenset(
        {ExecutionState.FINISHED, ExecutionState.CANCELING, ExecutionState.CANCELED, ExecutionState.FAILED}
    ),
    ExecutionState.CANCELING: frozenset({ExecutionState.CANCELED, ExecutionState.FAILED}),
    ExecutionState.RECONCILING: frozenset(
        {
            ExecutionState.INITIALIZING,
            ExecutionState.RUNNING,
            ExecutionState.FINISHED,
            ExecutionState.CANCELED,
            ExecutionState.FAILED,
        }
    ),
    ExecutionState.FINISHED: frozenset(),
    ExecutionState.CANCELED: frozenset(),
    ExecutionState.FAILED: frozenset(),
}
