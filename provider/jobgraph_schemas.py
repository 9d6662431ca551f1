"""The marshmallow schemas of the job model: JobGraph, restart strategies, Failure, JobResult.

Each loads into the model's frozen dataclasses and dumps the exact JSON form they were loaded
from; `sparkdispatch.jobgraph`'s `from_dict` / `to_dict` use the instances at the bottom.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from marshmallow import Schema, ValidationError, fields, post_dump, post_load, validate, validates_schema

from sparkdispatch import spark_conf
from sparkdispatch.jobgraph import (
    BLOB_KEY_PATTERN,
    ENTRYPOINT_PATTERN,
    JOB_ID_PATTERN,
    MAX_PARALLELISM,
    MAX_PARAMS_DEPTH,
    MAX_VERTICES,
    VERTEX_ID_PATTERN,
    ExecutionState,
    ExponentialDelayRestart,
    Failure,
    FailureRateRestart,
    FixedDelayRestart,
    JobGraph,
    JobResult,
    JobStatus,
    JobVertex,
    NoRestart,
    RestartStrategy,
    VertexResult,
    cycle_message,
    order_vertices,
)
from sparkdispatch.schema import StrictSchema, WholeMatch, drop_none, json_type


def _positive(name: str) -> validate.Range:
    return validate.Range(min=0, error=f"{name} must be >= 0")


class _Number(fields.Float):
    """A JSON number (an integer is one too); a string holding a number is refused as the wrong type."""

    def _validated(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.make_error("invalid")
        return super()._validated(value)


class _FixedDelaySchema(StrictSchema):
    type = fields.String(required=True)
    attempts = fields.Integer(load_default=3, strict=True, validate=_positive("attempts"))
    delay_s = _Number(load_default=1.0, validate=_positive("delay_s"))

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> FixedDelayRestart:
        data.pop("type")
        return FixedDelayRestart(**data)


class _ExponentialDelaySchema(StrictSchema):
    type = fields.String(required=True)
    initial_backoff_s = _Number(load_default=1.0, validate=_positive("initial_backoff_s"))
    max_backoff_s = _Number(load_default=300.0, validate=_positive("max_backoff_s"))
    backoff_multiplier = _Number(load_default=2.0, validate=validate.Range(min=1.0))
    reset_backoff_threshold_s = _Number(load_default=3600.0, validate=_positive("reset_backoff_threshold_s"))
    jitter_factor = _Number(load_default=0.1, validate=validate.Range(min=0.0, max=1.0))
    attempts = fields.Integer(load_default=10, strict=True, validate=_positive("attempts"))

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> ExponentialDelayRestart:
        data.pop("type")
        return ExponentialDelayRestart(**data)


class _FailureRateSchema(StrictSchema):
    type = fields.String(required=True)
    max_failures_per_interval = fields.Integer(load_default=1, strict=True, validate=validate.Range(min=1))
    failure_rate_interval_s = _Number(load_default=60.0, validate=validate.Range(min=0.001))
    delay_s = _Number(load_default=1.0, validate=_positive("delay_s"))

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> FailureRateRestart:
        data.pop("type")
        return FailureRateRestart(**data)


class _NoRestartSchema(StrictSchema):
    type = fields.String(required=True)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> NoRestart:
        return NoRestart()


RESTART_SCHEMAS: dict[str, type[Schema]] = {
    "none": _NoRestartSchema, "fixed-delay": _FixedDelaySchema,
    "exponential-delay": _ExponentialDelaySchema, "failure-rate": _FailureRateSchema,
}
_RESTART_SCHEMA_INSTANCES: dict[str, Schema] = {kind: schema() for kind, schema in RESTART_SCHEMAS.items()}


class RestartStrategyField(fields.Field[RestartStrategy]):
    """A restart strategy, its schema chosen by `type`."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> RestartStrategy:
        if not isinstance(value, Mapping):
            raise ValidationError("must be an object with a type")
        kind = value.get("type")
        if not isinstance(kind, str) or kind not in RESTART_SCHEMAS:
            got = repr(kind) if isinstance(kind, str) or kind is None else f"a JSON {json_type(kind)}"
            raise ValidationError({"type": [f"must be one of {', '.join(RESTART_SCHEMAS)}, got {got}"]})
        strategy: RestartStrategy = _RESTART_SCHEMA_INSTANCES[kind].load(value)
        return strategy

    def _serialize(self, value: RestartStrategy | None, attr: str | None, obj: Any,
                   **kwargs: Any) -> dict[str, Any] | None:
        if value is None:
            return None
        body: dict[str, Any] = {"type": value.type}
        for name in value.__dataclass_fields__:
            body[name] = getattr(value, name)
        return body


