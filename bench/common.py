"""Helpers shared by the benchmarks: services, clusters, job graphs, statistics, results.

Every process a benchmark starts is stopped on exit, on errors, on Ctrl-C and on SIGTERM:
`bench_main` turns SIGTERM into KeyboardInterrupt so the benchmarks' `finally` blocks run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sparkdispatch.config import Configuration
from sparkdispatch.testing.hosts import CLUSTER_TOKEN, MultiHostCluster
from sparkdispatch.testing.http import http_json, upload_artifact
from sparkdispatch.testing.local_cluster import LocalCluster, process_tree
from sparkdispatch.testing.services import RedisServer, ZooKeeperServer, stop_process_group
from sparkdispatch.testing.standalone_process import StandaloneProcess

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "bench" / "results"
TASKS_DIR = REPO / "bench" / "tasks"
BENCH_TASKS = TASKS_DIR / "bench_tasks.py"
VENV_BIN = Path(sys.executable).parent
CLUSTER_START_TIMEOUT_S = 240.0


# -- running a benchmark --------------------------------------------------------------------------


def bench_main(run: Callable[[], int]) -> None:
    """Run `run()` with SIGTERM mapped to KeyboardInterrupt; exit with its code (130 on Ctrl-C)."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
    try:
        code = run()
    except KeyboardInterrupt:
        print("interrupted; every process started was stopped", file=sys.stderr)
        code = 130
    sys.exit(code)


def add_run_options(parser: argparse.ArgumentParser, *, quick: str) -> None:
    """`--work-dir`, and `--quick`: a smoke run (`quick` says what it cuts) whose results go to `<name>.quick.json`."""
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="keep storage and logs here (default: a temporary directory, removed at the end)")
    parser.add_argument("--quick", action="store_true", help=f"smoke run: {quick}")


def add_pipeline_options(parser: argparse.ArgumentParser) -> None:
    """`--slots` of a standalone's TaskExecutor and `--rows` of the sales pipeline (`sales_graph`)."""
    parser.add_argument("--slots", type=int, default=2, help="slots of the standalone's TaskExecutor")
    parser.add_argument("--rows", type=int, default=100_000, help="orders the pipeline generates")


def bench_env() -> dict[str, str]:
    """The environment for child processes: the venv's bin on PATH (spark-submit finds SPARK_HOME
    through `python3`), Spark bound to loopback."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    return env


class BenchCluster(LocalCluster):
    """A LocalCluster whose processes log at `log_level` (DEBUG for profiling runs)."""

    def __init__(self, config: Configuration, *, log_level: str = "INFO", **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.log_level = log_level

    def start_master(self, index: int) -> None:
        argv = [sys.executable, "-m", "sparkdispatch.cli", "--log-level", self.log_level,
                *self.config.to_overrides(), "-D", f"rest.port={self.master_ports[index]}", "master"]
        self.masters[index] = self._spawn(argv, f"master-{index}.log")

    def start_task_executor(self, index: int) -> None:
        argv = [sys.executable, "-m", "sparkdispatch.taskexecutor", "--log-level", self.log_level,
                *self.config.to_overrides(), "-D", f"taskexecutor.id=te-{self.name}-{index}"]
        self.taskexecutors[index] = self._spawn(argv, f"taskexecutor-{index}.log")

    def pid(self, kind: str, index: int = 0) -> int:
        processes = self.masters if kind == "master" else self.taskexecutors
        process = processes[index]
        if process is None:
            raise RuntimeError(f"{kind} {index} is not running")
        return process.pid


def cluster_config(storage: Path, *, broker_url: str, zookeeper_hosts: str | None = None,
                   session_timeout: str = "4s", slots: int = 1, **extra: Any) -> Configuration:
    """A benchmark cluster's configuration: HA `zookeeper` when `zookeeper_hosts`, else `none`."""
    mapping: dict[str, Any] = {
        "storage.dir": str(storage),
        "broker.url": broker_url,
        "heartbeat.interval": "1s",
        "heartbeat.timeout": "10s",
        "taskexecutor.slots": slots,
        "rest.execution-result.long-poll": "5s",
        "spark.master": "local[2]",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
    }
    if zookeeper_hosts:
        mapping.update({
            "high-availability.mode": "zookeeper",
            "high-availability.zookeeper.quorum": zookeeper_hosts,
            "high-availability.zookeeper.path.root": f"/bench-{uuid.uuid4().hex[:10]}",
            "high-availability.zookeeper.session-timeout": session_timeout,
        })
    mapping.update(extra)
    return Configuration.from_mapping(mapping)


