"""Every error sparkdispatch raises on purpose, and its REST form.

::

    SparkDispatchError
    ├── ConfigurationError            a configuration key is unknown or its value is bad
    ├── InvalidJobGraph               a JobGraph failed validation (names the field)
    │   └── JobTooLarge               a JobGraph over a limit on the whole job (`jobgraph.max-subtasks`)
    ├── InvalidRequest                a request body other than a JobGraph failed validation
    ├── IllegalStateTransition        a job or execution state change Flink's lifecycle forbids
    ├── UnknownJob                    no job with that id
    ├── DuplicateJobSubmission        the job id is taken (running with another graph, or terminated)
    ├── JobAlreadyTerminated          the job finished or failed before it could be cancelled
    ├── FencingTokenMismatch          a call carried another leader session than the current one
    │   └── StaleExecution            a report names an attempt the JobMaster no longer runs
    ├── NoLeader                      no master leads at the moment
    ├── SlotRequestTimeout            no slot could be found in time
    ├── UnknownTaskExecutor           the TaskExecutor is not (or no longer) registered
    ├── SlotProcessLost               a TaskExecutor's slot process died under a task, or did not start
    ├── EntrypointNotFound            a task's `module:function` entrypoint does not exist in its code
    ├── StoreError                    an HA store refused or failed a read or write
    │   ├── StoreUnavailable          a store did not answer for now (ZooKeeper connection loss); retry
    │   ├── JobResultEntryExists      a JobResult for that job is stored already
    │   ├── NoSuchJobResult           no JobResult stored for that job
    │   └── BlobError                 a user-code blob cannot be stored or read
    │       ├── BlobNotFound
    │       ├── BlobTooLarge
    │       └── CorruptedBlob         the blob's content does not hash to its key
    ├── RequestTooLarge               a request body is over `rest.max-body-size`
    ├── RequestTimeout                a request body stalled longer than `rest.body-timeout`
    ├── UnsupportedMediaType          a JSON body without `Content-Type: application/json`
    ├── Unauthorized                  a REST call lacks the configured token
    ├── CsrfRefused                   a call made with the web UI's session cookie lacks its CSRF token
    ├── HostRefused                   a call's `Host` is none of the master's names (DNS rebinding)
    ├── OriginRefused                 a state-changing call from another site's web page
    ├── TooManyLoginAttempts          too many failed logins from one address; retry after `retry_after` s
    ├── RouteNotFound                 no REST resource at that path
    ├── MethodNotAllowed              the path does not take that HTTP method
    ├── InternalError                 the master failed on a bug; the body names the exception
    ├── ConnectServerError            a TaskExecutor's Spark Connect server failed to start or serve
    ├── MissingExtra                  a command needs packages of an extra that is not installed
    └── ServiceUnavailable            the master cannot answer now (standby, starting, stopping)
        ├── LeadershipLost            this process is no longer the leader
        └── RecoveryInProgress        a new leader is still recovering its jobs; retry after `retry_after` s

Each class carries the HTTP status the REST endpoint answers it with, so one middleware maps
them all. On the wire an error is `{"errors": [readable messages], "type": "<class name>",
...the class's fields}` (`to_body()`); `error_from_body(status, text)` turns such an answer back
into the same class with the same fields on every client, as kazoo's code → class registry
does for ZooKeeper's error codes. An answer that names no known class (a proxy's page, an older
master) becomes a plain `SparkDispatchError` carrying the status and the text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Self

JSONObject = dict[str, Any]


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

    def fields(self) -> JSONObject:
        """This class's own fields in its REST body, beside `errors` and `type`."""
        return {}

    def to_body(self) -> JSONObject:
        """The REST error body: `{"errors": [...], "type": "<class name>", ...fields}`."""
        return {"errors": self.messages(), "type": type(self).__name__, **self.fields()}

    def http_headers(self) -> dict[str, str]:
        """HTTP headers the REST answer of this error carries (e.g. `Retry-After`)."""
        return {}

    @classmethod
    def from_fields(cls, messages: Sequence[str], fields: Mapping[str, Any]) -> Self:
        """Rebuild the error from a body's messages and fields (classes with fields override it)."""
        return cls(messages[0], details=messages[1:])


class ConfigurationError(SparkDispatchError):
    http_status = 400


class TlsError(ConfigurationError):
    """A TLS setting cannot be used, or a TLS handshake with the master failed: the fix is in the settings."""


