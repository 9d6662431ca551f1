"""A real master inside the test process: `InProcessMaster`, with TaskExecutors played by the test.

`InProcessMaster` runs `sparkdispatch.entrypoint.master.Master` itself, with `high-availability.mode: none`
(unless `overrides` say otherwise), on a free loopback port and a temporary storage directory.
Its deployments and cancellations go to a `RecordingTaskExecutorGateway` instead of Celery.
A `ScriptedTaskExecutor` registers with the master through the TaskExecutor REST routes (with
the TaskExecutor's own `AsyncMasterClient`) and reports the state of each task deployed to it
as its script says, so a job reaches FINISHED, FAILED or CANCELED through the real REST and
TaskExecutor endpoints, with no Celery worker and no Spark.

Use it from async tests (`async with InProcessMaster() as master`, on the test's loop) or from
sync tests (`with InProcessMaster() as master`: the master runs on a loop thread of its own and
`master.run(coroutine)` runs a coroutine there).

The other way round, `MasterForTaskExecutors` is a master reduced to what real TaskExecutor
processes talk to: the TaskExecutor REST routes and a real ResourceManager, with every job's
JobMaster played by an `ExecutionLog` that records the slots, state reports and lost TaskExecutors.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, MutableSequence, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, cast

from aiohttp import web

from sparkdispatch.config import Configuration
from sparkdispatch.config.options import HA_MODE, REST_PORT
from sparkdispatch.errors import SparkDispatchError
from sparkdispatch.ha import STANDALONE_SESSION_ID, BlobReader
from sparkdispatch.ha.access import cluster_dir
from sparkdispatch.ha.election import ZooKeeperLeaderElection
from sparkdispatch.ha.leader import StandaloneLeaderElection
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.job_result import Failure
from sparkdispatch.jobmaster import TaskExecutorGateway
from sparkdispatch.client.loop_thread import LoopThread
from sparkdispatch.entrypoint.master import Master
from sparkdispatch.model.protocol import (
    ExecutionReport,
    ExecutionStateUpdate,
    RegistrationAck,
    SlotReport,
    TaskDeploymentDescriptor,
    TaskExecutorRegistration,
)
from sparkdispatch.resourcemanager import AllocatedSlot, ResourceManager
from sparkdispatch.rest.responses import artifact_response
from sparkdispatch.rest.taskexecutor_routes import LeaderForTaskExecutors, add_task_executor_routes
from sparkdispatch.resourcemanager.settings import ResourceManagerSettings
from sparkdispatch.taskexecutor.master_client import AsyncMasterClient
from sparkdispatch.testing.proxy import RecordingProxy
from sparkdispatch.testing.services import free_port
from sparkdispatch.model.job_graph import DEFAULT_POOL

log = logging.getLogger(__name__)

T = TypeVar("T")

ADVERTISED_HOST = "127.0.0.1"
# With `record_requests`, the master binds here and a RecordingProxy takes its advertised
# address: clients, standbys' answers and ZooKeeper all name the proxy. (All of 127/8 is
# loopback on Linux.)
BEHIND_PROXY_HOST = "127.0.0.2"


@dataclass(frozen=True)
class Deployment:
    """One task the master deployed: the slot, the descriptor and the leader session it came under."""

    slot: AllocatedSlot
    tdd: TaskDeploymentDescriptor
    session_id: str


class RecordingTaskExecutorGateway(TaskExecutorGateway):
    """The master's TaskExecutorGateway for tests: records deployments, cancels and releases; thread-safe."""

    def __init__(self) -> None:
        self.deployments: MutableSequence[Deployment] = []  # a benchmark keeps only the last ones
        self.cancels: list[tuple[str, str]] = []  # (TaskExecutor hostname, execution id)
        self.releases: list[tuple[str, str, str | None]] = []  # (TaskExecutor hostname, job id, vertex id)
        self.closed = False
        self._listeners: list[Callable[[Deployment | tuple[str, str]], None]] = []
        self._lock = threading.Lock()

    def listen(self, listener: Callable[[Deployment | tuple[str, str]], None]) -> None:
        """Call `listener` with each deployment and each (hostname, execution id) cancel, in the caller's thread."""
        with self._lock:
            self._listeners.append(listener)

    def deploy(self, slot: AllocatedSlot, tdd: TaskDeploymentDescriptor, session_id: str) -> None:
        deployment = Deployment(slot, tdd, session_id)
        with self._lock:
            self.deployments.append(deployment)
            listeners = list(self._listeners)
        for listener in listeners:
            listener(deployment)

    def cancel(self, task_executor_hostname: str, execution_id: str) -> bool:
        with self._lock:
            self.cancels.append((task_executor_hostname, execution_id))
            listeners = list(self._listeners)
        for listener in listeners:
            listener((task_executor_hostname, execution_id))
        return True

    def release_results(self, task_executor_hostname: str, job_id: str, vertex_id: str | None) -> bool:
        with self._lock:
            self.releases.append((task_executor_hostname, job_id, vertex_id))
        return True

    def close(self) -> None:
        self.closed = True

    def of_job(self, job_id: str) -> list[Deployment]:
        with self._lock:
            return [d for d in self.deployments if d.tdd.job_id == job_id]


