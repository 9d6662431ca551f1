"""P1 per-task overhead: a chain of trivial PySpark vertices on warm slots, against the floors and spark-submit.

    .venv/bin/python bench/p1_task_overhead.py [--runs 5] [--warm-up 2] [--length 20] [--spark-submit-runs 3]
                                               [--clusters redis-none,redis-zookeeper,standalone]
                                               [--chained] [--profile CHAINS] [--work-dir DIR] [--quick]

All in one run, with nothing else of the benchmark running while one part is measured:

- classic floor (the floor of the goal, what a user runs instead): the same
  `spark.range(10).count()` actions called `--length` times in ONE warm classic SparkSession
  (`local[2]`), in a process of its own (`harness.classic_floor_process`): a new one for each
  cluster, started just before it, so its JVM is no warmer than the cluster's;
- Connect floor (a diagnosis: what Spark Connect costs, apart from the cluster): the same actions
  in ONE warm Spark Connect session of this process, on a Connect server the
  benchmark starts with the settings a TaskExecutor gives its own (`ConnectServer`, same
  `spark.*` keys, warmed by `ConnectServer.start` the same way): a new one for each cluster,
  started just before it, so the floor's JVM is no warmer than the cluster's;
- cluster: a chain of `--length` vertices (each `bench_tasks:count_rows`) submitted to a real
  cluster with one TaskExecutor (one slot, its Connect server on `local[2]`), timed from POST
  /jobs to the JobResult. Clusters: Redis broker with HA `none`, Redis with ZooKeeper HA, and
  `sparkdispatch standalone` (filesystem:// broker);
- spark-submit: `spark-submit --master local[2]` of the same action, `--spark-submit-runs`
  times, what Airflow's SparkSubmitOperator does per task.

The cluster's chain is submitted with `"results": "durable"`, so that each vertex runs as a task
of its own: the cost of a task is what P1 measures. `--chained` submits it as the master runs such
a chain by default, every vertex chained into the last one's task (one task, one attempt), and
measures the cost per vertex instead (bench/results/p1_task_overhead.chained.json).

Warm-up is the same on both sides: each floor runs `--warm-up` chains after its start, each
cluster `--warm-up` chains after it registered. Then each timed cluster chain is paired with a
chain of each floor run just before it; the overhead per task is (cluster chain - classic floor
chain) / length, the median of those differences (the machine's load changes from minute to
minute), and the same against the Connect floor is printed beside it. Prints per-task medians,
the overheads, the ratio to the classic session and to spark-submit, and writes
bench/results/p1_task_overhead.json (with the load average). Goals: <= 20 ms per task above the
classic floor, >= 50x faster than spark-submit.

`--profile N` runs N more chains per cluster under py-spy (master on-CPU; the TaskExecutor's task
thread in wall time: it waits for the slot process, which runs the function) and splits each
task's time from the INFO log lines of master and TaskExecutor: dispatch (deploy -> Celery
message received), task (received -> runner finished), report (-> master records FINISHED),
schedule (-> next deployment). Raw profiles stay in `--work-dir`.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.classic_floor_process import ClassicFloorProcess
from harness.clusters import CLUSTER_START_TIMEOUT_S, BenchCluster, cluster_config
from harness.connect_floor import ConnectClient
from harness.graphs import chain_graph
from harness.paths import BENCH_TASKS, TASKS_DIR, VENV_BIN
from harness.processes import cpu_seconds, stop_process, tree_cpu_seconds
from harness.profiling import PySpy
from harness.reporting import load_average, load_change, median, print_table, save_results
from harness.running import add_run_options, bench_env, bench_main, scratch_dir
from harness.standalone import Standalone

from sparkdispatch.config import Configuration
from sparkdispatch.model.job_result import JobResult
from sparkdispatch.model.states import JobStatus
from sparkdispatch.testing.services import RedisServer, ZooKeeperServer

#: A TaskExecutor's task thread, and the parts of its time the profile tells apart (py-spy frame text).
TASK_THREAD = "TaskRunner.run ("
TASK_THREAD_PARTS = {
    "slot process (function, Spark action, result)": "SlotProcessPool.run (",
    "state reports over HTTP": "MasterConnection.report (",
    "artifact paths": "ArtifactCache.use (",
    "slot occupy / release": "SlotTable.",
}
GOAL_OVERHEAD_MS = 20.0
#: The floor the overhead goal is measured against (issue 27 point 5): what a user runs instead.
GOAL_FLOOR = "classic"
GOAL_SPEEDUP = 50.0
#: The Spark settings of every cluster's TaskExecutor and of the Connect floor's server.
SPARK_SETTINGS = {"spark.master": "local[2]", "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"}


class Floor(ABC):
    """`length` x `spark.range(10).count()` in one warm session of this process."""

    name = ""

    def __init__(self, length: int) -> None:
        self.length = length
        self.spark: Any = None
        self.start_s = 0.0

    def start(self, warm_up: int) -> None:
        """Open the session (timed: `start_s`), then run `warm_up` chains."""
        started = time.monotonic()
        self.spark = self.open()
        self.start_s = time.monotonic() - started
        for _ in range(warm_up):
            self.chain()

    def chain(self) -> float:
        """The seconds `length` actions took."""
        begin = time.perf_counter()
        for _ in range(self.length):
            self.spark.range(10).count()
        return time.perf_counter() - begin

    @abstractmethod
    def open(self) -> Any:
        """Start what the session needs; the session."""

    @abstractmethod
    def cpu_seconds(self) -> float:
        """CPU seconds used so far by this process and the Spark it talks to."""

    @abstractmethod
    def stop(self) -> None:
        """Stop the session and whatever was started for it."""


class ClassicFloor(Floor):
    """One warm classic SparkSession (`local[2]`) in a process of its own, a new one (and a new
    JVM) per cluster, so that it is no warmer than the cluster it is paired with."""

    name = "classic"

    def __init__(self, length: int) -> None:
        super().__init__(length)
        self.process = ClassicFloorProcess(
            SPARK_SETTINGS["spark.master"], SPARK_SETTINGS["spark.sql.shuffle.partitions"]
        )

    def open(self) -> Any:
        self.process.start()
        return None

    def chain(self) -> float:
        return self.process.run(self.length)

    def cpu_seconds(self) -> float:
        """CPU seconds of the floor's process and of its Spark JVM."""
        return self.process.cpu_seconds()

    def stop(self) -> None:
        self.process.stop()


