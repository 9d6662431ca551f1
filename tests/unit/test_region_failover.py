"""Region failover on BLOCKING exchanges: what a failure restarts, what it reuses, when it backtracks."""

from __future__ import annotations

from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.chaining import ResultsMode
from sparkdispatch.model.job_graph import JobGraph, JobVertex
from sparkdispatch.model.job_result import Failure
from sparkdispatch.jobmaster.execution import SubtaskId
from sparkdispatch.jobmaster.execution_graph import ExecutionGraph
from sparkdispatch.jobmaster.failover import tasks_to_restart, unreadable_inputs
from sparkdispatch.storage.results import ResultLayout

JOB_ID = "cd" * 16
RESULTS = ResultLayout("/results")


def chain_graph() -> ExecutionGraph:
    """a (2) -> b (2) -> c (1), and d (1) reading a: a fan-out with a branch."""
    return ExecutionGraph(
        JobGraph(
            name="chain",
            job_id=JOB_ID,
            results=ResultsMode.DURABLE,  # b's result is read from its partitions, not chained into c
            vertices=(
                JobVertex("a", "m:a", 2),
                JobVertex("b", "m:b", 2, ("a",)),
                JobVertex("c", "m:c", 1, ("b",)),
                JobVertex("d", "m:d", 1, ("a",)),
            ),
        )
    )


def finish(graph: ExecutionGraph, vertex_id: str, index: int) -> None:
    ev = graph.subtask(SubtaskId(vertex_id, index))
    ev.current.advance(ExecutionState.FINISHED)
    ev.current.result_path = RESULTS.attempt_path(JOB_ID, vertex_id, index, ev.current.execution_id)
    ev.progress_recorded = True


def run(graph: ExecutionGraph, vertex_id: str, index: int) -> None:
    graph.subtask(SubtaskId(vertex_id, index)).current.advance(ExecutionState.RUNNING)


def S(vertex_id: str, index: int) -> SubtaskId:
    return SubtaskId(vertex_id, index)


def test_a_failed_subtask_restarts_alone_when_it_has_not_produced() -> None:
    graph = chain_graph()
    finish(graph, "a", 0)
    finish(graph, "a", 1)
    run(graph, "b", 0)
    run(graph, "b", 1)
    # b[0] fails; its consumer c has not started and restarting it is a no-op, but it is involved
    assert tasks_to_restart(graph, [S("b", 0)]) == [S("b", 0), S("c", 0)]


def test_finished_upstream_with_readable_partitions_is_reused() -> None:
    graph = chain_graph()
    for i in (0, 1):
        finish(graph, "a", i)
    restart = tasks_to_restart(graph, [S("b", 1)])
    assert S("a", 0) not in restart and S("a", 1) not in restart
    assert S("b", 0) not in restart  # a sibling is its own region


def test_a_producer_restart_takes_every_consumer_downstream_transitively() -> None:
    graph = chain_graph()
    # a[1] failed; b, c, d consume it directly or transitively
    assert tasks_to_restart(graph, [S("a", 1)]) == [S("a", 1), S("b", 0), S("b", 1), S("c", 0), S("d", 0)]


def test_a_lost_partition_brings_its_producer_back() -> None:
    graph = chain_graph()
    finish(graph, "a", 0)
    finish(graph, "a", 1)
    finish(graph, "b", 0)
    finish(graph, "b", 1)
    finish(graph, "d", 0)
    run(graph, "c", 0)
    graph.subtask(S("b", 1)).partition_lost = True
    restart = tasks_to_restart(graph, [S("c", 0)])
    # b[1] re-runs (backtracking); its consumer c too; a's partitions are readable and reused
    assert restart == [S("b", 1), S("c", 0)]


def test_backtracking_follows_lost_partitions_upstream() -> None:
    graph = chain_graph()
    for vertex_id, index in (("a", 0), ("a", 1), ("b", 0), ("b", 1), ("d", 0)):
        finish(graph, vertex_id, index)
    run(graph, "c", 0)
    graph.subtask(S("b", 0)).partition_lost = True
    graph.subtask(S("a", 0)).partition_lost = True
    restart = tasks_to_restart(graph, [S("c", 0)])
    # a[0] is re-run for b[0]; every consumer of a[0] (b, d) runs again, and c after b
    assert restart == [S("a", 0), S("b", 0), S("b", 1), S("c", 0), S("d", 0)]


def test_a_running_producer_is_never_pulled_into_a_restart() -> None:
    graph = chain_graph()
    run(graph, "a", 0)
    finish(graph, "a", 1)
    graph.subtask(S("a", 1)).partition_lost = True
    restart = tasks_to_restart(graph, [S("a", 1)])
    assert S("a", 0) not in restart


def test_a_read_failure_naming_a_partition_marks_that_producer() -> None:
    graph = chain_graph()
    finish(graph, "a", 0)
    finish(graph, "a", 1)
    consumer = graph.subtask(S("b", 0))
    path = graph.subtask(S("a", 1)).current.result_path
    failure = Failure("AnalysisException", f"[PATH_NOT_FOUND] Path does not exist: file:{path}.", "")
    assert unreadable_inputs(graph, consumer, failure) == [S("a", 1)]


def test_other_failures_do_not_blame_producers() -> None:
    graph = chain_graph()
    finish(graph, "a", 0)
    finish(graph, "a", 1)
    consumer = graph.subtask(S("b", 0))
    path = graph.subtask(S("a", 0)).current.result_path
    assert unreadable_inputs(graph, consumer, Failure("ValueError", f"bad schema in {path}", "")) == []
    assert unreadable_inputs(graph, consumer, Failure("FileNotFoundException", "/elsewhere/x", "")) == []


def test_a_producer_running_again_is_not_blamed_for_its_old_partition() -> None:
    graph = chain_graph()
    finish(graph, "a", 0)
    finish(graph, "a", 1)
    old_path = graph.subtask(S("a", 1)).current.result_path
    graph.new_attempt(graph.subtask(S("a", 1)))
    consumer = graph.subtask(S("b", 0))
    failure = Failure("AnalysisException", f"[PATH_NOT_FOUND] Path does not exist: file:{old_path}.", "")
    assert unreadable_inputs(graph, consumer, failure) == []
