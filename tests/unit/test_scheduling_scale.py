"""Scheduling cost grows with the work done, not with the size of the graph: A(300) -> B(300); a
large job is scheduled a slice per turn of the loop, its graph built in a thread as on the loop.

The JobMaster runs on small fakes (slots handed over by the test, deployments and progress
records that always succeed). Work is counted, not timed: every read of a subtask's state
(`ExecutionVertex.state`), the unit of the old per-finish scan, which re-checked every waiting
consumer against all of its producers (~13.5 million reads here, ~8 s of loop CPU).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence

import pytest

from sparkdispatch.ha import JobProgress, SubtaskProgress
from sparkdispatch.storage.results import ResultLayout
from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.model.restart import NoRestart
from sparkdispatch.model.chaining import ResultsMode
from sparkdispatch.model.job_graph import JobGraph, JobVertex
from sparkdispatch.jobmaster import JobMaster, build_execution_graph
from sparkdispatch.jobmaster.execution import ExecutionVertex, SubtaskId
from sparkdispatch.jobmaster.job_master import SCHEDULE_SLICE
from sparkdispatch.model.protocol import ExecutionStateUpdate, TaskDeploymentDescriptor
from sparkdispatch.resourcemanager import AllocatedSlot
from sparkdispatch.jobmaster.settings import JobMasterSettings

JOB_ID = "5ca1ab1e" * 4
SESSION = "session-1"
PARALLELISM = 300


class SlotsByHand:
    """A ResourceManager that only listens: the test hands the slots over itself."""

    def __init__(self) -> None:
        self.declared: list[int] = []

    def declare_requirements(
        self,
        job_id: str,
        slots: int,
        listener: object,
        *,
        pool: str = "default",
        pinned: Mapping[str, int] | None = None,
    ) -> None:
        self.declared.append(slots)

    def release_slot(self, job_id: str, allocation_id: str) -> bool:
        return True

    def record_rpc_failure(self, task_executor_id: str) -> None:
        pass

    def record_rpc_success(self, task_executor_id: str) -> None:
        pass

    def task_executor_hostname(self, task_executor_id: str) -> str | None:
        return f"celery@{task_executor_id}"


class AcceptingGateway:
    def deploy(self, slot: AllocatedSlot, tdd: TaskDeploymentDescriptor, session_id: str) -> None:
        pass

    def cancel(self, task_executor_hostname: str, execution_id: str) -> bool:
        return True

    def release_results(self, task_executor_hostname: str, job_id: str, vertex_id: str | None) -> bool:
        return True

    def close(self) -> None:
        pass


class RecordingProgressStore:
    def __init__(self) -> None:
        self.records = 0

    async def record_subtask(
        self, session_id: str, job_id: str, vertex_id: str, subtask_index: int, progress: SubtaskProgress
    ) -> None:
        self.records += 1

    async def record_cancel(self, session_id: str, job_id: str) -> None:
        pass


class StateReads:
    """Counts reads of `ExecutionVertex.state`; past `limit` each read fails, so a quadratic or cubic
    scan ends the test at once instead of running for minutes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0

    def read(self, ev: ExecutionVertex) -> ExecutionState:
        self.count += 1
        if self.count > self.limit:
            raise AssertionError(f"more than {self.limit} subtask state reads")
        return ev.current.state


def slots(count: int) -> Sequence[AllocatedSlot]:
    return [
        AllocatedSlot(uuid.uuid4().hex, "te-1", index, "sparkdispatch.te.te-1", "celery@te-1", "registration-1")
        for index in range(count)
    ]