class ConnectFloor(Floor):
    """One warm Spark Connect session of this process, on a Connect server started (and warmed) as a
    TaskExecutor starts its own."""

    name = "connect"

    def __init__(self, length: int, config: Configuration, work_dir: Path) -> None:
        super().__init__(length)
        self.connect = ConnectClient(config, work_dir)

    def open(self) -> Any:
        self.connect.start()
        return self.connect.spark

    def cpu_seconds(self) -> float:
        """CPU seconds of this process (the client) and of the Connect server's JVM."""
        return self.connect.cpu_seconds()

    def stop(self) -> None:
        self.spark = None
        self.connect.stop()


def run_chains(
    submit: Callable[[dict[str, Any]], str],
    wait: Callable[[str], JobResult],
    artifact: str,
    floors: list[Floor],
    runs: int,
    warm_up: int,
    label: str,
    *,
    cpu_readers: dict[str, Callable[[], float]] | None = None,
    chained: bool = False,
) -> dict[str, Any]:
    """`warm_up` chains, then `runs` timed chains, each right after a chain of every floor measured here.

    Pairing each cluster chain with floor chains of the same moment keeps the difference
    meaningful on a machine whose load changes (2 cores shared with other work). `cpu_readers`:
    name -> CPU seconds used so far by some processes, reported per task of the cluster chains.
    The overhead is measured against the `GOAL_FLOOR` one, and against the Connect one apart.
    """
    length = floors[0].length
    walls: list[float] = []
    servers: list[float] = []
    floor_s: dict[str, list[float]] = {floor.name: [] for floor in floors}
    floor_cpu: dict[str, list[float]] = {floor.name: [] for floor in floors}
    readers = dict(cpu_readers or {})
    cpu: dict[str, list[float]] = {name: [] for name in readers}
    for run in range(warm_up + runs):
        timed = run >= warm_up
        # each vertex a task of its own (durable results): the overhead per task is what P1 measures;
        # `chained`: as the master runs such a chain unless told otherwise, all of it in the last vertex's task
        graph = chain_graph(
            f"p1-{label}-{run}", length, entrypoint="bench_tasks:count_rows", artifact=artifact, durable=not chained
        )
        if timed:
            for floor in floors:
                before = floor.cpu_seconds()
                floor_s[floor.name].append(floor.chain())
                floor_cpu[floor.name].append(floor.cpu_seconds() - before)
        cpu_before = {name: read() for name, read in readers.items()}
        begin = time.perf_counter()
        result = wait(submit(graph))
        wall = time.perf_counter() - begin
        if timed:
            for name, read in readers.items():
                cpu[name].append(read() - cpu_before[name])
        if result.status is not JobStatus.FINISHED:
            raise RuntimeError(f"{label}: chain {run} ended {result.status.value}: {result.failure}")
        if not timed:
            print(f"  {label}: warm-up chain {run + 1}: {wall:.2f}s", flush=True)
            continue
        walls.append(wall)
        servers.append(result.duration_ms / 1000.0)
        floors_text = ", ".join(
            f"{name} floor {values[-1]:.3f}s ({values[-1] / length * 1000:.1f} ms per action)"
            for name, values in floor_s.items()
        )
        print(
            f"  {label}: chain {run - warm_up + 1}: {wall:.3f}s submit->result ({wall / length * 1000:.1f} ms "
            f"per task), {result.duration_ms} ms in the master; {floors_text}",
            flush=True,
        )
    per_task_ms = [w / length * 1000 for w in walls]
    floor_ms = {name: [f / length * 1000 for f in values] for name, values in floor_s.items()}
    overhead_ms = [c - f for c, f in zip(per_task_ms, floor_ms[GOAL_FLOOR], strict=True)]
    above_connect_ms = [c - f for c, f in zip(per_task_ms, floor_ms["connect"], strict=True)]
    return {
        "chain_s": [round(w, 4) for w in walls],
        "server_duration_s": [round(s, 4) for s in servers],
        "floor_chain_s": {name: [round(f, 4) for f in values] for name, values in floor_s.items()},
        "per_task_ms": [round(p, 2) for p in per_task_ms],
        "per_task_ms_median": round(median(per_task_ms), 2),
        "server_per_task_ms_median": round(median([s / length * 1000 for s in servers]), 2),
        "floor_per_task_ms_median": {name: round(median(values), 2) for name, values in floor_ms.items()},
        "overhead_vs": GOAL_FLOOR,
        "overhead_per_task_ms": [round(o, 2) for o in overhead_ms],
        "overhead_per_task_ms_median": round(median(overhead_ms), 2),
        "above_connect_per_task_ms": [round(o, 2) for o in above_connect_ms],
        "above_connect_per_task_ms_median": round(median(above_connect_ms), 2),
        "cpu_ms_per_task_median": {name: round(median(values) / length * 1000, 1) for name, values in cpu.items()},
        "floor_cpu_ms_per_action_median": {
            name: round(median(values) / length * 1000, 1) for name, values in floor_cpu.items()
        },
        "load_average_after": load_average(),
    }


