"""The ExecutionGraph: unfolding, attempts, lifecycle checks, recovery, its snapshots and its JobResult."""

from __future__ import annotations

import gc
import random
import re
import weakref

import pytest

from sparkdispatch.errors import IllegalStateTransition, InvalidJobGraph
from sparkdispatch.ha import JobProgress, SubtaskProgress
from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.model.chaining import ResultsMode
from sparkdispatch.model.job_graph import JobGraph, JobVertex
from sparkdispatch.model.job_result import Failure, JobResult, VertexResult
from sparkdispatch.jobmaster.execution import ExecutionVertex, SubtaskId, aggregate_state
from sparkdispatch.jobmaster.execution_graph import ExecutionGraph
from sparkdispatch.jobmaster.recovered_graph import finished, restore
from sparkdispatch.resourcemanager import AllocatedSlot
from sparkdispatch.rest.views import flink_job_details, job_details
from sparkdispatch.storage.results import ResultLayout
from sparkdispatch.model.snapshot import JobSnapshot, SubtaskSnapshot, VertexSnapshot
from sparkdispatch.testing.passes import CountingVertices

JOB_ID = "ab" * 16


def diamond(parallelism: int = 2) -> JobGraph:
    return JobGraph(
        name="diamond",
        job_id=JOB_ID,
        results=ResultsMode.DURABLE,  # each vertex a task of its own: left and right would chain into sink
        vertices=(
            JobVertex("sink", "m:sink", 1, ("left", "right")),
            JobVertex("left", "m:left", parallelism, ("source",)),
            JobVertex("right", "m:right", parallelism, ("source",)),
            JobVertex("source", "m:source", parallelism),
        ),
    )


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


def ids(subtasks: list[ExecutionVertex]) -> list[str]:
    return [str(ev.id) for ev in subtasks]


def test_subtasks_are_offered_for_scheduling_once_every_input_partition_can_be_read() -> None:
    graph = ExecutionGraph(diamond())
    assert ids(graph.take_schedulable(held_back=())) == ["source[0]", "source[1]"]
    assert graph.take_schedulable(held_back=()) == []  # offered once
    finish(graph, SubtaskId("source", 0))
    source1 = graph.subtask(SubtaskId("source", 1))
    source1.current.advance(ExecutionState.FINISHED)
    assert graph.take_schedulable(held_back=()) == []  # finished, but not recorded yet
    source1.progress_recorded = True
    # both consumers at once, in topological order
    assert sorted(ids(graph.take_schedulable(held_back=()))) == ["left[0]", "left[1]", "right[0]", "right[1]"]
    for vertex_id in ("left", "right"):
        for index in (0, 1):
            graph.subtask(SubtaskId(vertex_id, index)).current.transition(ExecutionState.SCHEDULED)
    for vertex_id in ("left", "right"):
        finish(graph, SubtaskId(vertex_id, 0))
        finish(graph, SubtaskId(vertex_id, 1))
    assert ids(graph.take_schedulable(held_back=())) == ["sink[0]"]
    assert not graph.all_finished()
    graph.subtask(SubtaskId("sink", 0)).current.transition(ExecutionState.SCHEDULED)
    finish(graph, SubtaskId("sink", 0))
    assert graph.all_finished()


def test_a_lost_partition_or_a_new_attempt_holds_its_consumers_back_again() -> None:
    graph = ExecutionGraph(diamond())
    for ev in graph.take_schedulable(held_back=()):
        ev.current.transition(ExecutionState.SCHEDULED)
        finish(graph, ev.id)
    assert len(graph.take_schedulable(held_back=())) == 4
    source0 = graph.subtask(SubtaskId("source", 0))
    source0.partition_lost = True
    assert not graph.inputs_consumable(graph.subtask(SubtaskId("left", 0)))
    assert not graph.all_finished()
    # the consumers that had not started wait again; restarting the producer offers it alone
    left1 = graph.subtask(SubtaskId("left", 1))
    graph.new_attempt(source0)
    assert ids(graph.take_schedulable(held_back={SubtaskId("source", 0)})) == []  # waiting out a backoff
    assert ids(graph.take_schedulable(held_back=())) == ["source[0]"]
    source0.current.transition(ExecutionState.SCHEDULED)
    finish(graph, SubtaskId("source", 0))
    assert left1.state is ExecutionState.CREATED
    assert sorted(ids(graph.take_schedulable(held_back=()))) == ["left[0]", "left[1]", "right[0]", "right[1]"]
    # a failed consumer's new attempt is offered again as soon as its inputs can be read
    left1.current.transition(ExecutionState.FAILED)
    graph.new_attempt(left1)
    assert ids(graph.take_schedulable(held_back=())) == ["left[1]"]


