"""Masters and TaskExecutors as real local processes: the production topology without Docker.

`LocalCluster` starts `sparkdispatch master` and `sparkdispatch taskexecutor` processes with
one shared configuration (ZooKeeper HA and Redis, or HA mode `none`), finds the leader, kills,
pauses and restarts processes for failover tests, and stops everything it started (a
TaskExecutor's Spark Connect server and slot processes too).

`TaskExecutorProcess` is one TaskExecutor process alone, for tests that play the master
themselves. Both are `Watched` processes: a wait (`sparkdispatch.testing.waiting`) given them
fails at once when one of their processes exits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sparkdispatch.client import SparkDispatchClient
from sparkdispatch.config import Configuration
from sparkdispatch.config.options import HA_MODE, REST_ADDRESS
from sparkdispatch.errors import SparkDispatchError
from sparkdispatch.model.job_result import JobResult
from sparkdispatch.model.rest_shapes import Overview, Submitted
from sparkdispatch.testing.http import http_json, upload_artifact
from sparkdispatch.testing.job_result import wait_for_result
from sparkdispatch.testing.services import file_tail, free_port, kill_process_group, python_module
from sparkdispatch.testing.waiting import Watched, eventually, eventually_blocking


class LocalCluster:
    """`masters` master processes and `taskexecutors` TaskExecutor processes sharing `config`."""

    def __init__(
        self,
        config: Configuration,
        *,
        masters: int = 1,
        taskexecutors: int = 1,
        log_dir: Path | None = None,
        log_level: str | None = None,
    ) -> None:
        if masters > 1 and config.get(HA_MODE) != "zookeeper":
            raise ValueError("several masters need high-availability.mode: zookeeper")
        self.config = config
        self.log_dir = log_dir or config.storage_dir / "log"
        self.log_level = log_level  # the processes' `--log-level`; None: their default
        self.name = uuid.uuid4().hex[:6]  # TaskExecutor ids (and so their queues) are this cluster's own
        self.master_ports = [free_port() for _ in range(masters)]
        if config.get(HA_MODE) == "none":
            # TaskExecutors find a master without HA at rest.address:rest.port
            self.config = config.with_overrides({"rest.port": self.master_ports[0]})
        self.masters: list[subprocess.Popen[bytes] | None] = [None] * masters
        self.taskexecutors: list[subprocess.Popen[bytes] | None] = [None] * taskexecutors
        self._paused: dict[int, list[ProcessId]] = {}  # TaskExecutor index -> the processes SIGSTOPped

    # -- processes ------------------------------------------------------------------------------

    def start(self, *, wait_for_taskexecutors: bool = True, timeout: float = 180.0) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            for index in range(len(self.masters)):
                self.start_master(index)
            self.wait_for_leader(timeout=timeout)
            for index in range(len(self.taskexecutors)):
                self.start_task_executor(index)
            if wait_for_taskexecutors:
                self.wait_for_task_executors(len(self.taskexecutors), timeout=timeout)
        except BaseException:
            self.stop()
            raise

    def start_master(self, index: int) -> None:
        argv = [
            *python_module("sparkdispatch.entrypoint.cli", log_level=self.log_level),
            *self.config.to_overrides(),
            "-D",
            f"rest.port={self.master_ports[index]}",
            "master",
        ]
        self.masters[index] = self._spawn(argv, f"master-{index}.log")

    def start_task_executor(self, index: int) -> None:
        argv = [
            *python_module("sparkdispatch.taskexecutor", log_level=self.log_level),
            *self.config.to_overrides(),
            "-D",
            f"taskexecutor.id={self.task_executor_id(index)}",
        ]
        self.taskexecutors[index] = self._spawn(argv, f"taskexecutor-{index}.log")

    def task_executor_id(self, index: int) -> str:
        """The `taskexecutor.id` of TaskExecutor `index` (the same after a restart)."""
        return f"te-{self.name}-{index}"

    def _spawn(self, argv: list[str], log_name: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
        with open(self.log_dir / log_name, "ab") as out:
            # a restarted process appends to the same log: mark where each run begins
            out.write(
                f"=== {log_name.removesuffix('.log')} started at {time.strftime('%H:%M:%S')} "
                f"({time.time():.3f})\n".encode()
            )
            out.flush()
            return subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
            )

    def kill_master(self, index: int, sig: int = signal.SIGKILL) -> None:
        self._kill(self.masters[index], sig)
        self.masters[index] = None

    def kill_task_executor(self, index: int, sig: int = signal.SIGKILL) -> None:
        if sig == signal.SIGKILL:
            self._paused.pop(index, None)  # SIGKILL ends stopped processes as they are
        else:
            self.resume_task_executor(index)  # other signals wait for SIGCONT
        self._kill(self.taskexecutors[index], sig)
        self.taskexecutors[index] = None

    def pause_task_executor(self, index: int) -> None:
        """SIGSTOP a TaskExecutor with its Spark Connect server and slot processes (a frozen host)."""
        process = self.taskexecutors[index]
        if process is None or process.poll() is not None or index in self._paused:
            return
        tree = process_tree(process.pid)
        for member in tree:
            _signal(member, signal.SIGSTOP)
        self._paused[index] = tree

    def resume_task_executor(self, index: int) -> None:
        """SIGCONT what `pause_task_executor` stopped."""
        for member in self._paused.pop(index, []):
            _signal(member, signal.SIGCONT)

    @staticmethod
    def _kill(process: subprocess.Popen[bytes] | None, sig: int, grace: float = 15.0) -> None:
        """SIGKILL takes the process and everything it started (a crash). Any other signal goes to
        the process alone, which stops its own children (a TaskExecutor its Spark JVM); SIGKILL
        after `grace`, and for whatever it left behind."""
        if process is None or process.poll() is not None:
            return
        tree = process_tree(process.pid)[1:]  # before the kill: orphans cannot be found by their parent
        try:
            if sig == signal.SIGKILL:
                os.killpg(process.pid, sig)
                for member in tree:
                    _signal(member, sig)
            else:
                process.send_signal(sig)
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        except ProcessLookupError:
            return
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the process if it hung, and whatever it left behind
        except ProcessLookupError:
            pass
        for member in tree:
            _signal(member, signal.SIGKILL)
        process.wait(timeout=10)

    def stop(self) -> None:
        """Stop every process this cluster started (TaskExecutors first; paused ones resumed first)."""
        for index in list(self._paused):
            self.resume_task_executor(index)
        for processes in (self.taskexecutors, self.masters):
            for process in processes:
                if process is not None and process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for index, process in enumerate(processes):
                self._kill(process, signal.SIGTERM)
                processes[index] = None

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- REST ---------------------------------------------------------------------------------

    def master_url(self, index: int) -> str:
        return f"http://{self.config.get(REST_ADDRESS)}:{self.master_ports[index]}"

    def request(self, method: str, url: str, body: Any = None, *, timeout: float = 30.0) -> tuple[int, Any]:
        """One HTTP call; (status, decoded JSON body or None)."""
        return http_json(method, url, body, token=self.config.auth_token, timeout=timeout)

    def overview(self, index: int) -> Overview | None:
        """Master `index`'s own `GET /overview`; None when it is not running or does not answer."""
        process = self.masters[index]
        if process is None or process.poll() is not None:
            return None
        try:
            status, body = self.request("GET", self.master_url(index) + "/overview", timeout=3)
        except OSError:
            return None
        return Overview.from_dict(body) if status == 200 else None

    def leaders(self) -> list[int]:
        """The masters whose `/overview` says they lead (two while a deposed leader has not noticed yet)."""
        return [
            index
            for index in range(len(self.masters))
            if (overview := self.overview(index)) is not None and overview.is_leader
        ]

    def leader_index(self) -> int | None:
        return next(iter(self.leaders()), None)

    def wait_for_leader(self, *, timeout: float = 60.0, exclude: int | None = None, watch: bool = True) -> int:
        """The index of the one master that leads, once exactly one does (and it is not `exclude`); with
        `watch`, a process of the cluster that exits meanwhile ends the wait (`WatchedProcessExited`)."""
        return single_leader(self.leaders, exclude=exclude, timeout=timeout, processes=[self] if watch else [])

    def leader_url(self, timeout: float = 60.0, *, watch: bool = True) -> str:
        return self.master_url(self.wait_for_leader(timeout=timeout, watch=watch))

    def wait_for_task_executors(self, count: int, *, timeout: float = 120.0) -> None:
        def registered() -> bool:
            leaders = self.leaders()
            overview = self.overview(leaders[0]) if len(leaders) == 1 else None
            return overview is not None and overview.taskmanagers >= count

        eventually_blocking(
            registered, f"{count} registered TaskExecutor(s)", timeout=timeout, interval=0.2, processes=[self]
        )

    def exited(self) -> str | None:
        for name, processes in (("master", self.masters), ("taskexecutor", self.taskexecutors)):
            for index, process in enumerate(processes):
                if process is not None and process.poll() is not None:
                    tail = file_tail(self.log_dir / f"{name}-{index}.log", 40)
                    return f"{name} {index} exited with {process.returncode}:\n{tail}"
        return None

    def logs(self) -> str:
        return f"logs in {self.log_dir}"

    def submit(self, graph: dict[str, Any]) -> str:
        status, body = self.request("POST", self.leader_url() + "/jobs", graph)
        if status not in (200, 202):
            raise RuntimeError(f"submission refused with {status}: {body}")
        return Submitted.from_dict(body).job_id

    def wait_for_result(self, job_id: str, *, timeout: float = 180.0) -> JobResult:
        """The job's JobResult, asked of whichever master leads (following failovers)."""
        return wait_for_result(
            lambda: [self.master_url(index) for index in self.leaders()],
            job_id,
            token=self.config.auth_token,
            timeout=timeout,
        )

    def upload_artifact(self, path: Path) -> str:
        return upload_artifact(self.leader_url(), path, token=self.config.auth_token)