@contextlib.contextmanager
def zookeeper_cluster(work_dir: Path | None, prefix: str, *, masters: int, taskexecutors: int,
                      **config: Any) -> Iterator[tuple[BenchCluster, ZooKeeperServer, RedisServer]]:
    """ZooKeeper, Redis and a started BenchCluster with ZooKeeper HA on them, storage and logs in
    `scratch_dir(work_dir, prefix)`; `config` goes to `cluster_config`. Everything is stopped at the
    end, the cluster before the directory its processes write into goes."""
    zookeeper, redis = ZooKeeperServer(), RedisServer()
    with zookeeper, redis, scratch_dir(work_dir, prefix) as scratch:
        storage = Path(scratch)
        cluster = BenchCluster(cluster_config(storage, broker_url=redis.url, zookeeper_hosts=zookeeper.hosts,
                                              **config),
                               masters=masters, taskexecutors=taskexecutors, log_dir=storage / "log")
        try:
            cluster.start(timeout=CLUSTER_START_TIMEOUT_S)
            yield cluster, zookeeper, redis
        finally:
            cluster.stop()


# -- job graphs -----------------------------------------------------------------------------------


def chain_graph(name: str, length: int, *, entrypoint: str, artifact: str,
                params: dict[str, Any] | None = None) -> dict[str, Any]:
    """`length` vertices v00 → v01 → ..., each running `entrypoint` once."""
    vertices = [{"id": f"v{i:02d}", "entrypoint": entrypoint, "parallelism": 1,
                 "inputs": [f"v{i - 1:02d}"] if i else [], "params": dict(params or {})}
                for i in range(length)]
    return {"name": name, "vertices": vertices, "artifacts": [artifact],
            "restart_strategy": {"type": "fixed-delay", "attempts": 0, "delay_s": 0.0}}


# -- processes I start outside LocalCluster -------------------------------------------------------


stop_process = stop_process_group  # the benchmarks' name for it


# -- statistics and results -----------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), nearest rank."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def machine_info() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    versions: dict[str, str | None] = {}
    for package in ("pyspark", "celery", "kombu", "kazoo", "aiohttp"):
        try:
            from importlib.metadata import version

            versions[package] = version(package)
        except Exception:  # noqa: BLE001 - a missing version is not worth failing a benchmark over
            versions[package] = None
    return {"cpus": os.cpu_count(), "cpu_model": cpu, "memory_gib": memory_gib,
            "python": platform.python_version(), "platform": platform.platform(), "packages": versions}