@dataclass(frozen=True)
class TaskOutcome:
    """How a ScriptedTaskExecutor ends a task: FINISHED (with `rows`, the `result_path` it says
    it wrote and the `input_files` it says it read), or FAILED with `failure`."""

    state: ExecutionState = ExecutionState.FINISHED
    failure: Failure | None = None
    rows: int | None = None
    result_path: str | None = None
    input_files: tuple[str, ...] = ()
    #: rows of the vertices chained into the task, by subtask (filled in by `chain_outcome`)
    chained_rows: Mapping[str, tuple[int | None, ...]] = field(default_factory=dict)


Script = Callable[[TaskDeploymentDescriptor], TaskOutcome | None]
"""What becomes of a deployed task: its outcome, or None to keep it running until told."""


def chain_outcome(script: Script, tdd: TaskDeploymentDescriptor) -> TaskOutcome | None:
    """The outcome of `tdd`'s attempt as a real TaskExecutor's would be: each subtask of each vertex
    chained into it runs first (the script asked with that subtask's descriptor), the first one
    that fails fails the attempt, and a FINISHED attempt reports their rows."""
    chained_rows: dict[str, tuple[int | None, ...]] = {}
    for chained in tdd.chained:
        rows: list[int | None] = []
        for index in range(chained.parallelism):
            member = replace(
                tdd,
                vertex_id=chained.vertex_id,
                entrypoint=chained.entrypoint,
                subtask_index=index,
                parallelism=chained.parallelism,
                params=chained.params,
                inputs=chained.inputs,
                input_schemas=chained.input_schemas,
                chained=(),
            )
            outcome = script(member)
            if outcome is None or outcome.state is not ExecutionState.FINISHED:
                return outcome
            rows.append(outcome.rows)
        chained_rows[chained.vertex_id] = tuple(rows)
    outcome = script(tdd)
    if outcome is None or outcome.state is not ExecutionState.FINISHED or not chained_rows:
        return outcome
    return replace(outcome, chained_rows=chained_rows)


def finish_every_task(tdd: TaskDeploymentDescriptor) -> TaskOutcome:
    return TaskOutcome()


