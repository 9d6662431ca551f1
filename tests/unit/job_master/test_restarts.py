"""A JobMaster's restart strategies and failover: attempts counted, root causes kept, lost
TaskExecutors and unreadable partitions rerun, failed slot requests (on fakes: `sparkdispatch.testing.job_master`)."""

from __future__ import annotations

import asyncio
import random

import pytest

from sparkdispatch.errors import (
    EnvironmentBuildFailed,
    JobAlreadyTerminated,
    SlotRequestTimeout,
    StaleExecution,
)
from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.model.restart import ExponentialDelayRestart, FailureRateRestart, FixedDelayRestart, NoRestart
from sparkdispatch.model.job_result import Failure
from sparkdispatch.jobmaster.execution import SubtaskId
from sparkdispatch.testing.job_master import (
    STEP_TIMEOUT_S,
    Harness,
    attempts_of,
    chain,
    diamond,
)


async def test_a_vertex_failing_twice_then_succeeding_shows_three_attempts() -> None:
    h = Harness(diamond(FixedDelayRestart(attempts=3, delay_s=0.01)))
    h.jm.start()
    result = await h.run_to_end(failures={SubtaskId("left", 1): 2})
    assert result.status is JobStatus.FINISHED
    assert result.vertices["left"].attempts == 3
    assert result.vertices["extract"].attempts == 1 and result.vertices["right"].attempts == 1
    assert attempts_of(h, SubtaskId("left", 1)) == [0, 1, 2]
    assert attempts_of(h, SubtaskId("extract", 0)) == [0] and attempts_of(h, SubtaskId("extract", 1)) == [0]
    assert attempts_of(h, SubtaskId("left", 0)) == [0]  # a sibling is its own region
    assert result.vertices["left"].failure is None
    await h.jm.join()


async def test_exhausted_restarts_fail_the_job_with_the_root_cause() -> None:
    h = Harness(diamond(FixedDelayRestart(attempts=1, delay_s=0.0)))
    h.jm.start()
    e0, e1 = await h.deployments(2)
    await h.report(e1, ExecutionState.RUNNING)
    await h.fail(e0)
    again = await h.deployment()
    assert again.subtask == e0.subtask and again.tdd.attempt == 1
    root_cause = Failure(
        "KeyError", "'region'", "Traceback (most recent call last):\n  File \"pipe.py\", line 9\nKeyError: 'region'\n"
    )
    await h.fail(again, root_cause)

    result = await asyncio.wait_for(h.jm.result_future, STEP_TIMEOUT_S)
    assert result.status is JobStatus.FAILED
    assert result.failure == root_cause and "KeyError: 'region'" in result.failure.traceback
    extract = result.vertices["extract"]
    assert extract.state is ExecutionState.FAILED and extract.failure == root_cause and extract.attempts == 2
    assert result.vertices["load"].state is ExecutionState.CANCELED and result.vertices["load"].attempts == 0
    await h.jm.join()
    assert (e1.slot.hostname, e1.tdd.execution_id) in h.gateway.cancels  # the still-running task is stopped
    assert h.rm.declarations[-1] == 0 and not h.rm.allocated
    with pytest.raises(StaleExecution):
        await h.report(e1, ExecutionState.FINISHED, rows=1, result_path=e1.tdd.result_path)
    with pytest.raises(JobAlreadyTerminated):
        await h.jm.cancel()


async def test_an_environment_build_failure_fails_the_job_at_once_whatever_restarts_are_left() -> None:
    h = Harness(diamond(FixedDelayRestart(attempts=5, delay_s=0.0)))
    h.jm.start()
    e0, e1 = await h.deployments(2)
    failure = Failure.from_exception(
        EnvironmentBuildFailed("uv said: nosuchlib was not found", requirement="nosuchlib==9.9")
    )
    await h.fail(e0, failure)
    result = await asyncio.wait_for(h.jm.result_future, STEP_TIMEOUT_S)
    assert result.status is JobStatus.FAILED and result.failure == failure
    assert result.vertices["extract"].attempts == 1  # not run again: the same build would fail again
    await h.jm.join()
    assert (e1.slot.hostname, e1.tdd.execution_id) in h.gateway.cancels


