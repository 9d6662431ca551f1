"""A real JobMaster on small fakes of its gateways, for the JobMaster's unit tests (tests/unit/job_master/).

`FakeResourceManager` hands out slots as soon as the job declares it needs them; `FakeGateway`
queues each deployment, and the test plays the TaskExecutor through `Harness` by reporting
states; `FakeProgressStore` records what the JobMaster persists. With `resource_manager(...)`
and `register(...)` a test runs the JobMaster against a real ResourceManager instead.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkdispatch.config import Configuration
from sparkdispatch.errors import ServiceUnavailable
from sparkdispatch.ha import JobProgress
from sparkdispatch.ha.progress_store import Finished, SubtaskProgress
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.restart import FixedDelayRestart, RestartStrategy
from sparkdispatch.model.chaining import ResultsMode
from sparkdispatch.model.job_graph import DEFAULT_POOL, JobGraph, JobVertex
from sparkdispatch.model.job_result import Failure, JobResult
from sparkdispatch.jobmaster import JobMaster
from sparkdispatch.jobmaster.execution import SubtaskId
from sparkdispatch.model.protocol import (
    ExecutionReport,
    ExecutionStateUpdate,
    RegistrationAck,
    SlotReport,
    TaskDeploymentDescriptor,
    TaskExecutorRegistration,
)
from sparkdispatch.model.repair import Repair
from sparkdispatch.model.rest_shapes import TaskManager
from sparkdispatch.resourcemanager import AllocatedSlot, ResourceManager, ResourceOverview, SlotListener
from sparkdispatch.jobmaster.settings import JobMasterSettings, restart_strategy_from_config
from sparkdispatch.resourcemanager.settings import ResourceManagerSettings

JOB_ID = "0123456789abcdef" * 2
SESSION = "11111111-2222-3333-4444-555555555555"
RESULTS = "/shared/results"
DEFAULT_RESTART = restart_strategy_from_config(Configuration.from_mapping({}))  # for graphs that name none
ARTIFACT = "f" * 64
STEP_TIMEOUT_S = 10  # a hang fails the test instead of waiting for pytest's timeout
THREE_RESTARTS = FixedDelayRestart(attempts=3, delay_s=0.0)


class FakeResourceManager:
    """Slots of a few TaskExecutors, given to the job whenever it declares it needs more in all."""

    def __init__(self, task_executors: tuple[str, ...] = ("te-1", "te-2"), slots_each: int = 2) -> None:
        self.free = [(te, i) for i in range(slots_each) for te in task_executors]
        self.allocated: dict[str, AllocatedSlot] = {}
        self.declarations: list[int] = []
        self.released: list[str] = []
        self.dead: set[str] = set()
        self.listener: SlotListener | None = None
        self.required = 0
        self.rpc_outcomes: list[tuple[str, bool]] = []  # (TaskExecutor id, the call went through)
        self.pools: set[str] = set()  # the pools slots were asked of
        self.pinned_declarations: list[Mapping[str, int] | None] = []

    def declare_requirements(
        self,
        job_id: str,
        slots: int,
        listener: SlotListener,
        *,
        pool: str = DEFAULT_POOL,
        pinned: Mapping[str, int] | None = None,
    ) -> None:
        assert job_id == JOB_ID
        self.pools.add(pool)
        self.pinned_declarations.append(pinned)
        self.declarations.append(slots)
        self.listener = listener
        self.required = slots
        asyncio.get_running_loop().call_soon(self._allocate)

    def release_slot(self, job_id: str, allocation_id: str) -> bool:
        assert job_id == JOB_ID
        slot = self.allocated.pop(allocation_id, None)
        assert slot is not None, f"slot {allocation_id} released twice or never allocated"
        self.released.append(allocation_id)
        if slot.task_executor_id not in self.dead:
            self.free.append((slot.task_executor_id, slot.slot_index))
        asyncio.get_running_loop().call_soon(self._allocate)
        return True

    def record_rpc_failure(self, task_executor_id: str) -> None:
        self.rpc_outcomes.append((task_executor_id, False))

    def record_rpc_success(self, task_executor_id: str) -> None:
        self.rpc_outcomes.append((task_executor_id, True))

    def task_executor_hostname(self, task_executor_id: str) -> str | None:
        return None if task_executor_id in self.dead else f"celery@{task_executor_id}"

    # what TaskExecutors and the REST endpoint call: never a JobMaster

    def register_task_executor(self, session_id: str | None, registration: TaskExecutorRegistration) -> RegistrationAck:
        raise AssertionError("a JobMaster registers no TaskExecutor")

    def heartbeat(
        self,
        session_id: str | None,
        task_executor_id: str,
        slot_report: SlotReport,
        executions: Sequence[ExecutionReport],
    ) -> None:
        raise AssertionError("a JobMaster sends no heartbeat")

    def unregister_task_executor(
        self, task_executor_id: str, reason: str, *, registration_id: str | None = None
    ) -> bool:
        raise AssertionError("a JobMaster unregisters no TaskExecutor")

    def overview(self) -> ResourceOverview:
        raise AssertionError("a JobMaster asks for no overview")

    def task_executors(self) -> list[TaskManager]:
        raise AssertionError("a JobMaster lists no TaskExecutors")

    def _allocate(self) -> None:
        new: list[AllocatedSlot] = []
        while self.required > len(self.allocated) + len(new) and self.free:
            te, index = self.free.pop(0)
            new.append(
                AllocatedSlot(uuid.uuid4().hex, te, index, f"sparkdispatch.te.{te}", f"celery@{te}", "registration-1")
            )
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
    slot: AllocatedSlot
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
        self.releases: list[tuple[str, str | None]] = []  # (TaskExecutor hostname, vertex id; None: the job)
        self.fail_deploys = 0
        self.broker_down = False
        self.deploy_errors: list[Exception] = []
        self.failed_tries: list[str] = []  # execution ids of the tries the broker refused
        self.fail_cancels = 0
        self._lock = threading.Lock()

    def deploy(self, slot: AllocatedSlot, tdd: TaskDeploymentDescriptor, session_id: str) -> None:
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

    def release_results(self, task_executor_hostname: str, job_id: str, vertex_id: str | None) -> bool:
        with self._lock:
            self.releases.append((task_executor_hostname, vertex_id))
        return True

    def close(self) -> None:
        """Nothing to release: no broker connection."""


@dataclass
class FakeProgressStore:
    """Records the finished subtasks a JobMaster persists; `gate` holds each write back until set, and
    `error` makes them fail."""

    records: list[tuple[str, str, str, int, str | None, int | None]] = field(default_factory=list)
    gate: asyncio.Event | None = None
    error: Exception | None = None

    async def record_subtask(
        self, session_id: str, job_id: str, vertex_id: str, subtask_index: int, progress: SubtaskProgress
    ) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        self.records.append((session_id, job_id, vertex_id, subtask_index, progress.result_path, progress.rows))

    def finished(self) -> set[SubtaskId]:
        return {SubtaskId(r[2], r[3]) for r in self.records}

    # what the Dispatcher calls: never a JobMaster

    async def record_cancel(self, session_id: str, job_id: str) -> None:
        raise AssertionError("a JobMaster records no cancel")

    async def start_repair(self, session_id: str, job_id: str, kept: Finished, repair: Repair) -> None:
        raise AssertionError("a JobMaster starts no repair")

    async def get(self, job_id: str) -> JobProgress:
        raise AssertionError("a JobMaster reads no progress: it is handed its recovered progress")

    async def remove(self, session_id: str, job_id: str) -> None:
        raise AssertionError("a JobMaster removes no progress")


def graph_of(
    *vertices: JobVertex, restart: RestartStrategy | None = None, results: ResultsMode = ResultsMode.DURABLE
) -> JobGraph:
    """The test job of `vertices`. Its results are durable unless `results` says otherwise: the
    JobMaster's tests of what happens between tasks need each vertex to run as a task of its own,
    and the tests of chains ask for `ResultsMode.AUTO`."""
    return JobGraph(
        name="test-job",
        job_id=JOB_ID,
        vertices=vertices,
        restart_strategy=restart,
        artifacts=(ARTIFACT,),
        config={"spark.sql.shuffle.partitions": "4"},
        results=results,
    )


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

    def __init__(
        self,
        graph: JobGraph,
        *,
        recovered: JobProgress | None = None,
        slots_each: int = 2,
        resource_manager: ResourceManager | None = None,
        missing_execution_threshold: int = 3,
        deployment_grace: float = 25.0,
    ) -> None:
        self.rm = FakeResourceManager(slots_each=slots_each)
        self.gateway = FakeGateway()
        self.store = FakeProgressStore()
        settings = JobMasterSettings(
            results_dir=RESULTS + "/",
            restart_strategy=DEFAULT_RESTART,
            missing_execution_threshold=missing_execution_threshold,
            deployment_grace=deployment_grace,
        )
        self.jm = JobMaster(
            graph,
            session_id=SESSION,
            resource_manager=resource_manager or self.rm,
            task_executor_gateway=self.gateway,
            progress_store=self.store,
            settings=settings,
            recovered_progress=recovered,
        )

    async def deployment(self) -> Deployment:
        async with asyncio.timeout(STEP_TIMEOUT_S):
            return await self.gateway.queue.get()

    async def deployments(self, count: int) -> list[Deployment]:
        return [await self.deployment() for _ in range(count)]

    def update(self, d: Deployment, state: ExecutionState, **kwargs: object) -> ExecutionStateUpdate:
        return ExecutionStateUpdate(
            job_id=d.tdd.job_id,
            job_master_id=d.tdd.job_master_id,
            execution_id=d.tdd.execution_id,
            state=state,
            task_executor_id=d.slot.task_executor_id,
            **kwargs,  # type: ignore[arg-type]
        )

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

    async def next_deployment(self) -> Deployment | None:
        """The next deployment, or None once the job has ended (an AssertionError if neither comes)."""
        get = asyncio.ensure_future(self.gateway.queue.get())
        either: list[asyncio.Future[Any]] = [get, self.jm.result_future]
        done, _ = await asyncio.wait(either, timeout=STEP_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
        assert done, "the job made no progress"
        if get not in done:
            get.cancel()
            return None
        return get.result()

    async def run_to_end(self, failures: dict[SubtaskId, int] | None = None) -> JobResult:
        """Play the TaskExecutor: finish every deployment, failing a subtask as often as `failures` says."""
        failures = dict(failures or {})
        while not self.jm.result_future.done():
            d = await self.next_deployment()
            if d is None:
                break
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
        for vertex_id in graph.chain_inputs(d.tdd.vertex_id):
            for producer in graph.subtasks(vertex_id):
                assert producer.id in self.store.finished() or producer.recovered, (
                    f"{d.subtask} deployed before {producer.id} finished"
                )


def boom(d: Deployment) -> Failure:
    return Failure(
        "ValueError",
        f"bad row in {d.subtask} attempt {d.tdd.attempt}",
        f'Traceback (most recent call last):\n  File "pipe.py", line 3, in {d.tdd.vertex_id}\n'
        f"ValueError: bad row in {d.subtask} attempt {d.tdd.attempt}\n",
    )


def attempts_of(h: Harness, subtask: SubtaskId) -> list[int]:
    return [d.tdd.attempt for d in h.gateway.deployments if d.subtask == subtask]


def resource_manager(*, rpc_failure_threshold: int, **keys: str) -> ResourceManager:
    config = Configuration.from_mapping({"heartbeat.rpc-failure-threshold": rpc_failure_threshold, **keys})
    return ResourceManager(ResourceManagerSettings.from_config(config), SESSION)


def register(rm: ResourceManager, task_executor_id: str, slots: int, *, session_id: str = SESSION) -> None:
    """Register a TaskExecutor of `slots` free slots, as its first registration does."""
    rm.register_task_executor(
        session_id,
        TaskExecutorRegistration(
            task_executor_id=task_executor_id,
            hostname=f"celery@{task_executor_id}",
            queue=f"sparkdispatch.te.{task_executor_id}",
            slots=slots,
            slot_report=SlotReport.free(slots),
            spark_master="local[2]",
        ),
    )
