"""A chain runs as its head's one task: deployed once with its chained vertices, each of which keeps
its own state, attempts and rows; a failure runs the chain again whole; a failover keeps it whole
(on fakes: `sparkdispatch.testing.job_master`)."""

from __future__ import annotations

from sparkdispatch.ha import JobProgress, SubtaskProgress
from sparkdispatch.jobmaster.execution import SubtaskId
from sparkdispatch.model.chaining import ResultKind, ResultsMode
from sparkdispatch.model.job_graph import JobGraph, JobVertex
from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.rest.views import flink_job_details, job_details
from sparkdispatch.testing.job_master import JOB_ID, RESULTS, THREE_RESTARTS, Harness, boom, graph_of


def sales_graph() -> JobGraph:
    """extract (x2, durable) -> clean (x2, chained) -> report: clean's two subtasks run in report's
    task, which reads extract's written result."""
    return graph_of(
        JobVertex("extract", "pipe:extract", 2, result=ResultKind.DURABLE),
        JobVertex("clean", "pipe:clean", 2, ("extract",), result=ResultKind.CHAINED),
        JobVertex("report", "pipe:report", 1, ("clean",)),
        restart=THREE_RESTARTS,
        results=ResultsMode.AUTO,
    )


def sales() -> Harness:
    return Harness(sales_graph())


async def test_a_chain_is_deployed_once_with_its_chained_vertex_and_each_keeps_its_rows() -> None:
    h = sales()
    h.jm.start()
    extracts = await h.deployments(2)
    assert {d.tdd.vertex_id for d in extracts} == {"extract"}
    for d in extracts:
        await h.finish(d, rows=50)
    report = await h.deployment()
    assert report.tdd.vertex_id == "report" and report.tdd.inputs == {"clean": ()}
    (clean,) = report.tdd.chained
    assert (clean.vertex_id, clean.entrypoint, clean.parallelism) == ("clean", "pipe:clean", 2)
    assert sorted(clean.inputs["extract"]) == sorted(d.tdd.result_path for d in extracts)
    snapshot = job_details(h.jm.snapshot()).to_dict()
    states = {v["id"]: {s["state"] for s in v["subtasks"]} for v in snapshot["vertices"]}
    assert states == {"extract": {"FINISHED"}, "clean": {"DEPLOYING"}, "report": {"DEPLOYING"}}
    await h.report(report, ExecutionState.RUNNING)
    assert h.jm.execution_graph.vertex_state("clean") is ExecutionState.RUNNING
    h.jm.update_execution_state(
        h.update(
            report,
            ExecutionState.FINISHED,
            rows=3,
            result_path=report.tdd.result_path,
            chained_rows={"clean": (40, 45)},
        )
    )
    result = await h.run_to_end()

    assert result.status is JobStatus.FINISHED
    assert len(h.gateway.deployments) == 3  # two extracts and the chain
    clean_result = result.vertices["clean"]
    assert clean_result.state is ExecutionState.FINISHED and clean_result.attempts == 1
    assert clean_result.rows == 85 and clean_result.partitions == () and clean_result.result_path is None
    assert result.vertices["report"].rows == 3
    assert result.vertices["report"].result_path == f"{RESULTS}/{JOB_ID}/report"
    assert h.store.finished() >= {SubtaskId("clean", 0), SubtaskId("clean", 1), SubtaskId("report", 0)}
    tasks = flink_job_details(h.jm.overview()).to_dict()["tasks"]
    assert tasks["finished"] == 3  # the tasks that ran: a chain counts once
    await h.jm.join()


async def test_a_failed_chain_runs_again_whole_with_its_chained_vertex() -> None:
    h = sales()
    h.jm.start()
    for d in await h.deployments(2):
        await h.finish(d)
    first = await h.deployment()
    await h.fail(first, boom(first))
    graph = h.jm.execution_graph
    assert graph.vertex_state("clean") is ExecutionState.CREATED  # renewed with its head
    second = await h.deployment()
    assert second.tdd.vertex_id == "report" and second.tdd.attempt == 1
    assert [c.vertex_id for c in second.tdd.chained] == ["clean"]
    h.jm.update_execution_state(
        h.update(second, ExecutionState.FINISHED, rows=1, result_path=second.tdd.result_path, chained_rows={})
    )
    result = await h.run_to_end()
    assert result.status is JobStatus.FINISHED
    assert result.vertices["clean"].attempts == 2 and result.vertices["report"].attempts == 2
    assert result.vertices["clean"].rows is None  # the plan did not count it
    await h.jm.join()


async def test_a_new_leader_keeps_a_recorded_chain_and_runs_one_whose_head_was_not_recorded() -> None:
    extract = {0: SubtaskProgress("/old/extract/0", 5), 1: SubtaskProgress("/old/extract/1", 5)}
    whole = JobProgress(
        JOB_ID,
        {
            "extract": extract,
            "clean": {0: SubtaskProgress(None, 4), 1: SubtaskProgress(None, 4)},
            "report": {0: SubtaskProgress("/old/report/0", 1)},
        },
    )
    kept = Harness(sales_graph(), recovered=whole)
    kept.jm.start()
    result = await kept.run_to_end()
    assert result.status is JobStatus.FINISHED and not kept.gateway.deployments
    assert result.vertices["clean"].rows == 8 and result.vertices["clean"].state is ExecutionState.FINISHED
    # a store may list the head before its chained vertex: the rows are kept all the same
    listed_head_first = JobProgress(JOB_ID, dict(reversed(list(whole.finished.items()))))
    reordered = Harness(sales_graph(), recovered=listed_head_first)
    reordered.jm.start()
    assert (await reordered.run_to_end()).vertices["clean"].rows == 8
    await reordered.jm.join()

    # clean recorded, its head not (the former leader stopped between the records): the chain runs again
    partial = JobProgress(JOB_ID, {"extract": extract, "clean": {0: SubtaskProgress(None, 4)}})
    again = Harness(sales_graph(), recovered=partial)
    again.jm.start()
    report = await again.deployment()
    assert report.tdd.vertex_id == "report" and [c.vertex_id for c in report.tdd.chained] == ["clean"]
    assert report.tdd.chained[0].inputs["extract"] == ("/old/extract/0", "/old/extract/1")
    assert again.jm.execution_graph.vertex_state("clean") is ExecutionState.DEPLOYING
    await again.finish(report)
    assert (await again.run_to_end()).status is JobStatus.FINISHED
    await kept.jm.join()
    await again.jm.join()
