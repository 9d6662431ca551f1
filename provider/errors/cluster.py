"""Errors of the cluster's components: fencing, leadership, slots, TaskExecutors and their Connect servers."""

from __future__ import annotations

from collections.abc import Iterable

from sparkdispatch.errors.base import SparkDispatchError


class FencingTokenMismatch(SparkDispatchError):
    """A call made under another fencing token (leader session, JobMaster id) than the current one.

    The tokens are in the message for the master's own log, never in the REST body: the current
    leader session id is what fences the leader's components, so answers do not hand it out.
    """

    http_status = 409
    component: str

    def __init__(self, component: str, expected: str | None = None, received: str | None = None) -> None:
        self.component = component
        self.expected = expected
        self.received = received
        self._public = (
            f"fencing token mismatch at the {component}: the call was made under another leader "
            "session than the current one; the caller talks to a former leader"
        )
        known = expected is not None or received is not None
        tokens = f" (the call carried {received!r}, the current token is {expected!r})" if known else ""
        super().__init__(self._public + tokens)

    def messages(self) -> list[str]:
        return [self._public, *self.details]


class StaleExecution(FencingTokenMismatch, own_fields_only=True):
    """A TaskExecutor reported on an execution (an old attempt) the JobMaster no longer tracks.

    The attempt's execution id fences its reports, as a leader session fences a leader's calls;
    the TaskExecutor answers it by cancelling that task and freeing its slot.
    """

    http_status = 409
    job_id: str
    execution_id: str
    reason: str

    def __init__(self, job_id: str, execution_id: str, reason: str = "it is no longer tracked") -> None:
        SparkDispatchError.__init__(
            self, f"execution {execution_id} of job {job_id} was refused: {reason}; cancel that task"
        )
        self.component = f"JobMaster of job {job_id}"
        self.expected = self.received = None
        self._public = self.message
        self.job_id = job_id
        self.execution_id = execution_id
        self.reason = reason


class NoLeader(SparkDispatchError):
    http_status = 503


class SlotRequestTimeout(SparkDispatchError):
    http_status = 503


class UnknownTaskExecutor(SparkDispatchError):
    http_status = 404


class SlotProcessLost(SparkDispatchError):
    """A slot process of a TaskExecutor died under its task (signal, exit, out of memory) or did not start."""


class ConnectServerError(SparkDispatchError):
    """A TaskExecutor's Spark Connect server failed to start or to serve; `log_file` is its log.

    The message names the log file; the details are its last lines.
    """

    log_file: str

    def __init__(self, message: str, *, log_file: str, details: Iterable[str] = ()) -> None:
        super().__init__(message, details=details)
        self.log_file = log_file


class ServiceUnavailable(SparkDispatchError):
    """The master cannot serve the call now; `leader` is the leader's REST address if known."""

    http_status = 503
    leader: str | None

    def __init__(self, message: str, *, leader: str | None = None, details: Iterable[str] = ()) -> None:
        super().__init__(message, details=details)
        self.leader = leader


class LeadershipLost(ServiceUnavailable, own_fields_only=True):
    """This process stopped leading while it served the call; the next leader serves it again."""

    http_status = 503
    component: str

    def __init__(self, component: str) -> None:
        super().__init__(f"the {component} is no longer led by this process")
        self.component = component


class RecoveryInProgress(ServiceUnavailable):
    """This master leads but still recovers its jobs; the call is answered once it is done.

    Its REST answer carries `Retry-After: <retry_after>` (seconds); `leader` is this master.
    """

    http_status = 503
    retry_after: int

    def __init__(self, message: str, *, leader: str | None, retry_after: int) -> None:
        super().__init__(message, leader=leader)
        self.retry_after = retry_after

    def http_headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}
