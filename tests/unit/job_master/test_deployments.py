"""A JobMaster's deployments: sent again while the broker does not take them, failed for other
reasons, and their outcomes counted by the ResourceManager (on fakes: `sparkdispatch.testing.job_master`)."""

from __future__ import annotations

import asyncio


from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.model.restart import FixedDelayRestart, NoRestart
from sparkdispatch.model.job_graph import JobVertex
from sparkdispatch.jobmaster.execution import SubtaskId
from sparkdispatch.model.protocol import SlotReport
from sparkdispatch.testing.waiting import eventually
from sparkdispatch.testing.job_master import (
    SESSION,
    STEP_TIMEOUT_S,
    Harness,
    chain,
    graph_of,
    register,
    resource_manager,
)


async def test_a_deployment_the_broker_does_not_take_is_sent_again_without_a_restart() -> None:
    """Redis restarting: the same attempt is sent again with backoff; the job's restart budget stays whole."""
    h = Harness(chain(NoRestart()))
    h.gateway.fail_deploys = 4
    h.jm.start()
    result = await h.run_to_end()
    assert result.status is JobStatus.FINISHED  # under NoRestart: no failure was counted
    assert [v.attempts for v in result.vertices.values()] == [1, 1]
    assert sorted(d.tdd.attempt for d in h.gateway.deployments) == [0, 0, 0]
    # the tries the broker refused were of the very executions that arrived later
    assert set(h.gateway.failed_tries) <= {d.tdd.execution_id for d in h.gateway.deployments}
    assert len(h.gateway.failed_tries) == 4
    assert sorted(ok for _, ok in h.rm.rpc_outcomes) == [False] * 4 + [True] * 3
    await h.jm.join()


async def test_a_deployment_is_sent_again_until_the_broker_takes_it_or_its_attempt_ends() -> None:
    h = Harness(chain())
    h.gateway.broker_down = True
    h.jm.start()
    await eventually(lambda: len(h.gateway.failed_tries) >= 6, "tries of both subtasks of a")
    assert h.gateway.deployments == [] and h.jm.status.value == "RUNNING"
    assert {ev.state for ev in h.jm.execution_graph.subtasks("a")} == {ExecutionState.DEPLOYING}
    h.gateway.broker_down = False
    a0, a1 = await h.deployments(2)
    assert (a0.tdd.attempt, a1.tdd.attempt) == (0, 0)
    await h.finish(a0)
    await h.report(a1, ExecutionState.RUNNING)
    h.gateway.broker_down = True
    h.jm.update_execution_state(h.update(a1, ExecutionState.FINISHED, rows=1, result_path=a1.tdd.result_path))
    b = h.jm.execution_graph.subtask(SubtaskId("b", 0))
    await eventually(lambda: b.current.execution_id in h.gateway.failed_tries, "b's first try")
    await h.jm.cancel()  # its attempt ends: the tries stop
    tries = len(h.gateway.failed_tries)
    await h.jm.join()
    await asyncio.sleep(0.3)  # room for a few more tries' backoffs: no try must come
    assert len(h.gateway.failed_tries) == tries and h.jm.status is JobStatus.CANCELED


async def test_a_deployment_failing_for_another_reason_fails_its_attempt() -> None:
    h = Harness(chain())
    h.gateway.deploy_errors = [TypeError("Object of type set is not JSON serializable")]
    h.jm.start()
    result = await h.run_to_end()
    assert result.status is JobStatus.FINISHED
    assert result.vertices["a"].attempts == 2  # one subtask's first deployment never left
    assert sorted(d.tdd.attempt for d in h.gateway.deployments if d.tdd.vertex_id == "a") == [0, 1]
    await h.jm.join()


async def test_deployment_and_cancel_outcomes_reach_the_resource_manager() -> None:
    h = Harness(chain())
    h.gateway.fail_deploys = 1
    h.jm.start()
    deployed = await h.deployments(2)  # one of the two first deployments failed and was sent again
    await h.jm.join()
    failed = [te for te, ok in h.rm.rpc_outcomes if not ok]
    assert len(failed) == 1 and failed[0] in {"te-1", "te-2"}
    assert sorted(te for te, ok in h.rm.rpc_outcomes if ok) == sorted(d.slot.task_executor_id for d in deployed)
    h.rm.rpc_outcomes.clear()
    for d in deployed:
        await h.report(d, ExecutionState.RUNNING)
    h.gateway.fail_cancels = 1
    await h.jm.cancel()
    await h.jm.join()
    assert sorted(ok for _, ok in h.rm.rpc_outcomes) == [False, True]
    assert sorted(te for te, _ in h.rm.rpc_outcomes) == sorted(d.slot.task_executor_id for d in deployed)


