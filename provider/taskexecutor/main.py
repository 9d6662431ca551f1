"""One TaskExecutor: a warm Spark Connect server, a Python process per slot, a Celery worker.

The Celery worker (two threads per slot) does all talking to the master; each slot's tasks run
in the slot's own process (`SlotProcessPool`) as clients of the TaskExecutor's Spark Connect
server, the Spark driver of all its slots, replaced by a successor now and then
(server_recycling.py). Server and spare slot processes are started and warmed before the worker
registers, and stopped after it: worker, slot processes, servers.
"""

from __future__ import annotations

import logging
import socket
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from sparkdispatch.broker.celery_app import queue_name
from sparkdispatch.config import Configuration
from sparkdispatch.config.options import (
    HA_MODE,
    SPARK_MASTER,
    TASKEXECUTOR_ARTIFACT_CACHE_MAX_SIZE,
    TASKEXECUTOR_ID,
    TASKEXECUTOR_METRICS_BIND_ADDRESS,
    TASKEXECUTOR_METRICS_PORT,
    TASKEXECUTOR_POOL,
    TASKEXECUTOR_PYTHON_WORKERS_TEMPLATE,
    TASKEXECUTOR_SLOTS,
)
from sparkdispatch.errors import ConfigurationError, ServiceUnavailable
from sparkdispatch.storage.private import keep_private
from sparkdispatch.ha import ClosableLeaderRetrieval, create_leader_retrieval
from sparkdispatch.taskexecutor.settings import (
    ConnectServerSettings,
    PythonEnvironmentSettings,
    SlotPoolSettings,
    is_local_master,
)
from sparkdispatch.taskexecutor.app import create_celery_app
from sparkdispatch.taskexecutor import kept_results
from sparkdispatch.taskexecutor.connect_server import ConnectServer
from sparkdispatch.taskexecutor.kept_results import kept_results_dir
from sparkdispatch.taskexecutor.leader_session import AskedLeaderSession
from sparkdispatch.taskexecutor.server_recycling import ConnectServers
from sparkdispatch.taskexecutor.master_client import MasterClient
from sparkdispatch.taskexecutor.artifact_cache import ArtifactCache
from sparkdispatch.taskexecutor.python_environments import PythonEnvironments, find_uv
from sparkdispatch.taskexecutor.runner import SLOT_RELEASE_MARGIN_S, TaskRunner
from sparkdispatch.taskexecutor.slot_table import SlotTable
from sparkdispatch.taskexecutor.server_watch import ConnectServerWatchStep, WorkerDaemonReaperStep
from sparkdispatch.taskexecutor.slot_pool import SlotProcessPool
from sparkdispatch.taskexecutor.worker import MasterConnection, MasterConnectionStep, TaskExecutorIdentity
from sparkdispatch.taskexecutor.worker_daemons import WorkerDaemonTemplate
from sparkdispatch.model.job_graph import POOL_PATTERN, POOL_RULE

log = logging.getLogger(__name__)


@dataclass
class TaskExecutor:
    """The parts of a running TaskExecutor the Celery task, control command and worker step use."""

    config: Configuration
    identity: TaskExecutorIdentity
    slots: SlotTable
    runner: TaskRunner
    connection: MasterConnection
    servers: ConnectServers
    pool: SlotProcessPool
    #: where it keeps results for the tasks placed beside it (`kept_results`)
    kept_results_dir: Path


def default_task_executor_id(config: Configuration) -> str:
    """`taskexecutor.id`, else `<hostname>-<random>`."""
    return config.get(TASKEXECUTOR_ID) or f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"


def task_executor_pool(config: Configuration) -> str:
    """`taskexecutor.pool`; `ConfigurationError` for a name no JobGraph could give."""
    pool = config.get(TASKEXECUTOR_POOL)
    if not POOL_PATTERN.fullmatch(pool):
        raise ConfigurationError(f"taskexecutor.pool {pool!r} {POOL_RULE}")
    return pool


def run_task_executor(config: Configuration, *, task_executor_id: str | None = None, loglevel: str = "INFO") -> int:
    """Start a TaskExecutor and block until its worker stops (SIGTERM / SIGINT: warm shutdown).

    Returns the worker's exit code: 0 after a requested shutdown, non-zero when the worker gave up
    (an unrecoverable error), so a supervisor restarts the TaskExecutor.
    """
    keep_private(config.storage_dir, results_dir=config.results_dir)
    te_id = task_executor_id or default_task_executor_id(config)
    identity = TaskExecutorIdentity(
        task_executor_id=te_id,
        hostname=f"{te_id}@{socket.gethostname()}",
        queue=queue_name(te_id),
        spark_master=config.get(SPARK_MASTER),
        pool=task_executor_pool(config),
    )
    slot_count = config.get(TASKEXECUTOR_SLOTS)
    log.info(
        "TaskExecutor %s starting: %d slots in pool %s, queue %s, Spark %s",
        te_id,
        slot_count,
        identity.pool,
        identity.queue,
        identity.spark_master,
    )

    # Warm before registering: the ResourceManager sees slots only once they can run tasks at once.
    # The server is started from this thread: it is killed when the thread that started it ends.
    # Started from this thread too, the worker-daemon template lives as long as the TaskExecutor.
    daemon_template = None
    if config.get(TASKEXECUTOR_PYTHON_WORKERS_TEMPLATE) and is_local_master(identity.spark_master):
        daemon_template = WorkerDaemonTemplate(config.storage_dir / "te-work" / te_id / "python-worker-daemons")
        daemon_template.start()

    def new_server() -> ConnectServer:
        return ConnectServer(
            ConnectServerSettings.from_config(config),
            work_dir=config.storage_dir / "te-work" / te_id,
            app_name=f"sparkdispatch-{te_id}",
            daemon_template=daemon_template,
        )

    try:
        server = new_server()
        server.start()
        servers = ConnectServers(server, successor=new_server)
        kept_dir = kept_results_dir(config.storage_dir, te_id)
        kept_results.clear(kept_dir)
        pool_settings = replace(SlotPoolSettings.from_config(config), kept_results_dir=str(kept_dir))
        pool = SlotProcessPool(pool_settings, connect_url=server.url, driver_log=str(server.log_path))
        try:
            pool.start()
            return _serve(config, identity, servers, pool, pool_settings, kept_dir=kept_dir, loglevel=loglevel)
        finally:
            pool.close()
            servers.stop()
    finally:
        if daemon_template is not None:
            daemon_template.stop()


