"""Per-job Python environments: the extra time of a job's first task in a cached and in a cold environment.

    .venv/bin/python bench/environments.py [--runs 8] [--label NAME] [--work-dir DIR] [--quick]

Starts `sparkdispatch standalone` (one TaskExecutor with one slot, Spark `local[2]`, packages from a
`python.find-links` directory of wheels made here, `python.no-index`) and runs rounds of one-vertex
jobs (`spark.range(10).count()`, the same artifact throughout), each timed from `POST /jobs` to the
FINISHED JobResult:

- `none`: no environment, after a job of the same kind (the slot's process kept): the baseline;
- `cached, new process`: an environment built before, after a job without one (the slot starts a
  process in the environment's interpreter: no spare runs it);
- `cached, process kept`: the same environment again (the slot's process kept);
- `cold`: a set of requirements never seen (a new tiny wheel each round beside the common one): uv
  resolves and installs it, then the slot starts a process in it.

uv's own cache is warm for the common wheel after the first round, as it is on a TaskExecutor that
has run jobs before. Every round's order is the same; one round warms up first. The extra time of a
kind is its median minus the median of `none`, from the same run. `--label` names the run in
bench/results/environments.json (each label's last run is kept).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness.reporting import load_average, load_change, median, print_table, save_labelled_run, spread_ms
from harness.running import add_run_options, bench_main, scratch_dir
from harness.standalone import Standalone

from sparkdispatch.testing.wheels import make_wheel

START_TIMEOUT_S = 600.0
JOB_TIMEOUT_S = 600.0
WARM_UP_ROUNDS = 1
KINDS = ("none", "cached, new process", "cached, process kept", "cold")
DEFAULTS = {
    "spark.master": "local[2]",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "rest.execution-result.long-poll": "5s",
    "taskexecutor.connect.start-timeout": "5min",
}
SOURCE = '''"""A small job's code."""


def count(ctx):
    import sd_probe  # noqa: F401 - only in an environment

    ctx.spark.range(10).count()


def count_plain(ctx):
    ctx.spark.range(10).count()
'''


def graph(artifact: str, name: str, dependencies: list[str] | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "artifacts": [artifact],
        "vertices": [{"id": "count", "entrypoint": f"env_job:{'count' if dependencies else 'count_plain'}"}],
        "restart_strategy": {"type": "fixed-delay", "attempts": 0, "delay_s": 0.0},
    }
    if dependencies:
        body["environment"] = {"dependencies": dependencies}
    return body


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=8, help="measured rounds (one job of each kind)")
    parser.add_argument("--label", default="latest", help="name of this run in the results")
    add_run_options(parser, quick="3 rounds")
    args = parser.parse_args()
    if args.quick:
        args.runs = 3
    rounds = WARM_UP_ROUNDS + args.runs
    report: dict[str, Any] = {"load_average_at_start": load_average(), "runs": args.runs, "quick": args.quick}
    seconds: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with scratch_dir(args.work_dir, "sparkdispatch-environments-") as scratch:
        wheelhouse = Path(scratch) / "wheelhouse"
        make_wheel(wheelhouse, "sd_probe", "1.0")
        for index in range(rounds):
            make_wheel(wheelhouse, f"sd_pad_{index}", "1.0")
        overrides = {**DEFAULTS, "python.find-links": str(wheelhouse), "python.no-index": "true"}
        report["overrides"] = overrides
        standalone = Standalone(Path(scratch) / "standalone", slots=1, overrides=overrides)
        try:
            print("standalone: 1 TaskExecutor x 1 slot", flush=True)
            standalone.start(START_TIMEOUT_S)
            code = Path(scratch) / "code" / "env_job.py"
            code.parent.mkdir(parents=True)
            code.write_text(SOURCE)
            artifact = standalone.rest.upload_artifact(code)
            cached = ["sd_probe==1.0"]
            standalone.rest.run_job(graph(artifact, "build-cached", cached), timeout=JOB_TIMEOUT_S)
            for index in range(rounds):
                measured = index >= WARM_UP_ROUNDS
                jobs = [
                    ("warm-up", None),
                    ("none", None),
                    ("cached, new process", cached),
                    ("cached, process kept", cached),
                    ("cold", ["sd_probe==1.0", f"sd_pad_{index}==1.0"]),
                ]
                for kind, dependencies in jobs:
                    wall, _ = standalone.rest.run_job(
                        graph(artifact, f"{kind}-{index}", dependencies), timeout=JOB_TIMEOUT_S
                    )
                    if measured and kind in seconds:
                        seconds[kind].append(wall)
                if measured:
                    print(
                        f"  round {index - WARM_UP_ROUNDS + 1}: "
                        + ", ".join(f"{kind} {seconds[kind][-1] * 1000:.0f} ms" for kind in KINDS),
                        flush=True,
                    )
        finally:
            standalone.stop()
    report["load_average_at_end"] = load_average()
    baseline = median(seconds["none"])
    figures = {
        kind: {**spread_ms(values), "extra_p50": (median(values) - baseline) * 1000} for kind, values in seconds.items()
    }
    print()
    print_table(
        ["job", "median ms", "extra ms (median - none's)", "p90 ms", "min ms", "max ms"],
        [[kind, *(f"{f[k]:.0f}" for k in ("p50", "extra_p50", "p90", "min", "max"))] for kind, f in figures.items()],
    )
    print(load_change(report))
    save_labelled_run(
        "environments",
        args.label,
        quick=args.quick,
        entry={
            **report,
            "figures_ms": figures,
            "samples_s": {k: [round(v, 3) for v in vs] for k, vs in seconds.items()},
        },
    )
    return 0


if __name__ == "__main__":
    bench_main(run)
