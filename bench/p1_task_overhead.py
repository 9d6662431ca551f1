"""P1 per-task overhead: a chain of trivial PySpark vertices on warm slots, against the floor and spark-submit.

    .venv/bin/python bench/p1_task_overhead.py [--runs 5] [--length 20] [--spark-submit-runs 3]
                                               [--clusters redis-none,redis-zookeeper,standalone]

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
than spark-submit.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import (
    BENCH_TASKS,
    TASKS_DIR,
    VENV_BIN,
    BenchCluster,
    Rest,
    bench_env,
    bench_main,
    chain_graph,
    child_pids,
    cluster_config,
    kill_pids,
    median,
    print_table,
    stop_process,
    write_results,
)

from sparkdispatch.testing.services import RedisServer, ZooKeeperServer, free_port

GOAL_OVERHEAD_MS = 20.0
GOAL_SPEEDUP = 50.0
CLUSTER_START_TIMEOUT_S = 240.0


def measure_floor(length: int, runs: int) -> dict[str, Any]:
    """`length` actions in one warm SparkSession of this process, `runs` times after a warm-up."""
    from pyspark.sql import SparkSession

    started = time.monotonic()
    spark = (SparkSession.builder.master("local[2]").appName("p1-floor")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    try:
        session_s = time.monotonic() - started
        for _ in range(length):  # warm-up: the first actions compile and load classes
            spark.range(10).count()
        chains = []
        for _ in range(runs):
            begin = time.perf_counter()
            for _ in range(length):
                spark.range(10).count()
            chains.append(time.perf_counter() - begin)
    finally:
        spark.stop()
    per_task_ms = [c / length * 1000 for c in chains]
    return {"session_start_s": round(session_s, 2), "chain_s": [round(c, 4) for c in chains],
            "per_task_ms": [round(p, 2) for p in per_task_ms], "per_task_ms_median": round(median(per_task_ms), 2)}


def run_chains(submit: Callable[[dict[str, Any]], str], wait: Callable[[str], dict[str, Any]], artifact: str,
               length: int, runs: int, label: str) -> dict[str, Any]:
    """A warm-up chain, then `runs` timed chains; per-task figures from client and server clocks."""
    walls, servers = [], []
    for run in range(runs + 1):
        graph = chain_graph(f"p1-{label}-{run}", length, entrypoint="bench_tasks:count_rows", artifact=artifact)
        begin = time.perf_counter()
        result = wait(submit(graph))
        wall = time.perf_counter() - begin
        if result["status"] != "FINISHED":
            raise RuntimeError(f"{label}: chain {run} ended {result['status']}: {result.get('failure')}")
        if run == 0:
            print(f"  {label}: warm-up chain {wall:.2f}s", flush=True)
            continue
        walls.append(wall)
        servers.append(result["duration_ms"] / 1000.0)
        print(f"  {label}: chain {run}: {wall:.3f}s submit->result, {result['duration_ms']} ms in the master "
              f"({wall / length * 1000:.1f} ms per task)", flush=True)
    per_task_ms = [w / length * 1000 for w in walls]
    return {"chain_s": [round(w, 4) for w in walls], "server_duration_s": [round(s, 4) for s in servers],
            "per_task_ms": [round(p, 2) for p in per_task_ms], "per_task_ms_median": round(median(per_task_ms), 2),
            "server_per_task_ms_median": round(median([s / length * 1000 for s in servers]), 2)}


def measure_local_cluster(storage: Path, *, broker_url: str, zookeeper_hosts: str | None, length: int,
                          runs: int, label: str) -> dict[str, Any]:
    config = cluster_config(storage, broker_url=broker_url, zookeeper_hosts=zookeeper_hosts, slots=1)
    cluster = BenchCluster(config, masters=1, taskexecutors=1, log_dir=storage / "log")
    started = time.monotonic()
    try:
        cluster.start(timeout=CLUSTER_START_TIMEOUT_S)
        print(f"  {label}: cluster up in {time.monotonic() - started:.1f}s (logs {storage / 'log'})", flush=True)
        artifact = cluster.upload_artifact(BENCH_TASKS)
        return run_chains(cluster.submit, lambda job_id: cluster.wait_for_result(job_id, timeout=300), artifact,
                          length, runs, label)
    finally:
        cluster.stop()


def measure_standalone(storage: Path, *, length: int, runs: int) -> dict[str, Any]:
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
        return run_chains(rest.submit, lambda job_id: rest.wait_for_result(job_id), artifact, length, runs,
                          "standalone")
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
            raise RuntimeError(f"spark-submit exited with {process.returncode}:\n{err.decode(errors='replace')[-2000:]}")
        times.append(elapsed)
        print(f"  spark-submit run {run + 1}: {elapsed:.2f}s", flush=True)
    return {"task_s": [round(t, 3) for t in times], "per_task_ms_median": round(median(times) * 1000, 1)}


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="timed chains per cluster (after one warm-up)")
    parser.add_argument("--length", type=int, default=20, help="vertices per chain")
    parser.add_argument("--spark-submit-runs", type=int, default=3)
    parser.add_argument("--clusters", default="redis-none,redis-zookeeper,standalone",
                        help="comma-separated: redis-none, redis-zookeeper, standalone")
    args = parser.parse_args()
    clusters = [c.strip() for c in args.clusters.split(",") if c.strip()]
    unknown = set(clusters) - {"redis-none", "redis-zookeeper", "standalone"}
    if unknown:
        parser.error(f"unknown cluster kind(s): {', '.join(sorted(unknown))}")

    results: dict[str, Any] = {}
    print(f"floor: {args.length} x spark.range(10).count() in one warm SparkSession", flush=True)
    results["floor"] = measure_floor(args.length, args.runs)
    print(f"  floor: {results['floor']['per_task_ms_median']:.1f} ms per action (median)", flush=True)

    redis = RedisServer() if any(c.startswith("redis") for c in clusters) else None
    zookeeper = ZooKeeperServer() if "redis-zookeeper" in clusters else None
    try:
        if redis is not None:
            redis.start()
        if zookeeper is not None:
            zookeeper.start()
        with tempfile.TemporaryDirectory(prefix="sparkdispatch-p1-") as scratch:
            for kind in clusters:
                print(f"cluster {kind}: chains of {args.length} vertices", flush=True)
                storage = Path(scratch) / kind
                if kind == "standalone":
                    results[kind] = measure_standalone(storage, length=args.length, runs=args.runs)
                else:
                    assert redis is not None
                    results[kind] = measure_local_cluster(
                        storage, broker_url=redis.url, zookeeper_hosts=zookeeper.hosts if zookeeper else None,
                        length=args.length, runs=args.runs, label=kind)
    finally:
        if zookeeper is not None:
            zookeeper.stop()
        if redis is not None:
            redis.stop()

    print(f"spark-submit --master local[2], {args.spark_submit_runs} tasks", flush=True)
    results["spark_submit"] = measure_spark_submit(args.spark_submit_runs)

    floor_ms = results["floor"]["per_task_ms_median"]
    submit_ms = results["spark_submit"]["per_task_ms_median"]
    rows = [["floor (one warm SparkSession)", f"{floor_ms:.1f}", "-", "-"]]
    summary = {}
    for kind in clusters:
        per_task = results[kind]["per_task_ms_median"]
        overhead = per_task - floor_ms
        speedup = submit_ms / per_task
        summary[kind] = {"per_task_ms": per_task, "overhead_ms": round(overhead, 2),
                         "speedup_vs_spark_submit": round(speedup, 1),
                         "overhead_goal_met": overhead <= GOAL_OVERHEAD_MS, "speedup_goal_met": speedup >= GOAL_SPEEDUP}
        rows.append([f"cluster {kind}", f"{per_task:.1f}", f"{overhead:+.1f}", f"{speedup:.1f}x"])
    rows.append(["spark-submit --master local[2]", f"{submit_ms:.0f}", f"{submit_ms - floor_ms:+.0f}", "1.0x"])
    print()
    print(f"per task, medians ({args.runs} chains of {args.length}; spark-submit {args.spark_submit_runs} tasks)")
    print_table(["what", "ms per task", "above floor (ms)", "vs spark-submit"], rows)
    print(f"goals: <= {GOAL_OVERHEAD_MS:g} ms above the floor, >= {GOAL_SPEEDUP:g}x faster than spark-submit")
    for kind, figures in summary.items():
        print(f"  {kind}: overhead {'met' if figures['overhead_goal_met'] else 'MISSED'}, "
              f"speedup {'met' if figures['speedup_goal_met'] else 'MISSED'}")
    path = write_results("p1_task_overhead", {
        "chain_length": args.length, "runs": args.runs, "spark_submit_runs": args.spark_submit_runs,
        "goal_overhead_ms": GOAL_OVERHEAD_MS, "goal_speedup": GOAL_SPEEDUP, "summary": summary, **results})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    bench_main(run)