async def test_failure_rate_fails_the_job_past_its_rate() -> None:
    h = Harness(chain(FailureRateRestart(max_failures_per_interval=2, failure_rate_interval_s=60.0, delay_s=0.0)))
    h.jm.start()
    a0, a1 = await h.deployments(2)
    await h.finish(a1)
    await h.fail(a0)
    await h.fail(await h.deployment())
    assert h.jm.status is JobStatus.RUNNING  # two failures within the interval: still allowed
    third = await h.deployment()
    assert third.tdd.attempt == 2
    await h.fail(third)
    result = await asyncio.wait_for(h.jm.result_future, STEP_TIMEOUT_S)
    assert result.status is JobStatus.FAILED and result.vertices["a"].attempts == 3
    assert "attempt 2" in result.failure.message  # type: ignore[union-attr]
    await h.jm.join()


async def test_exponential_delay_restarts_until_success() -> None:
    strategy = ExponentialDelayRestart(
        initial_backoff_s=0.005, max_backoff_s=0.02, backoff_multiplier=2.0, jitter_factor=0.0, attempts=3
    )
    h = Harness(chain(strategy))
    h.jm.start()
    result = await h.run_to_end(failures={SubtaskId("b", 0): 3})
    assert result.status is JobStatus.FINISHED and result.vertices["b"].attempts == 4
    assert h.jm.restart_strategy.backoff_s() == 0.02  # no jitter: the grown backoff itself
    await h.jm.join()


async def test_exponential_delay_attempts_exhausted_fail_the_job() -> None:
    h = Harness(chain(ExponentialDelayRestart(initial_backoff_s=0.001, max_backoff_s=0.002, attempts=1)))
    h.jm.start()
    result = await h.run_to_end(failures={SubtaskId("a", 0): 2})
    assert result.status is JobStatus.FAILED and result.vertices["a"].attempts == 2
    await h.jm.join()


async def test_no_restart_fails_at_the_first_failure() -> None:
    h = Harness(chain(NoRestart()))
    h.jm.start()
    result = await h.run_to_end(failures={SubtaskId("a", 1): 1})
    assert result.status is JobStatus.FAILED and result.vertices["a"].attempts == 1
    assert result.vertices["b"].state is ExecutionState.CANCELED
    await h.jm.join()


async def test_a_lost_task_executor_restarts_its_tasks_elsewhere_and_reuses_finished_upstream() -> None:
    h = Harness(diamond())
    h.jm.start()
    for d in await h.deployments(2):
        await h.finish(d)
    middle = await h.deployments(4)
    on_te1 = [d for d in middle if d.slot.task_executor_id == "te-1"]
    assert on_te1
    for d in middle:
        await h.report(d, ExecutionState.RUNNING)
    h.rm.lose("te-1")
    for d in middle:  # te-2's slots are busy until its own tasks end
        if d not in on_te1:
            await h.finish(d)
    redeployed = await h.deployments(len(on_te1))
    assert {d.subtask for d in redeployed} == {d.subtask for d in on_te1}
    assert all(d.slot.task_executor_id == "te-2" and d.tdd.attempt == 1 for d in redeployed)
    with pytest.raises(StaleExecution):  # the lost attempt's late report is refused
        await h.report(on_te1[0], ExecutionState.FINISHED, rows=1, result_path=on_te1[0].tdd.result_path)
    for d in redeployed:
        await h.finish(d)
    result = await h.run_to_end()
    assert result.status is JobStatus.FINISHED
    assert result.vertices["extract"].attempts == 1  # its partitions on shared storage were reused
    assert attempts_of(h, SubtaskId("extract", 0)) == [0]
    assert max(result.vertices[v].attempts for v in ("left", "right")) == 2
    await h.jm.join()


