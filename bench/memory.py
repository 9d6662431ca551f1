"""Memory of a TaskExecutor with 4 slots: its whole process tree, idle and running 4 tasks at once.

    .venv/bin/python bench/memory.py [--slots 4] [--task-seconds 20] [--work-dir DIR] [--quick]

Starts `sparkdispatch standalone --slots 4` (one TaskExecutor, Spark `local[*]`) and reads /proc
for the TaskExecutor process and every descendant: its Spark Connect server's JVM, Spark's Python
workers under it, the slot processes (bound to a job, or warm spares). Per process kind: how many,
RSS and PSS (RSS counts shared pages in every process that maps them; PSS divides each among its
users, so PSS sums to what the tree really holds). Measured:

- idle: after registration and a settling pause, median of a few samples;
- running: one job whose vertex has 4 subtasks (`bench_tasks:spark_busy`, small aggregations on
  the Connect server for `--task-seconds`), sampled every 0.5 s while all 4 run; the sample with
  the largest total RSS;
- after: idle again once that job finished (its slot processes retired, spares refilled).

Writes bench/results/memory.json with every sample and the load average.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from harness.paths import BENCH_TASKS
from harness.processes import descendants, memory_kib, process_cmdline
from harness.reporting import load_average, load_change, print_table, save_results
from harness.running import add_run_options, bench_main, scratch_dir
from harness.standalone import Standalone

from sparkdispatch.model.job_result import JobResult
from sparkdispatch.taskexecutor.slot_protocol import SLOT_PROCESS_NAME
from sparkdispatch.testing.process_census import process_name
from sparkdispatch.model.rest_shapes import ExecutionResult, JobDetails
from sparkdispatch.model.states import ExecutionState, JobStatus

START_TIMEOUT_S = 300.0
SETTLE_S = 5.0
SAMPLE_INTERVAL_S = 0.5
KINDS = (
    "taskexecutor",
    "connect server JVM",
    "slot processes",
    "slot-process template",
    "Spark Python workers",
    "other",
)


def process_kind(pid: int, task_executor: int) -> str:
    if pid == task_executor:
        return "taskexecutor"
    cmdline = process_cmdline(pid)
    if "SparkConnectServer" in cmdline:
        return "connect server JVM"
    if "sparkdispatch.taskexecutor.slot_process" in cmdline:
        return "slot processes"
    if "sparkdispatch.taskexecutor.slot_template" in cmdline:  # the template, or a process it forked
        return "slot processes" if process_name(pid) == SLOT_PROCESS_NAME else "slot-process template"
    if "pyspark.daemon" in cmdline or "pyspark.worker" in cmdline:
        return "Spark Python workers"
    return "other"


def sample(task_executor: int) -> dict[str, Any]:
    """One reading of the TaskExecutor's process tree: per kind, count, RSS and PSS in MiB."""
    per_kind = {kind: {"count": 0, "rss_mib": 0.0, "pss_mib": 0.0} for kind in KINDS}
    others = []
    for pid in (task_executor, *descendants(task_executor)):
        rss, pss = memory_kib(pid)
        if not rss:
            continue  # gone meanwhile
        kind = process_kind(pid, task_executor)
        if kind == "other":
            others.append(process_cmdline(pid)[:120])
        entry = per_kind[kind]
        entry["count"] += 1
        entry["rss_mib"] += rss / 1024
        entry["pss_mib"] += pss / 1024
    for entry in per_kind.values():
        entry["rss_mib"] = round(entry["rss_mib"], 1)
        entry["pss_mib"] = round(entry["pss_mib"], 1)
    return {
        "at": round(time.time(), 2),
        "per_kind": per_kind,
        "others": others,
        "total_rss_mib": round(sum(e["rss_mib"] for e in per_kind.values()), 1),
        "total_pss_mib": round(sum(e["pss_mib"] for e in per_kind.values()), 1),
    }


def idle_samples(task_executor: int, count: int) -> list[dict[str, Any]]:
    samples = []
    for _ in range(count):
        samples.append(sample(task_executor))
        time.sleep(1.0)
    return samples