class TaskExecutorProcess:
    """`python -m sparkdispatch.taskexecutor` in a process group of its own, its output in
    `<log_dir>/<id>.log`."""

    def __init__(self, config: Configuration, log_dir: Path, *, task_executor_id: str | None = None) -> None:
        self.id = task_executor_id or f"te-{uuid.uuid4().hex[:6]}"
        self.log = log_dir / f"{self.id}.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [*python_module("sparkdispatch.taskexecutor"), "--id", self.id, *config.to_overrides()],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
            )

    def kill(self) -> None:
        """SIGKILL the process group, as a machine dying."""
        kill_process_group(self.process)

    def log_tail(self, lines: int = 40) -> str:
        return file_tail(self.log, lines)

    def exited(self) -> str | None:
        if self.process.poll() is None:
            return None
        return f"TaskExecutor {self.id} exited with {self.process.returncode}:\n{self.log_tail()}"

    def logs(self) -> str:
        return f"--- {self.id}\n{self.log_tail()}"


def single_leader(
    leaders: Callable[[], Sequence[int]],
    *,
    exclude: int | None = None,
    timeout: float,
    processes: Sequence[Watched] = (),
) -> int:
    """The index `leaders()` names once it names exactly one, other than `exclude`: the one leader wait
    of local clusters and the multi-host ensemble's benchmarks."""

    def one() -> list[int]:
        current = leaders()
        return list(current) if len(current) == 1 and current[0] != exclude else []

    what = "one master to lead" + (f" other than master {exclude}" if exclude is not None else "")
    [index] = eventually_blocking(one, what, timeout=timeout, interval=0.1, processes=processes)
    return index


