"""The JobMaster against small fakes of the ResourceManager, the TaskExecutorGateway and the ProgressStore.

The fake ResourceManager hands out slots as soon as the job declares it needs them; the fake
gateway queues each deployment, and the test plays the TaskExecutor by reporting states.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import random
import threading
import uuid
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import pytest

from sparkdispatch.config import Configuration, restart_strategy_from_config
from sparkdispatch.errors import (
    FencingTokenMismatch,
    JobAlreadyTerminated,
    LeadershipLost,
    ServiceUnavailable,
    SlotRequestTimeout,
    StaleExecution,
    UnknownJob,
)
from sparkdispatch.jobgraph import (
    ExecutionState,
    ExponentialDelayRestart,
    FailureRateRestart,
    Failure,
    FixedDelayRestart,
    JobGraph,
    JobResult,
    JobStatus,
    JobVertex,
    NoRestart,
    RestartStrategy,
)
from sparkdispatch.jobmaster import JobMaster
from sparkdispatch.jobmaster.execution_graph import SubtaskId
from sparkdispatch.jobmaster.long_lived import LONG_LIVED_GRAPHS
from sparkdispatch.protocol import ExecutionStateUpdate, SlotReport, TaskDeploymentDescriptor, TaskExecutorRegistration
from sparkdispatch.resourcemanager import ResourceManager
from sparkdispatch.rest.views import flink_job_details, job_details
from sparkdispatch.settings import JobMasterSettings, ResourceManagerSettings
from sparkdispatch.snapshot import JobSnapshot
from sparkdispatch.testing.waiting import eventually

JOB_ID = "0123456789abcdef" * 2
SESSION = "11111111-2222-3333-4444-555555555555"
RESULTS = "/shared/results"
DEFAULT_RESTART = restart_strategy_from_config(Configuration.from_mapping({}))  # for graphs that name none
ARTIFACT = "f" * 64
STEP_TIMEOUT_S = 10  # a hang fails the test instead of waiting for pytest's timeout
THREE_RESTARTS = FixedDelayRestart(attempts=3, delay_s=0.0)


@dataclass(frozen=True)
class Slot:
    allocation_id: str
    task_executor_id: str
    slot_index: int
    queue: str
    hostname: str
    registration_id: str = "registration-1"


class FakeResourceManager:
    """Slots of a few TaskExecutors, given to the job whenever it declares it needs more in all."""

    def __init__(self, task_executors: tuple[str, ...] = ("te-1", "te-2"), slots_each: int = 2) -> None:
        self.free = [(te, i) for i in range(slots_each) for te in task_executors]
        self.allocated: dict[str, Slot] = {}
        self.declarations: list[int] = []
        self.released: list[str] = []
        self.dead: set[str] = set()
        self.listener: JobMaster | None = None
        self.required = 0
        self.rpc_outcomes: list[tuple[str, bool]] = []  # (TaskExecutor id, the call went through)

    def declare_requirements(self, job_id: str, slots: int, listener: JobMaster) -> None:
        assert job_id == JOB_ID
        self.declarations.append(slots)
        self.listener = listener
        self.required = slots
        asyncio.get_running_loop().call_soon(self._allocate)

    def release_slot(self, job_id: str, allocation_id: str) -> None:
        assert job_id == JOB_ID
        slot = self.allocated.pop(allocation_id, None)
        assert slot is not None, f"slot {allocation_id} released twice or never allocated"
        self.released.append(allocation_id)
        if slot.task_executor_id not in self.dead:
            self.free.append((slot.task_executor_id, slot.slot_index))
        asyncio.get_running_loop().call_soon(self._allocate)

    def record_rpc_failure(self, task_executor_id: str) -> None:
        self.rpc_outcomes.append((task_executor_id, False))

    def record_rpc_success(self, task_executor_id: str) -> None:
        self.rpc_outcomes.append((task_executor_id, True))

    def task_executor_hostname(self, task_executor_id: str) -> str | None:
        return None if task_executor_id in self.dead else f"celery@{task_executor_id}"

    def _allocate(self) -> None:
        new = []
        while self.required > len(self.allocated) + len(new) and self.free:
            te, index = self.free.pop(0)
            new.append(Slot(uuid.uuid4().hex, te, index, f"sparkdispatch.te.{te}", f"celery@{te}"))
        for slot in new:
            self.allocated[slot.allocation_id] = slot
        if new and self.listener is not None:
            self.listener.slots_allocated(new)

    def lose(self, task_executor_id: str) -> None:
        """The TaskExecutor stops heartbeating: its slots are gone."""
        self.dead.add(task_executor_id)
        self.free = [f for f in self.free if f[0] != task_executor_id]
        gone = [a for a, s in self.allocated.items() if s.task_executor_id == task_executor_id]
        for allocation_id in gone:
            del self.allocated[allocation_id]
        assert self.listener is not None
        self.listener.task_executor_lost(task_executor_id, gone, "heartbeat timeout")


@dataclass
class Deployment:
    slot: Slot
    tdd: TaskDeploymentDescriptor
    session_id: str

    @property
    def subtask(self) -> SubtaskId:
        return SubtaskId(self.tdd.vertex_id, self.tdd.subtask_index)


class FakeGateway:
    """Records deployments (handed to the test through a queue) and cancellations.

    `fail_deploys` deployments fail as the broker fails them (`ServiceUnavailable`), or all of
    them while `broker_down`; `deploy_errors` fail for another reason (raised as they are).
    """

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[Deployment] = asyncio.Queue()
        self.deployments: list[Deployment] = []
        self.cancels: list[tuple[str, str]] = []
        self.fail_deploys = 0
        self.broker_down = False
        self.deploy_errors: list[Exception] = []
        self.failed_tries: list[str] = []  # execution ids of the tries the broker refused
        self.fail_cancels = 0
        self._lock = threading.Lock()

    def deploy(self, slot: Slot, tdd: TaskDeploymentDescriptor, session_id: str) -> None:
        assert threading.current_thread() is not threading.main_thread(), "a blocking call on the loop"
        with self._lock:
            if self.deploy_errors:
                raise self.deploy_errors.pop(0)
            if self.fail_deploys or self.broker_down:
                self.fail_deploys = max(0, self.fail_deploys - 1)
                self.failed_tries.append(tdd.execution_id)
                raise ServiceUnavailable("cannot send the execution: Error 111 connecting to 127.0.0.1:6379")
        deployment = Deployment(slot, tdd, session_id)
        self._loop.call_soon_threadsafe(self._arrived, deployment)

    def _arrived(self, deployment: Deployment) -> None:
        self.deployments.append(deployment)
        self.queue.put_nowait(deployment)

    def cancel(self, task_executor_hostname: str, execution_id: str) -> bool:
        with self._lock:
            self.cancels.append((task_executor_hostname, execution_id))
            if self.fail_cancels:
                self.fail_cancels -= 1
                raise ServiceUnavailable(f"TaskExecutor {task_executor_hostname} did not answer")
        return True


@dataclass
class FakeProgressStore:
    records: list[tuple[str, str, str, int, str | None, int | None]] = field(default_factory=list)
    gate: asyncio.Event | None = None
    error: Exception | None = None

    async def record_subtask(self, session_id: str, job_id: str, vertex_id: str, subtask_index: int,
                             result_path: str | None, rows: int | None) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        self.records.append((session_id, job_id, vertex_id, subtask_index, result_path, rows))

    def finished(self) -> set[SubtaskId]:
        return {SubtaskId(r[2], r[3]) for r in self.records}


@dataclass(frozen=True)
class Entry:
    result_path: str | None
    rows: int | None


@dataclass
class Progress:
    finished: dict[str, dict[int, Entry]]


def graph_of(*vertices: JobVertex, restart: RestartStrategy | None = None) -> JobGraph:
    return JobGraph(name="test-job", job_id=JOB_ID, vertices=vertices, restart_strategy=restart,
                    artifacts=(ARTIFACT,), config={"spark.sql.shuffle.partitions": "4"})


def diamond(restart: RestartStrategy | None = THREE_RESTARTS) -> JobGraph:
    """extract (2) fans out to left (2) and right (2), which fan in to load (2)."""
    return graph_of(
        JobVertex("extract", "pipe:extract", 2, params={"n": 10}),
        JobVertex("left", "pipe:left", 2, ("extract",)),
        JobVertex("right", "pipe:right", 2, ("extract",)),
        JobVertex("load", "pipe:load", 2, ("left", "right")),
        restart=restart,
    )


def chain(restart: RestartStrategy | None = THREE_RESTARTS) -> JobGraph:
    return graph_of(JobVertex("a", "pipe:a", 2), JobVertex("b", "pipe:b", 1, ("a",)), restart=restart)


class Harness:
    """A JobMaster on the fakes; with `resource_manager`, on that real one instead (`rm` is then unused)."""

    def __init__(self, graph: JobGraph, *, recovered: Progress | None = None, slots_each: int = 2,
                 resource_manager: ResourceManager | None = None, missing_execution_threshold: int = 3,
                 deployment_grace: float = 25.0) -> None:
        self.rm = FakeResourceManager(slots_each=slots_each)
        self.gateway = FakeGateway()
        self.store = FakeProgressStore()
        settings = JobMasterSettings(results_dir=RESULTS + "/", restart_strategy=DEFAULT_RESTART,
                                     missing_execution_threshold=missing_execution_threshold,
                                     deployment_grace=deployment_grace)
        self.jm = JobMaster(graph, session_id=SESSION, resource_manager=resource_manager or self.rm,
                            task_executor_gateway=self.gateway, progress_store=self.store, settings=settings,
                            recovered_progress=recovered)

    async def deployment(self) -> Deployment:
        async with asyncio.timeout(STEP_TIMEOUT_S):
            return await self.gateway.queue.get()

    async def deployments(self, count: int) -> list[Deployment]:
        return [await self.deployment() for _ in range(count)]

    def update(self, d: Deployment, state: ExecutionState, **kwargs: object) -> ExecutionStateUpdate:
        return ExecutionStateUpdate(job_id=d.tdd.job_id, job_master_id=d.tdd.job_master_id,
                                    execution_id=d.tdd.execution_id, state=state,
                                    task_executor_id=d.slot.task_executor_id, **kwargs)  # type: ignore[arg-type]

    async def report(self, d: Deployment, state: ExecutionState, **kwargs: object) -> None:
        """Report as the TaskExecutor does; after FINISHED, wait for the record written after the answer."""
        self.jm.update_execution_state(self.update(d, state, **kwargs))
        if state is ExecutionState.FINISHED:
            await self.jm.join()

    async def finish(self, d: Deployment, rows: int | None = 10) -> None:
        await self.report(d, ExecutionState.RUNNING)
        await self.report(d, ExecutionState.FINISHED, rows=rows, result_path=d.tdd.result_path if rows else None)

    async def fail(self, d: Deployment, failure: Failure | None = None) -> None:
        await self.report(d, ExecutionState.RUNNING)
        await self.report(d, ExecutionState.FAILED, failure=failure or boom(d))

    async def run_to_end(self, failures: dict[SubtaskId, int] | None = None) -> JobResult:
        """Play the TaskExecutor: finish every deployment, failing a subtask as often as `failures` says."""
        failures = dict(failures or {})
        while not self.jm.result_future.done():
            get = asyncio.ensure_future(self.gateway.queue.get())
            done, _ = await asyncio.wait({get, self.jm.result_future}, timeout=STEP_TIMEOUT_S,
                                         return_when=asyncio.FIRST_COMPLETED)
            assert done, "the job made no progress"
            if get not in done:
                get.cancel()
                break
            d = get.result()
            self.check_batch_order(d)
            if failures.get(d.subtask, 0) > 0:
                failures[d.subtask] -= 1
                await self.fail(d)
            else:
                await self.finish(d)
        return await self.jm.result_future

    def check_batch_order(self, d: Deployment) -> None:
        """Every input of a deployed subtask finished, and was recorded, before it was deployed."""
        graph = self.jm.execution_graph
        for vertex_id in graph.inputs_of(d.tdd.vertex_id):
            for producer in graph.subtasks(vertex_id):
                assert producer.id in self.store.finished() or producer.recovered, \
                    f"{d.subtask} deployed before {producer.id} finished"


def boom(d: Deployment) -> Failure:
    return Failure("ValueError", f"bad row in {d.subtask} attempt {d.tdd.attempt}",
                   f'Traceback (most recent call last):\n  File "pipe.py", line 3, in {d.tdd.vertex_id}\n'
                   f"ValueError: bad row in {d.subtask} attempt {d.tdd.attempt}\n")


@pytest.fixture(autouse=True)
def no_background_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Illegal state transitions or crashes in the JobMaster's background work fail the test."""
    caplog.set_level(logging.INFO, logger="sparkdispatch.jobmaster")
    yield
    crashes = [r for r in caplog.records if "background call failed" in r.getMessage()
               or "ResourceManager call" in r.getMessage()]
    assert not crashes, crashes[0].exc_info


