"""The job model: JobGraph, lifecycles, JobResult and the messages between master and workers.

Values are frozen dataclasses; their JSON forms are defined by the marshmallow schemas below
and round-trip exactly (`X.from_dict(x.to_dict()) == x`). Validation names the field and the
reason, and raises `InvalidJobGraph` before anything is stored.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
import traceback as traceback_module
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, TypeAlias

from marshmallow import RAISE, Schema, ValidationError, fields, post_dump, post_load, validate, validates_schema

from sparkdispatch.config import Configuration
from sparkdispatch.errors import IllegalStateTransition, InvalidJobGraph

JOB_ID_PATTERN = re.compile(r"^[0-9a-f]{32}$")
VERTEX_ID_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
ENTRYPOINT_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
BLOB_KEY_PATTERN = re.compile(r"^[0-9a-f]{64}$")
MAX_VERTICES = 10_000
MAX_PARALLELISM = 10_000


# --------------------------------------------------------------------------------------------
# Lifecycles (Flink's JobStatus and ExecutionState)


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
    JobStatus.CREATED: frozenset({JobStatus.RUNNING, JobStatus.RECONCILING, JobStatus.CANCELLING,
                                  JobStatus.CANCELED, JobStatus.FAILED, JobStatus.SUSPENDED}),
    JobStatus.RECONCILING: frozenset({JobStatus.RUNNING, JobStatus.FAILING, JobStatus.CANCELLING,
                                      JobStatus.FAILED, JobStatus.SUSPENDED}),
    JobStatus.RUNNING: frozenset({JobStatus.FINISHED, JobStatus.FAILING, JobStatus.RESTARTING,
                                  JobStatus.CANCELLING, JobStatus.SUSPENDED}),
    JobStatus.FAILING: frozenset({JobStatus.FAILED, JobStatus.RESTARTING, JobStatus.CANCELLING,
                                  JobStatus.SUSPENDED}),
    JobStatus.RESTARTING: frozenset({JobStatus.RUNNING, JobStatus.CREATED, JobStatus.CANCELLING,
                                     JobStatus.CANCELED, JobStatus.FAILED, JobStatus.SUSPENDED}),
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
    ExecutionState.CREATED: frozenset({ExecutionState.SCHEDULED, ExecutionState.RECONCILING,
                                       ExecutionState.CANCELED, ExecutionState.FAILED}),
    ExecutionState.SCHEDULED: frozenset({ExecutionState.DEPLOYING, ExecutionState.CANCELING,
                                         ExecutionState.CANCELED, ExecutionState.FAILED}),
    ExecutionState.DEPLOYING: frozenset({ExecutionState.INITIALIZING, ExecutionState.CANCELING,
                                         ExecutionState.CANCELED, ExecutionState.FAILED}),
    ExecutionState.INITIALIZING: frozenset({ExecutionState.RUNNING, ExecutionState.CANCELING,
                                            ExecutionState.CANCELED, ExecutionState.FAILED}),
    ExecutionState.RUNNING: frozenset({ExecutionState.FINISHED, ExecutionState.CANCELING,
                                       ExecutionState.CANCELED, ExecutionState.FAILED}),
    ExecutionState.CANCELING: frozenset({ExecutionState.CANCELED, ExecutionState.FAILED}),
    ExecutionState.RECONCILING: frozenset({ExecutionState.INITIALIZING, ExecutionState.RUNNING,
                                           ExecutionState.FINISHED, ExecutionState.CANCELED,
                                           ExecutionState.FAILED}),
    ExecutionState.FINISHED: frozenset(),
    ExecutionState.CANCELED: frozenset(),
    ExecutionState.FAILED: frozenset(),
}


# --------------------------------------------------------------------------------------------
# Restart strategies (Flink's parameters and names)


@dataclass(frozen=True)
class NoRestart:
    type: ClassVar[str] = "none"


@dataclass(frozen=True)
class FixedDelayRestart:
    """Restart up to `attempts` times, `delay_s` apart (`restart-strategy.fixed-delay.*`)."""

    type: ClassVar[str] = "fixed-delay"
    attempts: int = 3
    delay_s: float = 1.0


@dataclass(frozen=True)
class ExponentialDelayRestart:
    """Pauses grow by `backoff_multiplier` up to `max_backoff_s` (`restart-strategy.exponential-delay.*`)."""

    type: ClassVar[str] = "exponential-delay"
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 300.0
    backoff_multiplier: float = 2.0
    reset_backoff_threshold_s: float = 3600.0
    jitter_factor: float = 0.1
    attempts: int = 10


@dataclass(frozen=True)
class FailureRateRestart:
    """Restart unless more than `max_failures_per_interval` failures fall in one interval."""

    type: ClassVar[str] = "failure-rate"
    max_failures_per_interval: int = 1
    failure_rate_interval_s: float = 60.0
    delay_s: float = 1.0


RestartStrategy: TypeAlias = NoRestart | FixedDelayRestart | ExponentialDelayRestart | FailureRateRestart


def restart_strategy_from_config(config: Configuration) -> RestartStrategy:
    """The `restart-strategy.*` configuration as a strategy value."""
    kind = config["restart-strategy.type"]
    if kind == "fixed-delay":
        return FixedDelayRestart(attempts=config["restart-strategy.fixed-delay.attempts"],
                                 delay_s=config["restart-strategy.fixed-delay.delay"])
    if kind == "exponential-delay":
        prefix = "restart-strategy.exponential-delay."
        return ExponentialDelayRestart(
            initial_backoff_s=config[prefix + "initial-backoff"], max_backoff_s=config[prefix + "max-backoff"],
            backoff_multiplier=config[prefix + "backoff-multiplier"],
            reset_backoff_threshold_s=config[prefix + "reset-backoff-threshold"],
            jitter_factor=config[prefix + "jitter-factor"], attempts=config[prefix + "attempts"])
    if kind == "failure-rate":
        prefix = "restart-strategy.failure-rate."
        return FailureRateRestart(max_failures_per_interval=config[prefix + "max-failures-per-interval"],
                                  failure_rate_interval_s=config[prefix + "failure-rate-interval"],
                                  delay_s=config[prefix + "delay"])
    return NoRestart()


# --------------------------------------------------------------------------------------------
# JobGraph


@dataclass(frozen=True)
class JobVertex:
    """One PySpark task of a job: `entrypoint` runs `parallelism` times, after all of `inputs`."""

    id: str
    entrypoint: str
    parallelism: int = 1
    inputs: tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JobGraph:
    """A job as submitted: vertices, their artifacts, restart strategy and Spark properties."""

    name: str
    vertices: tuple[JobVertex, ...]
    job_id: str | None = None
    artifacts: tuple[str, ...] = ()
    restart_strategy: RestartStrategy | None = None
    config: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any) -> JobGraph:
        """Validate a JSON-shaped value; raises `InvalidJobGraph` naming every bad field."""
        return _load(_SCHEMAS.job_graph, data)

    @classmethod
    def from_json(cls, text: str | bytes) -> JobGraph:
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidJobGraph({"body": [f"not valid JSON: {exc}"]}) from None
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        return _SCHEMAS.job_graph.dump(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def with_job_id(self, job_id: str) -> JobGraph:
        return replace(self, job_id=job_id)

    def fingerprint(self) -> str:
        """sha256 of the graph without its job id: two submissions are the same job iff equal."""
        body = self.to_dict()
        body.pop("job_id", None)
        return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def vertex(self, vertex_id: str) -> JobVertex:
        for vertex in self.vertices:
            if vertex.id == vertex_id:
                return vertex
        raise KeyError(vertex_id)

    def consumers(self, vertex_id: str) -> list[str]:
        """Ids of the vertices that read `vertex_id`'s result."""
        return [v.id for v in self.vertices if vertex_id in v.inputs]

    def topological_order(self) -> list[str]:
        """Vertex ids, every vertex after all of its inputs (the graph is acyclic once validated)."""
        order, cycle = _topological_order(self.vertices)
        if cycle:
            raise InvalidJobGraph({"vertices": [_cycle_message(cycle)]})
        return order


