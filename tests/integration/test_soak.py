"""A CI-sized soak: a warm `sparkdispatch standalone` runs the soak's job mix (Python UDFs, new code
versions, chained and durable results, a restarted attempt, a repair, a cancellation) and does not
grow in processes or threads.

bench/soak.py is the long form (thousands of jobs, every process sampled each minute); this test
runs 20 jobs, with the Connect server recycled every 12 job sessions so recycling happens under
the soak, and compares the TaskExecutor's tree once it settled after a warm-up of 6 jobs with the
same after the last job. Settled: one Connect server (none draining), every slot and the spare
holding a slot process, one slot-process template, one worker-daemon template, and Spark's Python
processes down to the worker daemons of the live job sessions (each forked from the worker-daemon
template, with the stub Spark started for it), one per slot at most (idle workers end a minute after
their last UDF; the daemons of released sessions are ended by the TaskExecutor).

Tolerances: the TaskExecutor, its server and its slot processes must match exactly once settled,
and Spark's Python processes stay at one daemon per slot at most (a Python worker daemon left per
session, as before the TaskExecutor ended those of released sessions, shows as a process more per
job; fewer is fine: a successor server has none until its sessions run a UDF). A JVM's threads
and open files move with its thread pools, which grow under load and shrink after a minute idle,
and with what up to 12 sessions left since the server's last replacement (Spark keeps a thread per
session that ran a UDF, its Python worker factory's idle monitor). Spark's two block-manager pools
are counted apart (`pooled_threads`): a burst of block removals, as a released session's cleanup
is, starts up to 100 threads in each for a minute, so a count taken just after one was +155 threads
over one taken a minute later (2026-11-29), which says nothing of growth; they may hold their 200 at
most. The other threads may grow by 100 and the open files by 200: between a server that had just
taken over and one 20 sessions old, +94 threads (both pools included) were measured at a load
average of 12 on the 2 cores. That the server was recycled at all is read in the TaskExecutor's
log. The TaskExecutor process itself keeps its threads (4 more allowed: Celery's own).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparkdispatch.testing.process_census import (
    DAEMON_STUB,
    DAEMON_TEMPLATE,
    PYTHON_WORKER,
    SERVER,
    SLOT,
    TASK_EXECUTOR,
    TEMPLATE,
    KindTotals,
    census,
)
from sparkdispatch.testing.soak_jobs import SoakJobs
from sparkdispatch.testing.standalone_process import StandaloneProcess
from sparkdispatch.testing.waiting import WaitTimedOut, eventually_blocking

pytestmark = pytest.mark.slow

SLOTS = 2
SPARES = 1
WARM_UP_JOBS = 6
JOBS = 20
START_S = 420.0
SETTLE_S = 300.0
JVM_THREADS_TOLERANCE = 100  # not counting the block-manager pools
JVM_POOLED_THREADS_MAX = 200  # Spark's two block-manager pools, 100 threads each
JVM_OPEN_FILES_TOLERANCE = 200
TASK_EXECUTOR_THREADS_TOLERANCE = 4
OVERRIDES = {
    "spark.master": "local[2]",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "rest.execution-result.long-poll": "5s",
    "taskexecutor.connect.recycle.sessions": 12,
    "taskexecutor.artifact-cache.max-size": "64kb",
    "taskexecutor.connect.start-timeout": "6min",
    "taskexecutor.slot-process.spares": SPARES,
}


def settled(standalone: StandaloneProcess) -> dict[str, KindTotals]:
    """The TaskExecutor's tree once it holds one server, no Python worker and every slot process."""
    assert standalone.process is not None
    root = standalone.process.pid

    def settled_totals() -> dict[str, KindTotals] | None:
        totals = census(root)
        if (
            (totals[SERVER].processes, totals[SLOT].processes, totals[TEMPLATE].processes) == (1, SLOTS + SPARES, 1)
            and totals[DAEMON_TEMPLATE].processes == 1
            and totals[PYTHON_WORKER].processes <= SLOTS
            and totals[DAEMON_STUB].processes <= SLOTS
        ):
            return totals
        return None

    try:
        return eventually_blocking(
            settled_totals, "the TaskExecutor to settle", timeout=SETTLE_S, interval=2.0, processes=[standalone]
        )
    except WaitTimedOut:
        raise AssertionError(f"the TaskExecutor did not settle: {describe(census(root))}") from None


def describe(totals: dict[str, KindTotals]) -> dict[str, object]:
    return {kind: entry.to_dict() for kind, entry in totals.items() if entry.processes}


@pytest.mark.timeout(1800)
def test_a_warm_taskexecutor_does_not_grow_in_processes_or_threads(tmp_path: Path) -> None:
    standalone = StandaloneProcess(tmp_path / "storage", slots=SLOTS, overrides=OVERRIDES)
    standalone.launch()
    try:
        standalone.wait_for_task_executors(timeout=START_S)
        jobs = SoakJobs(standalone.base_url, tmp_path / "jobs")
        for index in range(WARM_UP_JOBS):
            outcome = jobs.run(index)
            assert outcome.expected, outcome
        before = settled(standalone)
        for index in range(WARM_UP_JOBS, JOBS):
            outcome = jobs.run(index)
            assert outcome.expected, outcome
        after = settled(standalone)
    finally:
        standalone.stop()

    log = (standalone.log_dir / "taskexecutor-0.log").read_text(errors="replace")
    assert re.search(r"Spark Connect server at \S+ \(pid \d+\) took over", log), "no server was recycled"
    growth = f"after the warm-up: {describe(before)}; at the end: {describe(after)}"
    for kind in (TASK_EXECUTOR, SERVER, SLOT, TEMPLATE, DAEMON_TEMPLATE):
        assert after[kind].processes == before[kind].processes, growth
    assert after[PYTHON_WORKER].processes <= SLOTS, growth
    assert after[DAEMON_STUB].processes <= SLOTS, growth
    assert after[TASK_EXECUTOR].threads <= before[TASK_EXECUTOR].threads + TASK_EXECUTOR_THREADS_TOLERANCE, growth
    unpooled_before = before[SERVER].threads - before[SERVER].pooled_threads
    unpooled_after = after[SERVER].threads - after[SERVER].pooled_threads
    assert unpooled_after <= unpooled_before + JVM_THREADS_TOLERANCE, growth
    assert after[SERVER].pooled_threads <= JVM_POOLED_THREADS_MAX, growth
    assert after[SERVER].open_files <= before[SERVER].open_files + JVM_OPEN_FILES_TOLERANCE, growth