def middle(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The sample with the median total RSS."""
    return sorted(samples, key=lambda s: s["total_rss_mib"])[len(samples) // 2]


def running_subtasks(standalone: Standalone, job_id: str) -> int:
    status, body = standalone.rest.request("GET", f"/jobs/{job_id}", timeout=10)
    if status != 200:
        return 0
    return sum(
        1
        for vertex in JobDetails.from_dict(body).vertices
        for subtask in vertex.subtasks
        if subtask.state is ExecutionState.RUNNING
    )


def busy_graph(artifact: str, slots: int, seconds: float) -> dict[str, Any]:
    return {
        "name": "memory-busy",
        "artifacts": [artifact],
        "vertices": [
            {"id": "busy", "entrypoint": "bench_tasks:spark_busy", "parallelism": slots, "params": {"seconds": seconds}}
        ],
        "restart_strategy": {"type": "fixed-delay", "attempts": 0, "delay_s": 0.0},
    }


def measure_running(
    standalone: Standalone, task_executor: int, graph: dict[str, Any], slots: int
) -> tuple[list[dict[str, Any]], JobResult]:
    """Samples while all `slots` subtasks run, and the job's result."""
    job_id = standalone.rest.submit(graph)
    samples: list[dict[str, Any]] = []
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        status, body = standalone.rest.request("GET", f"/jobs/{job_id}/execution-result", timeout=10)
        if status == 200 and (result := ExecutionResult.from_dict(body).result) is not None:
            return samples, result
        if running_subtasks(standalone, job_id) >= slots:
            samples.append(sample(task_executor))
        time.sleep(SAMPLE_INTERVAL_S)
    raise TimeoutError(f"job {job_id} did not finish within {START_TIMEOUT_S:.0f}s")


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slots", type=int, default=4, help="slots of the TaskExecutor")
    parser.add_argument("--task-seconds", type=float, default=20.0, help="how long each running task works")
    add_run_options(parser, quick="tasks of 8 s, fewer idle samples")
    args = parser.parse_args()
    if args.quick:
        args.task_seconds = 8.0
    idle_count = 3 if args.quick else 5

    results: dict[str, Any] = {
        "load_average_at_start": load_average(),
        "slots": args.slots,
        "task_seconds": args.task_seconds,
        "quick": args.quick,
    }
    with scratch_dir(args.work_dir, "sparkdispatch-memory-") as scratch:
        standalone = Standalone(Path(scratch) / "standalone", slots=args.slots)
        try:
            print(f"standalone: 1 TaskExecutor x {args.slots} slots", flush=True)
            up_s = standalone.start(START_TIMEOUT_S)
            task_executor = standalone.task_executor_pids()[0]
            print(f"  up in {up_s:.1f}s; TaskExecutor pid {task_executor}", flush=True)
            time.sleep(SETTLE_S)
            idle = idle_samples(task_executor, idle_count)
            artifact = standalone.rest.upload_artifact(BENCH_TASKS)
            print(f"running: {args.slots} subtasks of bench_tasks:spark_busy for {args.task_seconds:g}s", flush=True)
            running, result = measure_running(
                standalone, task_executor, busy_graph(artifact, args.slots, args.task_seconds), args.slots
            )
            if result.status is not JobStatus.FINISHED:
                raise RuntimeError(f"the busy job ended {result.status.value}: {result.failure}")
            if not running:
                raise RuntimeError(f"never saw {args.slots} subtasks RUNNING at once")
            time.sleep(SETTLE_S)
            after = idle_samples(task_executor, idle_count)
        finally:
            standalone.stop()
    results["load_average_at_end"] = load_average()

    phases = {
        "idle": middle(idle),
        "running (peak)": max(running, key=lambda s: s["total_rss_mib"]),
        "idle after the job": middle(after),
    }
    print()
    print(
        f"TaskExecutor with {args.slots} slots: its process tree (count, RSS / PSS in MiB); running: "
        f"{len(running)} samples with all {args.slots} subtasks RUNNING, the largest"
    )
    rows = []
    for kind in KINDS:
        if not any(phase["per_kind"][kind]["count"] for phase in phases.values()):
            continue
        rows.append(
            [
                kind,
                *(
                    f"{p['per_kind'][kind]['count']} x, {p['per_kind'][kind]['rss_mib']:.0f} / "
                    f"{p['per_kind'][kind]['pss_mib']:.0f}"
                    for p in phases.values()
                ),
            ]
        )
    rows.append(["total", *(f"{p['total_rss_mib']:.0f} / {p['total_pss_mib']:.0f}" for p in phases.values())])
    print_table(["process kind", *phases], rows)
    for name, phase in phases.items():
        if phase["others"]:
            print(f"  other processes ({name}): {phase['others']}")
    print(load_change(results))
    save_results(
        "memory",
        quick=args.quick,
        report={**results, "phases": phases, "samples": {"idle": idle, "running": running, "after": after}},
    )
    return 0


if __name__ == "__main__":
    bench_main(run)
