"""Every error sparkdispatch raises on purpose, and its REST form.

::

    SparkDispatchError
    ├── ConfigurationError            a configuration key is unknown or its value is bad
    ├── InvalidJobGraph               a JobGraph failed validation (names the field)
    │   └── JobTooLarge               a JobGraph over a limit on the whole job (`jobgraph.max-subtasks`)
    ├── InvalidRequest                a request body other than a JobGraph failed validation
    │   └── InvalidShape              an answer or a stored record does not fit its declared shape (names the field)
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
    ├── EnvironmentBuildFailed        a job's Python environment could not be resolved or built
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

A class declares its fields once, as class-level annotations (`job_id: str`); they follow its
base class's unless it is defined with `own_fields_only=True`. `to_body()` and `from_fields()`
derive from them, and every class of this package registers itself under its name in
`ERROR_TYPES` as it is defined.
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType, NoneType, UnionType
from typing import Any, ClassVar, Self

JSONObject = dict[str, Any]

_REGISTRY: dict[str, type[SparkDispatchError]] = {}


class SparkDispatchError(Exception):
    """Root of sparkdispatch's own errors.

    A subclass's class-level annotations are the fields of its REST body, beside `errors` and
    `type`; each is an attribute of the error. Rebuilding one from a body (`from_fields`) calls
    its constructor: a parameter named `message` gets the body's first message, `details` the
    others, and a parameter named after a field that field, checked against its annotation (a
    field whose type admits None may be missing).
    """

    http_status: int = 500
    #: whether a task failing with this error may succeed when run again (the JobMaster restarts
    #: it under the job's restart strategy); a job whose task fails with one that may not fails at once
    restartable: ClassVar[bool] = True
    #: the REST body's fields, name → type, in body order (derived from the annotations)
    field_types: ClassVar[Mapping[str, object]] = MappingProxyType({})

    def __init__(self, message: str, *, details: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.details = list(details)

    def __init_subclass__(cls, *, own_fields_only: bool = False, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        hints = typing.get_type_hints(cls)
        own = {
            name: hints[name]
            for name in cls.__dict__.get("__annotations__", {})
            if typing.get_origin(hints[name]) is not ClassVar
        }
        base = next(b for b in cls.__bases__ if issubclass(b, SparkDispatchError))
        cls.field_types = MappingProxyType(own if own_fields_only else {**base.field_types, **own})
        if cls.__module__.partition(".")[0] == __name__.partition(".")[0]:
            if _REGISTRY.setdefault(cls.__name__, cls) is not cls:
                raise TypeError(f"two error classes are named {cls.__name__}")

    def messages(self) -> list[str]:
        """The message first, then any details, as the REST `errors` list."""
        return [self.message, *self.details]

    def fields(self) -> JSONObject:
        """This class's fields in its REST body, beside `errors` and `type`."""
        return {name: getattr(self, name) for name in self.field_types}

    def to_body(self) -> JSONObject:
        """The REST error body: `{"errors": [...], "type": "<class name>", ...fields}`."""
        return {"errors": self.messages(), "type": type(self).__name__, **self.fields()}

    def http_headers(self) -> dict[str, str]:
        """HTTP headers the REST answer of this error carries (e.g. `Retry-After`)."""
        return {}

    @classmethod
    def from_fields(cls, messages: Sequence[str], fields: Mapping[str, object]) -> Self:
        """Rebuild the error from a body's messages and fields; `KeyError` or `ValueError` when a
        field its constructor needs is missing or of another type."""
        parameters = inspect.signature(cls).parameters
        arguments: dict[str, Any] = {}
        if "message" in parameters:
            arguments["message"] = messages[0]
        if "details" in parameters:
            arguments["details"] = messages[1:]
        for name, hint in cls.field_types.items():
            if name not in parameters:
                continue  # derived by the constructor from the others
            if name in fields:
                arguments[name] = _checked(fields[name], hint, name)
            elif _admits_none(hint):
                arguments[name] = None
            elif parameters[name].default is inspect.Parameter.empty:
                raise KeyError(name)
        return cls(**arguments)


_REGISTRY[SparkDispatchError.__name__] = SparkDispatchError


def _admits_none(hint: object) -> bool:
    return isinstance(hint, UnionType) and NoneType in typing.get_args(hint)


def _checked(value: object, hint: object, name: str) -> object:
    """`value` if it is of the field type `hint` (str, int, bool, None, unions, list[...] and
    dict[str, ...] of them), else `ValueError` naming the field."""
    if isinstance(hint, UnionType):
        for member in typing.get_args(hint):
            try:
                return _checked(value, member, name)
            except ValueError:
                continue
        raise ValueError(f"{name} must be {hint}")
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin is list and isinstance(value, list):
        return [_checked(item, arguments[0], name) for item in value]
    if origin is dict and isinstance(value, dict):
        return {_checked(key, arguments[0], name): _checked(item, arguments[1], name) for key, item in value.items()}
    if hint is NoneType and value is None:
        return value
    if (
        isinstance(hint, type)
        and origin is None
        and isinstance(value, hint)
        and not (isinstance(value, bool) and hint is not bool)
    ):
        return value
    raise ValueError(f"{name} must be {getattr(hint, '__name__', hint)}")


class ConfigurationError(SparkDispatchError):
    http_status = 400


class TlsError(ConfigurationError):
    """A TLS setting cannot be used, or a TLS handshake with the master failed: the fix is in the settings."""


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


class Forbidden(SparkDispatchError):
    """A caller the master knows asked for what its role may not do (a viewer submitting, a user
    token on a TaskExecutor route, the cluster secret on a user's route)."""

    http_status = 403


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
    retry_after: int

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def http_headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class RouteNotFound(SparkDispatchError):
    """No REST resource at the requested path (aiohttp's own 404)."""

    http_status = 404


class MethodNotAllowed(SparkDispatchError):
    """The path exists but does not take the method; `allowed` lists the methods it takes."""

    http_status = 405
    method: str
    path: str
    allowed: list[str]

    def __init__(self, method: str, path: str, allowed: Iterable[str]) -> None:
        self.method = method
        self.path = path
        self.allowed = sorted(allowed)
        super().__init__(f"{method} {path}: Method Not Allowed (allowed: {', '.join(self.allowed) or 'none'})")


class InternalError(SparkDispatchError):
    """The master failed on an unexpected exception; its log has the traceback."""

    http_status = 500


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


class MissingExtra(SparkDispatchError):
    """A command needs the packages of an extra (`sparkdispatch[master]`, ...) that is not installed."""

    extra: str

    def __init__(self, message: str, *, extra: str) -> None:
        super().__init__(message)
        self.extra = extra


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


ERROR_TYPES: Mapping[str, type[SparkDispatchError]] = MappingProxyType(_REGISTRY)
"""The registry: class name (a body's `type`) → class, every class of this package (they register
themselves as they are defined)."""

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
