"""What TaskExecutors, JobMasters and the REST endpoint exchange with the ResourceManager.

JSON forms are defined by the marshmallow schemas below; `from_dict` refuses unknown or
missing fields and bad values with `InvalidRequest`, naming each field.
"""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from marshmallow import RAISE, Schema, ValidationError, fields, post_load, validate, validates_schema

from sparkdispatch.errors import InvalidRequest, SparkDispatchError
from sparkdispatch.jobgraph import ExecutionState, SlotReport, SlotReportSchema, _flatten_errors

TASK_EXECUTOR_ID_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@:-]{0,199}$")
MAX_SLOTS_PER_TASK_EXECUTOR = 1024


@dataclass(frozen=True)
class TaskExecutorRegistration:
    """A TaskExecutor introducing itself: its id, Celery hostname and queue, slots and their state."""

    task_executor_id: str
    hostname: str
    queue: str
    slots: int
    slot_report: SlotReport
    spark_master: str = ""

    @classmethod
    def from_dict(cls, data: Any) -> TaskExecutorRegistration:
        return _load(_REGISTRATION, data, "TaskExecutor registration")

    def to_dict(self) -> dict[str, Any]:
        return _REGISTRATION.dump(self)


@dataclass(frozen=True)
class RegistrationAck:
    """The ResourceManager's answer to a registration.

    `resource_manager_id` is fresh per ResourceManager instance, so a TaskExecutor can tell a
    restarted ResourceManager apart even when the leader session id stays the same (HA `none`).
    """

    resource_manager_id: str
    heartbeat_interval_ms: int
    heartbeat_timeout_ms: int

    @classmethod
    def from_dict(cls, data: Any) -> RegistrationAck:
        return _load(_REGISTRATION_ACK, data, "registration answer")

    def to_dict(self) -> dict[str, Any]:
        return {"resource_manager_id": self.resource_manager_id, "heartbeat_interval_ms": self.heartbeat_interval_ms,
                "heartbeat_timeout_ms": self.heartbeat_timeout_ms}


@dataclass(frozen=True)
class ExecutionReport:
    """One execution running on a TaskExecutor, as its heartbeat lists it."""

    job_id: str
    execution_id: str
    state: ExecutionState

    def to_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "execution_id": self.execution_id, "state": self.state.value}


@dataclass(frozen=True)
class HeartbeatPayload:
    """The body of `POST /v1/taskexecutors/{id}/heartbeat`."""

    slot_report: SlotReport
    executions: tuple[ExecutionReport, ...] = ()

    @classmethod
    def from_dict(cls, data: Any) -> HeartbeatPayload:
        return _load(_HEARTBEAT, data, "heartbeat")

    def to_dict(self) -> dict[str, Any]:
        return {"slot_report": self.slot_report.to_dict(), "executions": [e.to_dict() for e in self.executions]}


class AllocatedSlot(NamedTuple):
    """A slot the SlotManager gave to a job. (A NamedTuple: allocation is the hot path.)"""

    allocation_id: str
    task_executor_id: str
    slot_index: int
    queue: str
    hostname: str

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AllocatedSlot:
        return cls(**{name: data[name] for name in cls._fields})


@dataclass(frozen=True)
class ResourceOverview:
    """The slot counts of `GET /overview`."""

    taskmanagers: int
    slots_total: int
    slots_available: int

    def to_dict(self) -> dict[str, int]:
        return {"taskmanagers": self.taskmanagers, "slots_total": self.slots_total,
                "slots_available": self.slots_available}


class SlotListener(Protocol):
    """A job's side of the slot contract (the JobMaster implements it); called on the loop.

    A listener may also define `task_executor_heartbeat(task_executor_id, executions)`: it is
    then called with the `ExecutionReport`s of that job on each heartbeat of a TaskExecutor that
    holds one of the job's slots or runs one of its executions.
    """

    @abstractmethod
    def slots_allocated(self, slots: list[AllocatedSlot]) -> None: ...

    @abstractmethod
    def slot_request_failed(self, error: SparkDispatchError) -> None: ...

    @abstractmethod
    def task_executor_lost(self, task_executor_id: str, allocation_ids: list[str], reason: str) -> None: ...


def as_slot_report(value: SlotReport | Mapping[str, Any]) -> SlotReport:
    """A SlotReport, from itself or from its JSON form."""
    if isinstance(value, SlotReport):
        return value
    return _load(_SLOT_REPORT, value, "slot report")