def _field_lines(field_errors: Mapping[str, Sequence[str]]) -> list[str]:
    return [f"{field}: {reason}" for field, reasons in sorted(field_errors.items()) for reason in reasons]


def _field_errors(value: Any) -> dict[str, list[str]]:
    if not isinstance(value, Mapping) or not all(
            isinstance(reasons, list) and all(isinstance(r, str) for r in reasons) for reasons in value.values()):
        raise ValueError("field_errors must map field names to lists of reasons")
    return {str(field): list(reasons) for field, reasons in value.items()}


def _text(fields: Mapping[str, Any], name: str) -> str:
    value = fields[name]
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string")
    return value


def _optional_text(fields: Mapping[str, Any], name: str) -> str | None:
    return None if fields.get(name) is None else _text(fields, name)


def _whole_seconds(fields: Mapping[str, Any], name: str) -> int:
    value = fields[name]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer")
    return value


class InvalidJobGraph(SparkDispatchError):
    """A JobGraph refused by validation; `field_errors` maps a dotted field path to reasons."""

    http_status = 400

    def __init__(self, field_errors: dict[str, list[str]]) -> None:
        self.field_errors = field_errors
        lines = _field_lines(field_errors)
        super().__init__("invalid JobGraph: " + "; ".join(lines), details=lines)

    def messages(self) -> list[str]:
        return self.details

    def fields(self) -> JSONObject:
        return {"field_errors": self.field_errors}

    @classmethod
    def from_fields(cls, messages: Sequence[str], fields: Mapping[str, Any]) -> Self:
        return cls(_field_errors(fields["field_errors"]))


def _count(fields: Mapping[str, Any], name: str) -> int:
    value = fields[name]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer")
    return value


class JobTooLarge(InvalidJobGraph):
    """A JobGraph whose every field is within its own limit, but whose whole is not: its `subtasks`
    (the sum of its vertices' parallelism) are over `limit`, the value of the configuration `option`."""

    def __init__(self, *, subtasks: int, limit: int, option: str) -> None:
        self.subtasks = subtasks
        self.limit = limit
        self.option = option
        super().__init__({"vertices": [f"the job has {subtasks} subtasks (the sum of its vertices' parallelism); "
                                       f"{option} allows at most {limit}"]})

    def fields(self) -> JSONObject:
        return {**super().fields(), "subtasks": self.subtasks, "limit": self.limit, "option": self.option}

    @classmethod
    def from_fields(cls, messages: Sequence[str], fields: Mapping[str, Any]) -> Self:
        return cls(subtasks=_count(fields, "subtasks"), limit=_count(fields, "limit"), option=_text(fields, "option"))


class InvalidRequest(SparkDispatchError):
    """A request body (registration, heartbeat, ...) refused by validation; names each field."""

    http_status = 400

    def __init__(self, what: str, field_errors: dict[str, list[str]]) -> None:
        self.what = what
        self.field_errors = field_errors
        lines = _field_lines(field_errors)
        super().__init__(f"invalid {what}: " + "; ".join(lines), details=lines)

    def messages(self) -> list[str]:
        return self.details

    def fields(self) -> JSONObject:
        return {"what": self.what, "field_errors": self.field_errors}

    @classmethod
    def from_fields(cls, messages: Sequence[str], fields: Mapping[str, Any]) -> Self:
        return cls(_text(fields, "what"), _field_errors(fields["field_errors"]))


class IllegalStateTransition(SparkDispatchError):
    http_status = 409


class UnknownJob(SparkDispatchError):
    http_status = 404

    def __init__(self, job_id: str) -> None:
        super().__init__(f"no job with id {job_id}")
        self.job_id = job_id

    def fields(self) -> JSONObject:
        return {"job_id": self.job_id}

    @classmethod
    def from_fields(cls, messages: Sequence[str], fields: Mapping[str, Any]) -> Self:
        return cls(_text(fields, "job_id"))


class DuplicateJobSubmission(SparkDispatchError):
    http_status = 409

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"job {job_id} cannot be submitted: {reason}")
        self.job_id = job_id
        self.reason = reason

    def fields(self) -> JSONObject:
        return {"job_id": self.job_id, "reason": self.reason}

    @classmethod
    def from_fields(cls, messages: Sequence[str], fields: Mapping[str, Any]) -> Self:
        return cls(_text(fields, "job_id"), _text(fields, "reason"))