def write_results(name: str, report: dict[str, Any]) -> Path:
    """bench/results/<name>.json with the machine and the date added."""
    report = {"benchmark": name, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": machine_info(), **report}
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def save_results(name: str, report: dict[str, Any], *, quick: bool = False) -> None:
    """`write_results` under `name` (`name.quick` for a smoke run, which leaves the real results alone);
    prints where."""
    print(f"wrote {write_results(name + ('.quick' if quick else ''), report)}")


def load_change(report: dict[str, Any]) -> str:
    """`load average <at start> -> <at end> on N cores`, from the report's `load_average_at_*`."""
    return (f"load average {report['load_average_at_start']} -> {report['load_average_at_end']} on "
            f"{os.cpu_count()} cores")


def latency_ms(seconds: Sequence[float]) -> dict[str, float | None]:
    """Median, p99 and max of latencies in seconds, in ms (`latency_ms_median`, `_p99`, `_max`; None without any)."""
    if not seconds:
        return {"latency_ms_median": None, "latency_ms_p99": None, "latency_ms_max": None}
    return {"latency_ms_median": round(median(seconds) * 1000, 2),
            "latency_ms_p99": round(percentile(seconds, 99) * 1000, 2),
            "latency_ms_max": round(max(seconds) * 1000, 2)}


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    rows = [[str(cell) for cell in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))


# -- REST -----------------------------------------------------------------------------------------


class Rest:
    """Blocking calls to one master's REST endpoint (JSON bodies), for masters not in a LocalCluster."""

    def __init__(self, base_url: str, *, token: str = "") -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token

    def request(self, method: str, path: str, body: Any = None, *, timeout: float = 30.0) -> tuple[int, Any]:
        return http_json(method, self.base_url + path, body, token=self.token, timeout=timeout)

    def submit(self, graph: dict[str, Any]) -> str:
        status, body = self.request("POST", "/jobs", graph)
        if status not in (200, 202):
            raise RuntimeError(f"submission refused with {status}: {body}")
        return str(body["job_id"])

    def wait_for_result(self, job_id: str, *, timeout: float = 300.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, body = self.request("GET", f"/jobs/{job_id}/execution-result", timeout=30)
            if status == 200 and body["status"]["id"] == "COMPLETED":
                return dict(body["job_execution_result"])
            if status != 200:
                raise RuntimeError(f"execution-result of {job_id} answered {status}: {body}")
        raise TimeoutError(f"job {job_id} did not finish within {timeout:.0f}s")

    def run_job(self, graph: dict[str, Any], *, timeout: float) -> tuple[float, float]:
        """Submit `graph` and wait for its result: (seconds from POST to the result, the master's duration of
        the job); RuntimeError unless it FINISHED."""
        begin = time.perf_counter()
        result = self.wait_for_result(self.submit(graph), timeout=timeout)
        wall = time.perf_counter() - begin
        if result["status"] != "FINISHED":
            raise RuntimeError(f"job {graph.get('name')!r} ended {result['status']}: {result.get('failure')}")
        return wall, result["duration_ms"] / 1000.0

    def upload_artifact(self, path: Path) -> str:
        return upload_artifact(self.base_url, path, token=self.token)

    def wait_for_task_executors(self, count: int, *, timeout: float, alive: Callable[[], bool]) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not alive():
                raise RuntimeError(f"the master at {self.base_url} exited")
            try:
                status, body = self.request("GET", "/overview", timeout=3)
                if status == 200 and body.get("taskmanagers", 0) >= count:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{count} TaskExecutor(s) did not register at {self.base_url} within {timeout:.0f}s")


@contextlib.contextmanager
def scratch_dir(keep: Path | None, prefix: str) -> Iterator[str]:
    """`keep` (created, left in place) or a temporary directory removed at the end."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield str(keep.resolve())
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
        yield scratch


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# -- a 3-node ZooKeeper ensemble on network namespaces (`--ensemble`) -----------------------------


class Ensemble:
    """A started MultiHostCluster (sparkdispatch.testing.hosts) as a benchmark on the bridge sees it:
    blocking calls to its masters (index 0 and 1, on hosts master-1 and master-2), which one leads,
    and a master cut off from the network (`cut`) and back (`heal`)."""

    def __init__(self, cluster: MultiHostCluster) -> None:
        self.cluster = cluster
        self.masters = [Rest(url, token=CLUSTER_TOKEN) for url in cluster.master_addresses]
        self.cut_off: set[int] = set()

    @property
    def log_dir(self) -> Path:
        return self.cluster.workdir

    @staticmethod
    def host(index: int) -> str:
        return f"master-{index + 1}"

    def master_url(self, index: int) -> str:
        return self.masters[index].base_url

    def request(self, method: str, url: str, body: Any = None, *, timeout: float = 30.0) -> tuple[int, Any]:
        """One HTTP call with the cluster's token; (status, decoded JSON body or None)."""
        return http_json(method, url, body, token=CLUSTER_TOKEN, timeout=timeout)

    def submit(self, graph: dict[str, Any]) -> str:
        return self.masters[self.wait_for_leader()].submit(graph)

    def upload_artifact(self, path: Path) -> str:
        return self.masters[self.wait_for_leader()].upload_artifact(path)

    def pids(self) -> dict[str, int]:
        """Host name → pid of the process on it (`ip netns exec` runs the command in its own place)."""
        return {name: process.pid for name, process in self.cluster.processes.items()}

    def overview(self, index: int) -> dict[str, Any] | None:
        """The master's own `/overview` (`is_leader`, `leader`, ...); None without an answer (a standby's
        asks the leader for its counts, for up to 2 s)."""
        try:
            status, body = self.masters[index].request("GET", "/overview", timeout=3)
        except OSError:
            return None
        return dict(body) if status == 200 else None

    def leads(self, index: int) -> bool:
        """Whether the master serves the leader-only `GET /jobs/overview` (a standby answers 503 at once)."""
        try:
            return self.masters[index].request("GET", "/jobs/overview", timeout=1)[0] == 200
        except OSError:
            return False

    def leaders(self) -> list[int]:
        """The masters not cut off whose `/overview` says they lead."""
        return [index for index in range(len(self.masters))
                if index not in self.cut_off and (overview := self.overview(index)) and overview["is_leader"]]

    def wait_for_leader(self, *, timeout: float = 60.0) -> int:
        """The index of the one master that leads, once there is exactly one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.alive()
            if len(leaders := self.leaders()) == 1:
                return leaders[0]
            time.sleep(0.1)
        raise TimeoutError(f"no single leader within {timeout:.0f}s; logs in {self.log_dir}")

    def cut(self, index: int) -> None:
        assert self.cluster.network is not None
        self.cluster.network.cut(self.host(index))
        self.cut_off.add(index)

    def heal(self, index: int) -> None:
        assert self.cluster.network is not None
        self.cluster.network.heal(self.host(index))
        self.cut_off.discard(index)

    def wait_for_result(self, job_id: str, *, timeout: float = 180.0) -> dict[str, Any]:
        """Poll the masters not cut off (a standby answers 503) until the job's JobResult exists."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for index, master in enumerate(self.masters):
                if index in self.cut_off:
                    continue
                try:
                    status, body = master.request("GET", f"/jobs/{job_id}/execution-result", timeout=10)
                except OSError:
                    continue
                if status == 200 and body["status"]["id"] == "COMPLETED":
                    return dict(body["job_execution_result"])
            time.sleep(0.1)
        raise TimeoutError(f"job {job_id} did not finish within {timeout:.0f}s; logs in {self.log_dir}")

    def alive(self) -> bool:
        """True, or RuntimeError with its log's tail if a process of the cluster exited."""
        for name, process in self.cluster.processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{self.cluster.log_tail(name)}")
        return True


@contextlib.contextmanager
def ensemble_cluster(work_dir: Path | None, prefix: str, *, task_executors: int, session_timeout: str = "4s",
                     **config: Any) -> Iterator[Ensemble]:
    """A MultiHostCluster — ZooKeeper ×3, Redis, two masters and `task_executors` TaskExecutors, each on a
    network namespace host of its own, configured as the docker-compose cluster with the partition
    test's HA settings and `config` on top — in `scratch_dir(work_dir, prefix)`, yielded once one master
    leads and every TaskExecutor registered. Every process and namespace goes at the end."""
    extra = {"high-availability.zookeeper.session-timeout": session_timeout,
             "high-availability.zookeeper.path.root": f"/bench-{uuid.uuid4().hex[:10]}",
             "high-availability.cluster-id": "bench", "taskexecutor.registration.max-backoff": "1s",
             "spark.sql.shuffle.partitions": "1", **config}
    with scratch_dir(work_dir, prefix) as scratch:
        cluster = MultiHostCluster(workdir=Path(scratch), task_executors=task_executors,
                                   extra={key: str(value) for key, value in extra.items()})
        try:
            cluster.start()
            ensemble = Ensemble(cluster)
            leader = ensemble.masters[ensemble.wait_for_leader(timeout=CLUSTER_START_TIMEOUT_S)]
            leader.wait_for_task_executors(task_executors, timeout=CLUSTER_START_TIMEOUT_S, alive=ensemble.alive)
            yield ensemble
        finally:
            cluster.stop()


# -- profiling ------------------------------------------------------------------------------------


class PySpy:
    """`py-spy record` of one process into collapsed stacks; `top()` summarises where time went."""

    def __init__(self, pid: int, output: Path, *, rate: int = 200, idle: bool = False,
                 subprocesses: bool = False) -> None:
        self.pid = pid
        self.output = output
        executable = VENV_BIN / "py-spy"
        if not executable.exists():
            raise RuntimeError(f"py-spy is not installed: {VENV_BIN / 'pip'} install py-spy")
        argv = [str(executable), "record", "--pid", str(pid), "--format", "raw", "--output", str(output),
                "--rate", str(rate), "--nonblocking"]
        if idle:
            argv.append("--idle")
        if subprocesses:
            argv.append("--subprocesses")
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        stdin=subprocess.DEVNULL, start_new_session=True)

    def stop(self) -> None:
        """Stop recording (SIGINT makes py-spy write its output)."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGINT)
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
            except ProcessLookupError:
                pass

    def top(self, count: int = 15, *, only: str = "") -> dict[str, Any]:
        """The functions with the most samples: own (self) and inclusive, as shares of all samples.

        `only`: count just the stacks with a frame containing this text (one thread's work).
        """
        own: dict[str, int] = {}
        inclusive: dict[str, int] = {}
        total = 0
        if not self.output.exists():
            return {"samples": 0, "self": [], "inclusive": []}
        for line in self.output.read_text(errors="replace").splitlines():
            stack, _, samples = line.rpartition(" ")
            if not stack or not samples.isdigit():
                continue
            n = int(samples)
            frames = [_short_frame(f) for f in stack.split(";")]
            frames = [f for f in frames if f]
            if not frames or (only and not any(only in f for f in frames)):
                continue
            total += n
            own[frames[-1]] = own.get(frames[-1], 0) + n
            for frame in set(frames):
                inclusive[frame] = inclusive.get(frame, 0) + n

        def ranked(table: dict[str, int]) -> list[dict[str, Any]]:
            best = sorted(table.items(), key=lambda kv: kv[1], reverse=True)[:count]
            return [{"function": name, "share": round(n / total, 3) if total else 0.0} for name, n in best]

        return {"samples": total, "self": ranked(own), "inclusive": ranked(inclusive)}


    def shares(self, needles: dict[str, str], *, only: str = "") -> dict[str, float]:
        """label -> share of the (`only`-filtered) samples whose stack has a frame containing needle."""
        hits = dict.fromkeys(needles, 0)
        total = 0
        if not self.output.exists():
            return {label: 0.0 for label in needles}
        for line in self.output.read_text(errors="replace").splitlines():
            stack, _, samples = line.rpartition(" ")
            if not stack or not samples.isdigit() or (only and only not in stack):
                continue
            total += int(samples)
            for label, needle in needles.items():
                if needle in stack:
                    hits[label] += int(samples)
        return {label: round(n / total, 3) if total else 0.0 for label, n in hits.items()}


def _short_frame(frame: str) -> str:
    """`func (/long/path/site-packages/pkg/mod.py:12)` → `func (pkg/mod.py)`; thread frames dropped."""
    name, _, where = frame.partition(" (")
    if not where:
        return "" if frame.startswith(("process ", "thread ")) else frame
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "sparkdispatch/", "lib/python3.11/"):
        if marker in path:
            path = ("sparkdispatch/" if marker == "sparkdispatch/" else "") + path.split(marker, 1)[1]
            break
    return f"{name} ({path})"


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by `pid` and its reaped children (from /proc)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rfind(")") + 2:].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(v) for v in fields[11:15]) / ticks  # utime stime cutime cstime


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of `pid` and its live descendants (a TaskExecutor and its Spark JVM)."""
    total = 0.0
    for member, _ in process_tree(pid):
        try:
            total += cpu_seconds(member)
        except OSError:
            continue  # gone meanwhile
    return total


def process_cmdline(pid: int) -> str:
    """The command line of `pid`, arguments joined by spaces ("" when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (children first, then theirs), from /proc."""
    return [member for member, _ in process_tree(pid)[1:]]


def memory_kib(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of `pid` in KiB from /proc (PSS shares each shared page among its users); (0, 0) when gone."""
    rss = pss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
    except OSError:
        return 0, 0
    return rss, pss


# -- sparkdispatch standalone ---------------------------------------------------------------------


class Standalone(StandaloneProcess):
    """`sparkdispatch standalone` as a child process with the benchmarks' environment (`bench_env`), and
    its REST endpoint as `rest`. `start()` returns when every TaskExecutor registered."""

    def __init__(self, storage: Path, *, slots: int, overrides: dict[str, Any] | None = None,
                 log_level: str = "INFO") -> None:
        super().__init__(storage, slots=slots, overrides=overrides, env=bench_env(), log_level=log_level)
        self.rest = Rest("http://127.0.0.1:0")

    def launch(self) -> None:
        """Start the process and return at once (see `wait_until_ready`)."""
        super().launch()
        self.rest = Rest(self.base_url)

    def wait_until_ready(self, timeout: float, taskexecutors: int = 1) -> None:
        self.wait_for_task_executors(taskexecutors, timeout=timeout)

    def start(self, timeout: float) -> float:
        """Launch and wait until the TaskExecutor registered; the seconds it took."""
        begin = time.monotonic()
        self.launch()
        self.wait_until_ready(timeout)
        return time.monotonic() - begin


# -- Spark Connect floors -------------------------------------------------------------------------


class ConnectClient:
    """A Spark Connect server with the settings a TaskExecutor of `config` gives its own, started and
    warmed the same way (`ConnectServer.start`), and a warm session of this process on it (`spark`).

    Sessions are made as a slot process makes a job's: `session_conf` is set on each with `conf.set`.
    """

    def __init__(self, config: Configuration, work_dir: Path, *,
                 session_conf: dict[str, Any] | None = None) -> None:
        self.config = config
        self.work_dir = work_dir
        self.session_conf = dict(session_conf or {})
        self.server: Any = None
        self.spark: Any = None

    def start(self) -> None:
        from sparkdispatch.settings import ConnectServerSettings
        from sparkdispatch.taskexecutor.connect_server import ConnectServer

        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # as bench_env() gives the clusters' processes
        self.server = ConnectServer(ConnectServerSettings.from_config(self.config), work_dir=self.work_dir,
                                    app_name="bench-floor")
        self.server.start()
        self.spark = self.new_session()

    def new_session(self) -> Any:
        """A new session on the server with `session_conf` set; the caller stops it."""
        from sparkdispatch.taskexecutor.slot_process import new_session

        session = new_session(self.server.url)
        for key, value in self.session_conf.items():
            session.conf.set(key, value)
        return session

    def cpu_seconds(self) -> float:
        """CPU seconds of this process (the client) and of the Connect server's JVM."""
        if self.server is None or self.server.pid is None:
            return math.nan
        return cpu_seconds(os.getpid()) + tree_cpu_seconds(self.server.pid)

    def stop(self) -> None:
        if self.spark is not None:
            try:
                self.spark.stop()
            except Exception:  # noqa: BLE001 - the server is stopped next anyway
                pass
            self.spark = None
        if self.server is not None:
            self.server.stop()
            self.server = None


# -- the sales pipeline of dags/pipelines ---------------------------------------------------------

DAGS_DIR = REPO / "dags"
PIPELINES_DIR = DAGS_DIR / "pipelines"
SALES_GRAPH = PIPELINES_DIR / "sales_graph.yaml"


def pipelines_artifact(directory: Path) -> Path:
    """`dags/pipelines` zipped as the Airflow operator ships it (`pipelines.zip`), written into `directory`."""
    from sparkdispatch.artifacts import read_artifact

    name, data = read_artifact(PIPELINES_DIR)
    path = directory / name
    path.write_bytes(data)
    return path


def sales_graph(artifact: str, *, rows: int, name: str = "sales-report") -> dict[str, Any]:
    """The example pipeline's JobGraph (dags/pipelines/sales_graph.yaml) with `rows` orders and no restarts
    (a failed attempt fails the benchmark instead of hiding in its time)."""
    import yaml

    graph = yaml.safe_load(SALES_GRAPH.read_text().replace("{{ params.rows }}", str(rows)))
    graph["name"] = name
    graph["artifacts"] = [artifact]
    graph["restart_strategy"] = {"type": "fixed-delay", "attempts": 0, "delay_s": 0.0}
    return dict(graph)
