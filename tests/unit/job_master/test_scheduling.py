"""A JobMaster schedules a graph in batch order, shows its progress, waits for the progress records,
and skips what a former leader recovered (on fakes: `sparkdispatch.testing.job_master`)."""

from __future__ import annotations

import asyncio


from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.jobmaster.execution import SubtaskId
from sparkdispatch.rest.views import flink_job_details, job_details
from sparkdispatch.ha import JobProgress, SubtaskProgress
from sparkdispatch.testing.job_master import (
    ARTIFACT,
    JOB_ID,
    RESULTS,
    SESSION,
    STEP_TIMEOUT_S,
    Harness,
    chain,
    diamond,
)


async def test_fan_out_fan_in_runs_in_batch_order_and_finishes() -> None:
    h = Harness(diamond())
    h.jm.start()
    assert h.jm.status is JobStatus.RUNNING
    first = await h.deployments(2)
    assert {d.subtask for d in first} == {SubtaskId("extract", 0), SubtaskId("extract", 1)}
    tdd = first[0].tdd
    assert tdd.job_master_id == SESSION and first[0].session_id == SESSION
    assert tdd.result_path == f"{RESULTS}/{JOB_ID}/extract/{tdd.subtask_index}-{tdd.execution_id}"
    assert tdd.inputs == {} and dict(tdd.params) == {"n": 10} and tdd.artifacts == (ARTIFACT,)
    assert dict(tdd.spark_conf) == {"spark.sql.shuffle.partitions": "4"}
    assert tdd.parallelism == 2 and tdd.attempt == 0 and tdd.allocation_id == first[0].slot.allocation_id
    assert tdd.registration_id == first[0].slot.registration_id  # the TaskExecutor fences on it
    assert h.rm.declarations[0] == 2  # only the two extract subtasks can run yet
    for d in first:
        await h.finish(d, rows=50)

    result = await h.run_to_end()

    assert result.status is JobStatus.FINISHED and result.failure is None
    assert result.job_id == JOB_ID and result.name == "test-job"
    assert set(result.vertices) == {"extract", "left", "right", "load"}
    for vertex_id, vertex in result.vertices.items():
        assert vertex.state is ExecutionState.FINISHED and vertex.attempts == 1
        assert vertex.result_path == f"{RESULTS}/{JOB_ID}/{vertex_id}"
    assert result.vertices["extract"].rows == 100 and result.vertices["load"].rows == 20
    load = [d for d in h.gateway.deployments if d.tdd.vertex_id == "load"]
    assert {k: len(v) for k, v in load[0].tdd.inputs.items()} == {"left": 2, "right": 2}
    assert load[0].tdd.inputs["left"] == tuple(
        d.tdd.result_path
        for d in sorted(h.gateway.deployments, key=lambda d: d.tdd.subtask_index)
        if d.tdd.vertex_id == "left"
    )
    assert len(h.gateway.deployments) == 8 and len(h.store.records) == 8
    assert h.rm.declarations[-1] == 0 and not h.rm.allocated and len(h.rm.released) == 8
    details = job_details(h.jm.snapshot()).to_dict()
    assert details["status"] == "FINISHED" and details["end_time"] == result.end_time
    overview = flink_job_details(h.jm.overview()).to_dict()
    assert overview["state"] == "FINISHED" and overview["tasks"]["finished"] == 8 and overview["tasks"]["total"] == 8
    await h.jm.join()


