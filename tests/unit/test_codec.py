"""Shapes: a frozen dataclass's JSON form, its parser and its OpenAPI schema, all from one declaration."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import pytest

from sparkdispatch.errors import InvalidShape
from sparkdispatch.model.codec import Shape, schema_of, wire
from sparkdispatch.model.job_result import Failure, JobResult, VertexResult
from sparkdispatch.model.repair import Repair, RepairAnswer
from sparkdispatch.model.rest_shapes import (
    ANSWERS,
    Artifact,
    AttemptLog,
    HeartbeatAnswer,
    LeaderSession,
    Empty,
    ExecutionResult,
    FlinkJobDetails,
    FlinkJobList,
    FlinkTaskCounts,
    JobDetails,
    JobList,
    JobProgress,
    JobSummary,
    Overview,
    SubtaskDetails,
    SubtaskLogSize,
    Submitted,
    TaskManager,
    TaskManagerExecution,
    TaskManagerList,
    TaskManagerSlot,
    Unregistered,
    VertexDetails,
    VertexOutcome,
    VertexProgress,
)
from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.rest.openapi import openapi_document

JOB_ID = "ab" * 16


@dataclass(frozen=True)
class Inner(Shape):
    label: str
    level: ExecutionState


@dataclass(frozen=True)
class Example(Shape):
    """Every kind of field a shape may have."""

    name: str
    count: int
    ratio: float
    flag: bool
    status: JobStatus
    kind: Literal["small", "large"]
    note: str | None
    tags: tuple[str, ...]
    inner: Inner
    inners: tuple[Inner, ...]
    sizes: Mapping[str, int]
    result: JobResult
    dashed: int = field(metadata=wire("dashed-name", description="with a dash, as Flink names it"))
    ident: str = field(metadata=wire(pattern=re.compile(r"^[0-9a-f]{4}$")))
    extra: int | None = field(default=None, metadata=wire(omit_none=True))


def example(**changes: object) -> Example:
    result = JobResult(
        JOB_ID, "j", JobStatus.FAILED, 1, 5, {"a": VertexResult(ExecutionState.FAILED, 2)}, Failure("E", "boom")
    )
    values: dict[str, object] = dict(
        name="n",
        count=3,
        ratio=0.5,
        flag=True,
        status=JobStatus.RUNNING,
        kind="small",
        note=None,
        tags=("x", "y"),
        inner=Inner("i", ExecutionState.CREATED),
        inners=(Inner("j", ExecutionState.FAILED),),
        sizes={"a": 1},
        result=result,
        dashed=7,
        ident="0a1b",
    )
    values.update(changes)
    return Example(**values)  # type: ignore[arg-type]


def test_the_json_form_follows_the_declaration_and_parses_back() -> None:
    value = example()
    body = value.to_dict()
    expected = {
        "name": "n",
        "count": 3,
        "ratio": 0.5,
        "flag": True,
        "status": "RUNNING",
        "kind": "small",
        "note": None,
        "tags": ["x", "y"],
        "inner": {"label": "i", "level": "CREATED"},
        "inners": [{"label": "j", "level": "FAILED"}],
        "sizes": {"a": 1},
        "result": value.result.to_dict(),
        "dashed-name": 7,
        "ident": "0a1b",
    }
    assert list(body.items()) == list(expected.items())  # in the order declared, `null` kept, `extra` left out
    assert type(body["status"]) is str  # the value itself, not the enum
    assert Example.from_dict(body) == value
    with_extra = example(extra=4)
    assert with_extra.to_dict()["extra"] == 4 and Example.from_dict(with_extra.to_dict()) == with_extra


@pytest.mark.parametrize(
    ("change", "field_name"),
    [
        ({"count": "3"}, "count"),
        ({"count": None}, "count"),
        ({"flag": "maybe"}, "flag"),
        ({"status": "DANCING"}, "status"),
        ({"kind": "medium"}, "kind"),
        ({"tags": "x"}, "tags"),
        ({"inner": {"label": "i"}}, "inner.level"),
        ({"inners": [{"label": "j", "level": "FAILED", "more": 1}]}, "inners[0].more"),
        ({"result": {"job_id": JOB_ID}}, "result.name"),
        ({"ident": "0a1b\n"}, "ident"),
        ({"extra": None}, "extra"),
        ({"unknown": 1}, "unknown"),
    ],
)
def test_a_json_form_that_does_not_fit_is_refused_naming_the_field(change: dict[str, object], field_name: str) -> None:
    with pytest.raises(InvalidShape) as refused:
        Example.from_dict({**example().to_dict(), **change})
    assert refused.value.what == "Example" and field_name in refused.value.field_errors


def test_a_missing_field_is_refused_but_an_omitted_one_is_its_default() -> None:
    body = example().to_dict()
    del body["note"]
    with pytest.raises(InvalidShape, match="note: missing required field"):
        Example.from_dict(body)
    assert "extra" not in example().to_dict() and Example.from_dict(example().to_dict()).extra is None
    with pytest.raises(InvalidShape, match="expected a JSON object"):
        Example.from_dict(["not", "an", "object"])


def test_a_field_added_later_with_a_default_may_be_missing_from_an_older_masters_answer() -> None:
    assert JobList.from_dict({"jobs": []}) == JobList((), next=None)
    page = JobList((), next="abc").to_dict()
    assert page == {"jobs": [], "next": "abc"} and JobList.from_dict(page).next == "abc"


def test_a_field_without_a_json_form_is_refused_when_the_shape_is_first_used() -> None:
    @dataclass(frozen=True)
    class Unsure(Shape):
        either: int | str

    @dataclass(frozen=True)
    class Omitted(Shape):
        value: int | None = field(default=0, metadata=wire(omit_none=True))

    with pytest.raises(TypeError, match="Unsure.either"):
        Unsure(1).to_dict()
    with pytest.raises(TypeError, match="Omitted.value: a field left out while None defaults to None"):
        schema_of(Omitted)


def answers() -> list[Shape]:
    """One example of every answer of the REST API, every optional part present once."""
    result = JobResult(
        JOB_ID,
        "sales",
        JobStatus.FINISHED,
        1_000,
        4_000,
        {"a": VertexResult(ExecutionState.FINISHED, 1, rows=5, result_path="/r/a", partitions=("p",))},
    )
    repair = Repair(1, ("a",), ("a", "b"), 2_000, JobStatus.FINISHED)
    return [
        Overview(True, "http://m:8081", 1, 4, 3, 1, 2, 0, 0),
        JobList((JobSummary(JOB_ID, "sales", JobStatus.RUNNING, 1_000, None, None),)),
        FlinkJobList(
            (
                FlinkJobDetails(
                    JOB_ID,
                    "sales",
                    JobStatus.RUNNING,
                    1_000,
                    -1,
                    20,
                    1_020,
                    0,
                    FlinkTaskCounts.of({ExecutionState.RUNNING: 2}),
                ),
            )
        ),
        JobDetails(
            JOB_ID,
            "sales",
            JobStatus.FINISHED,
            1_000,
            4_000,
            (
                VertexDetails(
                    "a", ExecutionState.FINISHED, 2, (), (SubtaskDetails(0, ExecutionState.FINISHED, 0, "te"),)
                ),
                VertexDetails("b", ExecutionState.FINISHED, None, ("a",), (), attempts=1),
            ),
            (repair,),
        ),
        RepairAnswer(JOB_ID, True, Repair(2, ("b",), ("b",), 3_000)),
        AttemptLog(JOB_ID, JobStatus.RUNNING, "a", ExecutionState.RUNNING, 0, 1, 0, 6, "hello\n"),
        VertexOutcome(JOB_ID, JobStatus.RUNNING, "a", VertexResult(ExecutionState.RUNNING, 1)),
        JobProgress(
            JOB_ID,
            JobStatus.RUNNING,
            (VertexProgress("a", VertexResult(ExecutionState.RUNNING, 1), (SubtaskLogSize(0, 0, 12),)),),
        ),
        ExecutionResult.of(None),
        ExecutionResult.of(result),
        TaskManagerList(
            (
                TaskManager(
                    "te",
                    "te@h",
                    "q",
                    "local[1]",
                    1,
                    2,
                    1,
                    (TaskManagerSlot(0, "al", JOB_ID), TaskManagerSlot(1, None, None)),
                    None,
                    False,
                    5,
                    (TaskManagerExecution(JOB_ID, "e1", ExecutionState.RUNNING),),
                ),
            )
        ),
        Submitted(JOB_ID, f"/jobs/{JOB_ID}", JobStatus.INITIALIZING),
        Artifact("ab" * 32, "job.py"),
        Unregistered(True),
        HeartbeatAnswer(("ab" * 16,)),
        LeaderSession("6f1c8e5a-3b2d-4c7e-9a10-2b3c4d5e6f70"),
        Empty(),
    ]


@pytest.mark.parametrize("answer", answers(), ids=lambda answer: type(answer).__name__)
def test_every_answer_writes_what_its_schema_writes_and_parses_back(answer: Shape) -> None:
    body = answer.to_dict()
    assert schema_of(type(answer))().dump(answer) == body  # the fast writer and the schema agree
    assert type(answer).from_dict(body) == answer


def test_every_answer_is_listed_and_the_openapi_document_describes_it_by_its_declaration() -> None:
    assert {type(answer) for answer in answers()} == set(ANSWERS)
    schemas = openapi_document()["components"]["schemas"]
    for answer in answers():
        described = schemas[type(answer).__name__]
        body = answer.to_dict()
        assert list(described["properties"]) == list(body) or type(answer) is ExecutionResult, type(answer)
        assert described["additionalProperties"] is False
    details = schemas["VertexDetails"]
    assert "attempts" not in details["required"] and "parallelism" in details["required"]
    assert details["properties"]["parallelism"]["nullable"] is True
    assert schemas["FlinkJobDetails"]["properties"]["end-time"]["description"] == "-1 while the job runs"
    assert schemas["Submitted"]["properties"]["job_id"]["pattern"] == "^[0-9a-f]{32}$"
    assert schemas["ResultStatus"]["properties"]["id"]["enum"] == ["IN_PROGRESS", "COMPLETED"]
    executions = schemas["TaskManager"]["properties"]["executions"]
    assert executions["items"] == {"$ref": "#/components/schemas/TaskManagerExecution"}
    assert schemas["TaskManagerExecution"]["properties"]["execution_id"]["nullable"] is True  # a viewer's answer