def _topological_order(vertices: Iterable[JobVertex]) -> tuple[list[str], list[str]]:
    """(order, cycle): a topological order, or the vertex ids of one cycle when there is one."""
    inputs = {v.id: [i for i in v.inputs] for v in vertices}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    order: list[str] = []
    for root in inputs:
        if root in state:
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        path: list[str] = [root]
        state[root] = 1
        while stack:
            node, index = stack[-1]
            upstream = inputs.get(node, [])
            if index < len(upstream):
                stack[-1] = (node, index + 1)
                nxt = upstream[index]
                if nxt not in inputs:
                    continue
                if state.get(nxt) == 1:
                    cycle = path[path.index(nxt):]
                    return order, list(reversed(cycle))
                if nxt not in state:
                    state[nxt] = 1
                    stack.append((nxt, 0))
                    path.append(nxt)
            else:
                stack.pop()
                path.pop()
                state[node] = 2
                order.append(node)
    return order, []


def _cycle_message(cycle: list[str]) -> str:
    return "the graph has a cycle: " + " -> ".join([*cycle, cycle[0]])


# --------------------------------------------------------------------------------------------
# JobResult


@dataclass(frozen=True)
class Failure:
    """An exception as it reaches the JobResult: class name, message and traceback text."""

    cls: str
    message: str
    traceback: str = ""

    @classmethod
    def from_exception(cls, exc: BaseException) -> Failure:
        return cls(cls=type(exc).__name__, message=str(exc),
                   traceback="".join(traceback_module.format_exception(exc)))

    def to_dict(self) -> dict[str, Any]:
        return _SCHEMAS.failure.dump(self)