class _SparkConfField(fields.Dict):
    """Spark properties a job's session may set (`sparkdispatch.spark_conf`): string keys;
    scalar values, kept as strings."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(keys=fields.String(validate=validate.Length(min=1, max=256)), values=fields.Raw(), **kwargs)

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> dict[str, str]:
        # marshmallow leaves Dict._deserialize unannotated; it returns the checked dict
        result: dict[str, Any] = super()._deserialize(value, attr, data, **kwargs)  # type: ignore[no-untyped-call]
        converted: dict[str, str] = {}
        errors: dict[str, list[str]] = {}
        for key, item in result.items():
            if (refused := spark_conf.refusal(key)) is not None:
                errors.setdefault(key, []).append(refused)
            if isinstance(item, bool):
                converted[key] = "true" if item else "false"
            elif isinstance(item, (str, int, float)):
                converted[key] = str(item)
            else:
                errors.setdefault(key, []).append("must be a string, number or boolean")
        if errors:
            raise ValidationError(errors)
        return converted


class _ParamsField(fields.Dict):
    """A vertex's `params`: any JSON object, nested at most `MAX_PARAMS_DEPTH` levels (deeper ones
    could not be written out again)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(keys=fields.String(), values=fields.Raw(allow_none=True), **kwargs)

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> dict[str, Any]:
        # marshmallow leaves Dict._deserialize unannotated; it returns the checked dict
        result: dict[str, Any] = super()._deserialize(value, attr, data, **kwargs)  # type: ignore[no-untyped-call]
        level: list[dict[str, Any] | list[Any]] = [result]
        depth = 1
        while level:
            if depth > MAX_PARAMS_DEPTH:
                raise ValidationError(f"nested deeper than {MAX_PARAMS_DEPTH} levels")
            level = [child for item in level
                     for child in (item.values() if isinstance(item, dict) else item)
                     if isinstance(child, (dict, list))]
            depth += 1
        return result


class JobVertexSchema(StrictSchema):
    id = fields.String(required=True, validate=WholeMatch(
        VERTEX_ID_PATTERN, error="must be 1-128 letters, digits, '_', '.' or '-', not starting with '.' or '-'"))
    entrypoint = fields.String(required=True, validate=WholeMatch(
        ENTRYPOINT_PATTERN, error="must be 'module.path:function', e.g. 'pipelines.sales:extract'"))
    parallelism = fields.Integer(load_default=1, strict=True, validate=validate.Range(
        min=1, max=MAX_PARALLELISM, error=f"parallelism must be between 1 and {MAX_PARALLELISM}"))
    inputs = fields.List(fields.String(), load_default=list)
    params = _ParamsField(load_default=dict)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> JobVertex:
        data["inputs"] = tuple(data["inputs"])
        return JobVertex(**data)

    @post_dump
    def lists(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        data["inputs"] = list(data["inputs"])
        data["params"] = dict(data["params"])
        return data


class JobGraphSchema(StrictSchema):
    job_id = fields.String(allow_none=True, load_default=None, validate=WholeMatch(
        JOB_ID_PATTERN, error="must be 32 lowercase hex characters"))
    name = fields.String(required=True, validate=validate.Length(min=1, max=200, error="must be 1-200 characters"))
    vertices = fields.List(fields.Nested(JobVertexSchema), required=True, validate=validate.Length(
        min=1, max=MAX_VERTICES, error=f"a job needs 1 to {MAX_VERTICES} vertices"))
    artifacts = fields.List(fields.String(validate=WholeMatch(
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
            cycle = order_vertices(vertices)[1]
            if cycle:
                errors["vertices"] = [cycle_message(cycle)]
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


class FailureSchema(StrictSchema):
    cls = fields.String(required=True, data_key="class")
    message = fields.String(required=True)
    traceback = fields.String(load_default="")

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> Failure:
        return Failure(**data)


class VertexResultSchema(StrictSchema):
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
        return drop_none(data, "rows", "result_path", "failure")


class JobResultSchema(StrictSchema):
    job_id = fields.String(required=True, validate=WholeMatch(JOB_ID_PATTERN))
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
        return drop_none(data, "failure")


# one instance of each schema: they keep no state between calls, and building one per call costs
JOB_GRAPH = JobGraphSchema()
JOB_GRAPH_HEAD = JobGraphSchema(exclude=("vertices",))  # `JobGraph.to_json` adds the vertices' own JSON
JOB_VERTICES = JobVertexSchema(many=True)
FAILURE = FailureSchema()
JOB_RESULT = JobResultSchema()
VERTEX_RESULT = VertexResultSchema()