def measure_local_cluster(
    storage: Path,
    *,
    broker_url: str,
    zookeeper_hosts: str | None,
    floors: list[Floor],
    runs: int,
    warm_up: int,
    label: str,
    profile: int = 0,
    zookeeper_pid: int | None = None,
    chained: bool = False,
) -> dict[str, Any]:
    config = cluster_config(storage, broker_url=broker_url, zookeeper_hosts=zookeeper_hosts, slots=1, **SPARK_SETTINGS)
    cluster = BenchCluster(config, masters=1, taskexecutors=1, log_dir=storage / "log")
    started = time.monotonic()
    try:
        cluster.start(timeout=CLUSTER_START_TIMEOUT_S)
        print(f"  {label}: cluster up in {time.monotonic() - started:.1f}s (logs {storage / 'log'})", flush=True)
        artifact = cluster.upload_artifact(BENCH_TASKS)
        master, worker = cluster.pid("master"), cluster.pid("taskexecutor")
        readers = {"master": lambda: tree_cpu_seconds(master), "taskexecutor tree": lambda: tree_cpu_seconds(worker)}
        if zookeeper_pid is not None:
            readers["zookeeper"] = lambda: tree_cpu_seconds(zookeeper_pid)
        figures = run_chains(
            cluster.submit,
            lambda job_id: cluster.wait_for_result(job_id, timeout=300),
            artifact,
            floors,
            runs,
            warm_up,
            label,
            cpu_readers=readers,
            chained=chained,
        )
        if profile:
            figures["profile"] = profile_chains(
                cluster.submit,
                lambda job_id: cluster.wait_for_result(job_id, timeout=300),
                artifact,
                floors,
                profile,
                master_pid=cluster.pid("master"),
                worker_pid=cluster.pid("taskexecutor"),
                master_log=cluster.log_dir / "master-0.log",
                worker_log=cluster.log_dir / "taskexecutor-0.log",
                out_dir=storage / "profile",
                chained=chained,
            )
        return figures
    finally:
        cluster.stop()


