"""The master ↔ TaskExecutor protocol: every message either side sends, and its JSON form.

Master → TaskExecutor: a `TaskDeploymentDescriptor` per deployed attempt, a `RegistrationAck`
per registration. TaskExecutor → master: its `TaskExecutorRegistration`, a `HeartbeatPayload`
(its `SlotReport` and `ExecutionReport`s) and an `ExecutionStateUpdate` per state change.
Each JSON form is defined by a strict schema below; `from_dict` refuses unknown or missing
fields and bad values, naming each field (the deployment, slot report and state update with
`InvalidJobGraph`, the others with `InvalidRequest`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from marshmallow import ValidationError, fields, post_dump, post_load, validate, validates_schema

from sparkdispatch.errors import InvalidJobGraph, InvalidRequest
from sparkdispatch.model.codec import register_schema
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.job_graph import (
    BLOB_KEY_PATTERN,
    DEFAULT_POOL,
    ENTRYPOINT_PATTERN,
    JOB_ID_PATTERN,
    POOL_PATTERN,
    POOL_RULE,
    VERTEX_ID_PATTERN,
)
from sparkdispatch.model.environment import Environment, environment_field
from sparkdispatch.model.job_result import MAX_INPUT_FILES, Failure
from sparkdispatch.model.job_result import FailureSchema
from sparkdispatch.model.schema import (
    ErrorFactory,
    FieldErrors,
    StrictSchema,
    WholeMatch,
    drop_empty,
    drop_none,
    dump,
    flatten_errors,
    load,
)

# `GET /artifacts/{key}` names the artifact's file (`job.py`, `deps.zip`) in this header: a
# TaskExecutor keeps the name, since it imports a `.py` and a `.zip` differently.
ARTIFACT_NAME_HEADER = "X-SparkDispatch-Artifact-Name"
TASK_EXECUTOR_ID_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@:-]{0,199}$")
MAX_SLOTS_PER_TASK_EXECUTOR = 1024


def _invalid_request(what: str) -> ErrorFactory:
    def error(field_errors: FieldErrors) -> InvalidRequest:
        return InvalidRequest(what, field_errors)

    return error


# --------------------------------------------------------------------------------------------
# Slots


@dataclass(frozen=True)
class SlotStatus:
    """One slot as its TaskExecutor sees it: free, or allocated to a job."""

    index: int
    allocation_id: str | None = None
    job_id: str | None = None


@dataclass(frozen=True)
class SlotReport:
    """The state of every slot of one TaskExecutor."""

    slots: tuple[SlotStatus, ...]

    @classmethod
    def free(cls, count: int) -> SlotReport:
        return cls(tuple(SlotStatus(index=i) for i in range(count)))

    @classmethod
    def from_dict(cls, data: Any) -> SlotReport:
        return load(_SLOT_REPORT, data, SlotReport, InvalidJobGraph)

    def to_dict(self) -> dict[str, Any]:
        return dump(_SLOT_REPORT, self)


def as_slot_report(value: SlotReport | Mapping[str, Any]) -> SlotReport:
    """A SlotReport, from itself or from its JSON form."""
    if isinstance(value, SlotReport):
        return value
    return load(_SLOT_REPORT, value, SlotReport, _invalid_request("slot report"))


# --------------------------------------------------------------------------------------------
# Tasks


@dataclass(frozen=True)
class ChainedTask:
    """A vertex chained into the deployed one (docs/jobgraph.md, "Result kinds"): its function runs
    in the same attempt, once per subtask (`parallelism`), and the union of what they return is the
    input of its consumer in the chain, never written. `inputs` maps each of its upstream vertices to
    their result partitions, as a deployment's own; an upstream vertex chained too has none: its
    DataFrame is the one this attempt built for it."""

    vertex_id: str
    entrypoint: str
    parallelism: int = 1
    inputs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    input_schemas: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskDeploymentDescriptor:
    """Everything a TaskExecutor needs to run one attempt of one subtask.

    `inputs` maps each upstream vertex to the paths of its result partitions (an empty list
    when it returned nothing), and `input_schemas` those whose producers reported their result's
    schema to its JSON (`StructType.json()`), which the attempt reads them with instead of
    inferring it; `result_path` is where this attempt writes a returned DataFrame.
    `registration_id` is the TaskExecutor's registration the slot was allocated under: the
    TaskExecutor runs the task only while it is registered under it (and the deploying leader's
    session), so a deployment of an older session or registration never runs.
    """

    job_id: str
    job_master_id: str
    execution_id: str
    vertex_id: str
    entrypoint: str
    subtask_index: int
    parallelism: int
    attempt: int
    allocation_id: str
    slot_index: int
    result_path: str
    registration_id: str = ""
    job_name: str = ""
    inputs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    artifacts: tuple[str, ...] = ()
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    #: the Python environment the task runs in (its vertex's, else its job's), if any
    environment: Environment | None = None
    input_schemas: Mapping[str, str] = field(default_factory=dict)
    #: the vertices chained into this one, in the order they run (each after its own inputs)
    chained: tuple[ChainedTask, ...] = ()
    #: the result is kept on the TaskExecutor's local disk, not written to `result_path` (where
    #: the attempt's log still goes); the FINISHED report names where it is
    keep_result: bool = False

    @classmethod
    def from_dict(cls, data: Any) -> TaskDeploymentDescriptor:
        return load(_TDD, data, TaskDeploymentDescriptor, InvalidJobGraph)

    def to_dict(self) -> dict[str, Any]:
        return dump(_TDD, self)


@dataclass(frozen=True)
class ExecutionStateUpdate:
    """A TaskExecutor's report of one attempt's new state, fenced by `job_master_id`.

    A FINISHED attempt that wrote a result gives its `rows`, `result_path` and `result_schema`
    (the result's schema as Spark's JSON, `StructType.json()`; None from a TaskExecutor of before)."""

    job_id: str
    job_master_id: str
    execution_id: str
    state: ExecutionState
    task_executor_id: str = ""
    rows: int | None = None
    result_path: str | None = None
    #: FINISHED: the datasets its DataFrame read besides the job's results (`VertexResult.input_files`)
    input_files: tuple[str, ...] = ()
    failure: Failure | None = None
    result_schema: str | None = None
    #: FINISHED: each chained vertex's rows, by subtask (None where a subtask returned nothing, or
    #: where its DataFrame was not part of what the attempt ran)
    chained_rows: Mapping[str, tuple[int | None, ...]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any) -> ExecutionStateUpdate:
        return load(_STATE_UPDATE, data, ExecutionStateUpdate, InvalidJobGraph)

    def to_dict(self) -> dict[str, Any]:
        return dump(_STATE_UPDATE, self)


# --------------------------------------------------------------------------------------------
# Registration and heartbeats


@dataclass(frozen=True)
class TaskExecutorRegistration:
    """A TaskExecutor introducing itself: its id, Celery hostname and queue, slots and their state.

    `previous_registration_id` is the registration this TaskExecutor process held last (None on
    its first): when the ResourceManager still has it under that id, it keeps the slots'
    allocations (a TaskExecutor registering again after losing sight of the leader for a while).
    """

    task_executor_id: str
    hostname: str
    queue: str
    slots: int
    slot_report: SlotReport
    spark_master: str = ""
    previous_registration_id: str | None = None
    pool: str = DEFAULT_POOL

    @classmethod
    def from_dict(cls, data: Any) -> TaskExecutorRegistration:
        return load(_REGISTRATION, data, TaskExecutorRegistration, _invalid_request("TaskExecutor registration"))

    def to_dict(self) -> dict[str, Any]:
        return dump(_REGISTRATION, self)


@dataclass(frozen=True)
class RegistrationAck:
    """The ResourceManager's answer to a registration.

    `resource_manager_id` is fresh per ResourceManager instance, so a TaskExecutor can tell a
    restarted ResourceManager apart even when the leader session id stays the same (HA `none`).
    `registration_id` is fresh per registration; deployments name the one their slot was
    allocated under. `resumed` says the registration continued `previous_registration_id`: the
    slots' allocations were kept, so deployments under that id stay valid.
    """

    resource_manager_id: str
    heartbeat_interval_ms: int
    heartbeat_timeout_ms: int
    registration_id: str
    resumed: bool = False

    @property
    def heartbeat_interval_s(self) -> float:
        return self.heartbeat_interval_ms / 1000.0

    @property
    def heartbeat_timeout_s(self) -> float:
        return self.heartbeat_timeout_ms / 1000.0

    @classmethod
    def from_dict(cls, data: Any) -> RegistrationAck:
        return load(_REGISTRATION_ACK, data, RegistrationAck, _invalid_request("registration answer"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "resource_manager_id": self.resource_manager_id,
            "heartbeat_interval_ms": self.heartbeat_interval_ms,
            "heartbeat_timeout_ms": self.heartbeat_timeout_ms,
            "registration_id": self.registration_id,
            "resumed": self.resumed,
        }


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
    """The body of `POST /v1/taskexecutors/{id}/heartbeat`. `kept_jobs`: the jobs whose results
    the TaskExecutor keeps and none of whose executions it runs; the answer names those that ended
    (`HeartbeatAnswer`), whose results it deletes."""

    slot_report: SlotReport
    executions: tuple[ExecutionReport, ...] = ()
    kept_jobs: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: Any) -> HeartbeatPayload:
        return load(_HEARTBEAT, data, HeartbeatPayload, _invalid_request("heartbeat"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "slot_report": self.slot_report.to_dict(),
            "executions": [e.to_dict() for e in self.executions],
            "kept_jobs": list(self.kept_jobs),
        }


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
            raise InvalidRequest("heartbeat", flatten_errors(exc.messages, f"executions[{index}]")) from None
    return tuple(reports)


# --------------------------------------------------------------------------------------------
# Schemas


def _non_empty(name: str) -> validate.Length:
    return validate.Length(min=1, max=500, error=f"{name} must be 1-500 characters")


class SlotStatusSchema(StrictSchema):
    index = fields.Integer(required=True, strict=True, validate=validate.Range(min=0))
    allocation_id = fields.String(allow_none=True, load_default=None)
    job_id = fields.String(allow_none=True, load_default=None)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> SlotStatus:
        return SlotStatus(**data)


class SlotReportSchema(StrictSchema):
    slots = fields.List(fields.Nested(SlotStatusSchema), required=True)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> SlotReport:
        return SlotReport(tuple(data["slots"]))


class ChainedTaskSchema(StrictSchema):
    vertex_id = fields.String(required=True, validate=WholeMatch(VERTEX_ID_PATTERN))
    entrypoint = fields.String(required=True, validate=WholeMatch(ENTRYPOINT_PATTERN))
    parallelism = fields.Integer(load_default=1, strict=True, validate=validate.Range(min=1))
    inputs = fields.Dict(keys=fields.String(), values=fields.List(fields.String()), load_default=dict)
    input_schemas = fields.Dict(keys=fields.String(), values=fields.String(), load_default=dict)
    params = fields.Dict(keys=fields.String(), values=fields.Raw(allow_none=True), load_default=dict)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> ChainedTask:
        data["inputs"] = {k: tuple(v) for k, v in data["inputs"].items()}
        return ChainedTask(**data)

    @post_dump
    def lists(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        data["inputs"] = {k: list(v) for k, v in data["inputs"].items()}
        data["input_schemas"] = dict(data["input_schemas"])
        data["params"] = dict(data["params"])
        return data


class TaskDeploymentDescriptorSchema(StrictSchema):
    job_id = fields.String(required=True, validate=WholeMatch(JOB_ID_PATTERN))
    job_master_id = fields.String(required=True)
    execution_id = fields.String(required=True)
    vertex_id = fields.String(required=True, validate=WholeMatch(VERTEX_ID_PATTERN))
    entrypoint = fields.String(required=True, validate=WholeMatch(ENTRYPOINT_PATTERN))
    subtask_index = fields.Integer(required=True, strict=True, validate=validate.Range(min=0))
    parallelism = fields.Integer(required=True, strict=True, validate=validate.Range(min=1))
    attempt = fields.Integer(required=True, strict=True, validate=validate.Range(min=0))
    allocation_id = fields.String(required=True)
    slot_index = fields.Integer(required=True, strict=True, validate=validate.Range(min=0))
    result_path = fields.String(required=True)
    registration_id = fields.String(load_default="")
    job_name = fields.String(load_default="")
    inputs = fields.Dict(keys=fields.String(), values=fields.List(fields.String()), load_default=dict)
    params = fields.Dict(keys=fields.String(), values=fields.Raw(allow_none=True), load_default=dict)
    artifacts = fields.List(fields.String(validate=WholeMatch(BLOB_KEY_PATTERN)), load_default=list)
    spark_conf = fields.Dict(keys=fields.String(), values=fields.String(), load_default=dict)
    environment = environment_field()
    input_schemas = fields.Dict(keys=fields.String(), values=fields.String(), load_default=dict)
    chained = fields.List(fields.Nested(ChainedTaskSchema), load_default=list)
    keep_result = fields.Boolean(load_default=False)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> TaskDeploymentDescriptor:
        data["inputs"] = {k: tuple(v) for k, v in data["inputs"].items()}
        data["artifacts"] = tuple(data["artifacts"])
        data["chained"] = tuple(data["chained"])
        return TaskDeploymentDescriptor(**data)

    @post_dump
    def lists(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        data["inputs"] = {k: list(v) for k, v in data["inputs"].items()}
        data["artifacts"] = list(data["artifacts"])
        data["params"] = dict(data["params"])
        data["spark_conf"] = dict(data["spark_conf"])
        data["input_schemas"] = dict(data["input_schemas"])
        if not data["chained"]:
            del data["chained"]  # a deployment with no chain keeps the form TaskExecutors of before read
        if not data["keep_result"]:
            del data["keep_result"]
        return drop_none(data, "environment")


class ExecutionStateUpdateSchema(StrictSchema):
    job_id = fields.String(required=True, validate=WholeMatch(JOB_ID_PATTERN))
    job_master_id = fields.String(required=True)
    execution_id = fields.String(required=True)
    state = fields.Enum(ExecutionState, required=True)
    task_executor_id = fields.String(load_default="")
    rows = fields.Integer(allow_none=True, load_default=None, strict=True)
    result_path = fields.String(allow_none=True, load_default=None)
    input_files = fields.List(fields.String(), load_default=list, validate=validate.Length(max=MAX_INPUT_FILES))
    failure = fields.Nested(FailureSchema, allow_none=True, load_default=None)
    result_schema = fields.String(allow_none=True, load_default=None)
    chained_rows = fields.Dict(
        keys=fields.String(),
        values=fields.List(fields.Integer(allow_none=True, strict=True)),
        load_default=dict,
    )

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> ExecutionStateUpdate:
        data["input_files"] = tuple(data["input_files"])
        data["chained_rows"] = {k: tuple(v) for k, v in data["chained_rows"].items()}
        return ExecutionStateUpdate(**data)

    @post_dump
    def compact(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        if data["chained_rows"]:
            data["chained_rows"] = {k: list(v) for k, v in data["chained_rows"].items()}
        else:
            del data["chained_rows"]
        return drop_none(drop_empty(data, "input_files"), "rows", "result_path", "failure", "result_schema")


class TaskExecutorRegistrationSchema(StrictSchema):
    task_executor_id = fields.String(
        required=True,
        validate=WholeMatch(
            TASK_EXECUTOR_ID_PATTERN, error="must be 1-200 letters, digits or '_.@:-', not starting with '.@:-'"
        ),
    )
    hostname = fields.String(required=True, validate=_non_empty("hostname"))
    queue = fields.String(required=True, validate=_non_empty("queue"))
    slots = fields.Integer(
        required=True,
        strict=True,
        validate=validate.Range(
            min=1, max=MAX_SLOTS_PER_TASK_EXECUTOR, error=f"must be between 1 and {MAX_SLOTS_PER_TASK_EXECUTOR}"
        ),
    )
    slot_report = fields.Nested(SlotReportSchema, load_default=None)
    spark_master = fields.String(load_default="")
    previous_registration_id = fields.String(allow_none=True, load_default=None)
    pool = fields.String(load_default=DEFAULT_POOL, validate=WholeMatch(POOL_PATTERN, error=POOL_RULE))

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


class RegistrationAckSchema(StrictSchema):
    resource_manager_id = fields.String(required=True)
    heartbeat_interval_ms = fields.Integer(required=True, strict=True, validate=validate.Range(min=1))
    heartbeat_timeout_ms = fields.Integer(required=True, strict=True, validate=validate.Range(min=1))
    registration_id = fields.String(required=True, validate=_non_empty("registration_id"))
    resumed = fields.Boolean(load_default=False)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> RegistrationAck:
        return RegistrationAck(**data)


class ExecutionReportSchema(StrictSchema):
    job_id = fields.String(required=True, validate=_non_empty("job_id"))
    execution_id = fields.String(required=True, validate=_non_empty("execution_id"))
    state = fields.Enum(ExecutionState, required=True)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> ExecutionReport:
        return ExecutionReport(**data)


class HeartbeatPayloadSchema(StrictSchema):
    slot_report = fields.Nested(SlotReportSchema, required=True)
    executions = fields.List(fields.Nested(ExecutionReportSchema), load_default=list)
    kept_jobs = fields.List(fields.String(validate=WholeMatch(JOB_ID_PATTERN)), load_default=list)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> HeartbeatPayload:
        return HeartbeatPayload(
            slot_report=data["slot_report"], executions=tuple(data["executions"]), kept_jobs=tuple(data["kept_jobs"])
        )


register_schema(ExecutionReport, ExecutionReportSchema)

# one instance of each schema: they hold no per-call state, and building one costs more than a load
_SLOT_REPORT = SlotReportSchema()
_TDD = TaskDeploymentDescriptorSchema()
_STATE_UPDATE = ExecutionStateUpdateSchema()
_REGISTRATION = TaskExecutorRegistrationSchema()
_REGISTRATION_ACK = RegistrationAckSchema()
_EXECUTION_REPORT = ExecutionReportSchema()
_HEARTBEAT = HeartbeatPayloadSchema()
