"""A JobMaster's lifecycle: reports fenced and refused, cancel, suspend, lost leadership, bad calls,
snapshots off the loop, and an ended JobMaster freed (on fakes: `sparkdispatch.testing.job_master`)."""

from __future__ import annotations

import gc
import threading
import uuid
import weakref
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from sparkdispatch.errors import (
    FencingTokenMismatch,
    JobAlreadyTerminated,
    LeadershipLost,
    StaleExecution,
    UnknownJob,
)
from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.model.restart import NoRestart
from sparkdispatch.jobmaster.execution import SubtaskId
from sparkdispatch.jobmaster.execution_graph import ExecutionGraph
from sparkdispatch.jobmaster.long_lived import LONG_LIVED_GRAPHS
from sparkdispatch.model.protocol import ExecutionStateUpdate
from sparkdispatch.rest.views import flink_job_details, job_details
from sparkdispatch.model.snapshot import JobSnapshot
from sparkdispatch.testing.waiting import eventually
from sparkdispatch.testing.job_master import (
    JOB_ID,
    SESSION,
    Harness,
    chain,
    diamond,
    register,
    resource_manager,
)


async def test_stale_and_fenced_reports_are_refused_and_change_nothing() -> None:
    h = Harness(chain())
    h.jm.start()
    a0, a1 = await h.deployments(2)
    await h.report(a0, ExecutionState.RUNNING)
    with pytest.raises(FencingTokenMismatch):
        h.jm.update_execution_state(
            ExecutionStateUpdate(
                job_id=JOB_ID,
                job_master_id="00000000-0000-0000-0000-000000000000",
                execution_id=a0.tdd.execution_id,
                state=ExecutionState.FAILED,
            )
        )
    with pytest.raises(UnknownJob):
        h.jm.update_execution_state(
            ExecutionStateUpdate(
                job_id="f" * 32, job_master_id=SESSION, execution_id=a0.tdd.execution_id, state=ExecutionState.FAILED
            )
        )
    with pytest.raises(StaleExecution) as refused:
        h.jm.update_execution_state(
            ExecutionStateUpdate(
                job_id=JOB_ID, job_master_id=SESSION, execution_id=uuid.uuid4().hex, state=ExecutionState.RUNNING
            )
        )
    assert refused.value.http_status == 409
    assert h.jm.execution_graph.by_execution_id(a0.tdd.execution_id).state is ExecutionState.RUNNING  # type: ignore[union-attr]
    await h.report(a0, ExecutionState.RUNNING)  # a repeated report is harmless
    await h.report(a0, ExecutionState.INITIALIZING)  # so is a late one
    await h.fail(a1)
    retry = await h.deployment()
    with pytest.raises(StaleExecution):  # the failed attempt is gone
        await h.report(a1, ExecutionState.FINISHED, rows=3, result_path=a1.tdd.result_path)
    await h.finish(a0)
    await h.finish(retry)
    result = await h.run_to_end()
    assert result.status is JobStatus.FINISHED and result.vertices["a"].attempts == 2
    await h.jm.join()


async def test_lost_leadership_while_recording_stops_progress() -> None:
    h = Harness(chain())
    h.jm.start()
    a0, a1 = await h.deployments(2)
    h.store.error = LeadershipLost("JobGraph store")
    await h.finish(a0)
    await h.finish(a1)
    assert h.jm.execution_graph.subtask(SubtaskId("b", 0)).state is ExecutionState.CREATED
    h.jm.suspend()
    assert h.jm.status is JobStatus.SUSPENDED and h.jm.result_future.cancelled()
    await h.jm.join()


async def test_cancel_stops_running_tasks_and_releases_slots() -> None:
    h = Harness(diamond())
    h.jm.start()
    e0, e1 = await h.deployments(2)
    await h.report(e0, ExecutionState.RUNNING)
    await h.jm.cancel()
    assert h.jm.status is JobStatus.CANCELED
    assert sorted(h.gateway.cancels) == sorted((d.slot.hostname, d.tdd.execution_id) for d in (e0, e1))
    assert not h.rm.allocated and h.rm.declarations[-1] == 0
    result = h.jm.result_future.result()
    assert result.status is JobStatus.CANCELED and result.failure is None
    assert result.vertices["extract"].state is ExecutionState.CANCELED
    with pytest.raises(StaleExecution):
        await h.report(e0, ExecutionState.FINISHED, rows=1, result_path=e0.tdd.result_path)
    await h.jm.cancel()  # idempotent
    assert flink_job_details(h.jm.overview()).to_dict()["state"] == "CANCELED"
    await h.jm.join()


async def test_cancel_before_start() -> None:
    h = Harness(chain())
    await h.jm.cancel()
    assert h.jm.status is JobStatus.CANCELED and h.jm.result_future.result().status is JobStatus.CANCELED
    assert not h.gateway.deployments


async def test_suspend_stops_without_a_result_and_without_touching_progress() -> None:
    h = Harness(chain())
    h.jm.start()
    a0, a1 = await h.deployments(2)
    await h.finish(a0)
    await h.report(a1, ExecutionState.RUNNING)
    h.jm.suspend()
    assert h.jm.status is JobStatus.SUSPENDED
    assert h.jm.result_future.cancelled()
    assert h.store.records == [(SESSION, JOB_ID, "a", a0.tdd.subtask_index, a0.tdd.result_path, 10)]
    with pytest.raises(StaleExecution):
        await h.report(a1, ExecutionState.FINISHED, rows=1, result_path=a1.tdd.result_path)
    with pytest.raises(JobAlreadyTerminated):
        await h.jm.cancel()
    h.jm.suspend()  # idempotent
    await h.jm.join()
    assert (a1.slot.hostname, a1.tdd.execution_id) in h.gateway.cancels
    assert job_details(h.jm.snapshot()).to_dict()["status"] == "SUSPENDED"