async def test_a_finished_subtask_costs_work_in_proportion_to_its_consumers(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = JobGraph(
        name="a-to-b",
        job_id=JOB_ID,
        restart_strategy=NoRestart(),
        vertices=(JobVertex("a", "m:a", PARALLELISM), JobVertex("b", "m:b", PARALLELISM, ("a",))),
    )
    subtasks = 2 * PARALLELISM
    reads = StateReads(limit=20 * subtasks)
    monkeypatch.setattr(ExecutionVertex, "state", property(reads.read))
    store = RecordingProgressStore()
    job_master = JobMaster(
        graph,
        session_id=SESSION,
        resource_manager=SlotsByHand(),  # type: ignore[arg-type]
        task_executor_gateway=AcceptingGateway(),
        progress_store=store,  # type: ignore[arg-type]
        settings=JobMasterSettings(results_dir="/results/", restart_strategy=NoRestart()),
    )
    execution_graph = job_master.execution_graph

    job_master.start()
    job_master.slots_allocated(slots(PARALLELISM))
    await job_master.join()
    producers = list(execution_graph.subtasks("a"))
    assert all(ev.current.state is ExecutionState.DEPLOYING for ev in producers)
    for ev in producers:
        job_master.update_execution_state(
            ExecutionStateUpdate(
                job_id=JOB_ID,
                job_master_id=SESSION,
                execution_id=ev.current.execution_id,
                state=ExecutionState.FINISHED,
                task_executor_id="te-1",
                rows=1,
                result_path=ResultLayout("/results/").attempt_path(
                    JOB_ID, "a", ev.subtask_index, ev.current.execution_id
                ),
            )
        )
    await job_master.join()

    assert store.records == PARALLELISM
    assert all(ev.current.state is ExecutionState.SCHEDULED for ev in execution_graph.subtasks("b"))
    assert job_master.status is JobStatus.RUNNING
    # a few reads per subtask: each finish checks itself, the last one offers the consumers once
    assert reads.count <= 10 * subtasks, reads.count


def job_master_of(graph: JobGraph, resource_manager: SlotsByHand, **kwargs: object) -> JobMaster:
    return JobMaster(
        graph,
        session_id=SESSION,
        resource_manager=resource_manager,  # type: ignore[arg-type]
        task_executor_gateway=AcceptingGateway(),
        progress_store=RecordingProgressStore(),  # type: ignore[arg-type]
        settings=JobMasterSettings(results_dir="/results/", restart_strategy=NoRestart()),
        **kwargs,  # type: ignore[arg-type]
    )


async def test_many_schedulable_subtasks_are_scheduled_a_slice_per_turn_of_the_loop() -> None:
    sources = 2 * SCHEDULE_SLICE + SCHEDULE_SLICE // 2
    graph = JobGraph(
        name="wide",
        job_id=JOB_ID,
        results=ResultsMode.DURABLE,  # a's subtasks scheduled as tasks, not chained into b
        restart_strategy=NoRestart(),
        vertices=(JobVertex("a", "m:a", sources), JobVertex("b", "m:b", 1, ("a",))),
    )
    resource_manager = SlotsByHand()
    job_master = job_master_of(graph, resource_manager)

    def scheduled() -> int:
        return sum(1 for ev in job_master.execution_graph.subtasks("a") if ev.current.state is ExecutionState.SCHEDULED)

    job_master.start()
    assert scheduled() == SCHEDULE_SLICE and resource_manager.declared == [SCHEDULE_SLICE]
    await asyncio.sleep(0)  # the loop turns: one more slice, and whatever else waited for it
    assert scheduled() == 2 * SCHEDULE_SLICE
    await asyncio.sleep(0)
    assert scheduled() == sources and resource_manager.declared == [SCHEDULE_SLICE, 2 * SCHEDULE_SLICE, sources]
    await asyncio.sleep(0)
    assert resource_manager.declared[-1] == sources  # no slice after the last
    job_master.suspend()


async def test_a_graph_built_in_a_thread_runs_as_one_built_on_the_loop() -> None:
    graph = JobGraph(
        name="chain",
        job_id=JOB_ID,
        restart_strategy=NoRestart(),
        vertices=(JobVertex("a", "m:a", 3), JobVertex("b", "m:b", 2, ("a",))),
    )
    progress = JobProgress(
        JOB_ID,
        finished={
            "a": {0: SubtaskProgress("/r/a0", 1), 1: SubtaskProgress("/r/a1", 1)},
            "gone": {0: SubtaskProgress(None, None)},
        },
    )
    built = await asyncio.to_thread(build_execution_graph, graph, progress)
    for job_master in (
        job_master_of(graph, SlotsByHand(), recovered_progress=progress),
        job_master_of(graph, SlotsByHand(), recovered_progress=progress, execution_graph=built),
    ):
        job_master.start()
        execution_graph = job_master.execution_graph
        assert execution_graph.restored == (2, (SubtaskId("gone", 0),))
        assert [ev.current.state for ev in execution_graph.subtasks()] == [
            ExecutionState.FINISHED,
            ExecutionState.FINISHED,
            ExecutionState.SCHEDULED,
            ExecutionState.CREATED,
            ExecutionState.CREATED,
        ]
        job_master.suspend()
    assert job_master.execution_graph is built