class ScriptedTaskExecutor:
    """A TaskExecutor without Spark: registers through REST and reports its tasks' states by script.

    Each task deployed to it is reported RUNNING, then ended as `script(tdd)` says (the job's
    own script from `end_job`, else `script`); a task whose script answers None keeps running
    until `end_job`. Sends no heartbeats: the InProcessMaster's heartbeat timeout is long.
    """

    def __init__(
        self,
        master: InProcessMaster,
        *,
        task_executor_id: str,
        slots: int,
        script: Script | None = None,
        pool: str = DEFAULT_POOL,
    ) -> None:
        self.master = master
        self.task_executor_id = task_executor_id
        self.hostname = f"{task_executor_id}@in-process"
        self.slots = slots
        self.pool = pool
        self.script = script
        self.refused: list[SparkDispatchError] = []
        self._job_scripts: dict[str, Script] = {}
        self._running: dict[str, Deployment] = {}  # execution id → its deployment, until it ends
        self._client = AsyncMasterClient(token=master.config.task_executor_credential)
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def register(self) -> RegistrationAck:
        self._loop = asyncio.get_running_loop()
        self.master.gateway.listen(self._on_gateway_call)
        registration = TaskExecutorRegistration(
            task_executor_id=self.task_executor_id,
            hostname=self.hostname,
            queue=f"sparkdispatch.te.{self.task_executor_id}",
            slots=self.slots,
            slot_report=SlotReport.free(self.slots),
            spark_master="local[1]",
            pool=self.pool,
        )
        return await self._client.register(self.master.url, self.master.session_id, registration)

    async def end_job(self, job_id: str, outcome: TaskOutcome | Script = TaskOutcome()) -> None:
        """End the job's running tasks with `outcome`, and every later task of the job as well."""
        script: Script = outcome if callable(outcome) else (lambda tdd: outcome)
        self._job_scripts[job_id] = script
        for deployment in [d for d in self._running.values() if d.tdd.job_id == job_id]:
            await self._end(deployment, chain_outcome(script, deployment.tdd))

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._client.close()

    def _on_gateway_call(self, call: Deployment | tuple[str, str]) -> None:
        # from the JobMaster's gateway thread: hand the call over to the master's loop
        if self._loop is None or self._loop.is_closed():
            return
        if isinstance(call, Deployment):
            if call.slot.task_executor_id == self.task_executor_id:
                self._loop.call_soon_threadsafe(self._spawn, self._run(call))
        elif call[0] == self.hostname:
            self._loop.call_soon_threadsafe(self._running.pop, call[1], None)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, deployment: Deployment) -> None:
        tdd = deployment.tdd
        if not await self._report(deployment, TaskOutcome(ExecutionState.RUNNING)):
            return
        # running only once the master has it as RUNNING: an `end_job` meanwhile would send its end
        # beside the RUNNING report, and the master could get the two in either order
        self._running[tdd.execution_id] = deployment
        script = self._job_scripts.get(tdd.job_id, self.script)
        outcome = chain_outcome(script, tdd) if script is not None else None
        if outcome is not None:
            await self._end(deployment, outcome)

    async def _end(self, deployment: Deployment, outcome: TaskOutcome | None) -> None:
        if outcome is not None and self._running.pop(deployment.tdd.execution_id, None) is not None:
            await self._report(deployment, outcome)

    async def _report(self, deployment: Deployment, outcome: TaskOutcome) -> bool:
        tdd = deployment.tdd
        update = ExecutionStateUpdate(
            job_id=tdd.job_id,
            job_master_id=tdd.job_master_id,
            execution_id=tdd.execution_id,
            state=outcome.state,
            task_executor_id=self.task_executor_id,
            rows=outcome.rows,
            result_path=outcome.result_path,
            input_files=outcome.input_files,
            failure=outcome.failure,
            chained_rows=outcome.chained_rows,
        )
        try:
            await self._client.report_state(self.master.url, deployment.session_id, update)
        except SparkDispatchError as exc:  # a real TaskExecutor cancels a task whose report is refused
            log.info(
                "%s: the %s report of %s was refused: %s",
                self.task_executor_id,
                outcome.state.value,
                tdd.execution_id,
                exc,
            )
            self.refused.append(exc)
            self._running.pop(tdd.execution_id, None)
            return False
        return True