async def test_an_unreadable_partition_reruns_its_producer() -> None:
    h = Harness(chain())
    h.jm.start()
    a0, a1 = sorted(await h.deployments(2), key=lambda d: d.tdd.subtask_index)
    await h.finish(a0)
    await h.finish(a1)
    b = await h.deployment()
    assert b.tdd.inputs["a"] == (a0.tdd.result_path, a1.tdd.result_path)
    await h.fail(b, Failure("AnalysisException", f"[PATH_NOT_FOUND] Path does not exist: file:{a1.tdd.result_path}."))
    rerun = await h.deployment()
    assert rerun.subtask == SubtaskId("a", 1) and rerun.tdd.attempt == 1
    await h.finish(rerun)
    b_again = await h.deployment()
    assert b_again.subtask == SubtaskId("b", 0) and b_again.tdd.attempt == 1
    assert b_again.tdd.inputs["a"] == (a0.tdd.result_path, rerun.tdd.result_path)
    await h.finish(b_again)
    result = await h.run_to_end()
    assert result.status is JobStatus.FINISHED
    assert result.vertices["a"].attempts == 2 and attempts_of(h, SubtaskId("a", 0)) == [0]
    await h.jm.join()


async def test_a_failed_slot_request_fails_the_job_under_no_restart() -> None:
    h = Harness(chain(NoRestart()), slots_each=0)
    h.jm.start()
    assert h.rm.declarations == [2]
    h.jm.slot_request_failed(SlotRequestTimeout("no slot for job within 300 s"))
    result = await asyncio.wait_for(h.jm.result_future, STEP_TIMEOUT_S)
    assert result.status is JobStatus.FAILED
    assert result.failure is not None and result.failure.cls == "SlotRequestTimeout"
    assert h.rm.declarations[-1] == 0


async def test_a_failed_slot_request_is_retried_under_the_restart_strategy() -> None:
    h = Harness(chain(FixedDelayRestart(attempts=2, delay_s=0.0)), slots_each=0)
    h.jm.start()
    h.jm.slot_request_failed(SlotRequestTimeout("no slot for job within 300 s"))
    await asyncio.sleep(0.01)  # the restart's zero delay passes
    assert h.jm.status is JobStatus.RUNNING
    h.rm.free = [("te-9", 0)]  # a TaskExecutor joins
    h.rm._allocate()
    result = await h.run_to_end()
    assert result.status is JobStatus.FINISHED
    assert all(d.slot.task_executor_id == "te-9" for d in h.gateway.deployments)
    await h.jm.join()


@pytest.mark.parametrize("seed", range(12))
async def test_random_failures_and_losses_keep_every_transition_legal(seed: int) -> None:
    rng = random.Random(seed)
    h = Harness(diamond(FixedDelayRestart(attempts=1000, delay_s=0.0)), slots_each=3)
    h.jm.start()
    lost = False
    while not h.jm.result_future.done():
        d = await h.next_deployment()
        if d is None:
            break
        roll = rng.random()
        try:
            if roll < 0.25:
                await h.fail(d)
            elif roll < 0.3 and not lost:
                lost = True
                await h.report(d, ExecutionState.RUNNING)
                h.rm.lose(d.slot.task_executor_id)
            elif roll < 0.35 and d.tdd.inputs:  # it cannot read an input: that producer runs again
                path = rng.choice([path for paths in d.tdd.inputs.values() for path in paths])
                await h.fail(d, Failure("AnalysisException", f"[PATH_NOT_FOUND] Path does not exist: file:{path}."))
            else:
                await h.finish(d, rows=rng.choice([None, 5]))
        except StaleExecution:
            pass  # a restart elsewhere made this attempt old; the TaskExecutor would cancel it
    result = await h.jm.result_future
    assert result.status is JobStatus.FINISHED
    assert not h.rm.allocated and h.rm.declarations[-1] == 0
    await h.jm.join()
