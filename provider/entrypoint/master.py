"""One master process: HA services → REST endpoint → election → leader components.

Mirrors Flink's ClusterEntrypoint with one election per process (Flink ≥ 1.15): on each grant a
fresh ResourceManager and Dispatcher start under the new leader session id, the Dispatcher
recovers the stored jobs, and only then is the leadership confirmed (the REST address
published). While it recovers, the ResourceManager already serves TaskExecutors (it does not
depend on the Dispatcher, as in Flink) and the Dispatcher answers every job call with
`RecoveryInProgress` (503, `Retry-After`). On revocation the recovery is cancelled and both
stop; jobs are suspended locally and nothing is removed from the HA stores, so the next leader
resumes them.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Iterable
from dataclasses import dataclass

from sparkdispatch.dispatcher.archive import JobArchive
from sparkdispatch.dispatcher.blob_cleanup import BlobCleaner
from sparkdispatch.config import Configuration
from sparkdispatch.entrypoint.backing_services import check_backing_services
from sparkdispatch.dispatcher.dispatcher import Dispatcher
from sparkdispatch.errors import ServiceUnavailable
from sparkdispatch.ha import BlobStore, JobProgress, LeaderRetrieval, create_ha_services
from sparkdispatch.ha.leader import LeaderInfo
from sparkdispatch.model.job_graph import JobGraph
from sparkdispatch.jobmaster import JobMaster, JobMasterGateway, TaskExecutorGateway, build_execution_graph
from sparkdispatch.metrics.master import MasterMetrics
from sparkdispatch.resourcemanager import ResourceManager
from sparkdispatch.dispatcher.settings import ArchiveSettings, BlobCleanupSettings, CleanupSettings, JobLimits
from sparkdispatch.jobmaster.settings import JobMasterSettings
from sparkdispatch.resourcemanager.settings import ResourceManagerSettings
from sparkdispatch.storage.private import keep_private
from sparkdispatch.rest.app import RestServer
from sparkdispatch.rest.settings import RestSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MasterSettings:
    """Every master component's settings, read from one Configuration."""

    rest: RestSettings
    resource_manager: ResourceManagerSettings
    job_master: JobMasterSettings
    cleanup: CleanupSettings
    archive: ArchiveSettings
    blob_cleanup: BlobCleanupSettings
    job_limits: JobLimits

    @classmethod
    def from_config(cls, config: Configuration) -> MasterSettings:
        return cls(
            rest=RestSettings.from_config(config),
            job_limits=JobLimits.from_config(config),
            resource_manager=ResourceManagerSettings.from_config(config),
            job_master=JobMasterSettings.from_config(config),
            cleanup=CleanupSettings.from_config(config),
            archive=ArchiveSettings.from_config(config),
            blob_cleanup=BlobCleanupSettings.from_config(config),
        )


@dataclass(frozen=True)
class LeaderComponents:
    """What runs while this process leads, all fenced by `session_id` (the REST endpoint's LeaderView)."""

    session_id: str
    dispatcher: Dispatcher
    resource_manager: ResourceManager
    blob_store: BlobStore
    blob_cleaner: BlobCleaner

    def job_master(self, job_id: str) -> JobMasterGateway:
        return self.dispatcher.job_master(job_id)

    def ended_jobs(self, job_ids: Iterable[str]) -> list[str]:
        return self.dispatcher.ended_jobs(job_ids)


