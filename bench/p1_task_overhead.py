"""P1 per-task overhead: a chain of trivial PySpark vertices on warm slots, against the floor and spark-submit.

    .venv/bin/python bench/p1_task_overhead.py [--runs 5] [--length 20] [--spark-submit-runs 3]
                                               [--clusters redis-none,redis-zookeeper,standalone]
                                               [--profile CHAINS] [--work-dir DIR]

All in one run, with nothing else of the benchmark running while one part is measured:

- floor: the same `spark.range(10).count()` actions called `--length` times in one warm
  SparkSession (`local[2]`) inside this process;
- cluster: a chain of `--length` vertices (each `bench_tasks:count_rows`) submitted to a real
  cluster with one TaskExecutor (one slot, warm SparkSession, `local[2]`), timed from POST /jobs
  to the JobResult; a warm-up chain first, then `--runs` chains. Clusters: Redis broker with HA
  `none`, Redis with ZooKeeper HA, and `sparkdispatch standalone` (filesystem:// broker);
- spark-submit: `spark-submit --master local[2]` of the same action, `--spark-submit-runs`
  times, what Airflow's SparkSubmitOperator does per task.

Prints per-task medians, the overhead above the floor, the ratio to spark-submit, and writes
bench/results/p1_task_overhead.json. Goals: <= 20 ms per task above the floor, >= 50x faster
than spark-submit. Each cluster chain is paired with a floor chain run just before it, and the
overhead is the median of those differences: the machine's load changes from minute to minute.

`--profile N` runs N more chains per cluster under py-spy (master on-CPU; the TaskExecutor's task
thread in wall time) and splits each task's time from the INFO log lines of master and
TaskExecutor: dispatch (deploy -> Celery message received), task (received -> runner finished),
report (-> master records FINISHED), schedule (-> next deployment). Raw profiles stay in
`--work-dir`.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from common import (
    BENCH_TASKS,
    TASKS_DIR,
    VENV_BIN,
    BenchCluster,
    PySpy,
    Rest,
    bench_env,
    bench_main,
    chain_graph,
    child_pids,
    cluster_config,
    cpu_seconds,
    kill_pids,
    load_average,
    median,
    print_table,
    scratch_dir,
    stop_process,
    tree_cpu_seconds,
    write_results,
)

from sparkdispatch.testing.services import RedisServer, ZooKeeperServer, free_port

#: A TaskExecutor's task thread, and the parts of its time the profile tells apart (py-spy frame text).
TASK_THREAD = "TaskRunner.run ("
TASK_THREAD_PARTS = {
    "task function (Spark action)": "count_rows (",
    "state reports over HTTP": "MasterConnection.report (",
    "newSession + SQL conf": "TaskRunner._task_session (",
    "slot_scope (job group, local properties)": "slot_scope (",
    "artifact activation": "ArtifactCache.activate (",
    "entrypoint import": "load_entrypoint (",
}
GOAL_OVERHEAD_MS = 20.0
GOAL_SPEEDUP = 50.0
CLUSTER_START_TIMEOUT_S = 240.0


class Floor:
    """`length` x `spark.range(10).count()` in one warm SparkSession of this process."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.spark: Any = None
        self.session_start_s = 0.0

    def start(self) -> None:
        from pyspark.sql import SparkSession

        started = time.monotonic()
        self.spark = (SparkSession.builder.master("local[2]").appName("p1-floor")
                      .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                      .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        self.spark.sparkContext.setLogLevel("ERROR")
        self.session_start_s = time.monotonic() - started
        self.chain()
        self.chain()  # warm-up: the first actions compile and load classes

    def chain(self) -> float:
        begin = time.perf_counter()
        for _ in range(self.length):
            self.spark.range(10).count()
        return time.perf_counter() - begin

    def cpu_seconds(self) -> float:
        """CPU seconds of this process (its own threads) and of its Spark JVM."""
        try:
            jvm = self.spark.sparkContext._gateway.proc.pid  # the JVM pyspark launched
        except AttributeError:
            return math.nan
        return cpu_seconds(os.getpid()) + tree_cpu_seconds(jvm)

    def stop(self) -> None:
        if self.spark is not None:
            self.spark.stop()
            self.spark = None


def run_chains(submit: Callable[[dict[str, Any]], str], wait: Callable[[str], dict[str, Any]], artifact: str,
               floor: Floor, runs: int, label: str, *,
               cpu_readers: dict[str, Callable[[], float]] | None = None) -> dict[str, Any]:
    """A warm-up chain, then `runs` timed chains, each right after a floor chain measured in this process.

    Pairing each cluster chain with a floor chain of the same moment keeps the difference
    meaningful on a machine whose load changes (2 cores shared with other work). `cpu_readers`:
    name -> CPU seconds used so far by some processes, reported per task of the cluster chains.
    """
    length = floor.length
    walls, servers, floors = [], [], []
    readers = dict(cpu_readers or {})
    cpu: dict[str, list[float]] = {name: [] for name in readers}
    floor_cpu: list[float] = []
    for run in range(runs + 1):
        graph = chain_graph(f"p1-{label}-{run}", length, entrypoint="bench_tasks:count_rows", artifact=artifact)
        floor_cpu_before = floor.cpu_seconds()
        floor_s = floor.chain() if run else 0.0
        if run:
            floor_cpu.append(floor.cpu_seconds() - floor_cpu_before)
        cpu_before = {name: read() for name, read in readers.items()}
        begin = time.perf_counter()
        result = wait(submit(graph))
        wall = time.perf_counter() - begin
        if run:
            for name, read in readers.items():
                cpu[name].append(read() - cpu_before[name])
        if result["status"] != "FINISHED":
            raise RuntimeError(f"{label}: chain {run} ended {result['status']}: {result.get('failure')}")
        if run == 0:
            print(f"  {label}: warm-up chain {wall:.2f}s", flush=True)
            continue
        walls.append(wall)
        floors.append(floor_s)
        servers.append(result["duration_ms"] / 1000.0)
        print(f"  {label}: chain {run}: {wall:.3f}s submit->result ({wall / length * 1000:.1f} ms per task), "
              f"{result['duration_ms']} ms in the master; floor chain {floor_s:.3f}s "
              f"({floor_s / length * 1000:.1f} ms per action)", flush=True)
    per_task_ms = [w / length * 1000 for w in walls]
    floor_ms = [f / length * 1000 for f in floors]
    overhead_ms = [c - f for c, f in zip(per_task_ms, floor_ms)]
    return {"chain_s": [round(w, 4) for w in walls], "server_duration_s": [round(s, 4) for s in servers],
            "floor_chain_s": [round(f, 4) for f in floors],
            "per_task_ms": [round(p, 2) for p in per_task_ms], "per_task_ms_median": round(median(per_task_ms), 2),
            "server_per_task_ms_median": round(median([s / length * 1000 for s in servers]), 2),
            "floor_per_task_ms_median": round(median(floor_ms), 2),
            "overhead_per_task_ms": [round(o, 2) for o in overhead_ms],
            "overhead_per_task_ms_median": round(median(overhead_ms), 2),
            "cpu_ms_per_task_median": {name: round(median(values) / length * 1000, 1) for name, values in cpu.items()},
            "floor_cpu_ms_per_action_median": round(median(floor_cpu) / length * 1000, 1)}


def measure_local_cluster(storage: Path, *, broker_url: str, zookeeper_hosts: str | None, floor: Floor, runs: int,
                          label: str, profile: int = 0, zookeeper_pid: int | None = None) -> dict[str, Any]:
    config = cluster_config(storage, broker_url=broker_url, zookeeper_hosts=zookeeper_hosts, slots=1)
    cluster = BenchCluster(config, masters=1, taskexecutors=1, log_dir=storage / "log")
    started = time.monotonic()
    try:
        cluster.start(timeout=CLUSTER_START_TIMEOUT_S)
        print(f"  {label}: cluster up in {time.monotonic() - started:.1f}s (logs {storage / 'log'})", flush=True)
        artifact = cluster.upload_artifact(BENCH_TASKS)
        master, worker = cluster.pid("master"), cluster.pid("taskexecutor")
        readers = {"master": lambda: tree_cpu_seconds(master), "taskexecutor+jvm": lambda: tree_cpu_seconds(worker)}
        if zookeeper_pid is not None:
            readers["zookeeper"] = lambda: tree_cpu_seconds(zookeeper_pid)
        figures = run_chains(cluster.submit, lambda job_id: cluster.wait_for_result(job_id, timeout=300), artifact,
                             floor, runs, label, cpu_readers=readers)
        if profile:
            figures["profile"] = profile_chains(
                cluster.submit, lambda job_id: cluster.wait_for_result(job_id, timeout=300), artifact, floor,
                profile, master_pid=cluster.pid("master"), worker_pid=cluster.pid("taskexecutor"),
                master_log=cluster.log_dir / "master-0.log", worker_log=cluster.log_dir / "taskexecutor-0.log",
                out_dir=storage / "profile")
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
    received = [t for t in _log_times(worker, "deploy_task", "received")
                if deploying[0] - 0.001 <= t <= finished_worker[-1]]
    if len(received) != len(deploying):
        return {}
    n = len(deploying)
    return {
        "dispatch_ms": [(received[i] - deploying[i]) * 1000 for i in range(n)],
        "task_ms": [(finished_worker[i] - received[i]) * 1000 for i in range(n)],
        "report_ms": [(finished_master[i] - finished_worker[i]) * 1000 for i in range(n)],
        "schedule_ms": [(deploying[i + 1] - finished_master[i]) * 1000 for i in range(n - 1)],
    }


def profile_chains(submit: Callable[[dict[str, Any]], str], wait: Callable[[str], dict[str, Any]], artifact: str,
                   floor: Floor, chains: int, *, master_pid: int, worker_pid: int, master_log: Path,
                   worker_log: Path, out_dir: Path) -> dict[str, Any]:
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

        figures = run_chains(submit_and_note, wait, artifact, floor, chains, "profile")
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
        "task_thread_ms_estimate": {label: round(share * timeline_ms.get("task_ms", math.nan), 1)
                                    for label, share in task_thread.items()},
        "master_on_cpu": master_spy.top(20),
        "taskexecutor_task_thread": worker_spy.top(25, only=TASK_THREAD),
        "raw_profiles": str(out_dir),
    }


