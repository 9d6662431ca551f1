"""The JobResult: the outcome of a globally terminated job, its vertices' outcomes and failures,
and their JSON form."""

from __future__ import annotations

import traceback as traceback_module
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from marshmallow import ValidationError, fields, post_dump, post_load, validate, validates_schema

from sparkdispatch.errors import InvalidJobGraph
from sparkdispatch.model.codec import register_schema
from sparkdispatch.model.job_graph import JOB_ID_PATTERN
from sparkdispatch.model.schema import StrictSchema, WholeMatch, drop_empty, drop_none, dump, load
from sparkdispatch.model.states import ExecutionState, JobStatus


#: The most input datasets a vertex's outcome lists (`VertexResult.input_files`); a subtask reports
#: at most as many.
MAX_INPUT_FILES = 1000


@dataclass(frozen=True)
class Failure:
    """An exception as it reaches the JobResult: class name, message and traceback text."""

    cls: str
    message: str
    traceback: str = ""

    @classmethod
    def from_exception(cls, exc: BaseException) -> Failure:
        return cls(cls=type(exc).__name__, message=str(exc), traceback="".join(traceback_module.format_exception(exc)))

    def to_dict(self) -> dict[str, Any]:
        return dump(FAILURE, self)


@dataclass(frozen=True)
class VertexResult:
    """A vertex's outcome: its state, highest attempt count, rows written and where.

    `result_path` is the vertex's results directory; `partitions` are the Parquet directories of
    its final subtask attempts inside it (read them with `spark.read.parquet(*partitions)`; the
    directory may also hold the output of attempts that were superseded).

    `input_files` are the datasets its finished subtasks' DataFrames read, as Spark's
    `DataFrame.inputFiles()` tells them, besides the job's own results: the directories of the
    files, partition directories (`key=value`) folded into their table's, at most
    `MAX_INPUT_FILES`.
    """

    state: ExecutionState
    attempts: int
    rows: int | None = None
    result_path: str | None = None
    partitions: tuple[str, ...] = ()
    input_files: tuple[str, ...] = ()
    failure: Failure | None = None

    @classmethod
    def from_dict(cls, data: Any) -> VertexResult:
        return load(VERTEX_RESULT, data, VertexResult, InvalidJobGraph)

    def to_dict(self) -> dict[str, Any]:
        return dump(VERTEX_RESULT, self)


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
        return load(JOB_RESULT, data, JobResult, InvalidJobGraph)

    def to_dict(self) -> dict[str, Any]:
        return dump(JOB_RESULT, self)


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
    input_files = fields.List(fields.String(), load_default=list, validate=validate.Length(max=MAX_INPUT_FILES))
    failure = fields.Nested(FailureSchema, allow_none=True, load_default=None)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> VertexResult:
        data["partitions"] = tuple(data["partitions"])
        data["input_files"] = tuple(data["input_files"])
        return VertexResult(**data)

    @post_dump
    def compact(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        drop_empty(data, "partitions", "input_files")
        return drop_none(data, "rows", "result_path", "failure")


class JobResultSchema(StrictSchema):
    job_id = fields.String(required=True, validate=WholeMatch(JOB_ID_PATTERN))
    name = fields.String(required=True)
    status = fields.Enum(
        JobStatus,
        required=True,
        validate=validate.OneOf(
            [s for s in JobStatus if s.is_globally_terminal],
            error="a JobResult's status is FINISHED, FAILED or CANCELED",
        ),
    )
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


FAILURE = FailureSchema()
JOB_RESULT = JobResultSchema()
VERTEX_RESULT = VertexResultSchema()
register_schema(JobResult, JobResultSchema)
register_schema(VertexResult, VertexResultSchema)
