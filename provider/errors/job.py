"""Errors of a job and the requests about it: validation, its lifecycle, repair, its code."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from sparkdispatch.errors.base import SparkDispatchError


def _field_lines(field_errors: Mapping[str, Sequence[str]]) -> list[str]:
    return [f"{field}: {reason}" for field, reasons in sorted(field_errors.items()) for reason in reasons]


class InvalidJobGraph(SparkDispatchError):
    """A JobGraph refused by validation; `field_errors` maps a dotted field path to reasons."""

    http_status = 400
    field_errors: dict[str, list[str]]

    def __init__(self, field_errors: dict[str, list[str]]) -> None:
        self.field_errors = field_errors
        lines = _field_lines(field_errors)
        super().__init__("invalid JobGraph: " + "; ".join(lines), details=lines)

    def messages(self) -> list[str]:
        return self.details


class JobTooLarge(InvalidJobGraph):
    """A JobGraph whose every field is within its own limit, but whose whole is not: its `subtasks`
    (the sum of its vertices' parallelism) are over `limit`, the value of the configuration `option`."""

    subtasks: int
    limit: int
    option: str

    def __init__(self, *, subtasks: int, limit: int, option: str) -> None:
        self.subtasks = subtasks
        self.limit = limit
        self.option = option
        super().__init__(
            {
                "vertices": [
                    f"the job has {subtasks} subtasks (the sum of its vertices' parallelism); "
                    f"{option} allows at most {limit}"
                ]
            }
        )


class InvalidRequest(SparkDispatchError):
    """A request body (registration, heartbeat, ...) refused by validation; names each field."""

    http_status = 400
    what: str
    field_errors: dict[str, list[str]]

    def __init__(self, what: str, field_errors: dict[str, list[str]]) -> None:
        self.what = what
        self.field_errors = field_errors
        lines = _field_lines(field_errors)
        super().__init__(f"invalid {what}: " + "; ".join(lines), details=lines)

    def messages(self) -> list[str]:
        return self.details


class InvalidShape(InvalidRequest):
    """A JSON form this side read (a master's answer, a stored record) that does not fit its
    declared shape `what` (`sparkdispatch.model.codec`); `field_errors` names each field. Refused
    as a request body is, but the fault is the sender's: a master that raised one answers 500."""

    http_status = 500


class IllegalStateTransition(SparkDispatchError):
    http_status = 409


class UnknownJob(SparkDispatchError):
    http_status = 404
    job_id: str

    def __init__(self, job_id: str) -> None:
        super().__init__(f"no job with id {job_id}")
        self.job_id = job_id


class DuplicateJobSubmission(SparkDispatchError):
    http_status = 409
    job_id: str
    reason: str

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"job {job_id} cannot be submitted: {reason}")
        self.job_id = job_id
        self.reason = reason


class JobAlreadyTerminated(SparkDispatchError):
    http_status = 409
    job_id: str
    status: str

    def __init__(self, job_id: str, status: str) -> None:
        super().__init__(f"job {job_id} already reached {status} and cannot be cancelled")
        self.job_id = job_id
        self.status = status


class RepairNotPossible(SparkDispatchError):
    """A repair that cannot be made; `running` when only because the job has not ended yet
    (ask again once it has)."""

    http_status = 409
    job_id: str
    reason: str
    running: bool

    def __init__(self, job_id: str, reason: str, *, running: bool = False) -> None:
        super().__init__(f"job {job_id} cannot be repaired: {reason}")
        self.job_id = job_id
        self.reason = reason
        self.running = running


class EntrypointNotFound(SparkDispatchError):
    """A task's entrypoint (`module:function`) names a module or function its code does not have.

    Raised in the slot process, so it reaches the JobResult as a failure of this class; no
    retry of the task can fix it.
    """

    http_status = 400


class EnvironmentBuildFailed(SparkDispatchError):
    """A job's Python environment could not be resolved or built on a TaskExecutor.

    `requirement` is the dependency the resolver named (empty when it named none), the message
    the resolver's own words. Raised by the TaskExecutor before the task starts; the job fails at
    once, since a restart would build the same requirements again.
    """

    http_status = 400
    restartable = False
    requirement: str

    def __init__(self, message: str, *, requirement: str = "", details: Iterable[str] = ()) -> None:
        super().__init__(message, details=details)
        self.requirement = requirement
