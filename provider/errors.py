"""Every error sparkdispatch raises on purpose.

::

    SparkDispatchError
    ├── ConfigurationError            a configuration key is unknown or its value is bad
    ├── InvalidJobGraph               a JobGraph failed validation (names the field)
    ├── InvalidRequest                a request body other than a JobGraph failed validation
    ├── IllegalStateTransition        a job or execution state change Flink's lifecycle forbids
    ├── UnknownJob                    no job with that id
    ├── DuplicateJobSubmission        the job id is taken (running with another graph, or terminated)
    ├── JobAlreadyTerminated          the job finished or failed before it could be cancelled
    ├── FencingTokenMismatch          a call carried another leader session than the current one
    │   └── LeadershipLost            this process is no longer the leader
    ├── NoLeader                      no master leads at the moment
    ├── SlotRequestTimeout            no slot could be found in time
    ├── UnknownTaskExecutor           the TaskExecutor is not (or no longer) registered
    ├── StaleExecution                a report names an execution the JobMaster no longer tracks
    ├── StoreError                    an HA store refused or failed a read or write
    │   ├── JobResultEntryExists      a JobResult for that job is stored already
    │   ├── NoSuchJobResult           no JobResult stored for that job
    │   └── BlobError                 a user-code blob cannot be stored or read
    │       ├── BlobNotFound
    │       ├── BlobTooLarge
    │       └── CorruptedBlob         the blob's content does not hash to its key
    ├── RequestTooLarge               a request body is over `rest.max-body-size`
    ├── Unauthorized                  a REST call lacks the configured token
    └── ServiceUnavailable            the master cannot answer now (standby, starting, stopping)

Each class carries the HTTP status the REST endpoint answers it with, so one middleware maps
them all.
"""

from __future__ import annotations

from collections.abc import Iterable


class SparkDispatchError(Exception):
    """Root of sparkdispatch's own errors."""

    http_status: int = 500

    def __init__(self, message: str, *, details: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.details = list(details)

    def messages(self) -> list[str]:
        """The message first, then any details, as the REST `errors` list."""
        return [self.message, *self.details]


class ConfigurationError(SparkDispatchError):
    http_status = 400


class InvalidJobGraph(SparkDispatchError):
    """A JobGraph refused by validation; `field_errors` maps a dotted field path to reasons."""

    http_status = 400

    def __init__(self, field_errors: dict[str, list[str]]) -> None:
        self.field_errors = field_errors
        lines = [f"{field}: {reason}" for field, reasons in sorted(field_errors.items()) for reason in reasons]
        super().__init__("invalid JobGraph: " + "; ".join(lines), details=lines)

    def messages(self) -> list[str]:
        return self.details


class InvalidRequest(SparkDispatchError):
    """A request body (registration, heartbeat, ...) refused by validation; names each field."""

    http_status = 400

    def __init__(self, what: str, field_errors: dict[str, list[str]]) -> None:
        self.field_errors = field_errors
        lines = [f"{field}: {reason}" for field, reasons in sorted(field_errors.items()) for reason in reasons]
        super().__init__(f"invalid {what}: " + "; ".join(lines), details=lines)

    def messages(self) -> list[str]:
        return self.details


class IllegalStateTransition(SparkDispatchError):
    http_status = 409


class UnknownJob(SparkDispatchError):
    http_status = 404

    def __init__(self, job_id: str) -> None:
        super().__init__(f"no job with id {job_id}")
        self.job_id = job_id


class DuplicateJobSubmission(SparkDispatchError):
    http_status = 409

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"job {job_id} cannot be submitted: {reason}")
        self.job_id = job_id


class JobAlreadyTerminated(SparkDispatchError):
    http_status = 409

    def __init__(self, job_id: str, status: str) -> None:
        super().__init__(f"job {job_id} already reached {status} and cannot be cancelled")
        self.job_id = job_id
        self.status = status


class FencingTokenMismatch(SparkDispatchError):
    http_status = 409

    def __init__(self, component: str, expected: str | None, received: str | None) -> None:
        super().__init__(
            f"fencing token mismatch at the {component}: the call carried {received!r}, "
            f"the current token is {expected!r}; the caller talks to a former leader"
        )
        self.expected = expected
        self.received = received


class LeadershipLost(FencingTokenMismatch):
    http_status = 503

    def __init__(self, component: str) -> None:
        SparkDispatchError.__init__(self, f"the {component} is no longer led by this process")
        self.expected = None
        self.received = None


class NoLeader(SparkDispatchError):
    http_status = 503


class SlotRequestTimeout(SparkDispatchError):
    http_status = 503


class UnknownTaskExecutor(SparkDispatchError):
    http_status = 404


class StaleExecution(SparkDispatchError):
    """A TaskExecutor reported on an execution (an old attempt) the JobMaster no longer tracks.

    The TaskExecutor answers it by cancelling that task and freeing its slot.
    """

    http_status = 409

    def __init__(self, job_id: str, execution_id: str, reason: str = "it is no longer tracked") -> None:
        super().__init__(f"execution {execution_id} of job {job_id} was refused: {reason}; cancel that task")
        self.job_id = job_id
        self.execution_id = execution_id


class StoreError(SparkDispatchError):
    http_status = 500


class JobResultEntryExists(StoreError):
    http_status = 409


class NoSuchJobResult(StoreError):
    http_status = 404


class BlobError(StoreError):
    http_status = 400


class BlobNotFound(BlobError):
    http_status = 404


class BlobTooLarge(BlobError):
    http_status = 413


class CorruptedBlob(BlobError):
    http_status = 500


class RequestTooLarge(SparkDispatchError):
    http_status = 413


class Unauthorized(SparkDispatchError):
    http_status = 401


class ServiceUnavailable(SparkDispatchError):
    """The master cannot serve the call now; `leader` is the leader's REST address if known."""

    http_status = 503

    def __init__(self, message: str, *, leader: str | None = None) -> None:
        super().__init__(message)
        self.leader = leader