@dataclass(frozen=True)
class VertexResult:
    """A vertex's outcome: its state, highest attempt count, rows written and where.

    `result_path` is the vertex's results directory; `partitions` are the Parquet directories of
    its final subtask attempts inside it (read them with `spark.read.parquet(*partitions)`; the
    directory may also hold the output of attempts that were superseded).
    """

    state: ExecutionState
    attempts: int
    rows: int | None = None
    result_path: str | None = None
    partitions: tuple[str, ...] = ()
    failure: Failure | None = None


@dataclass(frozen=True)
class JobResult:
    """The outcome of a globally terminated job; written once, never changed."""

    job_id: str
    name: str
    status: JobStatus
    start_time: int
    end_time: int
    vertices: Mapping[str, VertexResult] = field(default_factory=dict)
    failure: Failure | None = None

    @property
    def duration_ms(self) -> int:
        return max(0, self.end_time - self.start_time)

    @classmethod
    def from_dict(cls, data: Any) -> JobResult:
        return _load(_SCHEMAS.job_result, data)

    def to_dict(self) -> dict[str, Any]:
        return _SCHEMAS.job_result.dump(self)


# --------------------------------------------------------------------------------------------
# Messages between the master and TaskExecutors


@dataclass(frozen=True)
class SlotStatus:
    """One slot as its TaskExecutor sees it: free, or allocated to a job."""

    index: int
    allocation_id: str | None = None
    job_id: str | None = None


@dataclass(frozen=True)
class SlotReport:
    slots: tuple[SlotStatus, ...]

    @classmethod
    def free(cls, count: int) -> SlotReport:
        return cls(tuple(SlotStatus(index=i) for i in range(count)))

    @classmethod
    def from_dict(cls, data: Any) -> SlotReport:
        return _load(_SCHEMAS.slot_report, data)

    def to_dict(self) -> dict[str, Any]:
        return _SCHEMAS.slot_report.dump(self)


