"""SlotManager throughput and latency with 100 / 1,000 / 10,000 simulated TaskExecutors x 8 slots.

Run: `.venv/bin/python bench/slot_manager.py` (optionally `--sizes 100,1000 --slots 8`).

Simulated TaskExecutors register and heartbeat through the ResourceManager's in-process
interface, exactly as the REST routes call it; simulated JobMasters declare requirements and
release slots. For each size it measures, on one asyncio loop:

- allocation throughput: jobs of 8 slots each declare requirements that together take every
  slot; the clock runs from the first declaration until every listener holds its slots. Then
  every job lowers its requirement to 0 and releases its slots (freeing throughput). Repeated
  until about 400,000 allocations were made; the table shows the median round, the JSON also
  the overall rate;
- allocation latency: one job raises its requirement by one slot at a time; each sample is the
  time from `declare_requirements` to its `slots_allocated` callback, one loop turn included;
- heartbeat throughput: every TaskExecutor sends a heartbeat with its slot report.

Prints a table and writes bench/results/slot_manager.json. Goal: >= 100,000 allocations/s,
flat across sizes.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sparkdispatch.config import Configuration
from sparkdispatch.errors import SparkDispatchError
from sparkdispatch.model.protocol import ExecutionReport, SlotReport, SlotStatus
from sparkdispatch.resourcemanager import AllocatedSlot, ResourceManager
from sparkdispatch.resourcemanager.settings import ResourceManagerSettings
from sparkdispatch.testing.job_master import SESSION, register

GOAL_PER_S = 100_000
RESULTS = Path(__file__).resolve().parent / "results" / "slot_manager.json"


class BenchJob:
    """A simulated JobMaster: counts its slots and wakes the bench when it has enough."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.slots: list[AllocatedSlot] = []
        self.waiter: asyncio.Future[None] | None = None
        self.wanted = 0

    def slots_allocated(self, slots: Sequence[AllocatedSlot]) -> None:
        self.slots.extend(slots)
        if self.waiter is not None and len(self.slots) >= self.wanted and not self.waiter.done():
            self.waiter.set_result(None)

    def slot_request_failed(self, error: SparkDispatchError) -> None:
        raise AssertionError(f"bench job {self.job_id}: {error}")

    def task_executor_lost(self, task_executor_id: str, allocation_ids: Sequence[str], reason: str) -> None:
        raise AssertionError(f"bench job {self.job_id} lost {task_executor_id}: {reason}")

    def task_executor_heartbeat(self, task_executor_id: str, executions: Sequence[ExecutionReport]) -> None:
        """Nothing runs in the bench, so a heartbeat lists nothing to act on."""


def _config() -> Configuration:
    # Long timeouts: nothing may time out while the bench holds the loop.
    return Configuration.from_mapping(
        {"heartbeat.interval": "10s", "heartbeat.timeout": "1h", "slot.request.timeout": "1h"}
    )


def _register(rm: ResourceManager, count: int, slots: int) -> float:
    started = time.perf_counter()
    for i in range(count):
        register(rm, f"te-{i:05d}", slots)
    return time.perf_counter() - started


def _heartbeats(rm: ResourceManager, count: int, slots: int) -> float:
    report = SlotReport(tuple(SlotStatus(index=i) for i in range(slots)))
    started = time.perf_counter()
    for i in range(count):
        rm.heartbeat(SESSION, f"te-{i:05d}", report, ())
    return count / (time.perf_counter() - started)


async def _throughput_round(rm: ResourceManager, jobs: list[BenchJob], per_job: int) -> tuple[float, float]:
    loop = asyncio.get_running_loop()
    started = time.perf_counter()
    for job in jobs:
        job.wanted = per_job
        job.waiter = loop.create_future()
        rm.declare_requirements(job.job_id, per_job, job)
    for job in jobs:
        await job.waiter  # type: ignore[misc]
    allocated = time.perf_counter() - started
    started = time.perf_counter()
    for job in jobs:
        rm.declare_requirements(job.job_id, 0, job)
        for slot in job.slots:
            rm.release_slot(job.job_id, slot.allocation_id)
        job.slots.clear()
    freed = time.perf_counter() - started
    return allocated, freed