class InProcessMaster:
    """The real master on a free loopback port with a temporary storage dir (see the module doc).

    `overrides` are configuration keys on top of the test defaults (`high-availability.mode:
    none`, a long heartbeat timeout); several InProcessMasters may share a `storage_dir` (HA on
    ZooKeeper, or one master after another). With `record_requests`, a RecordingProxy (`proxy`)
    takes the advertised address, so every REST call the master gets is recorded.
    """

    def __init__(
        self,
        *,
        storage_dir: str | Path | None = None,
        port: int | None = None,
        overrides: Mapping[str, object] | None = None,
        record_requests: bool = False,
    ) -> None:
        self.port = port or free_port()
        self._temp_dir: tempfile.TemporaryDirectory[str] | None = None
        if storage_dir is None:
            self._temp_dir = tempfile.TemporaryDirectory(prefix="sparkdispatch-master-", ignore_cleanup_errors=True)
            storage_dir = self._temp_dir.name
        keys: dict[str, object] = {
            "storage.dir": str(storage_dir),
            "rest.address": ADVERTISED_HOST,
            "rest.port": self.port,
            "heartbeat.timeout": "10min",
            # deployments go to the RecordingTaskExecutorGateway, never through a broker
            "broker.url": "memory://",
            **(overrides or {}),
        }
        if record_requests:
            keys["rest.bind-address"] = BEHIND_PROXY_HOST
        self.config = Configuration.from_mapping(keys)
        self.url = f"http://{ADVERTISED_HOST}:{self.port}"
        self.gateway = RecordingTaskExecutorGateway()
        self.proxy = (
            RecordingProxy(f"http://{BEHIND_PROXY_HOST}:{self.port}", port=self.port) if record_requests else None
        )
        self.task_executors: list[ScriptedTaskExecutor] = []
        self._master: Master | None = None
        self._loop_thread: LoopThread | None = None

    @property
    def master(self) -> Master:
        if self._master is None:
            raise RuntimeError("the InProcessMaster is not started")
        return self._master

    @property
    def session_id(self) -> str:
        """The leader session this master leads under; `ServiceUnavailable` on a standby."""
        return self.master.leader_components().session_id

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self, *, timeout: float = 30.0) -> None:
        """Start the master; with HA mode `none`, return once it leads and has recovered its jobs."""
        self._master = Master(self.config, task_executor_gateway=self.gateway)
        await self._master.start()
        if self.config.get(HA_MODE) == "none":
            await self.wait_for_leadership(timeout=timeout)
        if self.proxy is not None:
            await self.proxy.start()

    async def wait_for_leadership(self, *, timeout: float = 30.0) -> None:
        """Wait until this master leads with its leadership confirmed (its recovery done)."""
        deadline = time.monotonic() + timeout
        while not self._confirmed_leader():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the master at {self.url} did not become leader within {timeout:.0f}s")
            await asyncio.sleep(0.01)

    def _confirmed_leader(self) -> bool:
        election = self.master.ha.election
        # both elections confirm only after the Dispatcher recovered the stored jobs
        if not isinstance(election, (StandaloneLeaderElection, ZooKeeperLeaderElection)):
            raise TypeError(f"unknown leader election {type(election).__name__}")
        confirmed = election.confirmed
        return self.master.is_leader and confirmed is not None and confirmed.address == self.master.address

    async def step_down(self) -> None:
        """Leave the election: the master stays up as a standby (it cannot lead again)."""
        self.master.ha.election.stop()
        while self.master.is_leader:
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        for task_executor in self.task_executors:
            await task_executor.close()
        self.task_executors.clear()
        if self.proxy is not None:
            await self.proxy.stop()
        if self._master is not None:
            await self._master.stop()
        if self._temp_dir is not None:
            await _remove_tree(self._temp_dir)

    async def add_task_executor(
        self, task_executor_id: str = "te-1", *, slots: int = 2, script: Script | None = None, pool: str = DEFAULT_POOL
    ) -> ScriptedTaskExecutor:
        """A ScriptedTaskExecutor registered with this master, in `pool`."""
        task_executor = ScriptedTaskExecutor(
            self, task_executor_id=task_executor_id, slots=slots, script=script, pool=pool
        )
        self.task_executors.append(task_executor)
        await task_executor.register()
        return task_executor

    async def __aenter__(self) -> InProcessMaster:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # -- from synchronous tests ---------------------------------------------------------------

    def __enter__(self) -> InProcessMaster:
        self._loop_thread = LoopThread("sparkdispatch-in-process-master")
        try:
            self._loop_thread.run(self.__aenter__())
        except BaseException:
            self._loop_thread.close()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._loop_thread is not None
        try:
            self._loop_thread.run(self.stop())
        finally:
            self._loop_thread.close()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the master's loop thread (sync use: `with InProcessMaster()`)."""
        if self._loop_thread is None:
            coroutine.close()
            raise RuntimeError("run() serves `with InProcessMaster()`; under `async with`, await the coroutine")
        return self._loop_thread.run(coroutine)