@dataclass(frozen=True)
class TaskDeploymentDescriptor:
    """Everything a TaskExecutor needs to run one attempt of one subtask.

    `inputs` maps each upstream vertex to the paths of its result partitions (an empty list
    when it returned nothing); `result_path` is where this attempt writes a returned DataFrame.
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
    job_name: str = ""
    inputs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    artifacts: tuple[str, ...] = ()
    spark_conf: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any) -> TaskDeploymentDescriptor:
        return _load(_SCHEMAS.tdd, data)

    def to_dict(self) -> dict[str, Any]:
        return _SCHEMAS.tdd.dump(self)


@dataclass(frozen=True)
class ExecutionStateUpdate:
    """A TaskExecutor's report of one attempt's new state, fenced by `job_master_id`."""

    job_id: str
    job_master_id: str
    execution_id: str
    state: ExecutionState
    task_executor_id: str = ""
    rows: int | None = None
    result_path: str | None = None
    failure: Failure | None = None

    @classmethod
    def from_dict(cls, data: Any) -> ExecutionStateUpdate:
        return _load(_SCHEMAS.state_update, data)

    def to_dict(self) -> dict[str, Any]:
        return _SCHEMAS.state_update.dump(self)


# --------------------------------------------------------------------------------------------
# Schemas


def _load(schema: Schema, data: Any) -> Any:
    if not isinstance(data, Mapping):
        raise InvalidJobGraph({"body": [f"expected a JSON object, got {type(data).__name__}"]})
    try:
        return schema.load(data)
    except ValidationError as exc:
        raise InvalidJobGraph(_flatten_errors(exc.messages)) from None


def _flatten_errors(messages: Any, prefix: str = "") -> dict[str, list[str]]:
    flat: dict[str, list[str]] = {}
    if isinstance(messages, Mapping):
        for key, value in messages.items():
            if key == "_schema":
                name = prefix or "body"
            elif isinstance(key, int):
                name = f"{prefix}[{key}]"
            else:
                name = f"{prefix}.{key}" if prefix else str(key)
            for sub, reasons in _flatten_errors(value, name).items():
                flat.setdefault(sub, []).extend(reasons)
    elif isinstance(messages, list) and all(isinstance(m, str) for m in messages):
        flat[prefix or "body"] = [_plain(m) for m in messages]
    elif isinstance(messages, list):
        for item in messages:
            for sub, reasons in _flatten_errors(item, prefix).items():
                flat.setdefault(sub, []).extend(reasons)
    else:
        flat[prefix or "body"] = [_plain(str(messages))]
    return flat


def _plain(message: str) -> str:
    if message == "Unknown field.":
        return "unknown field"
    if message == "Missing data for required field.":
        return "missing required field"
    return message


class _StrictSchema(Schema):
    class Meta:
        unknown = RAISE


def _positive(name: str) -> validate.Range:
    return validate.Range(min=0, error=f"{name} must be >= 0")


class _FixedDelaySchema(_StrictSchema):
    type = fields.String(required=True)
    attempts = fields.Integer(load_default=3, strict=True, validate=_positive("attempts"))
    delay_s = fields.Float(load_default=1.0, validate=_positive("delay_s"))

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> FixedDelayRestart:
        data.pop("type")
        return FixedDelayRestart(**data)


class _ExponentialDelaySchema(_StrictSchema):
    type = fields.String(required=True)
    initial_backoff_s = fields.Float(load_default=1.0, validate=_positive("initial_backoff_s"))
    max_backoff_s = fields.Float(load_default=300.0, validate=_positive("max_backoff_s"))
    backoff_multiplier = fields.Float(load_default=2.0, validate=validate.Range(min=1.0))
    reset_backoff_threshold_s = fields.Float(load_default=3600.0, validate=_positive("reset_backoff_threshold_s"))
    jitter_factor = fields.Float(load_default=0.1, validate=validate.Range(min=0.0, max=1.0))
    attempts = fields.Integer(load_default=10, strict=True, validate=_positive("attempts"))

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> ExponentialDelayRestart:
        data.pop("type")
        return ExponentialDelayRestart(**data)


class _FailureRateSchema(_StrictSchema):
    type = fields.String(required=True)
    max_failures_per_interval = fields.Integer(load_default=1, strict=True, validate=validate.Range(min=1))
    failure_rate_interval_s = fields.Float(load_default=60.0, validate=validate.Range(min=0.001))
    delay_s = fields.Float(load_default=1.0, validate=_positive("delay_s"))

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> FailureRateRestart:
        data.pop("type")
        return FailureRateRestart(**data)


class _NoRestartSchema(_StrictSchema):
    type = fields.String(required=True)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> NoRestart:
        return NoRestart()


_RESTART_SCHEMAS: dict[str, type[Schema]] = {
    "none": _NoRestartSchema, "fixed-delay": _FixedDelaySchema,
    "exponential-delay": _ExponentialDelaySchema, "failure-rate": _FailureRateSchema,
}
_RESTART_SCHEMA_INSTANCES: dict[str, Schema] = {kind: schema() for kind, schema in _RESTART_SCHEMAS.items()}


class RestartStrategyField(fields.Field):
    """A restart strategy, its schema chosen by `type`."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> RestartStrategy:
        if not isinstance(value, Mapping):
            raise ValidationError("must be an object with a type")
        kind = value.get("type")
        if kind not in _RESTART_SCHEMAS:
            raise ValidationError({"type": [f"must be one of {', '.join(_RESTART_SCHEMAS)}, got {kind!r}"]})
        return _RESTART_SCHEMA_INSTANCES[kind].load(value)

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> Any:
        if value is None:
            return None
        body = {"type": value.type}
        for name in value.__dataclass_fields__:
            body[name] = getattr(value, name)
        return body


