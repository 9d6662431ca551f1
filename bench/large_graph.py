"""Large graph: a 10,000-vertex JobGraph accepted and scheduled while `/overview` keeps answering.

    .venv/bin/python bench/large_graph.py [--layers 100] [--width 100] [--parallelism 1] [--slots 16] [--no-run]

Starts a real master in a process of its own (sparkdispatch.testing.master.InProcessMaster: HA
`none`, file stores with fsync, INFO logging to a file) with one scripted TaskExecutor that
registers, takes deployments and reports RUNNING and FINISHED over the master's REST protocol at
once, with no Celery and no Spark (the test double's record of deployments is bounded, as a real
gateway keeps none). Two pollers (one keep-alive connection each) call
`GET /overview` and `GET /jobs/overview` back to back from the start; then the graph is POSTed:
`--layers` layers of `--width` vertices (10,000 by default) of `--parallelism` subtasks each, each
vertex reading two of the layer before it (`--layers 100 --width 100 --parallelism 10`: 100,000
subtasks, the default `jobgraph.max-subtasks`; `--layers 1 --width 10 --parallelism 10000`: as
many, all schedulable at once). The job runs until FINISHED: every vertex is scheduled once its inputs are finished,
deployed, reported and recorded, so the whole graph goes through the JobMaster's scheduling.
With `--no-run` the tasks never end (acceptance and the first layer's scheduling only).

Prints the time to accept (POST until 202) and to FINISHED, the master's CPU seconds, and for
each polled call the median, p99 and max latency over the acceptance (POST until 202, plus a
second), the run (until FINISHED), its end (the `--settle` seconds after: JobResult, archive,
cleanup, the job's structures freed) and all of it, with the five slowest calls (seconds after
the POST, ms); then the master's garbage collections after the POST (the full ones and any other
over 5 ms: how many, the longest), as each stops the master's loop while it runs. Writes
bench/results/large_graph.json. Goal: `/overview` within 100 ms throughout.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import http.client
import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harness.processes import cpu_seconds, stop_process
from harness.reporting import load_average, median, percentile, print_table, write_results
from harness.running import bench_main, scratch_dir

from sparkdispatch.model.rest_shapes import FlinkJobList, Submitted
from sparkdispatch.model.states import JobStatus

GOAL_MS = 100.0
POLLED = ("/overview", "/jobs/overview")
# POST until 202 and a second more; until FINISHED; the --settle seconds after it (archiving, cleanup); all
WINDOWS = ("acceptance", "running", "end", "whole_run")
GC_LOG = "gc.jsonl"  # the master's collections, in its work dir
GC_LOGGED_FROM_MS = 5.0  # besides every full collection


def layered_graph(layers: int, width: int, parallelism: int = 1) -> dict[str, Any]:
    """`layers` x `width` vertices of `parallelism` subtasks; vertex (l, i) reads (l-1, i) and (l-1, i+1 mod width)."""
    vertices = []
    for layer in range(layers):
        for index in range(width):
            inputs = [] if layer == 0 else sorted({f"l{layer - 1}-{index}", f"l{layer - 1}-{(index + 1) % width}"})
            vertices.append(
                {
                    "id": f"l{layer}-{index}",
                    "entrypoint": "bench_tasks:noop",
                    "inputs": inputs,
                    "parallelism": parallelism,
                }
            )
    return {
        "name": f"large-{layers}x{width}",
        "vertices": vertices,
        "restart_strategy": {"type": "fixed-delay", "attempts": 0, "delay_s": 0.0},
    }


# -- the master's process --------------------------------------------------------------------------


def log_collections(path: Path) -> None:
    """Append each full garbage collection of this process, and any other over GC_LOGGED_FROM_MS, to
    `path` as JSON lines: when it started (`time.perf_counter()`, the same clock in every process
    here), how long it took and its generation."""
    out = open(path, "a", buffering=1)
    started: list[float] = []

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started:
            ms = (time.perf_counter() - started[0]) * 1000
            if info["generation"] == 2 or ms >= GC_LOGGED_FROM_MS:
                out.write(json.dumps({"at": started[0], "ms": round(ms, 2), "generation": info["generation"]}) + "\n")

    gc.callbacks.append(timed)


def serve(port: int, storage: Path, slots: int, run_tasks: bool, log_level: str) -> int:
    """The master's process: an InProcessMaster and its scripted TaskExecutor until SIGTERM."""
    from sparkdispatch.testing.master import InProcessMaster, finish_every_task

    logging.basicConfig(
        level=log_level, filename=str(storage / "master.log"), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    log_collections(storage / GC_LOG)

    async def main() -> None:
        # The scripted TaskExecutor sends no heartbeats: the test default (10 min) would declare it
        # lost, and fail the job, when a job at the limit runs longer than that on a loaded machine.
        overrides = {"heartbeat.timeout": "2h"}
        async with InProcessMaster(storage_dir=storage / "master", port=port, overrides=overrides) as master:
            # The test double records every deployment; a real gateway (Celery) keeps none. Keep the
            # last few only, or 10,000 records would grow the heap each full collection walks.
            master.gateway.deployments = collections.deque(maxlen=100)
            await master.add_task_executor("te-bench", slots=slots, script=finish_every_task if run_tasks else None)
            print(master.url, flush=True)
            await asyncio.Event().wait()

    asyncio.run(main())
    return 0


# -- the benchmark ---------------------------------------------------------------------------------


class Poller(threading.Thread):
    """GETs `path` back to back on one keep-alive connection; (seconds since `origin`, ms, status) each."""

    def __init__(self, url: str, path: str, origin: float) -> None:
        super().__init__(name=f"poll {path}", daemon=True)
        self.address = urlsplit(url).netloc
        self.path = path
        self.origin = origin
        self.samples: list[tuple[float, float, int]] = []
        self.last_body: Any = None
        self.stopping = threading.Event()

    def run(self) -> None:
        connection = http.client.HTTPConnection(self.address, timeout=60)
        while not self.stopping.is_set():
            begin = time.perf_counter()
            try:
                connection.request("GET", self.path)
                answer = connection.getresponse()
                body = answer.read()
                status = answer.status
            except (OSError, http.client.HTTPException):
                connection.close()
                connection = http.client.HTTPConnection(self.address, timeout=60)
                status, body = -1, b""
            end = time.perf_counter()
            self.samples.append((begin - self.origin, (end - begin) * 1000, status))
            if status == 200:
                self.last_body = body
            time.sleep(0.005)
        connection.close()

    def latencies(self, start: float = 0.0, end: float = float("inf")) -> list[float]:
        return [ms for at, ms, status in self.samples if start <= at <= end and status == 200]

    def failures(self) -> int:
        return sum(1 for _, _, status in self.samples if status != 200)


def job_state(poller: Poller) -> tuple[JobStatus | None, int]:
    """The job's state and finished subtasks from the last `/jobs/overview` answer."""
    if poller.last_body is None:
        return None, 0
    jobs = FlinkJobList.from_dict(json.loads(poller.last_body)).jobs
    return (jobs[0].state, jobs[0].tasks.finished) if jobs else (None, 0)


def collections_after(log: Path, start: float) -> dict[str, Any]:
    """The master's logged garbage collections from `start` (perf_counter) on: full ones, the rest."""
    try:
        lines = log.read_text().splitlines()
    except FileNotFoundError:
        lines = []
    logged = [entry for entry in map(json.loads, lines) if entry["at"] >= start]
    full = [entry["ms"] for entry in logged if entry["generation"] == 2]
    return {
        "full": len(full),
        "longest_full_ms": max(full, default=0.0),
        "longest_ms": max((entry["ms"] for entry in logged), default=0.0),
        "slowest": [
            [round(entry["at"] - start, 3), entry["ms"], entry["generation"]]
            for entry in sorted(logged, key=lambda entry: entry["ms"], reverse=True)[:5]
        ],
    }


def summary(latencies: list[float]) -> dict[str, Any]:
    return {
        "samples": len(latencies),
        "median_ms": round(median(latencies), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "max_ms": round(max(latencies, default=0.0), 2),
        "over_goal": sum(1 for ms in latencies if ms > GOAL_MS),
    }


def start_master(scratch: Path, args: argparse.Namespace) -> tuple[subprocess.Popen[str], str]:
    from sparkdispatch.testing.services import free_port

    argv = [
        sys.executable,
        __file__,
        "--serve",
        str(free_port()),
        "--work-dir",
        str(scratch),
        "--slots",
        str(args.slots),
        "--log-level",
        args.log_level,
    ] + (["--no-run"] if args.no_run else [])
    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=open(scratch / "master.err", "w"),
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    url = process.stdout.readline().strip()
    if not url.startswith("http://"):
        raise RuntimeError(f"the master did not start; see {scratch / 'master.err'}")
    return process, url


def run_bench(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    graph = layered_graph(args.layers, args.width, args.parallelism)
    subtasks = len(graph["vertices"]) * args.parallelism
    body = json.dumps(graph).encode()
    process, url = start_master(scratch, args)
    try:
        origin = time.perf_counter()
        pollers = {path: Poller(url, path, origin) for path in POLLED}
        for poller in pollers.values():
            poller.start()
        time.sleep(1.0)  # a baseline before the submission
        cpu_before = cpu_seconds(process.pid)
        connection = http.client.HTTPConnection(urlsplit(url).netloc, timeout=600)
        posted = time.perf_counter() - origin
        connection.request("POST", "/jobs", body, {"Content-Type": "application/json"})
        answer = connection.getresponse()
        reply = json.loads(answer.read())
        accepted = time.perf_counter() - origin
        if answer.status != 202:
            raise RuntimeError(f"the graph was refused with {answer.status}: {reply}")
        print(
            f"accepted job {Submitted.from_dict(reply).job_id} ({len(graph['vertices'])} vertices, "
            f"{subtasks} subtasks, {len(body)} bytes) in {accepted - posted:.3f}s",
            flush=True,
        )
        finished_at = None
        deadline = time.monotonic() + args.timeout
        target = JobStatus.RUNNING if args.no_run else JobStatus.FINISHED
        state: JobStatus | None = None
        finished = 0
        while time.monotonic() < deadline:
            state, finished = job_state(pollers["/jobs/overview"])
            if state is target and (args.no_run or finished == subtasks):
                finished_at = time.perf_counter() - origin
                break
            if state in (JobStatus.FAILED, JobStatus.CANCELED):
                raise RuntimeError(f"the job ended {state.value}")
            time.sleep(0.05)
        if args.no_run:
            time.sleep(5.0)  # the first layer waits for slots meanwhile
            finished_at = time.perf_counter() - origin
        time.sleep(args.settle)  # after the end: archiving, cleanup, the job dropped
        cpu_used = cpu_seconds(process.pid) - cpu_before
        for poller in pollers.values():
            poller.stopping.set()
        for poller in pollers.values():
            poller.join(timeout=70)
    finally:
        stop_process(process)
    if finished_at is None:
        raise TimeoutError(
            f"the job did not reach {target.value} within {args.timeout:.0f}s (last: {state}, "
            f"{finished} subtasks finished)"
        )
    report: dict[str, Any] = {
        "vertices": len(graph["vertices"]),
        "subtasks": subtasks,
        "edges": sum(len(v["inputs"]) for v in graph["vertices"]),
        "body_bytes": len(body),
        "slots": args.slots,
        "tasks_run": not args.no_run,
        "accept_s": round(accepted - posted, 3),
        "until_done_s": round(finished_at - posted, 3),
        "master_cpu_s": round(cpu_used, 2),
        "goal_ms": GOAL_MS,
        "master_gc": collections_after(scratch / GC_LOG, origin + posted),
    }
    for path, poller in pollers.items():
        report[path] = {
            "whole_run": summary(poller.latencies()),
            "acceptance": summary(poller.latencies(posted, accepted + 1.0)),
            "running": summary(poller.latencies(accepted + 1.0, finished_at)),
            "end": summary(poller.latencies(finished_at)),
            "failed_calls": poller.failures(),
            "slowest": [
                [round(at - posted, 3), round(ms, 1)]
                for at, ms, _ in sorted(poller.samples, key=lambda s: s[1], reverse=True)[:5]
            ],
        }
    report["goal_met"] = report["/overview"]["whole_run"]["max_ms"] <= GOAL_MS
    return report


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=100)
    parser.add_argument("--width", type=int, default=100)
    parser.add_argument("--parallelism", type=int, default=1, help="subtasks of each vertex")
    parser.add_argument("--slots", type=int, default=16, help="slots of the scripted TaskExecutor")
    parser.add_argument("--no-run", action="store_true", help="tasks never end: acceptance and first scheduling")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the job's end")
    parser.add_argument(
        "--settle", type=float, default=3.0, help="seconds to poll on after the end (archive, cleanup, the job dropped)"
    )
    parser.add_argument("--log-level", default="INFO", help="the master's log level")
    parser.add_argument("--work-dir", type=Path, default=None, help="keep storage and logs here")
    parser.add_argument("--results-name", default="large_graph", help="bench/results/<name>.json")
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)  # the master's own process
    args = parser.parse_args()
    if args.serve is not None:
        return serve(args.serve, args.work_dir, args.slots, not args.no_run, args.log_level)

    with scratch_dir(args.work_dir, "sparkdispatch-large-graph-") as scratch:
        report = {
            "load_average_at_start": load_average(),
            **run_bench(args, Path(scratch)),
            "load_average_at_end": load_average(),
        }
    print()
    print(
        f"time to accept: {report['accept_s']:.3f}s; until {'FINISHED' if report['tasks_run'] else 'settled'}: "
        f"{report['until_done_s']:.1f}s; master CPU {report['master_cpu_s']:.1f}s"
    )
    rows = []
    for path in POLLED:
        for window in WINDOWS:
            figures = report[path][window]
            rows.append(
                [
                    path,
                    window,
                    figures["samples"],
                    figures["median_ms"],
                    figures["p99_ms"],
                    figures["max_ms"],
                    figures["over_goal"],
                ]
            )
    print_table(["call", "window", "samples", "median ms", "p99 ms", "max ms", f"> {GOAL_MS:g} ms"], rows)
    collections = report["master_gc"]
    print(
        f"master's garbage collections after the POST: {collections['full']} full, the longest "
        f"{collections['longest_full_ms']:.1f} ms; the longest of any generation {collections['longest_ms']:.1f} ms"
    )
    print(f"goal: /overview within {GOAL_MS:g} ms throughout: {'met' if report['goal_met'] else 'MISSED'}")
    written = write_results(args.results_name, report)
    print(f"wrote {written}")
    return 0 if report["goal_met"] else 1


if __name__ == "__main__":
    bench_main(run)
