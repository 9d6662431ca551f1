"""Soak: a warm `sparkdispatch standalone` running thousands of jobs; does any process grow?

    .venv/bin/python bench/soak.py [--jobs 2000] [--hours H] [--slots 2] [--warm-up-jobs N]
                                   [--sample-every 60] [--sample-jobs 25] [-D key=value ...]
                                   [--work-dir DIR] [--quick]

Starts `sparkdispatch standalone` (one TaskExecutor, `--slots` slots, Spark `local[2]`) and runs
jobs one after the other until `--jobs` ran or `--hours` passed: the mix of
`sparkdispatch.testing.soak_jobs` (two vertices with Python UDFs, every other job a new version of
its module, 1 in 10 with a failed attempt restarted, 1 in 25 failed and repaired, 1 in 25
cancelled while it runs). Every process of the cluster is sampled by kind (the standalone's master,
the TaskExecutor, its Spark Connect server JVMs, its slot processes, Spark's Python workers): how
many, RSS, threads and open files, every `--sample-every` seconds (a thread that sleeps in
between) and after every `--sample-jobs` jobs.

After the warm-up (`--warm-up-jobs`, default a tenth of the jobs, at least 50), each kind's growth
is the median of its samples over the last window of jobs against the median over the first window
after the warm-up (a window: a fifth of the samples taken at job counts after it, at least 3). A
Connect server is recycled every 200 job sessions by default (taskexecutor.connect.recycle.*), about
170 soak jobs, and its JVM's threads and Python workers grow between replacements; a window of a
fifth of 1,800 jobs spans two such teeth, so the sawtooth counts as what it is on average (a tenth
spanned less than one, and its median depended on where in a tooth the window fell). The peak of
each window is printed too: a leak that recycling hides still raises the peaks. Goal: <= 10% growth
of each over 2,000 jobs.

The TaskExecutor's artifact cache is bounded at 256 KiB here (`-D` overrides it), so evicting
artifacts is part of the soak. `--quick`: 60 jobs, warm-up 20, samples every 10 jobs. Writes
bench/results/soak.json (soak.quick.json) with every sample, every job's outcome and the load average.
"""

from __future__ import annotations

import argparse
import re
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from harness.reporting import load_average, load_change, print_table, save_results
from harness.running import add_run_options, bench_main, scratch_dir
from harness.standalone import Standalone

from sparkdispatch.entrypoint.cli import add_overrides_option
from sparkdispatch.testing.process_census import KINDS, METRICS, census
from sparkdispatch.testing.soak_jobs import JobOutcome, SoakJobs

START_TIMEOUT_S = 600.0
GOAL_GROWTH = 0.10
#: the growth compares the first and the last of this many windows of the samples after the warm-up
WINDOWS = 5
DEFAULTS = {
    "spark.master": "local[2]",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "rest.execution-result.long-poll": "5s",
    "taskexecutor.artifact-cache.max-size": "256kb",
    "taskexecutor.connect.start-timeout": "5min",
}
_TOOK_OVER = re.compile(r"took over in ([\d.]+) s")


