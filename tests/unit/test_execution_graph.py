"""The ExecutionGraph: unfolding, attempts, lifecycle checks, recovery, its snapshots and its JobResult."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest

from sparkdispatch.errors import IllegalStateTransition, InvalidJobGraph
from sparkdispatch.jobgraph import ExecutionState, Failure, JobGraph, JobResult, JobStatus, JobVertex
from sparkdispatch.jobmaster.execution_graph import ExecutionGraph, SubtaskId, aggregate_state
from sparkdispatch.rest.views import flink_job_details, job_details
from sparkdispatch.results import ResultLayout

JOB_ID = "ab" * 16


def diamond(parallelism: int = 2) -> JobGraph:
    return JobGraph(name="diamond", job_id=JOB_ID, vertices=(
        JobVertex("sink", "m:sink", 1, ("left", "right")),
        JobVertex("left", "m:left", parallelism, ("source",)),
        JobVertex("right", "m:right", parallelism, ("source",)),
        JobVertex("source", "m:source", parallelism),
    ))


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def finish(graph: ExecutionGraph, subtask_id: SubtaskId, *, rows: int | None = 5, path: str | None = "p") -> None:
    ev = graph.subtask(subtask_id)
    ev.current.advance(ExecutionState.FINISHED)
    ev.current.rows = rows
    ev.current.result_path = path and f"/r/{subtask_id.vertex_id}/{subtask_id.subtask_index}"
    ev.progress_recorded = True


def test_vertices_unfold_into_subtasks_in_topological_order() -> None:
    graph = ExecutionGraph(diamond())
    ids = [ev.id for ev in graph.subtasks()]
    assert len(ids) == 7
    order = [i.vertex_id for i in ids]
    assert order.index("source") < order.index("left") < order.index("sink")
    assert order.index("right") < order.index("sink")
    executions = [ev.current for ev in graph.subtasks()]
    assert all(re.fullmatch(r"[0-9a-f]{32}", e.execution_id) for e in executions)
    assert len({e.execution_id for e in executions}) == 7
    assert all(e.attempt == 0 and e.state is ExecutionState.CREATED for e in executions)
    assert graph.status is JobStatus.INITIALIZING
    assert set(graph.consumers_of("source")) == {"left", "right"}


def test_a_graph_without_job_id_is_refused() -> None:
    with pytest.raises(InvalidJobGraph, match="job_id"):
        ExecutionGraph(JobGraph(name="x", vertices=(JobVertex("a", "m:a"),)))


def test_reports_walk_the_normal_path_and_ignore_late_ones() -> None:
    graph = ExecutionGraph(diamond())
    execution = graph.subtask(SubtaskId("source", 0)).current
    execution.transition(ExecutionState.SCHEDULED)
    execution.transition(ExecutionState.DEPLOYING)
    assert execution.advance(ExecutionState.FINISHED) is True
    assert execution.state is ExecutionState.FINISHED
    assert execution.advance(ExecutionState.RUNNING) is False  # late report of an earlier step
    with pytest.raises(IllegalStateTransition):
        execution.advance(ExecutionState.FAILED)  # a terminal attempt never changes


def test_illegal_job_and_execution_transitions_raise() -> None:
    graph = ExecutionGraph(diamond())
    with pytest.raises(IllegalStateTransition, match="INITIALIZING to FINISHED"):
        graph.transition(JobStatus.FINISHED)
    assert graph.status is JobStatus.INITIALIZING
    with pytest.raises(IllegalStateTransition):
        graph.subtask(SubtaskId("source", 0)).current.transition(ExecutionState.RUNNING)


def test_new_attempt_replaces_only_a_terminal_attempt() -> None:
    graph = ExecutionGraph(diamond())
    ev = graph.subtask(SubtaskId("left", 1))
    old = ev.current
    with pytest.raises(ValueError, match="still runs"):
        graph.new_attempt(ev)
    old.transition(ExecutionState.FAILED)
    new = graph.new_attempt(ev)
    assert new.attempt == 1 and new.state is ExecutionState.CREATED
    assert graph.by_execution_id(old.execution_id) is None
    assert graph.by_execution_id(new.execution_id) is ev


@dataclass
class Progress:
    finished: dict[str, dict[int, object]] = field(default_factory=dict)


@dataclass(frozen=True)
class Entry:
    result_path: str | None
    rows: int | None


def test_restore_marks_recovered_subtasks_finished_via_reconciling() -> None:
    graph = ExecutionGraph(diamond())
    skipped = graph.restore(Progress({"source": {0: Entry("/r/s0", 3), 1: Entry(None, None)},
                                      "ghost": {0: Entry("/x", 1)}, "left": {5: Entry("/y", 1)}}))
    assert set(skipped) == {SubtaskId("ghost", 0), SubtaskId("left", 5)}
    s0, s1 = graph.subtasks("source")
    assert s0.state is ExecutionState.FINISHED and s0.current.rows == 3 and s0.current.result_path == "/r/s0"
    assert s1.is_consumable and s1.recovered
    assert graph.inputs_consumable(graph.subtask(SubtaskId("left", 0)))
    assert graph.partition_paths("source") == ("/r/s0",)
    assert not graph.inputs_consumable(graph.subtask(SubtaskId("sink", 0)))


def test_aggregate_state_follows_flink_precedence() -> None:
    S = ExecutionState
    assert aggregate_state([S.FINISHED, S.FAILED, S.RUNNING]) is S.FAILED
    assert aggregate_state([S.FINISHED, S.CANCELED]) is S.CANCELED
    assert aggregate_state([S.FINISHED, S.FINISHED]) is S.FINISHED
    assert aggregate_state([S.FINISHED, S.CREATED]) is S.RUNNING
    assert aggregate_state([S.SCHEDULED, S.CREATED]) is S.SCHEDULED
    assert aggregate_state([S.CREATED]) is S.CREATED


def test_flink_job_details_while_running_and_after() -> None:
    clock = Clock()
    graph = ExecutionGraph(diamond(), clock=clock)
    graph.transition(JobStatus.CREATED)
    graph.transition(JobStatus.RUNNING)
    finish(graph, SubtaskId("source", 0))
    clock.now += 2
    details = flink_job_details(graph.overview())
    assert set(details) == {"jid", "name", "state", "start-time", "end-time", "duration", "last-modification",
                            "pending-operators", "tasks"}
    assert details["jid"] == JOB_ID and details["state"] == "RUNNING"
    assert details["end-time"] == -1 and details["duration"] == 2000
    assert set(details["tasks"]) == {"created", "scheduled", "deploying", "running", "finished", "canceling",
                                     "canceled", "failed", "reconciling", "initializing", "total"}
    assert details["tasks"]["finished"] == 1 and details["tasks"]["created"] == 6 and details["tasks"]["total"] == 7
    for ev in graph.subtasks():
        if ev.state is not ExecutionState.FINISHED:
            finish(graph, ev.id)
    clock.now += 1
    graph.transition(JobStatus.FINISHED)
    done = flink_job_details(graph.overview())
    assert done["end-time"] == done["start-time"] + 3000 and done["duration"] == 3000


def test_details_shape_for_rest() -> None:
    graph = ExecutionGraph(diamond())
    body = job_details(graph.snapshot())
    assert set(body) == {"id", "name", "status", "start_time", "end_time", "vertices"}
    assert body["end_time"] is None
    left = next(v for v in body["vertices"] if v["id"] == "left")
    assert left["parallelism"] == 2 and left["state"] == "CREATED"
    assert left["subtasks"][1] == {"index": 1, "state": "CREATED", "attempt": 0, "taskmanager": None}


def test_job_result_sums_rows_and_names_the_vertex_dir() -> None:
    graph = ExecutionGraph(diamond())
    graph.transition(JobStatus.CREATED)
    graph.transition(JobStatus.RUNNING)
    for ev in graph.subtasks():
        finish(graph, ev.id, rows=None if ev.vertex.id == "sink" else 4,
               path=None if ev.vertex.id == "sink" else "p")
        ev.deployed_attempts = 1
    graph.subtask(SubtaskId("left", 1)).deployed_attempts = 3
    graph.transition(JobStatus.FINISHED)
    result = graph.job_result(results=ResultLayout("/r"))
    assert result.vertices["source"].rows == 8
    assert result.vertices["source"].result_path == f"/r/{JOB_ID}/source"
    assert result.vertices["left"].attempts == 3
    assert result.vertices["sink"].rows is None and result.vertices["sink"].result_path is None
    assert JobResult.from_dict(result.to_dict()) == result


def test_job_result_of_a_failed_job_names_the_root_cause() -> None:
    graph = ExecutionGraph(diamond())
    graph.transition(JobStatus.CREATED)
    graph.transition(JobStatus.RUNNING)
    failure = Failure("ValueError", "bad row", "Traceback ...\nValueError: bad row\n")
    ev = graph.subtask(SubtaskId("source", 1))
    ev.current.transition(ExecutionState.FAILED)
    ev.current.failure = failure
    ev.deployed_attempts = 2
    graph.failure = failure
    graph.transition(JobStatus.FAILING)
    graph.transition(JobStatus.FAILED)
    result = graph.job_result(results=ResultLayout("/r"))
    assert result.status is JobStatus.FAILED and result.failure == failure
    assert result.vertices["source"].state is ExecutionState.FAILED
    assert result.vertices["source"].failure == failure and result.vertices["source"].attempts == 2
    assert result.vertices["sink"].attempts == 0