class JobAlreadyTerminated(SparkDispatchError):
    http_status = 409

    def __init__(self, job_id: str, status: str) -> None:
        super().__init__(f"job {job_id} already reached {status} and cannot be cancelled")
        self.job_id = job_id
        self.status = status

    def fields(self) -> JSONObject:
        return {"job_id": self.job_id, "status": self.status}

    @classmethod
    def from_fields(cls, messages: Sequence[str], fields: Mapping[str, Any]) -> Self:
        return cls(_text(fields, "job_id"), _text(fields, "status"))


class RepairNotPossible(SparkDispatchError):
    """A repair that cannot be made; `running` when only because the job has not ended yet
    (ask again once it has)."""

    http_status = 409

    def __init__(self, job_id: str, reason: str, *, running: bool = False) -> None:
        super().__init__(f"job {job_id} cannot be repaired: {reason}")
        self.job_id = job_id
        self.reason = reason
        self.running = running

    def fields(self) -> JSONObject:
        return {"job_id": self.job_id, "reason": self.reason, "running": self.running}

    @classmethod
    def from_fields(cls, messages: Sequence[str], fields: Mapping[str, Any]) -> Self:
        return cls(_text(fields, "job_id"), _text(fields, "reason"), running=fields.get("running") is True)


class FencingTokenMismatch(SparkDispatchError):
    """A call made under another fencing token (leader session, JobMaster id) than the current one.

    The tokens are in the message for the master's own log, never in the REST body: the current
    leader session id is what fences the leader's components, so answers do not hand it out.
    """

    http_status = 409

    def __init__(self, component: str, expected: str | None = None, received: str | None = None) -> None:
        self.component = component
        self.expected = expected
        self.received = received
        self._public = (f"fencing token mismatch at the {component}: the call was made under another leader "
                        "session than the current one; the caller talks to a former leader")
        known = expected is not None or received is not None
        tokens = f" (the call carried {received!r}, the current token is {expected!r})" if known else ""
        super().__init__(self._public + tokens)

    def messages(self) -> list[str]:
        return [self._public, *self.details]

    def fields(self) -> JSONObject:
        return {"component": self.component}

    @classmethod
    def from_fields(cls, messages: Sequence[str], fields: Mapping[str, Any]) -> Self:
        return cls(_text(fields, "component"))


class StaleExecution(FencingTokenMismatch):
    """A TaskExecutor reported on an execution (an old attempt) the JobMaster no longer tracks.

    The attempt's execution id fences its reports, as a leader session fences a leader's calls;
    the TaskExecutor answers it by cancelling that task and freeing its slot.
    """

    http_status = 409

    def __init__(self, job_id: str, execution_id: str, reason: str = "it is no longer tracked") -> None:
        SparkDispatchError.__init__(
            self, f"execution {execution_id} of job {job_id} was refused: {reason}; cancel that task")
        self.component = f"JobMaster of job {job_id}"
        self.expected = self.received = None
        self._public = self.message
        self.job_id = job_id
        self.execution_id = execution_id
        self.reason = reason

    def fields(self) -> JSONObject:
        return {"job_id": self.job_id, "execution_id": self.execution_id, "reason": self.reason}

    @classmethod
    def from_fields(cls, messages: Sequence[str], fields: Mapping[str, Any]) -> Self:
        return cls(_text(fields, "job_id"), _text(fields, "execution_id"), _text(fields, "reason"))


class NoLeader(SparkDispatchError):
    http_status = 503


class SlotRequestTimeout(SparkDispatchError):
    http_status = 503


class UnknownTaskExecutor(SparkDispatchError):
    http_status = 404


class SlotProcessLost(SparkDispatchError):
    """A slot process of a TaskExecutor died under its task (signal, exit, out of memory) or did not start."""


class StoreError(SparkDispatchError):
    http_status = 500


class StoreUnavailable(StoreError):
    """A store could not be read or written for now (ZooKeeper connection loss or timeout); a retry may succeed."""

    http_status = 503


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


class RequestTimeout(SparkDispatchError):
    """A request body that sent nothing for longer than `rest.body-timeout`; the connection is closed."""

    http_status = 408


class UnsupportedMediaType(SparkDispatchError):
    """A body the endpoint reads as JSON sent with another `Content-Type` (a browser's form or
    `text/plain` request, which another site's page can send without asking)."""

    http_status = 415


class Unauthorized(SparkDispatchError):
    http_status = 401