async def test_failed_deployments_lose_a_task_executor_only_once_its_heartbeats_stop_too() -> None:
    rm = resource_manager(rpc_failure_threshold=2, **{"heartbeat.interval": "100ms", "heartbeat.timeout": "10s"})
    rm.start()
    register(rm, "te-1", 1)
    h = Harness(
        graph_of(JobVertex("a", "pipe:a", 1), restart=FixedDelayRestart(attempts=5, delay_s=0.0)), resource_manager=rm
    )
    h.gateway.broker_down = True
    h.jm.start()

    def heartbeating() -> bool:  # te-1 heartbeats: its failed deployments are the broker's trouble
        rm.heartbeat(SESSION, "te-1", SlotReport.free(1), [])
        return len(h.gateway.failed_tries) >= 4

    await eventually(heartbeating, "four failed tries while te-1 heartbeats", interval=0.05)
    assert rm.overview().taskmanagers == 1 and h.jm.status is JobStatus.RUNNING
    assert [ev.current.attempt for ev in h.jm.execution_graph.subtasks()] == [0]
    # te-1 falls silent: two intervals later it is unreachable; its attempt runs again elsewhere
    await eventually(lambda: rm.overview().taskmanagers == 0, "te-1 lost after failed deployments and silence")
    h.gateway.broker_down = False
    register(rm, "te-2", 1)
    d = await h.deployment()
    assert d.slot.task_executor_id == "te-2" and d.tdd.attempt == 1
    await h.finish(d)
    result = await asyncio.wait_for(h.jm.result_future, STEP_TIMEOUT_S)
    assert result.status is JobStatus.FINISHED
    await h.jm.join()
    rm.stop()


async def test_a_deployment_that_goes_through_resets_the_failure_count() -> None:
    rm = resource_manager(rpc_failure_threshold=2, **{"heartbeat.interval": "50ms", "heartbeat.timeout": "10s"})
    rm.start()
    register(rm, "te-1", 1)
    h = Harness(
        graph_of(JobVertex("a", "pipe:a", 1), restart=FixedDelayRestart(attempts=5, delay_s=0.0)), resource_manager=rm
    )
    await asyncio.sleep(0.15)  # te-1 silent for longer than two heartbeat intervals
    h.gateway.fail_deploys = 1
    h.jm.start()
    first = await h.deployment()  # attempt 0 failed once to reach the broker, then arrived
    assert first.tdd.attempt == 0
    h.gateway.fail_deploys = 1
    await h.fail(first)
    second = await h.deployment()  # attempt 1 as well
    assert second.tdd.attempt == 1 and second.slot.task_executor_id == "te-1"
    assert rm.overview().taskmanagers == 1  # two failures, but never two in a row
    await h.finish(second)
    assert (await asyncio.wait_for(h.jm.result_future, STEP_TIMEOUT_S)).status is JobStatus.FINISHED
    await h.jm.join()
    rm.stop()


async def test_failed_cancellations_in_a_row_lose_the_task_executor() -> None:
    # it never heartbeats: unreachable once the failed calls come with half a timeout of silence
    rm = resource_manager(rpc_failure_threshold=2, **{"heartbeat.interval": "100ms", "heartbeat.timeout": "1s"})
    rm.start()
    register(rm, "te-1", 2)
    h = Harness(chain(), resource_manager=rm)
    h.jm.start()
    for d in await h.deployments(2):
        await h.report(d, ExecutionState.RUNNING)
    assert rm.overview().taskmanagers == 1
    # the deployments' successes reach the ResourceManager from their threads: not after the failures
    await eventually(lambda: not h.jm._calls.busy, "deployments sent")
    h.gateway.fail_cancels = 2
    await h.jm.cancel()
    await h.jm.join()
    assert h.jm.status is JobStatus.CANCELED
    # the cancels' outcomes reach the ResourceManager from their threads, maybe after the job ended
    await eventually(lambda: rm.overview().taskmanagers == 0, "te-1 lost after two failed cancellations")
    assert len(h.gateway.cancels) == 2
    rm.stop()