async def test_details_show_subtask_states_attempts_and_taskmanagers() -> None:
    h = Harness(chain())
    h.jm.start()
    a0, a1 = await h.deployments(2)
    await h.report(a0, ExecutionState.RUNNING)
    details = job_details(h.jm.snapshot()).to_dict()
    vertex_a = details["vertices"][0]
    assert details["status"] == "RUNNING" and details["end_time"] is None
    assert vertex_a["id"] == "a" and vertex_a["state"] == "RUNNING" and vertex_a["parallelism"] == 2
    by_index = {s["index"]: s for s in vertex_a["subtasks"]}
    assert by_index[a0.tdd.subtask_index] == {
        "index": a0.tdd.subtask_index,
        "state": "RUNNING",
        "attempt": 0,
        "taskmanager": a0.slot.task_executor_id,
    }
    assert by_index[a1.tdd.subtask_index]["state"] == "DEPLOYING"
    assert details["vertices"][1]["subtasks"][0]["state"] == "CREATED"
    tasks = flink_job_details(h.jm.overview()).to_dict()["tasks"]
    assert (tasks["running"], tasks["deploying"], tasks["created"], tasks["total"]) == (1, 1, 1, 3)
    assert flink_job_details(h.jm.overview()).to_dict()["end-time"] == -1
    await h.finish(a0)
    await h.finish(a1)
    await h.run_to_end()
    await h.jm.join()


async def test_consumers_wait_for_the_progress_record() -> None:
    h = Harness(chain())
    gate = asyncio.Event()
    h.store.gate = gate
    h.jm.start()
    a0, a1 = await h.deployments(2)
    for d in (a0, a1):
        await h.report(d, ExecutionState.RUNNING)
    for d in (a0, a1):  # answered at once, while the progress records wait
        h.jm.update_execution_state(h.update(d, ExecutionState.FINISHED, rows=1, result_path=d.tdd.result_path))
    assert h.jm.execution_graph.subtask(a0.subtask).state is ExecutionState.FINISHED
    for _ in range(20):  # turns of the loop, for anything that would schedule b
        await asyncio.sleep(0)
    b = h.jm.execution_graph.subtask(SubtaskId("b", 0))
    assert b.state is ExecutionState.CREATED and not h.store.records
    assert not h.rm.allocated  # the finished subtasks' slots are back already
    gate.set()
    await h.jm.join()
    assert b.state is not ExecutionState.CREATED
    assert len(h.store.records) == 2 and h.store.records[0][0] == SESSION
    result = await h.run_to_end()
    assert result.status is JobStatus.FINISHED
    await h.jm.join()


async def test_recovered_progress_skips_finished_subtasks() -> None:
    progress = JobProgress(
        JOB_ID,
        {
            "extract": {0: SubtaskProgress("/old/extract/0-x", 7), 1: SubtaskProgress("/old/extract/1-y", 8)},
            "left": {1: SubtaskProgress("/old/left/1-z", 3)},
        },
    )
    h = Harness(diamond(), recovered=progress)
    h.jm.start()
    first = await h.deployments(3)
    assert {d.subtask for d in first} == {SubtaskId("left", 0), SubtaskId("right", 0), SubtaskId("right", 1)}
    assert first[0].tdd.inputs["extract"] == ("/old/extract/0-x", "/old/extract/1-y")
    for d in first:
        await h.finish(d)
    load = await h.deployment()
    assert "/old/left/1-z" in load.tdd.inputs["left"]
    await h.finish(load)
    result = await h.run_to_end()
    assert result.status is JobStatus.FINISHED
    assert result.vertices["extract"].rows == 15 and result.vertices["extract"].attempts == 1
    deployed = {d.subtask for d in h.gateway.deployments}
    assert not deployed & {SubtaskId("extract", 0), SubtaskId("extract", 1), SubtaskId("left", 1)}
    assert SubtaskId("extract", 0) not in h.store.finished()  # recorded by the former leader, not again
    await h.jm.join()


async def test_a_fully_recovered_job_finishes_without_running_anything() -> None:
    progress = JobProgress(
        JOB_ID,
        {"a": {0: SubtaskProgress(None, None), 1: SubtaskProgress("/p/a1", 2)}, "b": {0: SubtaskProgress("/p/b0", 2)}},
    )
    h = Harness(chain(), recovered=progress)
    h.jm.start()
    result = await asyncio.wait_for(h.jm.result_future, STEP_TIMEOUT_S)
    assert result.status is JobStatus.FINISHED and result.vertices["b"].rows == 2
    assert not h.gateway.deployments