_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def _log_times(path: Path, *needles: str) -> list[float]:
    """Epoch seconds of the log lines containing every needle, in order."""
    times = []
    for line in path.read_text(errors="replace").splitlines():
        match = _LOG_TIME.match(line)
        if match and all(n in line for n in needles):
            stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
            times.append(stamp.timestamp())
    return times


def task_timeline(master: Path, worker: Path, job_id: str) -> dict[str, list[float]]:
    """Per task of one chain job (one slot, so tasks run one after another), from INFO log lines:

    dispatch: master logs `deploying` -> the worker logs the Celery message `received`;
    task: `received` -> the runner logs `finished` (state reports + SparkSession work);
    report: runner `finished` -> master logs `attempt N finished` (FINISHED report, progress store);
    schedule: master `finished` -> master `deploying` of the next vertex (scheduling, slot allocation).
    """
    deploying = _log_times(master, job_id, "deploying")
    finished_master = _log_times(master, job_id, "attempt", "finished (")
    finished_worker = _log_times(worker, job_id, "sparkdispatch.taskexecutor.runner", "finished")
    if not deploying or len(deploying) != len(finished_master) or len(deploying) != len(finished_worker):
        return {}
    received = [
        t for t in _log_times(worker, "deploy_task", "received") if deploying[0] - 0.001 <= t <= finished_worker[-1]
    ]
    if len(received) != len(deploying):
        return {}
    n = len(deploying)
    return {
        "dispatch_ms": [(received[i] - deploying[i]) * 1000 for i in range(n)],
        "task_ms": [(finished_worker[i] - received[i]) * 1000 for i in range(n)],
        "report_ms": [(finished_master[i] - finished_worker[i]) * 1000 for i in range(n)],
        "schedule_ms": [(deploying[i + 1] - finished_master[i]) * 1000 for i in range(n - 1)],
    }