class Master:
    """A master process: leader or standby, by election.

    Deployments go through `task_executor_gateway` (by default a Celery sender on `broker.url`);
    the master closes it when it stops.
    """

    def __init__(self, config: Configuration, *, task_executor_gateway: TaskExecutorGateway | None = None) -> None:
        self.config = config
        self.settings = MasterSettings.from_config(config)
        self.settings.rest.check_exposure()
        check_backing_services(config)
        self.settings.rest.client_tls.context()  # an unusable CA file fails the start, not a standby's call
        self.ha = create_ha_services(config)
        self.metrics = MasterMetrics()
        self.rest = RestServer(self, self.settings.rest)
        self.address = ""
        self._gateway = task_executor_gateway
        self._leader: LeaderComponents | None = None
        self._recovery: asyncio.Task[None] | None = None
        self._leader_info: LeaderInfo | None = None
        self._retrieval: LeaderRetrieval | None = None
        self._events: asyncio.Queue[str | None] = asyncio.Queue()
        self._leadership_task: asyncio.Task[None] | None = None
        self._lag_probe: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.stopped = asyncio.Event()
        self.fatal_error: BaseException | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._lag_probe = asyncio.create_task(self.metrics.probe_loop_lag(), name="loop-lag-probe")
        await self.ha.start()
        await self.rest.start()
        self.address = f"{self.settings.rest.scheme}://{self.settings.rest.address}:{self.rest.port}"
        self._retrieval = self.ha.create_retrieval()
        self._retrieval.start(self._on_leader_info)
        self._leadership_task = asyncio.create_task(self._follow_leadership(), name="leadership")
        self.ha.election.start(self)
        log.info("master started at %s (high-availability.mode %s)", self.address, self.ha.mode)

    async def stop(self) -> None:
        """Leave the election, stop leading, close the REST endpoint and the HA services (data kept)."""
        if self.stopped.is_set():
            return
        self.ha.election.stop()
        self._events.put_nowait(None)
        if self._leadership_task is not None:
            await self._leadership_task
        await self._step_down()
        if self._retrieval is not None:
            self._retrieval.stop()
        await self.rest.stop()
        if self._lag_probe is not None:
            self._lag_probe.cancel()
            await asyncio.gather(self._lag_probe, return_exceptions=True)
        await self.ha.close()
        if self._gateway is not None:
            await asyncio.to_thread(self._gateway.close)
        self.stopped.set()
        log.info("master at %s stopped", self.address)

    # -- LeaderContender (called on the loop) ---------------------------------------------------

    def grant_leadership(self, session_id: str) -> None:
        self._events.put_nowait(session_id)

    def revoke_leadership(self) -> None:
        self._events.put_nowait("")

    async def _follow_leadership(self) -> None:
        # grants and revocations are handled one after another, in the order they came; a
        # recovery still running when the next one comes is cancelled by the step down
        while (event := await self._events.get()) is not None:
            try:
                await self._step_down()
                if event:
                    self._lead(event)
            except Exception as exc:  # noqa: BLE001 - a leadership change that fails ends the master
                await self._fail(exc)
                return

    async def _fail(self, exc: BaseException) -> None:
        log.error("leadership change failed; stopping this master so another can take over", exc_info=exc)
        self.fatal_error = exc
        await self._step_down()
        asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(self.stop()))

    def _lead(self, session_id: str) -> None:
        log.info("granted leadership, session %s", session_id)
        self.metrics.leader_granted()
        resource_manager = ResourceManager(self.settings.resource_manager, session_id)
        resource_manager.start()
        gateway = self._task_executor_gateway()
        progress_store = self.ha.progress_store
        job_master_settings = self.settings.job_master

        async def new_job_master(graph: JobGraph, recovered: JobProgress | None) -> JobMaster:
            # built from immutable inputs in a thread, handed to the loop finished
            execution_graph = await asyncio.to_thread(build_execution_graph, graph, recovered)
            return JobMaster(
                graph,
                session_id=session_id,
                resource_manager=resource_manager,
                task_executor_gateway=gateway,
                progress_store=progress_store,
                settings=job_master_settings,
                recovered_progress=recovered,
                events=self.metrics,
                execution_graph=execution_graph,
            )

        dispatcher = Dispatcher(
            session_id=session_id,
            address=self.address,
            jobgraph_store=self.ha.jobgraph_store,
            job_result_store=self.ha.job_result_store,
            progress_store=progress_store,
            archive=JobArchive(self.settings.archive, check=self.ha.check_leadership),
            blob_store=self.ha.blob_store,
            new_job_master=new_job_master,
            cleanup=self.settings.cleanup,
            events=self.metrics,
            limits=self.settings.job_limits,
        )
        self._leader = LeaderComponents(
            session_id,
            dispatcher,
            resource_manager,
            self.ha.blob_store,
            BlobCleaner(self.ha.blob_store, self.ha.jobgraph_store, self.settings.blob_cleanup),
        )
        self._recovery = asyncio.create_task(self._recover(self._leader), name=f"recovery-{session_id}")

    async def _recover(self, leader: LeaderComponents) -> None:
        try:
            await leader.dispatcher.start()
        except Exception as exc:  # noqa: BLE001 - a recovery that fails ends the master
            self._recovery = None  # this task ends here: the step down must not wait for it
            await self._fail(exc)
            return
        if not self.ha.election.confirm_leadership(leader.session_id, self.address):
            log.info("leadership session %s ended during recovery", leader.session_id)
            return
        leader.blob_cleaner.start()  # after recovery: every stored job's artifacts are known

    async def _step_down(self) -> None:
        recovery, self._recovery = self._recovery, None
        if recovery is not None and not recovery.done():
            recovery.cancel()
            await asyncio.gather(recovery, return_exceptions=True)
        leader, self._leader = self._leader, None
        if leader is None:
            return
        log.info("stopping leader components of session %s", leader.session_id)
        await leader.blob_cleaner.stop()
        await leader.dispatcher.stop()
        leader.resource_manager.stop()

    def _task_executor_gateway(self) -> TaskExecutorGateway:
        if self._gateway is None:
            from sparkdispatch.resourcemanager.celery_gateway import CeleryTaskExecutorGateway

            self._gateway = CeleryTaskExecutorGateway(self.config)
        return self._gateway

    # -- MasterView (REST) --------------------------------------------------------------------

    def leader_components(self) -> LeaderComponents:
        if self._leader is None:
            leader = self.leader_address()
            where = f"; the leader is {leader}" if leader and leader != self.address else "; no leader right now"
            raise ServiceUnavailable(f"this master ({self.address}) is a standby{where}", leader=leader)
        return self._leader

    def leader_address(self) -> str | None:
        if self._leader is not None:
            return self.address
        return self._leader_info.address if self._leader_info else None

    @property
    def is_leader(self) -> bool:
        return self._leader is not None

    def _on_leader_info(self, info: LeaderInfo | None) -> None:
        # called from kazoo's thread: hand the value over to the loop
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(setattr, self, "_leader_info", info)


async def run_master(config: Configuration) -> int:
    """Run one master until SIGINT or SIGTERM; the exit code for the command line."""
    keep_private(config.storage_dir, results_dir=config.results_dir)
    master = Master(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: asyncio.ensure_future(master.stop()))
    await master.start()
    print(f"sparkdispatch master: REST {master.address}  web UI {master.address}/ui/", flush=True)
    await master.stopped.wait()
    return 1 if master.fatal_error else 0
