"""A JobMaster compares what it deployed with what TaskExecutors' heartbeats list: stale executions
cancelled, missing ones failed over after their grace (on fakes: `sparkdispatch.testing.job_master`)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.model.restart import FixedDelayRestart, NoRestart, RestartStrategy
from sparkdispatch.model.job_graph import JobVertex
from sparkdispatch.model.protocol import ExecutionReport, SlotReport
from sparkdispatch.testing.job_master import (
    JOB_ID,
    SESSION,
    STEP_TIMEOUT_S,
    Deployment,
    Harness,
    chain,
    graph_of,
    register,
    resource_manager,
)


async def test_a_heartbeat_listing_a_stale_execution_gets_it_cancelled() -> None:
    h = Harness(chain())
    h.jm.start()
    a0, a1 = await h.deployments(2)
    await h.fail(a0)
    retry = await h.deployment()
    await h.jm.join()
    cancels_before = list(h.gateway.cancels)
    h.jm.task_executor_heartbeat(
        a0.slot.task_executor_id,
        [
            ExecutionReport(JOB_ID, a0.tdd.execution_id, ExecutionState.RUNNING),  # the failed attempt still runs there
            ExecutionReport(JOB_ID, retry.tdd.execution_id, ExecutionState.RUNNING),
            ExecutionReport(JOB_ID, a1.tdd.execution_id, ExecutionState.DEPLOYING),
            ExecutionReport(JOB_ID, uuid.uuid4().hex, ExecutionState.FINISHED),
        ],
    )
    await h.jm.join()
    assert h.gateway.cancels[len(cancels_before) :] == [(a0.slot.hostname, a0.tdd.execution_id)]
    await h.jm.cancel()
    await h.jm.join()


async def test_a_heartbeat_of_a_task_executor_without_a_slot_of_the_job_gets_stale_executions_cancelled() -> None:
    """E.g. a master restarted under the same session: the former JobMaster's tasks run on where this one holds
    no slot; they are cancelled, not left holding their slots until they end."""
    h = Harness(chain())
    h.jm.start()
    await h.deployments(2)
    stale = uuid.uuid4().hex
    h.jm.task_executor_heartbeat("te-9", [ExecutionReport(JOB_ID, stale, ExecutionState.RUNNING)])
    await h.jm.join()
    assert h.gateway.cancels == [("celery@te-9", stale)]
    await h.jm.cancel()
    await h.jm.join()


def listing(*deployments: Deployment, state: ExecutionState = ExecutionState.RUNNING) -> list[ExecutionReport]:
    return [ExecutionReport(JOB_ID, d.tdd.execution_id, state) for d in deployments]


@pytest.mark.parametrize("restart", [NoRestart(), FixedDelayRestart(attempts=1, delay_s=0.0)])
async def test_an_execution_fails_over_only_after_the_grace_and_heartbeats_in_a_row_without_it(
    restart: RestartStrategy,
) -> None:
    """Within the grace a deployment is on its way; once listed, `missing_execution_threshold` heartbeats in a
    row without it fail it over (and a listing in between starts the count again)."""
    h = Harness(chain(restart), missing_execution_threshold=2, deployment_grace=0.5)
    h.jm.start()
    lost, other = await h.deployments(2)
    await h.jm.join()
    te = lost.slot.task_executor_id
    other_te = other.slot.task_executor_id
    for _ in range(4):  # within the grace the deployment is still on its way
        h.jm.task_executor_heartbeat(te, listing(other) if other_te == te else [])
    await asyncio.sleep(0.5)  # the grace passes
    h.jm.task_executor_heartbeat(
        te,
        [ExecutionReport(JOB_ID, lost.tdd.execution_id, ExecutionState.DEPLOYING)]
        + (listing(other) if other_te == te else []),
    )
    assert h.jm.execution_graph.subtask(lost.subtask).current.attempt == 0  # it arrived after all: listed
    for _ in range(2):
        assert h.jm.execution_graph.subtask(lost.subtask).current.attempt == 0
        h.jm.task_executor_heartbeat(te, listing(other) if other_te == te else [])
    if isinstance(restart, NoRestart):
        result = await asyncio.wait_for(h.jm.result_future, STEP_TIMEOUT_S)
        assert result.status is JobStatus.FAILED and result.failure is not None
        assert result.failure.cls == "ExecutionLost", result.failure  # listed once: it ran there, then vanished
    else:
        retry = await h.deployment()
        assert (retry.subtask, retry.tdd.attempt) == (lost.subtask, 1)
        assert h.jm.execution_graph.subtask(other.subtask).current.attempt == 0  # listed all along
        await h.finish(other)
        await h.finish(retry)
        b = await h.deployment()
        await h.finish(b)
        assert (await asyncio.wait_for(h.jm.result_future, STEP_TIMEOUT_S)).status is JobStatus.FINISHED
    await h.jm.join()


async def test_a_deployment_never_listed_fails_over_saying_it_was_lost_on_the_way() -> None:
    h = Harness(chain(NoRestart()), missing_execution_threshold=3, deployment_grace=0.2)
    h.jm.start()
    lost, _ = await h.deployments(2)
    await h.jm.join()
    te = lost.slot.task_executor_id
    for _ in range(2):
        h.jm.task_executor_heartbeat(te, [])
    await asyncio.sleep(0.2)  # the grace passes
    assert h.jm.status is JobStatus.RUNNING  # past the grace, but only two heartbeats omitted it
    h.jm.task_executor_heartbeat(te, [])
    result = await asyncio.wait_for(h.jm.result_future, STEP_TIMEOUT_S)
    assert result.status is JobStatus.FAILED and result.failure is not None
    assert result.failure.cls == "DeploymentLost"
    assert f"sent to TaskExecutor {te}" in result.failure.message and "last 3 heartbeats" in result.failure.message
    await h.jm.join()


async def test_deployments_lost_together_count_as_one_failure() -> None:
    """A broker restart loses both deployments to one TaskExecutor: one restart, as for a lost TaskExecutor."""
    h = Harness(chain(FixedDelayRestart(attempts=1, delay_s=0.0)), missing_execution_threshold=1, deployment_grace=0.0)
    h.rm.free = [("te-1", 0), ("te-1", 1)]
    h.jm.start()
    await h.deployments(2)
    await h.jm.join()
    h.jm.task_executor_heartbeat("te-1", [])
    retries = await h.deployments(2)
    assert sorted(d.tdd.attempt for d in retries) == [1, 1] and h.jm.status is JobStatus.RUNNING
    for d in retries:
        await h.finish(d)
    await h.finish(await h.deployment())
    assert (await asyncio.wait_for(h.jm.result_future, STEP_TIMEOUT_S)).status is JobStatus.FINISHED
    await h.jm.join()


async def test_an_execution_whose_final_report_was_lost_fails_over_and_the_job_finishes() -> None:
    """RUNNING arrived, then the task ended and its terminal report never did; its TaskExecutor lists it no more."""
    h = Harness(chain(), missing_execution_threshold=3, deployment_grace=60.0)
    h.jm.start()
    a0, a1 = await h.deployments(2)
    await h.report(a0, ExecutionState.RUNNING)
    await h.finish(a1)
    te = a0.slot.task_executor_id
    h.jm.task_executor_heartbeat(te, listing(a0, state=ExecutionState.FINISHED))  # ended there, report held
    h.jm.task_executor_heartbeat(te, [])
    h.jm.task_executor_heartbeat(te, [])
    assert h.jm.execution_graph.subtask(a0.subtask).current.attempt == 0
    h.jm.task_executor_heartbeat(te, [])  # the third heartbeat in a row without it (no grace once acknowledged)
    retry = await h.deployment()
    assert (retry.subtask, retry.tdd.attempt) == (a0.subtask, 1)
    await h.finish(retry)
    await h.finish(await h.deployment())
    result = await asyncio.wait_for(h.jm.result_future, STEP_TIMEOUT_S)
    assert result.status is JobStatus.FINISHED and result.vertices["a"].attempts == 2
    await h.jm.join()


async def test_executions_listed_by_their_heartbeats_are_never_failed() -> None:
    h = Harness(chain(NoRestart()), missing_execution_threshold=1, deployment_grace=0.0)
    h.jm.start()
    a0, a1 = await h.deployments(2)
    await h.jm.join()
    await h.report(a1, ExecutionState.RUNNING)
    for _ in range(20):  # a0 waits in its TaskExecutor for a thread; a1 runs
        for te in {a0.slot.task_executor_id, a1.slot.task_executor_id}:
            h.jm.task_executor_heartbeat(
                te,
                [
                    r
                    for r in listing(a0, state=ExecutionState.DEPLOYING) + listing(a1)
                    if te == (a0 if r.execution_id == a0.tdd.execution_id else a1).slot.task_executor_id
                ],
            )
        h.jm.task_executor_heartbeat("te-elsewhere", [])  # other TaskExecutors' heartbeats are no evidence
    assert h.jm.status is JobStatus.RUNNING
    assert [ev.current.attempt for ev in h.jm.execution_graph.subtasks("a")] == [0, 0]
    await h.finish(a0)
    await h.finish(a1)
    await h.finish(await h.deployment())
    assert (await asyncio.wait_for(h.jm.result_future, STEP_TIMEOUT_S)).status is JobStatus.FINISHED
    await h.jm.join()


async def test_the_resource_manager_forwards_heartbeats_that_fail_a_lost_deployment_over() -> None:
    rm = resource_manager(rpc_failure_threshold=2, **{"heartbeat.interval": "50ms", "heartbeat.timeout": "10s"})
    rm.start()
    register(rm, "te-1", 1)
    h = Harness(
        graph_of(JobVertex("a", "pipe:a", 1), restart=FixedDelayRestart(attempts=1, delay_s=0.0)),
        resource_manager=rm,
        missing_execution_threshold=2,
        deployment_grace=0.0,
    )
    h.jm.start()
    lost = await h.deployment()
    await h.jm.join()
    for _ in range(2):  # the TaskExecutor's heartbeats through the ResourceManager: it has no such execution
        rm.heartbeat(SESSION, "te-1", SlotReport.free(1), [])
    retry = await h.deployment()
    assert (retry.subtask, retry.tdd.attempt, retry.slot.task_executor_id) == (lost.subtask, 1, "te-1")
    rm.heartbeat(
        SESSION,
        "te-1",
        SlotReport.free(1),
        [{"job_id": JOB_ID, "execution_id": retry.tdd.execution_id, "state": "DEPLOYING"}],
    )
    await h.finish(retry)
    assert (await asyncio.wait_for(h.jm.result_future, STEP_TIMEOUT_S)).status is JobStatus.FINISHED
    await h.jm.join()
    rm.stop()
