"""Chaos: a stream of jobs on a real HA cluster while its processes are killed, paused and restarted.

    .venv/bin/python bench/chaos.py [--jobs 500] [--faults 20] [--seed N] [--in-flight 3] [-D key=value ...]

Starts ZooKeeper, Redis, two masters (HA `zookeeper`) and two TaskExecutors, and runs `--jobs`
jobs produce(2) → transform(2) → summarize(1) (`bench/tasks/chaos_tasks.py`), `--in-flight` at a
time, while `--faults` faults hit it at points drawn from `--seed` (printed; random when not
given): SIGKILL of the leader master, SIGKILL and SIGSTOP (past the heartbeat timeout) of a
TaskExecutor, a Redis restart, a ZooKeeper SIGSTOP past the session timeout — every kind at least
once, each restarted or resumed, and the cluster healed before the next. Then it audits
(`sparkdispatch.testing.chaos_audit`): every accepted job has exactly one JobResult, FINISHED, with
the right rows; no execution started after its job's JobResult or its vertex's result was
complete; no job hung past `--hang-after`; no znode, dirty JobResult, JobGraph file, result
directory or slot is left. Prints the counts and every finding (with the faults during the job and
log lines about it), writes bench/results/chaos.json, and exits 1 when anything was found.
The test `tests/integration/test_chaos.py` is the same run, smaller.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from harness.paths import TASKS_DIR
from harness.reporting import load_average, print_table, write_results
from harness.running import bench_main, scratch_dir

from sparkdispatch.testing.chaos import ChaosRun
from sparkdispatch.testing.chaos_model import ChaosSettings

TASKS = TASKS_DIR / "chaos_tasks.py"


def override(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {item!r}")
    return key.strip(), value.strip()


def run() -> int:
    defaults = ChaosSettings()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--faults", type=int, default=20)
    parser.add_argument("--seed", type=int, default=None, help="plan of jobs and faults (default: random, printed)")
    parser.add_argument("--in-flight", type=int, default=defaults.in_flight, help="jobs running at once")
    parser.add_argument(
        "--hang-after",
        type=float,
        default=defaults.hang_after_s,
        help="seconds after acceptance a job without its JobResult hangs",
    )
    parser.add_argument(
        "--restart-attempts", type=int, default=defaults.restart_attempts, help="each job's fixed-delay restart budget"
    )
    parser.add_argument(
        "--max-task-sleep",
        type=float,
        default=defaults.max_task_sleep_s,
        help="each task pauses up to this long, seconds",
    )
    parser.add_argument(
        "--session-timeout", type=float, default=defaults.session_timeout_s, help="ZooKeeper session timeout, seconds"
    )
    parser.add_argument("--heartbeat-timeout", type=float, default=defaults.heartbeat_timeout_s, help="seconds")
    parser.add_argument("--slot-request-timeout", type=float, default=defaults.slot_request_timeout_s, help="seconds")
    parser.add_argument(
        "-D",
        dest="overrides",
        action="append",
        default=[],
        type=override,
        metavar="KEY=VALUE",
        help="another configuration key of the cluster",
    )
    parser.add_argument("--work-dir", type=Path, default=None, help="keep storage, logs and markers here")
    args = parser.parse_args()
    settings = ChaosSettings(
        jobs=args.jobs,
        faults=args.faults,
        seed=args.seed if args.seed is not None else random.randrange(1_000_000),
        in_flight=args.in_flight,
        hang_after_s=args.hang_after,
        restart_attempts=args.restart_attempts,
        max_task_sleep_s=args.max_task_sleep,
        session_timeout_s=args.session_timeout,
        heartbeat_timeout_s=args.heartbeat_timeout,
        slot_request_timeout_s=args.slot_request_timeout,
        overrides=tuple(args.overrides),
    )
    load_at_start = load_average()
    with scratch_dir(args.work_dir, "sparkdispatch-chaos-") as scratch:
        report = ChaosRun(settings, work_dir=Path(scratch), tasks=TASKS).run()
    print()
    print(report.summary())
    print()
    counts = report.counts()
    print_table(
        ["jobs", "faults", "executions", "re-executions", "lost", "duplicated", "hung", "leftovers"],
        [
            [
                report.jobs,
                len(report.faults),
                report.executions,
                report.re_executions,
                counts["lost"],
                counts["duplicated"],
                counts["hung"],
                counts["leftover"],
            ]
        ],
    )
    path = write_results(
        "chaos", {**report.to_dict(), "load_average_at_start": load_at_start, "load_average_at_end": load_average()}
    )
    print(f"wrote {path}")
    return 1 if report.findings else 0


if __name__ == "__main__":
    bench_main(run)