class _SparkConfField(fields.Dict):
    """Spark properties: string keys; scalar values, kept as strings."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(keys=fields.String(validate=validate.Length(min=1, max=256)), values=fields.Raw(), **kwargs)

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> dict[str, str]:
        result = super()._deserialize(value, attr, data, **kwargs)
        converted: dict[str, str] = {}
        for key, item in result.items():
            if isinstance(item, bool):
                converted[key] = "true" if item else "false"
            elif isinstance(item, (str, int, float)):
                converted[key] = str(item)
            else:
                raise ValidationError({key: ["must be a string, number or boolean"]})
        return converted


class JobVertexSchema(_StrictSchema):
    id = fields.String(required=True, validate=validate.Regexp(
        VERTEX_ID_PATTERN, error="must be 1-128 letters, digits, '_', '.' or '-', not starting with '.' or '-'"))
    entrypoint = fields.String(required=True, validate=validate.Regexp(
        ENTRYPOINT_PATTERN, error="must be 'module.path:function', e.g. 'pipelines.sales:extract'"))
    parallelism = fields.Integer(load_default=1, strict=True, validate=validate.Range(
        min=1, max=MAX_PARALLELISM, error=f"parallelism must be between 1 and {MAX_PARALLELISM}"))
    inputs = fields.List(fields.String(), load_default=list)
    params = fields.Dict(keys=fields.String(), values=fields.Raw(allow_none=True), load_default=dict)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> JobVertex:
        data["inputs"] = tuple(data["inputs"])
        return JobVertex(**data)

    @post_dump
    def lists(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        data["inputs"] = list(data["inputs"])
        data["params"] = dict(data["params"])
        return data


class JobGraphSchema(_StrictSchema):
    job_id = fields.String(allow_none=True, load_default=None, validate=validate.Regexp(
        JOB_ID_PATTERN, error="must be 32 lowercase hex characters"))
    name = fields.String(required=True, validate=validate.Length(min=1, max=200, error="must be 1-200 characters"))
    vertices = fields.List(fields.Nested(JobVertexSchema), required=True, validate=validate.Length(
        min=1, max=MAX_VERTICES, error=f"a job needs 1 to {MAX_VERTICES} vertices"))
    artifacts = fields.List(fields.String(validate=validate.Regexp(
        BLOB_KEY_PATTERN, error="must be a blob key (64 hex characters) from POST /artifacts")), load_default=list)
    restart_strategy = RestartStrategyField(allow_none=True, load_default=None)
    config = _SparkConfField(load_default=dict)

    @validates_schema(skip_on_field_errors=True)
    def check_graph(self, data: dict[str, Any], **_: Any) -> None:
        vertices: list[JobVertex] = data["vertices"]
        errors: dict[str, list[str]] = {}
        seen: dict[str, int] = {}
        for index, vertex in enumerate(vertices):
            if vertex.id in seen:
                errors.setdefault(f"vertices[{index}].id", []).append(
                    f"duplicate vertex id {vertex.id!r} (also vertices[{seen[vertex.id]}])")
            else:
                seen[vertex.id] = index
        for index, vertex in enumerate(vertices):
            for name in vertex.inputs:
                if name not in seen:
                    errors.setdefault(f"vertices[{index}].inputs", []).append(f"{name!r} names no vertex")
                elif name == vertex.id:
                    errors.setdefault(f"vertices[{index}].inputs", []).append(f"vertex {name!r} reads itself")
            if len(set(vertex.inputs)) != len(vertex.inputs):
                errors.setdefault(f"vertices[{index}].inputs", []).append("an input is named twice")
        if not errors:
            _, cycle = _topological_order(vertices)
            if cycle:
                errors["vertices"] = [_cycle_message(cycle)]
        if errors:
            raise ValidationError(errors)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> JobGraph:
        data["vertices"] = tuple(data["vertices"])
        data["artifacts"] = tuple(data["artifacts"])
        return JobGraph(**data)

    @post_dump
    def lists(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        data["artifacts"] = list(data["artifacts"])
        data["config"] = dict(data["config"])
        return data


class FailureSchema(_StrictSchema):
    cls = fields.String(required=True, data_key="class")
    message = fields.String(required=True)
    traceback = fields.String(load_default="")

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> Failure:
        return Failure(**data)


def _drop_none(data: dict[str, Any], *names: str) -> dict[str, Any]:
    for name in names:
        if data.get(name) is None:
            data.pop(name, None)
    return data


class VertexResultSchema(_StrictSchema):
    state = fields.Enum(ExecutionState, required=True)
    attempts = fields.Integer(required=True, strict=True, validate=validate.Range(min=0))
    rows = fields.Integer(allow_none=True, load_default=None, strict=True)
    result_path = fields.String(allow_none=True, load_default=None)
    partitions = fields.List(fields.String(), load_default=list)
    failure = fields.Nested(FailureSchema, allow_none=True, load_default=None)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> VertexResult:
        data["partitions"] = tuple(data["partitions"])
        return VertexResult(**data)

    @post_dump
    def compact(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        if data["partitions"]:
            data["partitions"] = list(data["partitions"])
        else:
            del data["partitions"]
        return _drop_none(data, "rows", "result_path", "failure")


class JobResultSchema(_StrictSchema):
    job_id = fields.String(required=True, validate=validate.Regexp(JOB_ID_PATTERN))
    name = fields.String(required=True)
    status = fields.Enum(JobStatus, required=True, validate=validate.OneOf(
        [s for s in JobStatus if s.is_globally_terminal], error="a JobResult's status is FINISHED, FAILED or CANCELED"))
    start_time = fields.Integer(required=True, strict=True)
    end_time = fields.Integer(required=True, strict=True)
    duration_ms = fields.Integer(load_default=None, allow_none=True, strict=True)
    vertices = fields.Dict(keys=fields.String(), values=fields.Nested(VertexResultSchema), load_default=dict)
    failure = fields.Nested(FailureSchema, allow_none=True, load_default=None)

    @validates_schema(skip_on_field_errors=True)
    def check_duration(self, data: dict[str, Any], **_: Any) -> None:
        # duration_ms is derived from the times; accepted on input only if it agrees
        expected = max(0, data["end_time"] - data["start_time"])
        if data["duration_ms"] is not None and data["duration_ms"] != expected:
            raise ValidationError({"duration_ms": [f"must equal end_time - start_time ({expected})"]})

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> JobResult:
        data.pop("duration_ms")
        return JobResult(**data)

    @post_dump
    def compact(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        data["vertices"] = dict(data["vertices"])
        return _drop_none(data, "failure")


class SlotStatusSchema(_StrictSchema):
    index = fields.Integer(required=True, strict=True, validate=validate.Range(min=0))
    allocation_id = fields.String(allow_none=True, load_default=None)
    job_id = fields.String(allow_none=True, load_default=None)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> SlotStatus:
        return SlotStatus(**data)


class SlotReportSchema(_StrictSchema):
    slots = fields.List(fields.Nested(SlotStatusSchema), required=True)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> SlotReport:
        return SlotReport(tuple(data["slots"]))


class TaskDeploymentDescriptorSchema(_StrictSchema):
    job_id = fields.String(required=True, validate=validate.Regexp(JOB_ID_PATTERN))
    job_master_id = fields.String(required=True)
    execution_id = fields.String(required=True)
    vertex_id = fields.String(required=True, validate=validate.Regexp(VERTEX_ID_PATTERN))
    entrypoint = fields.String(required=True, validate=validate.Regexp(ENTRYPOINT_PATTERN))
    subtask_index = fields.Integer(required=True, strict=True, validate=validate.Range(min=0))
    parallelism = fields.Integer(required=True, strict=True, validate=validate.Range(min=1))
    attempt = fields.Integer(required=True, strict=True, validate=validate.Range(min=0))
    allocation_id = fields.String(required=True)
    slot_index = fields.Integer(required=True, strict=True, validate=validate.Range(min=0))
    result_path = fields.String(required=True)
    job_name = fields.String(load_default="")
    inputs = fields.Dict(keys=fields.String(), values=fields.List(fields.String()), load_default=dict)
    params = fields.Dict(keys=fields.String(), values=fields.Raw(allow_none=True), load_default=dict)
    artifacts = fields.List(fields.String(validate=validate.Regexp(BLOB_KEY_PATTERN)), load_default=list)
    spark_conf = fields.Dict(keys=fields.String(), values=fields.String(), load_default=dict)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> TaskDeploymentDescriptor:
        data["inputs"] = {k: tuple(v) for k, v in data["inputs"].items()}
        data["artifacts"] = tuple(data["artifacts"])
        return TaskDeploymentDescriptor(**data)

    @post_dump
    def lists(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        data["inputs"] = {k: list(v) for k, v in data["inputs"].items()}
        data["artifacts"] = list(data["artifacts"])
        data["params"] = dict(data["params"])
        data["spark_conf"] = dict(data["spark_conf"])
        return data


class ExecutionStateUpdateSchema(_StrictSchema):
    job_id = fields.String(required=True, validate=validate.Regexp(JOB_ID_PATTERN))
    job_master_id = fields.String(required=True)
    execution_id = fields.String(required=True)
    state = fields.Enum(ExecutionState, required=True)
    task_executor_id = fields.String(load_default="")
    rows = fields.Integer(allow_none=True, load_default=None, strict=True)
    result_path = fields.String(allow_none=True, load_default=None)
    failure = fields.Nested(FailureSchema, allow_none=True, load_default=None)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> ExecutionStateUpdate:
        return ExecutionStateUpdate(**data)

    @post_dump
    def compact(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        return _drop_none(data, "rows", "result_path", "failure")


class _Schemas:
    """One instance of each schema: they keep no state between calls, and building one per call costs."""

    def __init__(self) -> None:
        self.job_graph = JobGraphSchema()
        self.failure = FailureSchema()
        self.job_result = JobResultSchema()
        self.slot_report = SlotReportSchema()
        self.tdd = TaskDeploymentDescriptorSchema()
        self.state_update = ExecutionStateUpdateSchema()


_SCHEMAS = _Schemas()