def measure_standalone(storage: Path, *, floor: Floor, runs: int, profile: int = 0) -> dict[str, Any]:
    """`sparkdispatch standalone` (HA none, filesystem:// broker, master in its own process)."""
    port = free_port()
    argv = [sys.executable, "-m", "sparkdispatch.cli", "-D", f"rest.port={port}", "-D", "spark.master=local[2]",
            "-D", "spark.ui.enabled=false", "-D", "spark.sql.shuffle.partitions=2",
            "-D", "rest.execution-result.long-poll=5s", "-D", "heartbeat.interval=1s",
            "standalone", "--storage", str(storage), "--slots", "1"]
    (storage / "log").mkdir(parents=True, exist_ok=True)
    with open(storage / "log" / "standalone.log", "ab") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=bench_env(), start_new_session=True)
    task_executors: list[int] = []
    try:
        rest = Rest(f"http://127.0.0.1:{port}")
        started = time.monotonic()
        rest.wait_for_task_executors(1, timeout=CLUSTER_START_TIMEOUT_S, alive=lambda: process.poll() is None)
        task_executors = child_pids(process.pid)  # their own sessions: stopped by the standalone, or below
        print(f"  standalone: up in {time.monotonic() - started:.1f}s (logs {storage / 'log'})", flush=True)
        artifact = rest.upload_artifact(BENCH_TASKS)
        worker = task_executors[0]
        readers = {"master": lambda: cpu_seconds(process.pid), "taskexecutor+jvm": lambda: tree_cpu_seconds(worker)}
        figures = run_chains(rest.submit, rest.wait_for_result, artifact, floor, runs, "standalone",
                             cpu_readers=readers)
        if profile:
            figures["profile"] = profile_chains(
                rest.submit, rest.wait_for_result, artifact, floor, profile, master_pid=process.pid,
                worker_pid=task_executors[0], master_log=storage / "log" / "standalone.log",
                worker_log=storage / "log" / "taskexecutor-0.log", out_dir=storage / "profile")
        return figures
    finally:
        stop_process(process, grace=20)
        kill_pids(task_executors)