def attempts_of(h: Harness, subtask: SubtaskId) -> list[int]:
    return [d.tdd.attempt for d in h.gateway.deployments if d.subtask == subtask]


# ---------------------------------------------------------------------------------------------


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
        d.tdd.result_path for d in sorted(h.gateway.deployments, key=lambda d: d.tdd.subtask_index)
        if d.tdd.vertex_id == "left")
    assert len(h.gateway.deployments) == 8 and len(h.store.records) == 8
    assert h.rm.declarations[-1] == 0 and not h.rm.allocated and len(h.rm.released) == 8
    details = job_details(h.jm.snapshot())
    assert details["status"] == "FINISHED" and details["end_time"] == result.end_time
    overview = flink_job_details(h.jm.overview())
    assert overview["state"] == "FINISHED" and overview["tasks"]["finished"] == 8 and overview["tasks"]["total"] == 8
    await h.jm.join()


async def test_details_show_subtask_states_attempts_and_taskmanagers() -> None:
    h = Harness(chain())
    h.jm.start()
    a0, a1 = await h.deployments(2)
    await h.report(a0, ExecutionState.RUNNING)
    details = job_details(h.jm.snapshot())
    vertex_a = details["vertices"][0]
    assert details["status"] == "RUNNING" and details["end_time"] is None
    assert vertex_a["id"] == "a" and vertex_a["state"] == "RUNNING" and vertex_a["parallelism"] == 2
    by_index = {s["index"]: s for s in vertex_a["subtasks"]}
    assert by_index[a0.tdd.subtask_index] == {"index": a0.tdd.subtask_index, "state": "RUNNING", "attempt": 0,
                                              "taskmanager": a0.slot.task_executor_id}
    assert by_index[a1.tdd.subtask_index]["state"] == "DEPLOYING"
    assert details["vertices"][1]["subtasks"][0]["state"] == "CREATED"
    tasks = flink_job_details(h.jm.overview())["tasks"]
    assert (tasks["running"], tasks["deploying"], tasks["created"], tasks["total"]) == (1, 1, 1, 3)
    assert flink_job_details(h.jm.overview())["end-time"] == -1
    await h.finish(a0)
    await h.finish(a1)
    await h.run_to_end()
    await h.jm.join()


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
    root_cause = Failure("KeyError", "'region'", 'Traceback (most recent call last):\n  File "pipe.py", line 9\n'
                                                "KeyError: 'region'\n")
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
    strategy = ExponentialDelayRestart(initial_backoff_s=0.005, max_backoff_s=0.02, backoff_multiplier=2.0,
                                       jitter_factor=0.0, attempts=3)
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