def test_restored_subtasks_count_as_finished_and_offer_their_consumers() -> None:
    graph = ExecutionGraph(diamond())
    restore(graph, JobProgress(JOB_ID, {"source": {0: SubtaskProgress("/r/s0", 3), 1: SubtaskProgress("/r/s1", 3)}}))
    assert sorted(ids(graph.take_schedulable(held_back=()))) == ["left[0]", "left[1]", "right[0]", "right[1]"]


def test_a_subtask_a_former_leader_chained_and_this_graph_runs_as_a_task_runs_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A release before 2026-11-29 chained clean (read by two vertices of report's task) into report's
    # task and recorded it so (rows counted in report's plan, no path); this one keeps it, a task.
    graph = ExecutionGraph(
        JobGraph(
            name="sales",
            job_id=JOB_ID,
            vertices=(
                JobVertex("clean", "m:clean", 2),
                JobVertex("by_region", "m:by_region", 2, ("clean",)),
                JobVertex("by_product", "m:by_product", 1, ("clean",)),
                JobVertex("report", "m:report", 1, ("by_region", "by_product")),
                JobVertex("other", "m:other", 1),
            ),
        )
    )
    assert graph.kept.is_kept("clean") and graph.chains.is_chained("by_region")
    chained_then = {0: SubtaskProgress(None, 50), 1: SubtaskProgress(None, 50)}
    with caplog.at_level("WARNING"):
        skipped = restore(
            graph, JobProgress(JOB_ID, {"clean": chained_then, "other": {0: SubtaskProgress(None, None)}})
        )
    assert skipped == []
    assert [ev.state for ev in graph.subtasks("clean")] == [ExecutionState.CREATED] * 2
    assert sorted(ids(graph.take_schedulable(held_back=()))) == ["clean[0]", "clean[1]"]
    # a task that returned nothing (no rows, no path) is restored as ever
    assert graph.subtask(SubtaskId("other", 0)).state is ExecutionState.FINISHED
    assert "records clean[0], clean[1] as chained into another task" in caplog.text


def test_the_graph_is_built_in_a_few_passes_over_the_job_graph() -> None:
    count = 2_000
    vertices = CountingVertices(JobVertex(f"v{i}", "m:f", 2, (f"v{i - 1}",) if i else ()) for i in range(count))
    CountingVertices.yielded = 0
    graph = ExecutionGraph(JobGraph(name="chain", job_id=JOB_ID, vertices=vertices))
    assert len(list(graph.subtasks())) == 2 * count
    # a scan of the vertices per lookup (by id, or for a vertex's consumers) would be ~2.5 * count**2
    assert CountingVertices.yielded <= 5 * count


def test_restore_marks_recovered_subtasks_finished_via_reconciling() -> None:
    graph = ExecutionGraph(diamond())
    skipped = restore(
        graph,
        JobProgress(
            JOB_ID,
            {
                "source": {0: SubtaskProgress("/r/s0", 3), 1: SubtaskProgress(None, None)},
                "ghost": {0: SubtaskProgress("/x", 1)},
                "left": {5: SubtaskProgress("/y", 1)},
            },
        ),
    )
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
    details = flink_job_details(graph.overview()).to_dict()
    assert set(details) == {
        "jid",
        "name",
        "state",
        "start-time",
        "end-time",
        "duration",
        "last-modification",
        "pending-operators",
        "tasks",
    }
    assert details["jid"] == JOB_ID and details["state"] == "RUNNING"
    assert details["end-time"] == -1 and details["duration"] == 2000
    assert set(details["tasks"]) == {
        "created",
        "scheduled",
        "deploying",
        "running",
        "finished",
        "canceling",
        "canceled",
        "failed",
        "reconciling",
        "initializing",
        "total",
    }
    assert details["tasks"]["finished"] == 1 and details["tasks"]["created"] == 6 and details["tasks"]["total"] == 7
    for ev in graph.subtasks():
        if ev.state is not ExecutionState.FINISHED:
            finish(graph, ev.id)
    clock.now += 1
    graph.transition(JobStatus.FINISHED)
    done = flink_job_details(graph.overview()).to_dict()
    assert done["end-time"] == done["start-time"] + 3000 and done["duration"] == 3000


def test_details_shape_for_rest() -> None:
    graph = ExecutionGraph(diamond())
    body = job_details(graph.snapshot()).to_dict()
    assert set(body) == {"id", "name", "status", "start_time", "end_time", "vertices", "repairs"}
    assert body["end_time"] is None
    left = next(v for v in body["vertices"] if v["id"] == "left")
    assert left["parallelism"] == 2 and left["state"] == "CREATED"
    assert left["subtasks"][1] == {"index": 1, "state": "CREATED", "attempt": 0, "taskmanager": None}


def test_job_result_sums_rows_and_names_the_vertex_dir() -> None:
    graph = ExecutionGraph(diamond())
    graph.transition(JobStatus.CREATED)
    graph.transition(JobStatus.RUNNING)
    for ev in graph.subtasks():
        finish(graph, ev.id, rows=None if ev.vertex.id == "sink" else 4, path=None if ev.vertex.id == "sink" else "p")
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


# -- snapshots taken in two steps, the JobResult in one pass, freeing a dropped graph -------------


def snapshot_subtask_by_subtask(graph: ExecutionGraph) -> JobSnapshot:
    """What `snapshot()` shows, read straight off the graph (as it was built before captures)."""
    vertices = []
    for vertex_id in graph.vertex_ids:
        subtasks = tuple(
            SubtaskSnapshot(ev.subtask_index, ev.current.state, ev.current.attempt, ev.current.task_executor_id)
            for ev in graph.subtasks(vertex_id)
        )
        vertices.append(
            VertexSnapshot(
                id=vertex_id,
                state=aggregate_state([s.state for s in subtasks]),
                parallelism=len(subtasks),
                inputs=graph.inputs_of(vertex_id),
                subtasks=subtasks,
            )
        )
    return JobSnapshot(graph.overview(), tuple(vertices))


def vertex_result_by_definition(graph: ExecutionGraph, vertex_id: str, results: ResultLayout) -> VertexResult:
    """A vertex's outcome, each field by its definition (as it was built before the one-pass version)."""
    subtasks = list(graph.subtasks(vertex_id))
    executions = [ev.current for ev in subtasks]
    state = aggregate_state([e.state for e in executions])
    finished = [e for e in executions if e.state is ExecutionState.FINISHED]
    rows_seen = [e.rows for e in finished if e.rows is not None]
    partitions = tuple(e.result_path for e in finished if e.result_path is not None)
    failure = (
        next(e.failure for e in executions if e.state is ExecutionState.FAILED)
        if state is ExecutionState.FAILED
        else None
    )
    return VertexResult(
        state=state,
        attempts=max(ev.deployed_attempts for ev in subtasks),
        rows=sum(rows_seen) if rows_seen else None,
        result_path=results.vertex_dir(graph.job_id, vertex_id) if partitions else None,
        partitions=partitions,
        failure=failure,
    )


def slot(index: int) -> AllocatedSlot:
    return AllocatedSlot(f"alloc-{index}", f"te-{index % 3}", index, "q", f"te-{index % 3}@host", "reg")


def scramble(graph: ExecutionGraph, rng: random.Random) -> None:
    """Put every subtask's attempt in some state, with or without slot, rows, partition and failure."""
    for index, ev in enumerate(graph.subtasks()):
        execution = ev.current
        execution.state = rng.choice(list(ExecutionState))
        execution.attempt = ev.deployed_attempts = rng.randrange(3)
        execution.slot = slot(index) if rng.random() < 0.7 else None
        execution.rows = rng.choice([None, 0, 7])
        execution.result_path = rng.choice([None, f"/r/{ev.id.vertex_id}/{ev.subtask_index}"])
        execution.failure = rng.choice([None, Failure("ValueError", f"bad row {index}")])


def test_the_overview_counts_each_subtask_by_its_current_attempt_without_walking_them() -> None:
    rng = random.Random(7)
    graph = ExecutionGraph(diamond(parallelism=3))
    restore(graph, JobProgress(JOB_ID, {"source": {0: SubtaskProgress("/r/s0", 3)}}))

    def walked() -> dict[ExecutionState, int]:
        tasks = dict.fromkeys(ExecutionState, 0)
        for ev in graph.subtasks():
            tasks[ev.state] += 1
        return tasks

    assert graph.overview().tasks == walked()
    for _ in range(30):
        scramble(graph, rng)
        for ev in graph.subtasks():
            if ev.state.is_terminal and rng.random() < 0.5:
                replaced = ev.current
                graph.new_attempt(ev)
                replaced.state = ExecutionState.CANCELED  # a superseded attempt counts no more
        assert graph.overview().tasks == walked()
    assert sum(graph.overview().tasks.values()) == graph.subtask_count


def test_a_capture_builds_the_snapshot_of_its_moment_and_nothing_later() -> None:
    rng = random.Random(13)
    clock = Clock()
    graph = ExecutionGraph(diamond(parallelism=3), clock=clock)
    graph.transition(JobStatus.CREATED)
    graph.transition(JobStatus.RUNNING)
    for _ in range(20):
        scramble(graph, rng)
        expected = snapshot_subtask_by_subtask(graph)
        capture = graph.capture()
        assert graph.snapshot() == expected
        scramble(graph, rng)  # what happens after the capture does not show in it
        clock.now += 1
        assert capture.build() == expected
        assert graph.snapshot() == snapshot_subtask_by_subtask(graph)


def test_the_job_result_is_each_vertex_outcome_by_its_definition() -> None:
    rng = random.Random(11)
    results = ResultLayout("/r")
    for _ in range(50):
        graph = ExecutionGraph(diamond(parallelism=3))
        graph.transition(JobStatus.CREATED)
        graph.transition(JobStatus.RUNNING)
        scramble(graph, rng)
        graph.transition(JobStatus.CANCELLING)
        graph.transition(JobStatus.CANCELED)
        result = graph.job_result(results=results)
        assert result.vertices == {
            vertex_id: vertex_result_by_definition(graph, vertex_id, results) for vertex_id in graph.vertex_ids
        }


def test_a_dropped_graph_is_freed_by_reference_counting_alone() -> None:
    """No reference cycle: the graph of an ended job goes at once, without waiting for a full collection."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        graph = ExecutionGraph(diamond())
        graph.transition(JobStatus.CREATED)
        graph.transition(JobStatus.RUNNING)
        for subtask in list(graph.subtasks("source")):
            finish(graph, subtask.id)  # the subtasks tell the graph, which offers their consumers
        assert graph.inputs_consumable(graph.subtask(SubtaskId("left", 0)))
        graph.capture()
        dropped = weakref.ref(graph)
        del graph, subtask
        assert dropped() is None
    finally:
        if collecting:
            gc.enable()


SCHEMA = '{"fields":[{"metadata":{},"name":"id","nullable":true,"type":"long"}],"type":"struct"}'
OTHER_SCHEMA = SCHEMA.replace('"long"', '"string"')


def test_a_deployment_carries_the_schema_its_producers_reported_also_after_a_failover() -> None:
    from sparkdispatch.jobmaster.deployment import deployment_descriptor

    slot = AllocatedSlot("alloc", "te-1", 0, "q", "host", "reg")

    def schemas_given_to_left(progress: dict[int, SubtaskProgress]) -> dict[str, str]:
        graph = ExecutionGraph(diamond())
        restore(graph, JobProgress(JOB_ID, {"source": progress}))
        left = graph.subtask(SubtaskId("left", 0))
        tdd = deployment_descriptor(graph, left, slot, job_master_id="jm", results=ResultLayout("/r"))
        return dict(tdd.input_schemas)

    # recorded with the progress, so a new leader hands it on as the first one did
    assert schemas_given_to_left({0: SubtaskProgress("/r/s0", 3, SCHEMA), 1: SubtaskProgress("/r/s1", 3, SCHEMA)}) == {
        "source": SCHEMA
    }
    # a subtask that returned nothing has no partition and no say
    assert schemas_given_to_left({0: SubtaskProgress("/r/s0", 3, SCHEMA), 1: SubtaskProgress(None, None)}) == {
        "source": SCHEMA
    }
    # progress stored before schemas were recorded, or partitions that disagree: the consumer infers
    assert schemas_given_to_left({0: SubtaskProgress("/r/s0", 3), 1: SubtaskProgress("/r/s1", 3)}) == {}
    assert schemas_given_to_left({0: SubtaskProgress("/r/s0", 3, SCHEMA), 1: SubtaskProgress("/r/s1", 3)}) == {}
    assert (
        schemas_given_to_left({0: SubtaskProgress("/r/s0", 3, SCHEMA), 1: SubtaskProgress("/r/s1", 3, OTHER_SCHEMA)})
        == {}
    )


def test_a_repair_keeps_the_schemas_of_the_results_it_keeps() -> None:
    graph = ExecutionGraph(diamond())
    restore(graph, JobProgress(JOB_ID, {"source": {0: SubtaskProgress("/r/s0", 3, SCHEMA)}}))
    assert finished(graph) == {"source": {0: SubtaskProgress("/r/s0", 3, SCHEMA)}}