class Sampler:
    """Censuses of the cluster: every `every` seconds on a thread of its own, and when asked (`take`)."""

    def __init__(self, root: int, every: float) -> None:
        self.root = root
        self.every = every
        self.samples: list[dict[str, Any]] = []
        self.jobs_done = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._begin = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def take(self, reason: str) -> dict[str, Any]:
        totals = census(self.root)
        sample = {
            "at_s": round(time.monotonic() - self._begin, 1),
            "jobs": self.jobs_done,
            "reason": reason,
            "load_average": load_average(),
            "kinds": {kind: totals[kind].to_dict() for kind in KINDS if totals[kind].processes},
        }
        with self._lock:
            self.samples.append(sample)
        return sample

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.take("minute" if self.every == 60 else "timer")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def growth(samples: list[dict[str, Any]], *, warm_up: int) -> list[dict[str, Any]]:
    """Per kind and metric: the median and the peak over the first window of counted samples after the
    warm-up and over the last window (each a fifth of them, at least 3), the growth of the median, and
    the peak over the whole run."""
    counted = [s for s in samples if s["reason"] == "jobs" and s["jobs"] > warm_up]
    if not counted:
        return []
    width = max(3, len(counted) // WINDOWS)
    rows = []
    for kind in KINDS:
        for metric in METRICS:

            def values(chosen: list[dict[str, Any]], kind: str = kind, metric: str = metric) -> list[float]:
                return [float(s["kinds"].get(kind, {}).get(metric, 0)) for s in chosen]

            first, last = values(counted[:width]), values(counted[-width:])
            before, after = statistics.median(first), statistics.median(last)
            if not before and not after:
                continue
            rows.append(
                {
                    "kind": kind,
                    "metric": metric,
                    "after_warm_up": before,
                    "end": after,
                    "growth": (after - before) / before if before else None,
                    "window_peaks": [max(first), max(last)],
                    "peak": max(values([s for s in samples if s["jobs"] > warm_up])),
                }
            )
    return rows


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2000, help="jobs to run (the full form: 2,000)")
    parser.add_argument("--hours", type=float, default=0.0, help="stop after this long, whatever --jobs says")
    parser.add_argument("--slots", type=int, default=2, help="slots of the TaskExecutor")
    parser.add_argument(
        "--warm-up-jobs",
        type=int,
        default=0,
        help="jobs before growth counts (default: a tenth of --jobs, at least 50)",
    )
    parser.add_argument("--sample-every", type=float, default=60.0, help="seconds between timed samples")
    parser.add_argument("--sample-jobs", type=int, default=25, help="jobs between counted samples")
    add_overrides_option(parser, help="configuration of the standalone cluster (on top of the soak's own)")
    add_run_options(parser, quick="60 jobs, a warm-up of 20, samples every 10 jobs")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.warm_up_jobs, args.sample_jobs = 60, 20, 10
    warm_up = args.warm_up_jobs or max(50, args.jobs // 10)
    overrides = {**DEFAULTS, **dict(item.split("=", 1) for item in args.overrides)}

    outcomes: list[JobOutcome] = []
    results: dict[str, Any] = {
        "load_average_at_start": load_average(),
        "jobs_asked": args.jobs,
        "hours": args.hours,
        "slots": args.slots,
        "warm_up_jobs": warm_up,
        "overrides": overrides,
        "quick": args.quick,
    }
    with scratch_dir(args.work_dir, "sparkdispatch-soak-") as scratch:
        standalone = Standalone(Path(scratch) / "standalone", slots=args.slots, overrides=overrides)
        sampler: Sampler | None = None
        try:
            print(
                f"standalone: 1 TaskExecutor x {args.slots} slots; {args.jobs} jobs"
                + (f" or {args.hours:g} h" if args.hours else ""),
                flush=True,
            )
            results["start_s"] = round(standalone.start(START_TIMEOUT_S), 1)
            assert standalone.process is not None
            sampler = Sampler(standalone.process.pid, args.sample_every)
            sampler.take("start")
            sampler.start()
            jobs = SoakJobs(standalone.rest.base_url, Path(scratch) / "jobs")
            deadline = time.monotonic() + args.hours * 3600 if args.hours else None
            for index in range(args.jobs):
                if deadline is not None and time.monotonic() > deadline:
                    break
                outcome = jobs.run(index)
                outcomes.append(outcome)
                sampler.jobs_done = index + 1
                if not outcome.expected:
                    print(f"  job {index} ({outcome.kind}) ended {outcome.status}: {outcome.failure[:500]}", flush=True)
                if (index + 1) % args.sample_jobs == 0:
                    report_progress(sampler.take("jobs"), outcomes)
        finally:
            if sampler is not None:
                sampler.stop()
            standalone.stop()
        results["connect_server_replacements_s"] = [
            float(m.group(1)) for m in _TOOK_OVER.finditer(read(standalone.log_dir / "taskexecutor-0.log"))
        ]
    results["load_average_at_end"] = load_average()
    assert sampler is not None
    total = len(outcomes)
    rows = growth(sampler.samples, warm_up=warm_up)
    print_summary(rows, outcomes, results)
    save_results(
        "soak",
        quick=args.quick,
        report={
            **results,
            "jobs_run": total,
            "growth": rows,
            "samples": sampler.samples,
            "jobs": [
                {
                    "index": o.index,
                    "kind": o.kind,
                    "status": o.status,
                    "seconds": round(o.seconds, 2),
                    **({"failure": o.failure} if o.failure else {}),
                }
                for o in outcomes
            ],
        },
    )
    return 0 if all(o.expected for o in outcomes) else 1


def read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def report_progress(sample: dict[str, Any], outcomes: list[JobOutcome]) -> None:
    kinds = sample["kinds"]
    parts = [
        f"{kind.split()[0]} {v['processes']}p {v['threads']}t {v['open_files']}f {v['rss_mib']:.0f}M"
        for kind, v in kinds.items()
    ]
    recent = [o.seconds for o in outcomes[-25:]]
    print(
        f"  {sample['jobs']:5d} jobs, {sample['at_s']:7.0f} s, last 25 median {statistics.median(recent):.1f} s "
        f"| {' | '.join(parts)}",
        flush=True,
    )


def print_summary(rows: list[dict[str, Any]], outcomes: list[JobOutcome], results: dict[str, Any]) -> None:
    print()
    by_kind: dict[str, list[JobOutcome]] = {}
    for outcome in outcomes:
        by_kind.setdefault(outcome.kind, []).append(outcome)
    print_table(
        ["job kind", "jobs", "as expected", "median s"],
        [
            [kind, len(done), sum(o.expected for o in done), f"{statistics.median(o.seconds for o in done):.2f}"]
            for kind, done in sorted(by_kind.items())
        ],
    )
    print(f"Connect server replaced {len(results['connect_server_replacements_s'])} times")
    print()
    print_table(
        ["process kind", "metric", "after warm-up", "end", "growth", "window peaks", "peak"],
        [
            [
                r["kind"],
                r["metric"],
                f"{r['after_warm_up']:.0f}",
                f"{r['end']:.0f}",
                "-"
                if r["growth"] is None
                else f"{r['growth'] * 100:+.1f}%"
                + (" !" if r["growth"] is not None and r["growth"] > GOAL_GROWTH else ""),
                "{:.0f} -> {:.0f}".format(*r["window_peaks"]),
                f"{r['peak']:.0f}",
            ]
            for r in rows
        ],
    )
    print(f"goal: <= {GOAL_GROWTH:.0%} growth of each after the warm-up ('!' marks a miss)")
    print(load_change(results))


if __name__ == "__main__":
    bench_main(run)