async def test_bad_lifecycle_calls_are_refused() -> None:
    h = Harness(chain())
    h.jm.start()
    with pytest.raises(Exception, match="started already"):
        h.jm.start()
    await h.jm.cancel()
    await h.jm.join()


# -- large jobs: snapshots built off the loop, graphs out of the collector's way -------------------


def timeless(snapshot: JobSnapshot) -> JobSnapshot:
    """`snapshot` but for the running time, which counts up to when it was taken."""
    return replace(snapshot, overview=replace(snapshot.overview, duration_ms=0))


async def test_a_snapshot_off_the_loop_shows_the_job_as_of_the_call() -> None:
    h = Harness(diamond())
    h.jm.start()
    first, second = await h.deployments(2)
    await h.report(first, ExecutionState.RUNNING)
    expected, pending = h.jm.snapshot(), h.jm.snapshot_off_loop()
    await h.finish(first)  # changes after the call do not show in its snapshot
    await h.fail(second)
    assert timeless(await pending) == timeless(expected)
    await h.jm.cancel()
    await h.jm.join()
    assert await h.jm.snapshot_off_loop() == h.jm.snapshot() != expected


@pytest.mark.parametrize("end", ["finish", "cancel"])
async def test_an_ended_jobs_result_and_snapshot_are_built_off_the_loop(
    monkeypatch: pytest.MonkeyPatch, end: str
) -> None:
    """An ended job's graph no longer changes: its JobResult and its snapshot, which walk all its
    subtasks (0.3 s and more at 100,000), are built in threads, the capture too."""
    built_in: dict[str, list[int]] = {"job_result": [], "capture": []}

    def recorded(name: str) -> Any:
        method = getattr(ExecutionGraph, name)

        def call(graph: ExecutionGraph, *args: Any, **kwargs: Any) -> Any:
            built_in[name].append(threading.get_ident())
            return method(graph, *args, **kwargs)

        return call

    for name in built_in:
        monkeypatch.setattr(ExecutionGraph, name, recorded(name))
    h = Harness(diamond())
    h.jm.start()
    if end == "finish":
        result = await h.run_to_end()
    else:
        await h.deployments(2)
        await h.jm.cancel()
        result = h.jm.result_future.result()  # published before cancel returns
    assert result.status is (JobStatus.FINISHED if end == "finish" else JobStatus.CANCELED)
    built_in["capture"].clear()  # the snapshots taken while the job ran
    snapshot = await h.jm.snapshot_off_loop()
    on_loop = threading.get_ident()
    assert built_in["job_result"] and on_loop not in built_in["job_result"]
    assert built_in["capture"] and on_loop not in built_in["capture"]
    assert snapshot == h.jm.snapshot()
    await h.jm.join()


@pytest.fixture
def every_graph_frozen(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """LONG_LIVED_GRAPHS freezes even the tests' small graphs; no automatic collection meanwhile."""
    monkeypatch.setattr(LONG_LIVED_GRAPHS, "min_subtasks", 1)
    # garbage of earlier tests in this process (large graphs in cycles not collected yet) must
    # not count here: this test is about its own JobMaster, freed without the collector
    gc.collect()
    collecting = gc.isenabled()
    gc.disable()
    yield
    gc.unfreeze()  # a failed test must not leave the rest of the session frozen
    if collecting:
        gc.enable()


@pytest.mark.parametrize("end", ["finish", "fail", "cancel", "suspend"])
async def test_a_job_master_is_freed_when_dropped_and_its_graph_unfrozen(every_graph_frozen: None, end: str) -> None:
    """No reference cycle keeps an ended JobMaster: dropping it frees its graph and unfreezes the heap."""
    rm = resource_manager(rpc_failure_threshold=2)
    rm.start()
    register(rm, "te-1", 2)
    alive_before = LONG_LIVED_GRAPHS.alive
    h = Harness(chain(restart=NoRestart()), resource_manager=rm)
    assert LONG_LIVED_GRAPHS.alive == alive_before + 1 and gc.get_freeze_count() > 0
    h.jm.start()
    if end == "finish":
        assert (await h.run_to_end()).status is JobStatus.FINISHED
    else:
        first, second = await h.deployments(2)
        await h.finish(first)
        await h.report(second, ExecutionState.RUNNING)
        if end == "fail":
            await h.fail(second)
        elif end == "cancel":
            await h.jm.cancel()
        else:
            h.jm.suspend()
    await h.jm.join()
    assert h.jm.status.is_terminal
    # the ended JobMaster released its graph: it counts as freed, whoever may still refer to it
    assert LONG_LIVED_GRAPHS.alive == alive_before
    if alive_before == 0:
        assert gc.get_freeze_count() == 0
    job_master = weakref.ref(h.jm)
    graph = weakref.ref(h.jm.execution_graph)
    del h
    rm.stop()
    assert job_master() is None
    # The threads that built its JobResult drop their work items (the graph among their arguments)
    # a moment after the loop took the result; the collector stays off, so only reference counts free it.
    await eventually(lambda: graph() is None, "the graph to be freed", timeout=5.0, interval=0.01)
