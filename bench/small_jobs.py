"""Small jobs: a one-vertex job from submit to FINISHED, with the last job's code and with new code.

    .venv/bin/python bench/small_jobs.py [--runs 15] [--slots 2] [--udf] [--gap S] [--label NAME]
                                         [-D key=value ...] [--work-dir DIR] [--quick]

Starts `sparkdispatch standalone` (one TaskExecutor, `--slots` slots, Spark `local[2]`) and runs
pairs of jobs, one after the other: a job of one vertex (parallelism 1, `spark.range(10).count()`
in the job's module) with the same artifact as the job before it, then one whose module is a new
version (a new artifact, uploaded before the job is submitted: the upload is not counted). Timed
from `POST /jobs` to the FINISHED JobResult (the master's long poll answers at once). Three pairs
warm up first. `--label` names the run in the results (e.g. `before`, `after`): the figures of
every label stay in bench/results/small_jobs.json, the last run of each label. From the
TaskExecutor's log it also reports how long a spare slot process took from wanted to ready, and a
new process's start (forked from the template, or spawned with its imports) and warm-up
(`-D taskexecutor.slot-process.template=false` measures spawned ones).

`--udf`: the job's one task runs a Python UDF of its module over 10 rows in 2 partitions instead
(`spark.range(0, 10, 1, 2)`, collected), so each job's session needs Spark's Python workers
(`-D taskexecutor.slot-process.python-workers=0` measures it without them started ahead). `--gap`:
seconds between one job's end and the next job's submission (default 0, back to back), as jobs
of a schedule come.

The floor, after the cluster stopped: the same task function called in one warm classic
SparkSession (`local[2]`) of this process, as a script that already ran it once would; each
median is printed against it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness.classic_floor import classic_session
from harness.reporting import load_average, load_change, print_table, save_labelled_run, spread_ms
from harness.running import add_run_options, bench_main, scratch_dir
from harness.standalone import Standalone
from sparkdispatch.entrypoint.cli import add_overrides_option

START_TIMEOUT_S = 600.0
JOB_TIMEOUT_S = 300.0
WARM_UP_PAIRS = 3
DEFAULTS = {
    "spark.master": "local[2]",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "rest.execution-result.long-poll": "5s",
    "taskexecutor.connect.start-timeout": "5min",
}
SOURCE = '''"""A small job's code, version {version}."""

VERSION = {version}


def count(ctx):
    ctx.spark.range(10).count()


def _plus_version(value):
    return value + VERSION