async def task_executors_registered(
    client: SparkDispatchClient, count: int, *, processes: Sequence[TaskExecutorProcess], timeout: float
) -> None:
    """Wait until the leader lists `count` TaskExecutors (an AssertionError as `eventually`'s)."""

    async def registered() -> bool:
        try:
            return (await client.overview()).taskmanagers == count
        except SparkDispatchError:  # no leader yet
            return False

    await eventually(
        registered, f"{count} registered TaskExecutor(s)", processes=processes, timeout=timeout, interval=0.05
    )


ProcessId = tuple[int, int]  # (pid, start time in clock ticks): a pid the kernel reused is another process


def stat_fields(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the process's name (which may hold spaces and
    parentheses): its state, its parent's pid, its group, ... (`man 5 proc`, from the third on;
    its start time is `[19]`); OSError when it is gone."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2 :].split()


def parent_pid(pid: int) -> int:
    """The process's parent's pid; OSError when it is gone."""
    return int(stat_fields(pid)[1])


def process_tree(pid: int) -> list[ProcessId]:
    """`pid` and every live descendant, parents before children (read from /proc)."""
    children: dict[int, list[ProcessId]] = {}
    started: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = stat_fields(int(entry.name))
        except OSError:
            continue
        member = (int(entry.name), int(fields[19]))
        started[member[0]] = member[1]
        children.setdefault(int(fields[1]), []).append(member)
    if pid not in started:
        return []
    found = [(pid, started[pid])]
    frontier = found
    while frontier:
        frontier = [child for parent, _ in frontier for child in children.get(parent, [])]
        found.extend(frontier)
    return found


def _signal(member: ProcessId, sig: int) -> None:
    """Signal the process unless it is gone (or its pid now names another process)."""
    pid, started = member
    try:
        if int(stat_fields(pid)[19]) == started:
            os.kill(pid, sig)
    except (OSError, ValueError, IndexError):
        pass