def profile_chains(
    submit: Callable[[dict[str, Any]], str],
    wait: Callable[[str], JobResult],
    artifact: str,
    floors: list[Floor],
    chains: int,
    *,
    master_pid: int,
    worker_pid: int,
    master_log: Path,
    worker_log: Path,
    out_dir: Path,
    chained: bool = False,
) -> dict[str, Any]:
    """Chains under py-spy (master: on-CPU samples; TaskExecutor: all samples of the task thread) and
    the per-task timeline from the logs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    master_spy = PySpy(master_pid, out_dir / "master-pyspy.txt", rate=500)
    worker_spy = PySpy(worker_pid, out_dir / "taskexecutor-pyspy.txt", rate=500, idle=True)
    job_ids: list[str] = []
    try:
        time.sleep(1.0)  # py-spy attaches

        def submit_and_note(graph: dict[str, Any]) -> str:
            job_ids.append(submit(graph))
            return job_ids[-1]

        figures = run_chains(submit_and_note, wait, artifact, floors, chains, 1, "profile", chained=chained)
    finally:
        master_spy.stop()
        worker_spy.stop()
    timeline: dict[str, list[float]] = {}
    for job_id in job_ids[1:]:  # without the warm-up chain
        for key, values in task_timeline(master_log, worker_log, job_id).items():
            timeline.setdefault(key, []).extend(values)
    timeline_ms = {key: round(median(values), 2) for key, values in timeline.items()}
    task_thread = worker_spy.shares(TASK_THREAD_PARTS, only=TASK_THREAD)
    return {
        "chains": figures,
        "timeline_ms_median": timeline_ms,
        "task_thread_share": task_thread,
        "task_thread_ms_estimate": {
            label: round(share * timeline_ms.get("task_ms", math.nan), 1) for label, share in task_thread.items()
        },
        "master_on_cpu": master_spy.top(20),
        "taskexecutor_task_thread": worker_spy.top(25, only=TASK_THREAD),
        "raw_profiles": str(out_dir),
    }


def measure_standalone(
    storage: Path, *, floors: list[Floor], runs: int, warm_up: int, profile: int = 0, chained: bool = False
) -> dict[str, Any]:
    """`sparkdispatch standalone` (HA none, filesystem:// broker, master in its own process)."""
    standalone = Standalone(
        storage,
        slots=1,
        overrides={**SPARK_SETTINGS, "rest.execution-result.long-poll": "5s", "heartbeat.interval": "1s"},
    )
    try:
        up_s = standalone.start(CLUSTER_START_TIMEOUT_S)
        print(f"  standalone: up in {up_s:.1f}s (logs {standalone.log_dir})", flush=True)
        rest = standalone.rest
        artifact = rest.upload_artifact(BENCH_TASKS)
        assert standalone.process is not None
        master, worker = standalone.process.pid, standalone.task_executor_pids()[0]
        readers = {"master": lambda: cpu_seconds(master), "taskexecutor tree": lambda: tree_cpu_seconds(worker)}
        figures = run_chains(
            rest.submit,
            rest.wait_for_result,
            artifact,
            floors,
            runs,
            warm_up,
            "standalone",
            cpu_readers=readers,
            chained=chained,
        )
        if profile:
            figures["profile"] = profile_chains(
                rest.submit,
                rest.wait_for_result,
                artifact,
                floors,
                profile,
                master_pid=master,
                worker_pid=worker,
                master_log=standalone.log_dir / "standalone.log",
                worker_log=standalone.log_dir / "taskexecutor-0.log",
                out_dir=storage / "profile",
                chained=chained,
            )
        return figures
    finally:
        standalone.stop()


def measure_spark_submit(runs: int) -> dict[str, Any]:
    spark_submit = VENV_BIN / "spark-submit"
    argv = [
        str(spark_submit),
        "--master",
        "local[2]",
        "--conf",
        "spark.ui.enabled=false",
        str(TASKS_DIR / "spark_submit_task.py"),
    ]
    times = []
    for run in range(runs):
        begin = time.perf_counter()
        process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=bench_env(), start_new_session=True
        )
        try:
            _, err = process.communicate(timeout=180)
        finally:
            stop_process(process, grace=5)
        elapsed = time.perf_counter() - begin
        if process.returncode != 0:
            tail = err.decode(errors="replace")[-2000:]
            raise RuntimeError(f"spark-submit exited with {process.returncode}:\n{tail}")
        times.append(elapsed)
        print(f"  spark-submit run {run + 1}: {elapsed:.2f}s", flush=True)
    return {"task_s": [round(t, 3) for t in times], "per_task_ms_median": round(median(times) * 1000, 1)}