async def _latency(rm: ResourceManager, total_slots: int, samples: int) -> list[float]:
    loop = asyncio.get_running_loop()
    job = BenchJob("f" * 32)
    latencies: list[float] = []
    while len(latencies) < samples:
        for wanted in range(1, min(total_slots, samples - len(latencies)) + 1):
            job.wanted = wanted
            job.waiter = loop.create_future()
            started = time.perf_counter_ns()
            rm.declare_requirements(job.job_id, wanted, job)
            await job.waiter
            latencies.append((time.perf_counter_ns() - started) / 1000)
        rm.declare_requirements(job.job_id, 0, job)
        for slot in job.slots:
            rm.release_slot(job.job_id, slot.allocation_id)
        job.slots.clear()
    return latencies


async def bench_size(
    task_executors: int, slots: int, *, target_allocations: int, latency_samples: int, per_job: int
) -> dict[str, Any]:
    rm = ResourceManager(ResourceManagerSettings.from_config(_config()), SESSION)
    rm.start()
    try:
        register_s = _register(rm, task_executors, slots)
        heartbeats_per_s = _heartbeats(rm, task_executors, slots)
        total_slots = task_executors * slots
        jobs = [BenchJob(f"{i:032x}") for i in range(total_slots // per_job)]
        rounds = max(3, -(-target_allocations // total_slots))
        per_round = len(jobs) * per_job
        allocate_times, free_times = [], []
        gc.collect()
        for _ in range(rounds):
            allocated, freed = await _throughput_round(rm, jobs, per_job)
            allocate_times.append(allocated)
            free_times.append(freed)
        assert rm.overview().slots_available == total_slots, "a round left slots allocated"
        allocations = rounds * per_round
        latencies = sorted(await _latency(rm, total_slots, latency_samples))
        return {
            "task_executors": task_executors,
            "slots": total_slots,
            "rounds": rounds,
            "allocations": allocations,
            # The median round is the headline: the machine's other load makes single rounds noisy.
            "allocations_per_s": round(per_round / statistics.median(allocate_times)),
            "allocations_per_s_overall": round(allocations / sum(allocate_times)),
            "frees_per_s": round(per_round / statistics.median(free_times)),
            "latency_us_median": round(statistics.median(latencies), 1),
            "latency_us_p99": round(latencies[int(len(latencies) * 0.99) - 1], 1),
            "latency_samples": len(latencies),
            "registration_s": round(register_s, 3),
            "heartbeats_per_s": round(heartbeats_per_s),
        }
    finally:
        rm.stop()


def _table(rows: list[dict[str, Any]]) -> str:
    header = (
        f"{'TaskExecutors':>13} {'slots':>7} {'alloc/s':>10} {'free/s':>10} {'p50 us':>8} {'p99 us':>8} "
        f"{'heartbeats/s':>13} {'register s':>10}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r['task_executors']:>13,} {r['slots']:>7,} {r['allocations_per_s']:>10,} "
            f"{r['frees_per_s']:>10,} {r['latency_us_median']:>8} {r['latency_us_p99']:>8} "
            f"{r['heartbeats_per_s']:>13,} {r['registration_s']:>10}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="TaskExecutor counts, comma-separated")
    parser.add_argument("--slots", type=int, default=8, help="slots per TaskExecutor")
    parser.add_argument("--allocations", type=int, default=400_000, help="allocations per size, at least")
    parser.add_argument("--latency-samples", type=int, default=20_000)
    parser.add_argument("--slots-per-job", type=int, default=8)
    args = parser.parse_args(argv)
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        rows.append(
            asyncio.run(
                bench_size(
                    size,
                    args.slots,
                    target_allocations=args.allocations,
                    latency_samples=args.latency_samples,
                    per_job=args.slots_per_job,
                )
            )
        )
        print(f"  {size:,} TaskExecutors done", file=sys.stderr)
    print(_table(rows))
    rates = [r["allocations_per_s"] for r in rows]
    met = min(rates) >= GOAL_PER_S
    spread = max(rates) / min(rates)
    print(
        f"\ngoal >= {GOAL_PER_S:,} allocations/s: {'met' if met else 'NOT met'} "
        f"(slowest {min(rates):,}/s; fastest/slowest {spread:.2f})"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "slot_manager",
                "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "python": platform.python_version(),
                "machine": platform.machine(),
                "goal_allocations_per_s": GOAL_PER_S,
                "goal_met": met,
                "fastest_over_slowest": round(spread, 3),
                "slots_per_task_executor": args.slots,
                "slots_per_job": args.slots_per_job,
                "results": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