def udf(ctx):
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    ctx.spark.range(0, 10, 1, 2).select(F.udf(_plus_version, LongType())("id")).collect()
'''


def graph(artifact: str, index: int, function: str) -> dict[str, Any]:
    return {
        "name": f"small-{index}",
        "artifacts": [artifact],
        "vertices": [{"id": function, "entrypoint": f"small_job:{function}"}],
        "restart_strategy": {"type": "fixed-delay", "attempts": 0, "delay_s": 0.0},
    }


#: The TaskExecutor's log lines about a spare's start (slot_pool.py's SPARE_READY, slot_child.py's).
SPARE_READY = re.compile(r"spare slot process \d+ ready ([\d.]+)s after it was wanted")
PROCESS_READY = re.compile(
    r"slot process \d+ ready in ([\d.]+)s \((forked|spawned and imported) ([\d.]+)s, warmed ([\d.]+)s\)"
)


def spare_starts(log: Path) -> dict[str, dict[str, float]]:
    """From the TaskExecutor's log: seconds from "spare wanted" to "spare ready" and a new process's
    start (forked, or spawned and its imports), its warm-up and both (spread in ms), besides the
    spares made at the TaskExecutor's start."""
    text = log.read_text(errors="replace") if log.exists() else ""
    wanted_to_ready = [float(m.group(1)) for m in SPARE_READY.finditer(text)]
    started = list(PROCESS_READY.finditer(text))[1:]  # the first is the spare made before registering
    figures = {
        "spare wanted to ready": wanted_to_ready,
        "process start": [float(m.group(3)) for m in started],
        "process warm-up": [float(m.group(4)) for m in started],
        "process ready": [float(m.group(1)) for m in started],
    }
    return {kind: {**spread_ms(values), "n": len(values)} for kind, values in figures.items() if values}


def classic_floor(function: str, runs: int) -> list[float]:
    """The same task function in one warm classic SparkSession (`local[2]`) of this process, called
    `runs` times after warm-up calls: the seconds of each call (what a user runs instead)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers: this interpreter
    spark = classic_session("local[2]", "small-jobs-classic-floor", {"spark.sql.shuffle.partitions": "2"})
    try:
        module: dict[str, Any] = {"__name__": "small_job_floor"}  # not importable: its UDF is pickled by value
        exec(compile(SOURCE.format(version=0), "small_job.py", "exec"), module)
        task, ctx = module[function], SimpleNamespace(spark=spark)
        for _ in range(WARM_UP_PAIRS):
            task(ctx)
        seconds = []
        for _ in range(runs):
            begin = time.perf_counter()
            task(ctx)
            seconds.append(time.perf_counter() - begin)
        return seconds
    finally:
        spark.stop()


def upload(standalone: Standalone, directory: Path, version: int) -> str:
    path = directory / str(version) / "small_job.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SOURCE.format(version=version))
    return standalone.rest.upload_artifact(path)


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15, help="measured pairs (same code, new code)")
    parser.add_argument("--slots", type=int, default=2, help="slots of the TaskExecutor")
    parser.add_argument("--label", default="latest", help="name of this run in the results")
    parser.add_argument("--udf", action="store_true", help="each job runs a Python UDF of its module")
    parser.add_argument("--gap", type=float, default=0.0, help="seconds between a job's end and the next")
    add_overrides_option(parser, help="configuration of the standalone cluster")
    add_run_options(parser, quick="5 pairs")
    args = parser.parse_args()
    if args.quick:
        args.runs = 5
    overrides = {**DEFAULTS, **dict(item.split("=", 1) for item in args.overrides)}
    report: dict[str, Any] = {
        "load_average_at_start": load_average(),
        "slots": args.slots,
        "runs": args.runs,
        "overrides": overrides,
        "quick": args.quick,
        "udf": args.udf,
        "gap_s": args.gap,
    }
    seconds: dict[str, list[float]] = {"same code": [], "new code": [], "floor": []}
    function = "udf" if args.udf else "count"
    with scratch_dir(args.work_dir, "sparkdispatch-small-jobs-") as scratch:
        standalone = Standalone(Path(scratch) / "standalone", slots=args.slots, overrides=overrides)
        try:
            print(f"standalone: 1 TaskExecutor x {args.slots} slots", flush=True)
            standalone.start(START_TIMEOUT_S)
            code = Path(scratch) / "code"
            artifact = upload(standalone, code, 0)
            for index in range(WARM_UP_PAIRS + args.runs):
                measured = index >= WARM_UP_PAIRS
                for kind in ("same code", "new code"):
                    if kind == "new code":
                        artifact = upload(standalone, code, index + 1)
                    time.sleep(args.gap)
                    wall, _ = standalone.rest.run_job(graph(artifact, index, function), timeout=JOB_TIMEOUT_S)
                    if measured:
                        seconds[kind].append(wall)
                if measured:
                    print(
                        f"  pair {index - WARM_UP_PAIRS + 1}: same code {seconds['same code'][-1] * 1000:.0f} ms, "
                        f"new code {seconds['new code'][-1] * 1000:.0f} ms",
                        flush=True,
                    )
        finally:
            standalone.stop()
            spares = spare_starts(standalone.log_dir / "taskexecutor-0.log")
    print("floor: the same task function in one warm classic session", flush=True)
    seconds["floor"] = classic_floor(function, args.runs)
    report["load_average_at_end"] = load_average()
    figures = {kind: spread_ms(values) for kind, values in seconds.items()}
    floor = figures["floor"]["p50"]
    print()
    print_table(
        ["job", "median ms", "p90 ms", "min ms", "max ms", "median / floor"],
        [
            [kind, *(f"{f[k]:.0f}" for k in ("p50", "p90", "min", "max")), f"{f['p50'] / floor:.1f}x"]
            for kind, f in figures.items()
        ],
    )
    print()
    print_table(
        ["slot process", "n", "median ms", "p90 ms", "min ms", "max ms"],
        [[kind, f"{f['n']:.0f}", *(f"{f[k]:.0f}" for k in ("p50", "p90", "min", "max"))] for kind, f in spares.items()],
    )
    print(load_change(report))
    save_labelled_run(
        "small_jobs",
        args.label,
        quick=args.quick,
        entry={
            **report,
            "figures_ms": figures,
            "slot_processes_ms": spares,
            "samples_s": {k: [round(v, 3) for v in vs] for k, vs in seconds.items()},
            "ratios_to_floor": {kind: round(f["p50"] / floor, 2) for kind, f in figures.items()},
        },
    )
    return 0


if __name__ == "__main__":
    bench_main(run)