class ExecutionLog:
    """A JobMaster's end, recorded: allocated slots, state reports, lost TaskExecutors."""

    def __init__(self) -> None:
        self.updates: list[ExecutionStateUpdate] = []
        self.slots: list[AllocatedSlot] = []
        self.lost: list[tuple[str, list[str], str]] = []

    def update_execution_state(self, update: ExecutionStateUpdate) -> None:
        self.updates.append(update)

    def slots_allocated(self, slots: Sequence[AllocatedSlot]) -> None:
        self.slots.extend(slots)

    def slot_request_failed(self, error: SparkDispatchError) -> None:
        raise AssertionError(f"slot request failed: {error}")

    def task_executor_lost(self, task_executor_id: str, allocation_ids: Sequence[str], reason: str) -> None:
        self.lost.append((task_executor_id, list(allocation_ids), reason))

    def task_executor_heartbeat(self, task_executor_id: str, executions: Sequence[ExecutionReport]) -> None:
        """The tests follow executions through their state reports, not through heartbeats."""

    def final(self, execution_id: str) -> ExecutionStateUpdate | None:
        """The last terminal state report of `execution_id`; None while there is none."""
        for update in reversed(self.updates):
            if update.execution_id == execution_id and update.state.is_terminal:
                return update
        return None

    def states(self, execution_id: str) -> list[ExecutionState]:
        return [u.state for u in self.updates if u.execution_id == execution_id]


class MasterForTaskExecutors:
    """The TaskExecutor routes on `rest.port` and a ResourceManager, leading under `session_id`;
    every job's JobMaster is `jobs`."""

    def __init__(self, config: Configuration, *, session_id: str = STANDALONE_SESSION_ID) -> None:
        self.config = config
        self.session_id = session_id
        self.jobs = ExecutionLog()
        self.resource_manager = ResourceManager(ResourceManagerSettings.from_config(config), session_id)
        self._runner: web.AppRunner | None = None

    def job_master(self, job_id: str) -> ExecutionLog:
        return self.jobs

    def ended_jobs(self, job_ids: Iterable[str]) -> list[str]:
        """None: no job ends here (its JobMaster is a log of the executions' reports)."""
        return []

    async def start(self) -> None:
        self.resource_manager.start()
        app = web.Application()
        # the routes call only `update_execution_state` on a JobMaster, which `jobs` records
        add_task_executor_routes(app, lambda: cast(LeaderForTaskExecutors, self))
        blobs = BlobReader(cluster_dir(self.config, "blobs"))  # the cluster's store, as a master serves it

        async def artifact(request: web.Request) -> web.StreamResponse:
            return await artifact_response(blobs, request.match_info["key"])

        app.router.add_get("/artifacts/{key}", artifact)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.config.get(REST_PORT)).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.resource_manager.stop()

    async def restart_resource_manager(self) -> None:
        """Both the REST endpoint and the ResourceManager go away and come back empty."""
        await self.stop()
        self.resource_manager = ResourceManager(ResourceManagerSettings.from_config(self.config), self.session_id)
        await self.start()


async def _remove_tree(temp_dir: tempfile.TemporaryDirectory[str]) -> None:
    """Remove a stopped master's storage, waiting briefly for a store write it handed to a thread
    before stopping (a cancelled task's `asyncio.to_thread` call still ends in its thread)."""
    temp_dir.cleanup()
    for _ in range(100):
        if not os.path.exists(temp_dir.name):
            return
        await asyncio.sleep(0.02)
        shutil.rmtree(temp_dir.name, ignore_errors=True)