def measure_spark_submit(runs: int) -> dict[str, Any]:
    spark_submit = VENV_BIN / "spark-submit"
    argv = [str(spark_submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
            str(TASKS_DIR / "spark_submit_task.py")]
    times = []
    for run in range(runs):
        begin = time.perf_counter()
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=bench_env(),
                                   start_new_session=True)
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
    print("  per task, medians from the logs (ms): " + ", ".join(
        f"{key[:-3]} {value:.1f}" for key, value in profile["timeline_ms_median"].items()))
    print("  TaskExecutor task thread (wall time, py-spy --idle), share and ms of the median task:")
    for label, share in profile["task_thread_share"].items():
        print(f"    {share * 100:5.1f}%  {profile['task_thread_ms_estimate'][label]:6.1f} ms  {label}")
    print("  master, share of on-CPU samples (inclusive):")
    generic = ("threading.py", "runpy", "asyncio/runners", "cli.py", "concurrent/futures", "base_events.py",
               "standalone.py")
    entries = [e for e in profile["master_on_cpu"]["inclusive"] if not any(g in e["function"] for g in generic)]
    for entry in entries[:12]:
        print(f"    {entry['share'] * 100:5.1f}%  {entry['function']}")


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="timed chains per cluster (after one warm-up)")
    parser.add_argument("--length", type=int, default=20, help="vertices per chain")
    parser.add_argument("--spark-submit-runs", type=int, default=3)
    parser.add_argument("--profile", type=int, default=0, metavar="CHAINS",
                        help="after the timed chains of each cluster, run CHAINS more under py-spy and "
                             "break the per-task time down from the logs")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="keep storage and logs here (default: a temporary directory, removed at the end)")
    parser.add_argument("--clusters", default="redis-none,redis-zookeeper,standalone",
                        help="comma-separated: redis-none, redis-zookeeper, standalone")
    args = parser.parse_args()
    clusters = [c.strip() for c in args.clusters.split(",") if c.strip()]
    unknown = set(clusters) - {"redis-none", "redis-zookeeper", "standalone"}
    if unknown:
        parser.error(f"unknown cluster kind(s): {', '.join(sorted(unknown))}")

    results: dict[str, Any] = {"load_average_at_start": load_average()}
    floor = Floor(args.length)
    redis = RedisServer() if any(c.startswith("redis") for c in clusters) else None
    zookeeper = ZooKeeperServer() if "redis-zookeeper" in clusters else None
    try:
        print(f"floor: {args.length} x spark.range(10).count() in one warm SparkSession of this process", flush=True)
        floor.start()
        if redis is not None:
            redis.start()
        if zookeeper is not None:
            zookeeper.start()
        with scratch_dir(args.work_dir, "sparkdispatch-p1-") as scratch:
            for kind in clusters:
                print(f"cluster {kind}: chains of {args.length} vertices", flush=True)
                storage = Path(scratch) / kind
                try:
                    if kind == "standalone":
                        results[kind] = measure_standalone(storage, floor=floor, runs=args.runs,
                                                           profile=args.profile)
                    else:
                        assert redis is not None
                        with_zk = zookeeper is not None and kind == "redis-zookeeper"
                        results[kind] = measure_local_cluster(
                            storage, broker_url=redis.url, zookeeper_hosts=zookeeper.hosts if with_zk else None,
                            floor=floor, runs=args.runs, label=kind, profile=args.profile,
                            zookeeper_pid=zookeeper.process.pid if with_zk and zookeeper.process else None)
                except (RuntimeError, TimeoutError) as exc:
                    # one cluster kind failing (a chain FAILED, a process died) is a finding; measure the rest
                    print(f"  {kind}: FAILED: {exc}", flush=True)
                    results[kind] = {"error": str(exc)}
    finally:
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
            rows.append([f"cluster {kind}", "FAILED", "-", "-", "-"])
            continue
        per_task = figures["per_task_ms_median"]
        overhead = figures["overhead_per_task_ms_median"]
        speedup = submit_ms / per_task
        summary[kind] = {"per_task_ms": per_task, "floor_ms": figures["floor_per_task_ms_median"],
                         "overhead_ms": overhead, "speedup_vs_spark_submit": round(speedup, 1),
                         "overhead_goal_met": overhead <= GOAL_OVERHEAD_MS, "speedup_goal_met": speedup >= GOAL_SPEEDUP}
        rows.append([f"cluster {kind}", f"{per_task:.1f}", f"{figures['floor_per_task_ms_median']:.1f}",
                     f"{overhead:+.1f}", f"{speedup:.1f}x"])
    if "spark_submit" in results:
        rows.append(["spark-submit --master local[2]", f"{submit_ms:.0f}", "-", "-", "1.0x"])
    print()
    print(f"per task, medians of {args.runs} chains of {args.length} (each paired with a floor chain run just "
          f"before it); spark-submit: median of {args.spark_submit_runs} tasks")
    print_table(["what", "ms per task", "floor ms", "above floor (ms)", "vs spark-submit"], rows)
    print(f"goals: <= {GOAL_OVERHEAD_MS:g} ms above the floor, >= {GOAL_SPEEDUP:g}x faster than spark-submit; "
          f"load average {results['load_average_at_start']} -> {results['load_average_at_end']} on "
          f"{os.cpu_count()} cores")
    for kind, figures in summary.items():
        if "error" in figures:
            print(f"  {kind}: FAILED: {figures['error']}")
            continue
        cpu = results[kind]["cpu_ms_per_task_median"]
        print(f"  {kind}: CPU ms per task: " + ", ".join(f"{name} {ms:.1f}" for name, ms in cpu.items())
              + f"; floor (this process + its JVM) {results[kind]['floor_cpu_ms_per_action_median']:.1f}")
        print(f"  {kind}: overhead {'met' if figures['overhead_goal_met'] else 'MISSED'}, "
              f"speedup {'met' if figures['speedup_goal_met'] else 'MISSED'}")
    for kind in clusters:
        profile = results[kind].get("profile")
        if profile:
            print_profile(kind, profile)
    path = write_results("p1_task_overhead", {
        "chain_length": args.length, "runs": args.runs, "spark_submit_runs": args.spark_submit_runs,
        "goal_overhead_ms": GOAL_OVERHEAD_MS, "goal_speedup": GOAL_SPEEDUP, "summary": summary,
        "floor_session_start_s": round(floor.session_start_s, 2), **results})
    print(f"wrote {path}")
    return 1 if any("error" in figures for figures in summary.values()) else 0


if __name__ == "__main__":
    bench_main(run)
