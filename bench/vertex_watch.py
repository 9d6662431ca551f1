"""What deferred vertex tasks cost the master and ZooKeeper: a 50-vertex group in one triggerer.

    .venv/bin/python bench/vertex_watch.py [--vertices 50] [--interval 5] [--window 60] [--quick]

Starts a real ZooKeeper and a real master leading through it (in this process, behind a proxy that
counts every request it answers), submits a job of `--vertices` vertices whose tasks run until
the end, and runs one `SparkDispatchVertexTrigger` per vertex on one asyncio loop, as a
triggerer does, at the default poll interval, with an Airflow connection that finds the leader
through ZooKeeper. Over `--window` seconds it counts the requests the master received and,
from ZooKeeper's `mntr`, the sessions the triggers added. Goal (issue 28): at most 1 request/s
and one ZooKeeper session. Prints the figures and writes bench/results/vertex_watch.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "bench" / "results"
JOB_ID = "5" * 32


def zookeeper_connections(hosts: str) -> int:
    """`zk_num_alive_connections` of ZooKeeper's `mntr` (one per client session)."""
    host, port = hosts.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as connection:
        connection.sendall(b"mntr")
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    for line in answer.decode().splitlines():
        key, _, value = line.partition("\t")
        if key == "zk_num_alive_connections":
            return int(value)
    raise RuntimeError(f"ZooKeeper's mntr did not answer zk_num_alive_connections: {answer[:200]!r}")


async def measure(vertices: int, interval: float, window: float, zookeeper_hosts: str, storage: Path) -> dict[str, Any]:
    from sparkdispatch.client import SparkDispatchClient
    from sparkdispatch.operators import SparkDispatchVertexTrigger
    from sparkdispatch.testing.master import InProcessMaster

    root = f"/bench-{uuid.uuid4().hex[:8]}"
    overrides = {
        "high-availability.mode": "zookeeper",
        "high-availability.zookeeper.quorum": zookeeper_hosts,
        "high-availability.zookeeper.path.root": root,
        "high-availability.zookeeper.session-timeout": "4s",
    }
    async with InProcessMaster(storage_dir=storage, overrides=overrides, record_requests=True) as master:
        await master.wait_for_leadership()
        await master.add_task_executor(slots=vertices)
        graph = {
            "job_id": JOB_ID,
            "name": "wide",
            "restart_strategy": {"type": "none"},
            "vertices": [{"id": f"v{i:02d}", "entrypoint": "m:f"} for i in range(vertices)],
        }
        async with SparkDispatchClient(addresses=[master.url]) as client:
            await client.submit(graph)
        while len(master.gateway.of_job(JOB_ID)) < vertices:
            await asyncio.sleep(0.05)
        os.environ["AIRFLOW_CONN_SD_BENCH"] = json.dumps(
            {"conn_type": "sparkdispatch", "extra": {"zookeeper_quorum": zookeeper_hosts, "zookeeper_root": root}}
        )
        sessions_before = zookeeper_connections(zookeeper_hosts)
        triggers = [
            SparkDispatchVertexTrigger(
                job_id=JOB_ID, vertex_id=f"v{i:02d}", sparkdispatch_conn_id="sd_bench", poll_interval=interval
            )
            for i in range(vertices)
        ]

        async def run(trigger: SparkDispatchVertexTrigger) -> list[Any]:
            return [event async for event in trigger.run()]

        runs = [asyncio.create_task(run(trigger)) for trigger in triggers]
        assert master.proxy is not None
        await asyncio.sleep(2 * interval)  # every trigger has started and polled
        sessions_during = zookeeper_connections(zookeeper_hosts)
        first = len(master.proxy.requests)
        started = time.monotonic()
        await asyncio.sleep(window)
        requests = master.proxy.requests[first:]
        elapsed = time.monotonic() - started
        await master.task_executors[0].end_job(JOB_ID)
        events = [event for events in await asyncio.wait_for(asyncio.gather(*runs), 120) for event in events]
        await asyncio.sleep(1.0)  # the last trigger closed the shared client and its ZooKeeper session
        sessions_after = zookeeper_connections(zookeeper_hosts)
    by_path: dict[str, int] = {}
    for request in requests:
        key = f"{request.method} {request.path.replace(JOB_ID, '{job_id}')}"
        by_path[key] = by_path.get(key, 0) + 1
    return {
        "vertices": vertices,
        "poll_interval_s": interval,
        "window_s": round(elapsed, 1),
        "requests": len(requests),
        "requests_per_s": round(len(requests) / elapsed, 3),
        "by_path": by_path,
        "zookeeper_sessions_added": sessions_during - sessions_before,
        "zookeeper_sessions_left_after": sessions_after - sessions_before,
        "events": sorted({str(event.payload["status"]) for event in events}),
        "event_count": len(events),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vertices", type=int, default=50)
    parser.add_argument("--interval", type=float, default=5.0, help="the triggers' poll_interval (default 5 s)")
    parser.add_argument("--window", type=float, default=60.0, help="seconds to count requests over")
    parser.add_argument("--quick", action="store_true", help="a 15 s window, results to vertex_watch.quick.json")
    args = parser.parse_args()
    window = 15.0 if args.quick else args.window
    os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="sparkdispatch-bench-airflow-"))
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    from sparkdispatch.testing.services import ZooKeeperServer

    zookeeper = ZooKeeperServer()
    zookeeper.start()
    try:
        with tempfile.TemporaryDirectory(prefix="sparkdispatch-bench-") as storage:
            figures = asyncio.run(measure(args.vertices, args.interval, window, zookeeper.hosts, Path(storage)))
    finally:
        zookeeper.stop()
    result = {
        "bench": "vertex_watch",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "goal": {"requests_per_s": 1.0, "zookeeper_sessions": 1},
        **figures,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / ("vertex_watch.quick.json" if args.quick else "vertex_watch.json")
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    met = result["requests_per_s"] <= 1.0 and result["zookeeper_sessions_added"] == 1
    print(
        f"{'goal met' if met else 'goal MISSED'}: {result['requests_per_s']} requests/s, "
        f"{result['zookeeper_sessions_added']} ZooKeeper session(s); written to {path}"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
