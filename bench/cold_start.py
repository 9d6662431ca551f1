"""Cold start: from launching `sparkdispatch standalone` to the first job's result; that job against the steady state.

    .venv/bin/python bench/cold_start.py [--launches 3] [--steady-runs 4] [--slots 2] [--rows 100000]
                                         [--work-dir DIR] [--quick]

Each launch starts `sparkdispatch standalone --slots 2` as a new process (a free REST port, a new
temporary storage directory, nothing warm but the OS's file cache), and measures:

- ready: launch -> `GET /overview` counts the TaskExecutor (its Connect server started and
  warmed, its spare slot process warmed, registered);
- first result: launch -> the first job's FINISHED result; the job (the example pipeline,
  dags/pipelines/sales_graph.yaml, `--rows` orders, the code uploaded as `pipelines.zip`) is
  submitted the moment the TaskExecutor registered;
- first job: its POST -> result time, and `--steady-runs` more jobs right after it, whose median is
  the steady state. Goal: first job <= 2x the steady state.

The TaskExecutor's own log gives the Connect server's start and warm-up times. Prints the medians
over the launches, writes bench/results/cold_start.json with every sample and the load average.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path
from typing import Any

from harness.graphs import pipelines_artifact, sales_graph
from harness.reporting import load_average, load_change, median, print_table, save_results
from harness.running import add_pipeline_options, add_run_options, bench_main, scratch_dir
from harness.standalone import Standalone

GOAL_RATIO = 2.0
START_TIMEOUT_S = 300.0
JOB_TIMEOUT_S = 300.0
_SERVER_READY = re.compile(r"Spark Connect server ready at \S+ in ([\d.]+) s \(warm-up ([\d.]+) s")


def connect_server_times(log: Path) -> dict[str, float]:
    """The TaskExecutor's Connect server start (warm-up included) and warm-up seconds, from its log."""
    try:
        match = _SERVER_READY.search(log.read_text(errors="replace"))
    except OSError:
        return {}
    return (
        {"connect_server_ready_s": float(match.group(1)), "connect_server_warm_up_s": float(match.group(2))}
        if match
        else {}
    )


def launch(storage: Path, artifact_file: Path, *, slots: int, rows: int, steady_runs: int) -> dict[str, Any]:
    standalone = Standalone(storage, slots=slots)
    try:
        begin = time.monotonic()
        standalone.launch()
        standalone.wait_until_ready(START_TIMEOUT_S)
        ready_s = time.monotonic() - begin
        graph = sales_graph(standalone.rest.upload_artifact(artifact_file), rows=rows)
        first_s, first_master_s = standalone.rest.run_job(graph, timeout=JOB_TIMEOUT_S)
        first_result_s = time.monotonic() - begin
        steady = [standalone.rest.run_job(graph, timeout=JOB_TIMEOUT_S) for _ in range(steady_runs)]
        figures: dict[str, Any] = {
            "ready_s": round(ready_s, 2),
            "first_result_s": round(first_result_s, 2),
            "first_job_s": round(first_s, 3),
            "first_job_master_s": round(first_master_s, 3),
            "steady_job_s": [round(wall, 3) for wall, _ in steady],
            "steady_job_master_s": [round(master, 3) for _, master in steady],
            **connect_server_times(standalone.log_dir / "taskexecutor-0.log"),
            "load_average": load_average(),
        }
        figures["steady_job_s_median"] = round(median(figures["steady_job_s"]), 3)
        figures["first_to_steady"] = round(first_s / figures["steady_job_s_median"], 2)
        return figures
    finally:
        standalone.stop()


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launches", type=int, default=3, help="standalone launches, each measured from scratch")
    parser.add_argument("--steady-runs", type=int, default=4, help="jobs after the first, per launch")
    add_pipeline_options(parser)
    add_run_options(parser, quick="1 launch, 2 steady runs")
    args = parser.parse_args()
    if args.quick:
        args.launches, args.steady_runs = 1, 2

    results: dict[str, Any] = {
        "load_average_at_start": load_average(),
        "launches": args.launches,
        "steady_runs": args.steady_runs,
        "slots": args.slots,
        "rows": args.rows,
        "quick": args.quick,
    }
    samples: list[dict[str, Any]] = []
    with scratch_dir(args.work_dir, "sparkdispatch-cold-") as scratch:
        artifact_file = pipelines_artifact(Path(scratch))
        for index in range(args.launches):
            print(f"launch {index + 1}: sparkdispatch standalone --slots {args.slots}", flush=True)
            figures = launch(
                Path(scratch) / f"launch-{index}",
                artifact_file,
                slots=args.slots,
                rows=args.rows,
                steady_runs=args.steady_runs,
            )
            samples.append(figures)
            server = (
                f" (its Connect server {figures['connect_server_ready_s']:.1f}s, warm-up "
                f"{figures['connect_server_warm_up_s']:.1f}s)"
                if "connect_server_ready_s" in figures
                else ""
            )
            print(
                f"  ready after {figures['ready_s']:.1f}s{server}; first result after "
                f"{figures['first_result_s']:.1f}s; first job {figures['first_job_s']:.2f}s, steady "
                f"{figures['steady_job_s']} (median {figures['steady_job_s_median']:.2f}s): "
                f"{figures['first_to_steady']:.2f}x; load {figures['load_average'][0]}",
                flush=True,
            )
    results["load_average_at_end"] = load_average()

    keys = [
        "ready_s",
        "connect_server_ready_s",
        "connect_server_warm_up_s",
        "first_result_s",
        "first_job_s",
        "steady_job_s_median",
        "first_to_steady",
    ]
    medians = {key: round(median([s[key] for s in samples if key in s]), 3) for key in keys}
    print()
    print(
        f"cold start of `sparkdispatch standalone --slots {args.slots}` and the sales pipeline ({args.rows} rows), "
        f"medians of {args.launches} launch(es)"
    )
    print_table(
        ["what", "median"],
        [
            ["launch -> TaskExecutor registered (ready)", f"{medians['ready_s']:.1f} s"],
            ["  of which its Connect server start + warm-up", f"{medians['connect_server_ready_s']:.1f} s"],
            ["  of which the warm-up", f"{medians['connect_server_warm_up_s']:.1f} s"],
            ["launch -> first job's FINISHED result", f"{medians['first_result_s']:.1f} s"],
            ["first job (POST -> result)", f"{medians['first_job_s']:.2f} s"],
            [f"steady state (median of the next {args.steady_runs})", f"{medians['steady_job_s_median']:.2f} s"],
            ["first / steady", f"{medians['first_to_steady']:.2f}x"],
        ],
    )
    met = medians["first_to_steady"] <= GOAL_RATIO
    print(f"goal: first job <= {GOAL_RATIO:g}x the steady state: {'met' if met else 'MISSED'}; {load_change(results)}")
    save_results(
        "cold_start",
        quick=args.quick,
        report={**results, "goal_first_to_steady": GOAL_RATIO, "samples": samples, "medians": medians, "goal_met": met},
    )
    return 0


if __name__ == "__main__":
    bench_main(run)