async def test_stale_and_fenced_reports_are_refused_and_change_nothing() -> None:
    h = Harness(chain())
    h.jm.start()
    a0, a1 = await h.deployments(2)
    await h.report(a0, ExecutionState.RUNNING)
    with pytest.raises(FencingTokenMismatch):
        h.jm.update_execution_state(ExecutionStateUpdate(
            job_id=JOB_ID, job_master_id="00000000-0000-0000-0000-000000000000",
            execution_id=a0.tdd.execution_id, state=ExecutionState.FAILED))
    with pytest.raises(UnknownJob):
        h.jm.update_execution_state(ExecutionStateUpdate(
            job_id="f" * 32, job_master_id=SESSION, execution_id=a0.tdd.execution_id, state=ExecutionState.FAILED))
    with pytest.raises(StaleExecution) as refused:
        h.jm.update_execution_state(ExecutionStateUpdate(
            job_id=JOB_ID, job_master_id=SESSION, execution_id=uuid.uuid4().hex, state=ExecutionState.RUNNING))
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
    assert flink_job_details(h.jm.overview())["state"] == "CANCELED"
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
    assert job_details(h.jm.snapshot())["status"] == "SUSPENDED"


async def test_recovered_progress_skips_finished_subtasks() -> None:
    progress = Progress({"extract": {0: Entry("/old/extract/0-x", 7), 1: Entry("/old/extract/1-y", 8)},
                         "left": {1: Entry("/old/left/1-z", 3)}})
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
    progress = Progress({"a": {0: Entry(None, None), 1: Entry("/p/a1", 2)}, "b": {0: Entry("/p/b0", 2)}})
    h = Harness(chain(), recovered=progress)
    h.jm.start()
    result = await asyncio.wait_for(h.jm.result_future, STEP_TIMEOUT_S)
    assert result.status is JobStatus.FINISHED and result.vertices["b"].rows == 2
    assert not h.gateway.deployments


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
    assert h.gateway.deployments == [] and h.jm.status is JobStatus.RUNNING
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