def as_execution_reports(values: Sequence[ExecutionReport | Mapping[str, Any]] | None) -> tuple[ExecutionReport, ...]:
    """ExecutionReports, from themselves or from their JSON forms."""
    if not values:
        return ()
    if isinstance(values, (str, bytes, Mapping)):
        raise InvalidRequest("heartbeat", {"executions": ["must be a list"]})
    reports: list[ExecutionReport] = []
    for index, value in enumerate(values):
        if isinstance(value, ExecutionReport):
            reports.append(value)
            continue
        if not isinstance(value, Mapping):
            raise InvalidRequest("heartbeat", {f"executions[{index}]": ["must be an object"]})
        try:
            reports.append(_EXECUTION_REPORT.load(value))
        except ValidationError as exc:
            raise InvalidRequest("heartbeat", _flatten_errors(exc.messages, f"executions[{index}]")) from None
    return tuple(reports)


# --------------------------------------------------------------------------------------------
# Schemas


def _load(schema: Schema, data: Any, what: str) -> Any:
    if not isinstance(data, Mapping):
        raise InvalidRequest(what, {"body": [f"expected a JSON object, got {type(data).__name__}"]})
    try:
        return schema.load(data)
    except ValidationError as exc:
        raise InvalidRequest(what, _flatten_errors(exc.messages)) from None


class _StrictSchema(Schema):
    class Meta:
        unknown = RAISE


def _non_empty(name: str) -> validate.Length:
    return validate.Length(min=1, max=500, error=f"{name} must be 1-500 characters")


class _RegistrationSchema(_StrictSchema):
    task_executor_id = fields.String(required=True, validate=validate.Regexp(
        TASK_EXECUTOR_ID_PATTERN, error="must be 1-200 letters, digits or '_.@:-', not starting with '.@:-'"))
    hostname = fields.String(required=True, validate=_non_empty("hostname"))
    queue = fields.String(required=True, validate=_non_empty("queue"))
    slots = fields.Integer(required=True, strict=True, validate=validate.Range(
        min=1, max=MAX_SLOTS_PER_TASK_EXECUTOR, error=f"must be between 1 and {MAX_SLOTS_PER_TASK_EXECUTOR}"))
    slot_report = fields.Nested(SlotReportSchema, load_default=None)
    spark_master = fields.String(load_default="")

    @validates_schema(skip_on_field_errors=True)
    def check_report(self, data: dict[str, Any], **_: Any) -> None:
        report: SlotReport | None = data["slot_report"]
        if report is None:
            return
        seen: set[int] = set()
        problems: list[str] = []
        for status in report.slots:
            if status.index >= data["slots"]:
                problems.append(f"slot index {status.index} is out of range for {data['slots']} slots")
            elif status.index in seen:
                problems.append(f"slot index {status.index} is reported twice")
            seen.add(status.index)
        if problems:
            raise ValidationError({"slot_report": problems})

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> TaskExecutorRegistration:
        if data["slot_report"] is None:
            data["slot_report"] = SlotReport.free(data["slots"])
        return TaskExecutorRegistration(**data)


class _RegistrationAckSchema(_StrictSchema):
    resource_manager_id = fields.String(required=True)
    heartbeat_interval_ms = fields.Integer(required=True, strict=True, validate=validate.Range(min=1))
    heartbeat_timeout_ms = fields.Integer(required=True, strict=True, validate=validate.Range(min=1))

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> RegistrationAck:
        return RegistrationAck(**data)


class _ExecutionReportSchema(_StrictSchema):
    job_id = fields.String(required=True, validate=_non_empty("job_id"))
    execution_id = fields.String(required=True, validate=_non_empty("execution_id"))
    state = fields.Enum(ExecutionState, required=True)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> ExecutionReport:
        return ExecutionReport(**data)


class _HeartbeatSchema(_StrictSchema):
    slot_report = fields.Nested(SlotReportSchema, required=True)
    executions = fields.List(fields.Nested(_ExecutionReportSchema), load_default=list)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> HeartbeatPayload:
        return HeartbeatPayload(slot_report=data["slot_report"], executions=tuple(data["executions"]))


# one instance of each schema: they hold no per-call state, and building one costs more than a load
_REGISTRATION = _RegistrationSchema()
_REGISTRATION_ACK = _RegistrationAckSchema()
_HEARTBEAT = _HeartbeatSchema()
_EXECUTION_REPORT = _ExecutionReportSchema()
_SLOT_REPORT = SlotReportSchema()