class CsrfRefused(SparkDispatchError):
    """A state-changing call authenticated by the web UI's session cookie without the session's
    `X-CSRF-Token`: it may come from another site's page."""

    http_status = 403


class HostRefused(SparkDispatchError):
    """A call whose `Host` header names none of the master's own names (`rest.allowed-hosts`): a
    web page of another site that made its name resolve to the master (DNS rebinding)."""

    http_status = 403


class OriginRefused(SparkDispatchError):
    """A state-changing call sent by a web page of another origin than the master's own and those
    of `rest.allowed-origins`."""

    http_status = 403


class TooManyLoginAttempts(SparkDispatchError):
    """Too many failed logins from one client address: the next is heard after `retry_after`
    seconds (also its `Retry-After` header)."""

    http_status = 429

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def fields(self) -> JSONObject:
        return {"retry_after": self.retry_after}

    def http_headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}

    @classmethod
    def from_fields(cls, messages: Sequence[str], fields: Mapping[str, Any]) -> Self:
        return cls(messages[0], retry_after=_whole_seconds(fields, "retry_after"))


class RouteNotFound(SparkDispatchError):
    """No REST resource at the requested path (aiohttp's own 404)."""

    http_status = 404


class MethodNotAllowed(SparkDispatchError):
    """The path exists but does not take the method; `allowed` lists the methods it takes."""

    http_status = 405

    def __init__(self, method: str, path: str, allowed: Iterable[str]) -> None:
        self.method = method
        self.path = path
        self.allowed = sorted(allowed)
        super().__init__(f"{method} {path}: Method Not Allowed (allowed: {', '.join(self.allowed) or 'none'})")

    def fields(self) -> JSONObject:
        return {"method": self.method, "path": self.path, "allowed": self.allowed}

    @classmethod
    def from_fields(cls, messages: Sequence[str], fields: Mapping[str, Any]) -> Self:
        allowed = fields["allowed"]
        if not isinstance(allowed, list) or not all(isinstance(m, str) for m in allowed):
            raise ValueError("allowed must be a list of methods")
        return cls(_text(fields, "method"), _text(fields, "path"), allowed)


class InternalError(SparkDispatchError):
    """The master failed on an unexpected exception; its log has the traceback."""

    http_status = 500


class EntrypointNotFound(SparkDispatchError):
    """A task's entrypoint (`module:function`) names a module or function its code does not have.

    Raised in the slot process, so it reaches the JobResult as a failure of this class; no
    retry of the task can fix it.
    """

    http_status = 400


class MissingExtra(SparkDispatchError):
    """A command needs the packages of an extra (`sparkdispatch[master]`, ...) that is not installed."""

    def __init__(self, message: str, *, extra: str) -> None:
        super().__init__(message)
        self.extra = extra

    def fields(self) -> JSONObject:
        return {"extra": self.extra}

    @classmethod
    def from_fields(cls, messages: Sequence[str], fields: Mapping[str, Any]) -> Self:
        return cls(messages[0], extra=_text(fields, "extra"))


class ConnectServerError(SparkDispatchError):
    """A TaskExecutor's Spark Connect server failed to start or to serve; `log_file` is its log.

    The message names the log file; the details are its last lines.
    """

    def __init__(self, message: str, *, log_file: str, details: Iterable[str] = ()) -> None:
        super().__init__(message, details=details)
        self.log_file = log_file

    def fields(self) -> JSONObject:
        return {"log_file": self.log_file}

    @classmethod
    def from_fields(cls, messages: Sequence[str], fields: Mapping[str, Any]) -> Self:
        return cls(messages[0], log_file=_text(fields, "log_file"), details=messages[1:])


class ServiceUnavailable(SparkDispatchError):
    """The master cannot serve the call now; `leader` is the leader's REST address if known."""

    http_status = 503

    def __init__(self, message: str, *, leader: str | None = None, details: Iterable[str] = ()) -> None:
        super().__init__(message, details=details)
        self.leader = leader

    def fields(self) -> JSONObject:
        return {"leader": self.leader}

    @classmethod
    def from_fields(cls, messages: Sequence[str], fields: Mapping[str, Any]) -> Self:
        return cls(messages[0], leader=_optional_text(fields, "leader"), details=messages[1:])