def resource_manager(*, rpc_failure_threshold: int, **keys: str) -> ResourceManager:
    config = Configuration.from_mapping({"heartbeat.rpc-failure-threshold": rpc_failure_threshold, **keys})
    return ResourceManager(ResourceManagerSettings.from_config(config), SESSION)


def register(rm: ResourceManager, task_executor_id: str, slots: int) -> None:
    rm.register_task_executor(SESSION, TaskExecutorRegistration(
        task_executor_id=task_executor_id, hostname=f"celery@{task_executor_id}",
        queue=f"sparkdispatch.te.{task_executor_id}", slots=slots, slot_report=SlotReport.free(slots),
        spark_master="local[2]"))


async def test_failed_deployments_lose_a_task_executor_only_once_its_heartbeats_stop_too() -> None:
    rm = resource_manager(rpc_failure_threshold=2, **{"heartbeat.interval": "100ms", "heartbeat.timeout": "10s"})
    rm.start()
    register(rm, "te-1", 1)
    h = Harness(graph_of(JobVertex("a", "pipe:a", 1), restart=FixedDelayRestart(attempts=5, delay_s=0.0)),
                resource_manager=rm)
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
    h = Harness(graph_of(JobVertex("a", "pipe:a", 1), restart=FixedDelayRestart(attempts=5, delay_s=0.0)),
                resource_manager=rm)
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
    await eventually(lambda: not h.jm._background, "deployments sent")
    h.gateway.fail_cancels = 2
    await h.jm.cancel()
    await h.jm.join()
    assert h.jm.status is JobStatus.CANCELED
    # the cancels' outcomes reach the ResourceManager from their threads, maybe after the job ended
    await eventually(lambda: rm.overview().taskmanagers == 0, "te-1 lost after two failed cancellations")
    assert len(h.gateway.cancels) == 2
    rm.stop()


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


