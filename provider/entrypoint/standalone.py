"""`sparkdispatch standalone`: a master and N TaskExecutors on this machine, embedded defaults.

As `airflow standalone` or Flink's `start-cluster.sh`: HA mode `none` (stores under
`--storage`), Celery over kombu's `filesystem://` transport (no Redis), Spark `local[*]`. The
master runs in this process; each TaskExecutor is a child process. Ctrl-C or SIGTERM stops
them all; killed with SIGKILL, it takes them along (`sparkdispatch.lifeline`: each TaskExecutor
gets SIGKILL, and its Spark Connect server and slot processes follow it the same way).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from sparkdispatch.config import Configuration
from sparkdispatch.config.options import BROKER_URL, STORAGE_DIR, TASKEXECUTOR_SLOTS
from sparkdispatch.entrypoint.master import Master
from sparkdispatch.lifeline import tied_to_parent
from sparkdispatch.storage.private import keep_private

log = logging.getLogger(__name__)

STOP_GRACE_S = 10.0
RESTART_BACKOFF_S = (1.0, 30.0)  # first and longest pause before a dead TaskExecutor is started again


def standalone_config(config: Configuration, *, slots: int | None = None, storage: str | None = None) -> Configuration:
    """`config` with the embedded defaults of standalone mode on top."""
    storage_dir = Path(os.path.expanduser(storage or config.get(STORAGE_DIR))).resolve()
    overrides: dict[str, object] = {"high-availability.mode": "none", "storage.dir": str(storage_dir)}
    if config.get(BROKER_URL) == BROKER_URL.default:
        overrides["broker.url"] = "filesystem://"
    if slots is not None:
        overrides["taskexecutor.slots"] = slots
    return config.with_overrides(overrides)


class StandaloneCluster:
    """The master (in this process) and its TaskExecutor child processes."""

    def __init__(self, config: Configuration, *, taskexecutors: int = 1) -> None:
        self.config = config
        self.taskexecutor_count = taskexecutors
        self.master: Master | None = None
        self.processes: list[subprocess.Popen[bytes]] = []
        self._log_dir = config.storage_dir / "log"
        # the TaskExecutors' configuration, secrets included, in a file of mode 0600: not on their command lines
        self._child_config = config.storage_dir / "standalone" / "taskexecutor.yaml"
        self._supervisor: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.config.storage_dir.mkdir(parents=True, exist_ok=True)
        if not self.config.cluster_secret:
            # the TaskExecutors' own credential: no user's token, or none at all, lets a caller act as one
            self.config = self.config.with_overrides({"cluster.secret": secrets.token_urlsafe(32)})
        self.master = Master(self.config)
        await self.master.start()
        # TaskExecutors find the master at rest.address:rest.port, so pass the bound port on
        self.config = self.config.with_overrides({"rest.port": self.master.rest.port})
        self.config.write_file(self._child_config)
        self._log_dir.mkdir(exist_ok=True)
        for index in range(self.taskexecutor_count):
            self.processes.append(self._spawn_task_executor(index))
        self._supervisor = asyncio.create_task(self._supervise(), name="taskexecutor-supervisor")

    async def _supervise(self) -> None:
        """Start a TaskExecutor again when it dies, as a process supervisor would."""
        pause = [RESTART_BACKOFF_S[0]] * len(self.processes)
        while True:
            await asyncio.sleep(0.5)
            for index, process in enumerate(self.processes):
                if process.poll() is None:
                    continue
                log.warning(
                    "TaskExecutor %d exited with %s; starting it again in %.0fs (log: %s)",
                    index,
                    process.returncode,
                    pause[index],
                    self._log_dir / f"taskexecutor-{index}.log",
                )
                await asyncio.sleep(pause[index])
                pause[index] = min(pause[index] * 2, RESTART_BACKOFF_S[1])
                self.processes[index] = self._spawn_task_executor(index)

    def _spawn_task_executor(self, index: int) -> subprocess.Popen[bytes]:
        argv = [
            sys.executable,
            "-m",
            "sparkdispatch.taskexecutor",
            "--config",
            str(self._child_config),
            "-D",
            f"taskexecutor.id=standalone-{index}",
        ]
        # from the event loop's thread, the main thread: the TaskExecutor dies when this process does
        with open(self._log_dir / f"taskexecutor-{index}.log", "ab") as out:
            return subprocess.Popen(
                tied_to_parent(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    async def wait_for_task_executors(self, timeout: float = 120.0) -> int:
        """Wait until every TaskExecutor registered; the number that did."""
        assert self.master is not None
        deadline = time.monotonic() + timeout
        registered = 0
        while time.monotonic() < deadline:
            if self.master.is_leader:
                registered = self.master.leader_components().resource_manager.overview().taskmanagers
                if registered >= self.taskexecutor_count:
                    break
            await asyncio.sleep(0.2)
        return registered

    async def stop(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            await asyncio.gather(self._supervisor, return_exceptions=True)
        for process in self.processes:
            # the worker alone: it stops its own Spark JVM, which a signal to the group would kill first
            _signal(process, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for process in self.processes:
            try:
                await asyncio.to_thread(process.wait, max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal(process, signal.SIGKILL, group=True)
                await asyncio.to_thread(process.wait)
        self.processes.clear()
        if self.master is not None:
            await self.master.stop()


def _signal(process: subprocess.Popen[bytes], sig: int, *, group: bool = False) -> None:
    try:
        if group:
            os.killpg(process.pid, sig)
        else:
            process.send_signal(sig)
    except ProcessLookupError:
        pass


async def run_standalone(
    config: Configuration, *, taskexecutors: int = 1, slots: int | None = None, storage: str | None = None
) -> int:
    """Run the standalone cluster until Ctrl-C or SIGTERM."""
    config = standalone_config(config, slots=slots, storage=storage)
    keep_private(config.storage_dir, results_dir=config.results_dir)
    cluster = StandaloneCluster(config, taskexecutors=taskexecutors)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await cluster.start()
    try:
        assert cluster.master is not None
        address = cluster.master.address
        print(f"sparkdispatch standalone: REST {address}  web UI {address}/ui/", flush=True)
        print(
            f"  storage {cluster.config.storage_dir}; starting {taskexecutors} TaskExecutor(s) "
            f"with {cluster.config.get(TASKEXECUTOR_SLOTS)} slot(s) each",
            flush=True,
        )
        waiter = asyncio.create_task(cluster.wait_for_task_executors())
        done, _ = await asyncio.wait({waiter, asyncio.create_task(stop.wait())}, return_when=asyncio.FIRST_COMPLETED)
        if waiter in done:
            print(
                f"  {waiter.result()} TaskExecutor(s) ready. Submit with:\n"
                f"    sparkdispatch -D rest.port={cluster.master.rest.port} run GRAPH.json --wait",
                flush=True,
            )
        await stop.wait()
        waiter.cancel()
    finally:
        print("sparkdispatch standalone: stopping", flush=True)
        await cluster.stop()
    return 0