class LeadershipLost(ServiceUnavailable):
    """This process stopped leading while it served the call; the next leader serves it again."""

    http_status = 503

    def __init__(self, component: str) -> None:
        super().__init__(f"the {component} is no longer led by this process")
        self.component = component

    def fields(self) -> JSONObject:
        return {"component": self.component}

    @classmethod
    def from_fields(cls, messages: Sequence[str], fields: Mapping[str, Any]) -> Self:
        return cls(_text(fields, "component"))


class RecoveryInProgress(ServiceUnavailable):
    """This master leads but still recovers its jobs; the call is answered once it is done.

    Its REST answer carries `Retry-After: <retry_after>` (seconds); `leader` is this master.
    """

    http_status = 503

    def __init__(self, message: str, *, leader: str | None, retry_after: int) -> None:
        super().__init__(message, leader=leader)
        self.retry_after = retry_after

    def fields(self) -> JSONObject:
        return {"leader": self.leader, "retry_after": self.retry_after}

    def http_headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}

    @classmethod
    def from_fields(cls, messages: Sequence[str], fields: Mapping[str, Any]) -> Self:
        return cls(messages[0], leader=_optional_text(fields, "leader"),
                   retry_after=_whole_seconds(fields, "retry_after"))


ERROR_TYPES: Mapping[str, type[SparkDispatchError]] = MappingProxyType({cls.__name__: cls for cls in (
    SparkDispatchError, ConfigurationError, TlsError, InvalidJobGraph, JobTooLarge, InvalidRequest,
    IllegalStateTransition, UnknownJob, DuplicateJobSubmission, JobAlreadyTerminated, RepairNotPossible,
    FencingTokenMismatch, StaleExecution, NoLeader, SlotRequestTimeout, UnknownTaskExecutor, SlotProcessLost,
    StoreError, StoreUnavailable, JobResultEntryExists, NoSuchJobResult, BlobError, BlobNotFound, BlobTooLarge,
    CorruptedBlob, RequestTooLarge, RequestTimeout, UnsupportedMediaType, Unauthorized, CsrfRefused, HostRefused,
    OriginRefused, TooManyLoginAttempts, RouteNotFound, MethodNotAllowed, InternalError, EntrypointNotFound,
    MissingExtra, ConnectServerError, ServiceUnavailable, LeadershipLost, RecoveryInProgress,
)})
"""The registry: class name (a body's `type`) → class."""

_MAX_TEXT = 500


#: Under `/v1/` (Flink's REST prefix) an error body is Flink's `{"errors": [...]}` alone; the rest
#: of `to_body()` (`type` and the class's fields, as compact JSON) travels in this header.
ERROR_HEADER = "X-SparkDispatch-Error"
_MAX_HEADER = 4096


def error_header(error: SparkDispatchError) -> str:
    """The `ERROR_HEADER` value of `error`: its type and fields, or its type alone when they are long."""
    value = json.dumps({"type": type(error).__name__, **error.fields()}, separators=(",", ":"))
    return value if len(value) <= _MAX_HEADER else json.dumps({"type": type(error).__name__})


def error_from_body(status: int, text: str, *, header: str | None = None) -> SparkDispatchError:
    """The error an HTTP error answer stands for: the class its body's `type` names, with its fields.

    `header` is the answer's `ERROR_HEADER` (a `/v1/` answer), whose type and fields complete a
    body that has none. A body that is not JSON, names no registered class or lacks a field of
    its class becomes a `SparkDispatchError` carrying the answer's status and its messages (or text).
    """
    try:
        body = json.loads(text) if text.strip() else None
    except ValueError:
        body = None
    messages = _body_messages(body)
    error: SparkDispatchError | None = None
    if isinstance(body, dict) and messages:
        if "type" not in body and header:
            body = {**_header_fields(header), **body}
        cls = ERROR_TYPES.get(str(body.get("type")))
        if cls is not None:
            try:
                error = cls.from_fields(messages, body)
            except (KeyError, TypeError, ValueError):
                error = None
    if error is None:
        fallback = messages or [text.strip()[:_MAX_TEXT] or f"HTTP {status} without a body"]
        error = SparkDispatchError(fallback[0], details=fallback[1:])
    if error.http_status != status:
        error.http_status = status
    return error


def _header_fields(header: str) -> dict[str, Any]:
    try:
        fields = json.loads(header)
    except ValueError:
        return {}
    return fields if isinstance(fields, dict) else {}


def _body_messages(body: object) -> list[str]:
    listed = body.get("errors") if isinstance(body, dict) else None
    if isinstance(listed, list) and listed:
        return [str(message) for message in listed]
    return []