@dataclass(frozen=True)
class Report:
    job_id: str
    execution_id: str
    state: ExecutionState


async def test_a_heartbeat_listing_a_stale_execution_gets_it_cancelled() -> None:
    h = Harness(chain())
    h.jm.start()
    a0, a1 = await h.deployments(2)
    await h.fail(a0)
    retry = await h.deployment()
    await h.jm.join()
    cancels_before = list(h.gateway.cancels)
    h.jm.task_executor_heartbeat(a0.slot.task_executor_id, [
        Report(JOB_ID, a0.tdd.execution_id, ExecutionState.RUNNING),  # the failed attempt still runs there
        Report(JOB_ID, retry.tdd.execution_id, ExecutionState.RUNNING),
        Report(JOB_ID, a1.tdd.execution_id, ExecutionState.DEPLOYING),
        Report(JOB_ID, uuid.uuid4().hex, ExecutionState.FINISHED),
    ])
    await h.jm.join()
    assert h.gateway.cancels[len(cancels_before):] == [(a0.slot.hostname, a0.tdd.execution_id)]
    await h.jm.cancel()
    await h.jm.join()


async def test_a_heartbeat_of_a_task_executor_without_a_slot_of_the_job_gets_stale_executions_cancelled() -> None:
    """E.g. a master restarted under the same session: the former JobMaster's tasks run on where this one holds
    no slot; they are cancelled, not left holding their slots until they end."""
    h = Harness(chain())
    h.jm.start()
    await h.deployments(2)
    stale = uuid.uuid4().hex
    h.jm.task_executor_heartbeat("te-9", [Report(JOB_ID, stale, ExecutionState.RUNNING)])
    await h.jm.join()
    assert h.gateway.cancels == [("celery@te-9", stale)]
    await h.jm.cancel()
    await h.jm.join()