def print_profile(kind: str, profile: dict[str, Any]) -> None:
    print(f"\nprofile of {kind} (raw py-spy output in {profile['raw_profiles']}):")
    print(
        "  per task, medians from the logs (ms): "
        + ", ".join(f"{key[:-3]} {value:.1f}" for key, value in profile["timeline_ms_median"].items())
    )
    print("  TaskExecutor task thread (wall time, py-spy --idle), share and ms of the median task:")
    for label, share in profile["task_thread_share"].items():
        print(f"    {share * 100:5.1f}%  {profile['task_thread_ms_estimate'][label]:6.1f} ms  {label}")
    print("  master, share of on-CPU samples (inclusive):")
    generic = (
        "threading.py",
        "runpy",
        "asyncio/runners",
        "cli.py",
        "concurrent/futures",
        "base_events.py",
        "standalone.py",
    )
    entries = [e for e in profile["master_on_cpu"]["inclusive"] if not any(g in e["function"] for g in generic)]
    for entry in entries[:12]:
        print(f"    {entry['share'] * 100:5.1f}%  {entry['function']}")


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="timed chains per cluster (after the warm-up)")
    parser.add_argument(
        "--warm-up", type=int, default=2, help="warm-up chains per cluster, and per floor after its start"
    )
    parser.add_argument("--length", type=int, default=20, help="vertices per chain")
    parser.add_argument("--spark-submit-runs", type=int, default=3)
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="CHAINS",
        help="after the timed chains of each cluster, run CHAINS more under py-spy and "
        "break the per-task time down from the logs",
    )
    parser.add_argument(
        "--clusters",
        default="redis-none,redis-zookeeper,standalone",
        help="comma-separated: redis-none, redis-zookeeper, standalone",
    )
    parser.add_argument(
        "--chained",
        action="store_true",
        help="the chain as the master runs it by default (all vertices in the last one's task), "
        "not each vertex a task of its own",
    )
    add_run_options(parser, quick="standalone only, 2 timed chains of 5, one spark-submit")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.length, args.spark_submit_runs, args.clusters = 2, 5, 1, "standalone"
    clusters = [c.strip() for c in args.clusters.split(",") if c.strip()]
    unknown = set(clusters) - {"redis-none", "redis-zookeeper", "standalone"}
    if unknown:
        parser.error(f"unknown cluster kind(s): {', '.join(sorted(unknown))}")

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the floors' Spark binds loopback, as the clusters'
    results: dict[str, Any] = {"load_average_at_start": load_average()}
    redis = RedisServer() if any(c.startswith("redis") for c in clusters) else None
    zookeeper = ZooKeeperServer() if "redis-zookeeper" in clusters else None
    floors: list[Floor] = []
    floor_start_s: dict[str, float] = {}
    with scratch_dir(args.work_dir, "sparkdispatch-p1-") as scratch:
        try:
            if redis is not None:
                redis.start()
            if zookeeper is not None:
                zookeeper.start()
            for kind in clusters:
                # A Connect floor of its own per cluster, as warm as the cluster's TaskExecutor: a new
                # server warmed as a TaskExecutor warms its own, then `--warm-up` chains. One floor
                # shared by the clusters was warmed by every chain before, and flattered the later ones.
                floor_config = Configuration.from_mapping(
                    {"storage.dir": str(Path(scratch) / "floor" / kind), **SPARK_SETTINGS}
                )
                connect = ConnectFloor(args.length, floor_config, Path(scratch) / "floor" / kind / "connect-server")
                classic = ClassicFloor(args.length)
                described = {
                    connect: "one warm Spark Connect session of this process, on a Connect server started as a "
                    "TaskExecutor's",
                    classic: "one warm classic SparkSession (local[2]) of a new process",
                }
                for floor, what in described.items():
                    floors.append(floor)
                    print(
                        f"{floor.name} floor for {kind}: the same in {what}, {args.warm_up} warm-up chain(s)",
                        flush=True,
                    )
                    floor.start(args.warm_up)
                    floor_start_s[f"{floor.name} for {kind}"] = round(floor.start_s, 2)
                    print(f"  ready in {floor.start_s:.1f}s", flush=True)
                print(f"cluster {kind}: chains of {args.length} vertices, {args.warm_up} warm-up chain(s)", flush=True)
                storage = Path(scratch) / kind
                try:
                    if kind == "standalone":
                        results[kind] = measure_standalone(
                            storage,
                            floors=floors,
                            runs=args.runs,
                            warm_up=args.warm_up,
                            profile=args.profile,
                            chained=args.chained,
                        )
                    else:
                        assert redis is not None
                        zk = zookeeper if kind == "redis-zookeeper" else None
                        results[kind] = measure_local_cluster(
                            storage,
                            broker_url=redis.url,
                            zookeeper_hosts=zk.hosts if zk else None,
                            floors=floors,
                            runs=args.runs,
                            warm_up=args.warm_up,
                            label=kind,
                            profile=args.profile,
                            zookeeper_pid=zk.process.pid if zk and zk.process else None,
                            chained=args.chained,
                        )
                except (RuntimeError, TimeoutError) as exc:
                    # one cluster kind failing (a chain FAILED, a process died) is a finding; measure the rest
                    print(f"  {kind}: FAILED: {exc}", flush=True)
                    results[kind] = {"error": str(exc)}
                finally:
                    for its_own in (connect, classic):
                        floors.remove(its_own)
                        its_own.stop()
        finally:
            for floor in floors:
                floor.stop()
            if zookeeper is not None:
                zookeeper.stop()
            if redis is not None:
                redis.stop()

    if args.spark_submit_runs > 0:
        print(f"spark-submit --master local[2], {args.spark_submit_runs} tasks", flush=True)
        results["spark_submit"] = measure_spark_submit(args.spark_submit_runs)
    results["load_average_at_end"] = load_average()

    submit_ms = results["spark_submit"]["per_task_ms_median"] if "spark_submit" in results else math.nan
    rows = []
    summary = {}
    for kind in clusters:
        figures = results[kind]
        if "error" in figures:
            summary[kind] = {"error": figures["error"]}
            rows.append([f"cluster {kind}", "FAILED", "-", "-", "-", "-", "-", "-"])
            continue
        per_task = figures["per_task_ms_median"]
        connect_ms = figures["floor_per_task_ms_median"]["connect"]
        classic_ms = figures["floor_per_task_ms_median"]["classic"]
        overhead = figures["overhead_per_task_ms_median"]
        above_connect = figures["above_connect_per_task_ms_median"]
        speedup = submit_ms / per_task
        summary[kind] = {
            "per_task_ms": per_task,
            "connect_floor_ms": connect_ms,
            "classic_floor_ms": classic_ms,
            "overhead_ms": overhead,
            "above_connect_floor_ms": above_connect,
            "ratio_to_classic": round(per_task / classic_ms, 2),
            "speedup_vs_spark_submit": round(speedup, 1),
            "overhead_goal_met": overhead <= GOAL_OVERHEAD_MS,
            "speedup_goal_met": speedup >= GOAL_SPEEDUP,
        }
        rows.append(
            [
                f"cluster {kind}",
                f"{per_task:.1f}",
                f"{classic_ms:.1f}",
                f"{overhead:+.1f}",
                f"{connect_ms:.1f}",
                f"{above_connect:+.1f}",
                f"{per_task / classic_ms:.2f}x",
                f"{speedup:.1f}x",
            ]
        )
    if "spark_submit" in results:
        rows.append(["spark-submit --master local[2]", f"{submit_ms:.0f}", "-", "-", "-", "-", "-", "1.0x"])
    print()
    print(
        f"per task, medians of {args.runs} chains of {args.length} after {args.warm_up} warm-up chain(s), each "
        f"paired with a chain of each floor run just before it; spark-submit: median of {args.spark_submit_runs}"
    )
    print_table(
        [
            "what",
            "ms per task",
            "classic floor ms",
            "above classic floor (ms)",
            "Connect floor ms",
            "above Connect floor (ms)",
            "vs classic",
            "faster than spark-submit",
        ],
        rows,
    )
    print(
        f"goals: <= {GOAL_OVERHEAD_MS:g} ms above the classic floor, >= {GOAL_SPEEDUP:g}x faster than "
        f"spark-submit; {load_change(results)}"
    )
    for kind, figures in summary.items():
        if "error" in figures:
            print(f"  {kind}: FAILED: {figures['error']}")
            continue
        cpu = results[kind]["cpu_ms_per_task_median"]
        floor_cpu = results[kind]["floor_cpu_ms_per_action_median"]
        print(
            f"  {kind}: CPU ms per task: "
            + ", ".join(f"{name} {ms:.1f}" for name, ms in cpu.items())
            + "; per floor action (this process + its JVM): "
            + ", ".join(f"{name} {ms:.1f}" for name, ms in floor_cpu.items())
        )
        print(
            f"  {kind}: overhead {'met' if figures['overhead_goal_met'] else 'MISSED'}, "
            f"speedup {'met' if figures['speedup_goal_met'] else 'MISSED'}"
        )
    for kind in clusters:
        profile = results[kind].get("profile")
        if profile:
            print_profile(kind, profile)
    save_results(
        "p1_task_overhead" + ".chained" * args.chained,
        quick=args.quick,
        report={
            "chained": args.chained,
            "chain_length": args.length,
            "runs": args.runs,
            "warm_up_chains": args.warm_up,
            "spark_submit_runs": args.spark_submit_runs,
            "quick": args.quick,
            "goal_overhead_ms": GOAL_OVERHEAD_MS,
            "goal_speedup": GOAL_SPEEDUP,
            "summary": summary,
            "floor_start_s": floor_start_s,
            **results,
        },
    )
    return 1 if any("error" in figures for figures in summary.values()) else 0


if __name__ == "__main__":
    bench_main(run)