def _serve(
    config: Configuration,
    identity: TaskExecutorIdentity,
    servers: ConnectServers,
    pool: SlotProcessPool,
    pool_settings: SlotPoolSettings,
    *,
    kept_dir: Path,
    loglevel: str,
) -> int:
    """Register and serve deployments until the worker stops; returns its exit code."""
    te_id = identity.task_executor_id
    slot_count = config.get(TASKEXECUTOR_SLOTS)
    # Only what a TaskExecutor needs of HA: it follows the leader and reads blobs, creating nothing.
    retrieval = create_leader_retrieval(config)
    client = MasterClient(config)
    stop_metrics: list[Callable[[], None]] = []
    try:
        retrieval.start(client.leader_changed)
        slots = SlotTable(slot_count)
        if config.get(HA_MODE) == "none":  # no ZooKeeper publishes the session: the master tells it
            asked = AskedLeaderSession(retrieval, client)
            current_leader, session_refused = asked.current, asked.forget
        else:
            current_leader, session_refused = retrieval.current, lambda: None
        connection = MasterConnection(
            config,
            identity=identity,
            slots=slots,
            client=client,
            current_leader=current_leader,
            session_refused=session_refused,
            kept_results_dir=kept_dir,
        )
        runner = TaskRunner(
            pool=pool,
            slots=slots,
            reporter=connection,
            task_executor_id=te_id,
            artifacts=ArtifactCache(
                _artifact_fetcher(client, retrieval),
                config.storage_dir / "te-cache" / te_id,
                max_size=config.get(TASKEXECUTOR_ARTIFACT_CACHE_MAX_SIZE),
            ),
            environments=_python_environments(config),
            slot_release_timeout_s=pool_settings.cancellation_timeout + SLOT_RELEASE_MARGIN_S,
            start_deadline=connection.start_deadline,
        )
        runtime = TaskExecutor(
            config=config,
            identity=identity,
            slots=slots,
            runner=runner,
            connection=connection,
            servers=servers,
            pool=pool,
            kept_results_dir=kept_dir,
        )
        if config.get(TASKEXECUTOR_METRICS_PORT):
            from sparkdispatch.taskexecutor.metrics import TaskExecutorParts, serve_metrics

            parts = TaskExecutorParts(
                slots=slot_count,
                busy_slots=lambda: len(slots.running()),
                ended_attempts=runner.ended_counts,
                slot_processes_lost=lambda: pool.processes_lost,
                connect_server_healthy=servers.is_healthy,
                connect_server_starts=lambda: servers.starts,
                connect_server_recycles=lambda: servers.recycles,
            )
            metrics_server, _ = serve_metrics(
                te_id,
                parts,
                port=config.get(TASKEXECUTOR_METRICS_PORT),
                address=config.get(TASKEXECUTOR_METRICS_BIND_ADDRESS),
            )
            stop_metrics.append(metrics_server.shutdown)
        app = create_celery_app(config, task_executor=runtime)
        app.steps["worker"].add(MasterConnectionStep)
        app.steps["worker"].add(ConnectServerWatchStep)
        app.steps["worker"].add(WorkerDaemonReaperStep)
        # Twice the slots' threads: a slot's next deployment comes as soon as its last attempt is
        # reported, while that attempt's thread still returns. With one thread per slot it then
        # waited for one, and with as many unacknowledged messages as its prefetch count a worker on
        # a polling broker stops looking for messages until its loop acknowledges them (up to 2 s).
        worker = app.Worker(
            hostname=identity.hostname,
            pool="threads",
            concurrency=2 * slot_count,
            queues=[identity.queue],
            loglevel=loglevel,
            without_mingle=True,
            without_gossip=True,
            without_heartbeat=True,
            quiet=True,
        )
        worker.start()
        exit_code = int(worker.exitcode or 0)
        log.info("TaskExecutor %s stopped (exit code %s)", te_id, exit_code)
        return exit_code
    finally:
        for stop in stop_metrics:
            stop()
        retrieval.close()
        client.close()


def _artifact_fetcher(client: MasterClient, retrieval: ClosableLeaderRetrieval) -> Callable[[str, Path], Path]:
    """Fetches an artifact from the current leader (Flink's BlobServer role): a TaskExecutor's host
    needs no mount of the masters' storage for user code."""

    def fetch(key: str, directory: Path) -> Path:
        leader = retrieval.current()
        if leader is None:
            raise ServiceUnavailable(f"no leading master is known to fetch artifact {key} from")
        return client.fetch_artifact(leader.address, key, directory)

    return fetch


def _python_environments(config: Configuration) -> PythonEnvironments:
    """The jobs' Python environments here; without `uv` a job that asks for one fails (said now too)."""
    environments = PythonEnvironments(PythonEnvironmentSettings.from_config(config))
    if find_uv() is None:
        log.warning(
            "no `uv` next to %s or on PATH: jobs that name an environment will fail with EnvironmentBuildFailed "
            "(install sparkdispatch[taskexecutor], which brings it)",
            sys.executable,
        )
    return environments