def listing(*deployments: Deployment, state: ExecutionState = ExecutionState.RUNNING) -> list[Report]:
    return [Report(JOB_ID, d.tdd.execution_id, state) for d in deployments]


@pytest.mark.parametrize("restart", [NoRestart(), FixedDelayRestart(attempts=1, delay_s=0.0)])
async def test_an_execution_fails_over_only_after_the_grace_and_heartbeats_in_a_row_without_it(
        restart: RestartStrategy) -> None:
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
    h.jm.task_executor_heartbeat(te, [Report(JOB_ID, lost.tdd.execution_id, ExecutionState.DEPLOYING)] +
                                 (listing(other) if other_te == te else []))
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
    h = Harness(chain(FixedDelayRestart(attempts=1, delay_s=0.0)), missing_execution_threshold=1,
                deployment_grace=0.0)
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
            h.jm.task_executor_heartbeat(te, [r for r in listing(a0, state=ExecutionState.DEPLOYING) + listing(a1)
                                              if te == (a0 if r.execution_id == a0.tdd.execution_id
                                                        else a1).slot.task_executor_id])
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
    h = Harness(graph_of(JobVertex("a", "pipe:a", 1), restart=FixedDelayRestart(attempts=1, delay_s=0.0)),
                resource_manager=rm, missing_execution_threshold=2, deployment_grace=0.0)
    h.jm.start()
    lost = await h.deployment()
    await h.jm.join()
    for _ in range(2):  # the TaskExecutor's heartbeats through the ResourceManager: it has no such execution
        rm.heartbeat(SESSION, "te-1", SlotReport.free(1), [])
    retry = await h.deployment()
    assert (retry.subtask, retry.tdd.attempt, retry.slot.task_executor_id) == (lost.subtask, 1, "te-1")
    rm.heartbeat(SESSION, "te-1", SlotReport.free(1), [{"job_id": JOB_ID, "execution_id": retry.tdd.execution_id,
                                                       "state": "DEPLOYING"}])
    await h.finish(retry)
    assert (await asyncio.wait_for(h.jm.result_future, STEP_TIMEOUT_S)).status is JobStatus.FINISHED
    await h.jm.join()
    rm.stop()


async def test_bad_lifecycle_calls_are_refused() -> None:
    h = Harness(chain())
    h.jm.start()
    with pytest.raises(Exception, match="started already"):
        h.jm.start()
    await h.jm.cancel()
    await h.jm.join()


@pytest.mark.parametrize("seed", range(12))
async def test_random_failures_and_losses_keep_every_transition_legal(seed: int) -> None:
    rng = random.Random(seed)
    h = Harness(diamond(FixedDelayRestart(attempts=1000, delay_s=0.0)), slots_each=3)
    h.jm.start()
    lost = False
    while not h.jm.result_future.done():
        get = asyncio.ensure_future(h.gateway.queue.get())
        done, _ = await asyncio.wait({get, h.jm.result_future}, timeout=STEP_TIMEOUT_S,
                                     return_when=asyncio.FIRST_COMPLETED)
        assert done, "no progress"
        if get not in done:
            get.cancel()
            break
        d = get.result()
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
async def test_a_job_master_is_freed_when_dropped_and_its_graph_unfrozen(every_graph_frozen: None,
                                                                         end: str) -> None:
    """No reference cycle keeps an ended JobMaster: dropping it frees its graph and unfreezes the heap."""
    rm = resource_manager(rpc_failure_threshold=2)
    rm.start()
    register(rm, "te-1", 2)
    h = Harness(chain(restart=NoRestart()), resource_manager=rm)
    assert LONG_LIVED_GRAPHS.alive == 1 and gc.get_freeze_count() > 0
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
    job_master = weakref.ref(h.jm)
    del h
    rm.stop()
    assert job_master() is None
    assert LONG_LIVED_GRAPHS.alive == 0 and gc.get_freeze_count() == 0

