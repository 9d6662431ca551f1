"""P2 submissions: jobs accepted and persisted per second by a master under ZooKeeper HA.

    .venv/bin/python bench/p2_submissions.py [--clients 32] [--jobs 3000] [--duration 30]
                                            [--taskexecutors 1] [--profile] [--ensemble]

Starts ZooKeeper, Redis, one master (HA `zookeeper`) and `--taskexecutors` TaskExecutors, then
`--clients` concurrent HTTP clients (aiohttp, one keep-alive connection each) POST one-vertex
JobGraphs (`bench_tasks:noop`) until `--jobs` were sent or `--duration` seconds passed, after a
warm-up of 50. A 202 means the JobGraph is in ZooKeeper (the Dispatcher persists before it
answers). Prints acceptance throughput (202s per second), median and p99 latency, and writes
bench/results/p2_submissions.json, with the CPU seconds each process used during the load.
Goal: >= 300 jobs/s. With `--profile`, py-spy records the master during the load and its
hottest functions are printed and stored. `--taskexecutors 0` measures acceptance alone (jobs
then wait for slots instead of running).

With `--ensemble` (root: network namespaces) the cluster is sparkdispatch.testing.hosts'
MultiHostCluster: a 3-node ZooKeeper ensemble, Redis, two masters and `--taskexecutors`
TaskExecutors, each on a host (network namespace) of its own, configured as the docker-compose
cluster; the load goes to the leader over the bridge, and the results to
bench/results/p2_submissions.ensemble.json (CPU seconds per host's process, leader and standby).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.clusters import zookeeper_cluster
from harness.ensemble import ensemble_cluster
from harness.paths import BENCH_TASKS
from harness.processes import cpu_seconds
from harness.profiling import PySpy
from harness.reporting import latency_ms, load_average, print_table, save_results
from harness.rest import Rest
from harness.running import bench_main
from sparkdispatch.config.options import HA_CLUSTER_ID, HA_ZOOKEEPER_PATH_ROOT

GOAL_JOBS_PER_S = 300.0
WARMUP_JOBS = 50


def job_graph(index: int, artifact: str) -> dict[str, Any]:
    return {
        "name": f"p2-{index}",
        "artifacts": [artifact],
        "vertices": [{"id": "only", "entrypoint": "bench_tasks:noop", "parallelism": 1}],
    }


async def load(url: str, artifact: str, *, clients: int, jobs: int, duration: float, token: str = "") -> dict[str, Any]:
    """POST /jobs from `clients` concurrent clients; latencies of 202s, counts by status."""
    import aiohttp

    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    errors: list[str] = []
    next_index = 0
    deadline = 0.0

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal next_index
        while next_index < jobs and time.monotonic() < deadline:
            index = next_index
            next_index += 1
            body = json.dumps(job_graph(index, artifact))
            begin = time.perf_counter()
            try:
                async with session.post(url + "/jobs", data=body, headers=headers) as answer:
                    await answer.read()
                    status = answer.status
            except aiohttp.ClientError as exc:
                status = -1
                if len(errors) < 5:
                    errors.append(repr(exc))
            elapsed = time.perf_counter() - begin
            statuses[status] = statuses.get(status, 0) + 1
            if status == 202:
                latencies.append(elapsed)

    timeout = aiohttp.ClientTimeout(total=60)
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        deadline = time.monotonic() + 60
        saved_jobs, jobs = jobs, WARMUP_JOBS
        await asyncio.gather(*(client(session) for _ in range(min(clients, WARMUP_JOBS))))
        warmup_statuses = dict(statuses)
        latencies.clear()
        statuses.clear()
        jobs, next_index = saved_jobs + WARMUP_JOBS, WARMUP_JOBS
        begin = time.perf_counter()
        deadline = time.monotonic() + duration
        await asyncio.gather(*(client(session) for _ in range(clients)))
        elapsed = time.perf_counter() - begin
    accepted = statuses.get(202, 0)
    return {
        "warmup_statuses": warmup_statuses,
        "statuses": statuses,
        "sent": sum(statuses.values()),
        "accepted": accepted,
        "elapsed_s": round(elapsed, 3),
        "accepted_per_s": round(accepted / elapsed, 1) if elapsed else 0.0,
        **latency_ms(latencies),
        "client_errors": errors,
    }


def count_jobs_in_zookeeper(hosts: str, root: str, cluster_id: str) -> int | None:
    """JobGraphs under `<root>/<cluster-id>/jobgraphs`, to check that accepted means persisted."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError

    zk = KazooClient(hosts=hosts, timeout=10)
    zk.start(timeout=10)
    try:
        return len(zk.get_children(f"/{root.strip('/')}/{cluster_id}/jobgraphs"))
    except NoNodeError:
        return None
    finally:
        zk.stop()
        zk.close()


@dataclass
class Target:
    """The master under load, and what the report reads of its cluster."""

    master: Rest
    description: str
    pids: dict[str, int]  # process → pid, for the CPU seconds it used during the load
    zookeeper: str  # connect string
    root: str  # high-availability.zookeeper.path.root
    cluster_id: str
    work_dir: Path  # where a profile goes


@contextlib.contextmanager
def single_host(args: argparse.Namespace) -> Iterator[Target]:
    """One master on one ZooKeeper server and Redis, all on this host."""
    with zookeeper_cluster(
        args.work_dir, "sparkdispatch-p2-", masters=1, taskexecutors=args.taskexecutors, slots=2
    ) as (cluster, zookeeper, redis):
        config = cluster.config
        assert zookeeper.process is not None and redis.process is not None
        url = cluster.leader_url()
        pids = {
            "master": cluster.pid("master"),
            "zookeeper": zookeeper.process.pid,
            "redis": redis.process.pid,
            "bench_client": os.getpid(),
        }
        pids.update({f"taskexecutor-{i}": cluster.pid("taskexecutor", i) for i in range(args.taskexecutors)})
        yield Target(
            Rest(url, token=config.auth_token),
            f"master {url} (ZooKeeper HA)",
            pids,
            zookeeper.hosts,
            config.get(HA_ZOOKEEPER_PATH_ROOT),
            config.get(HA_CLUSTER_ID),
            config.storage_dir,
        )


@contextlib.contextmanager
def on_ensemble(args: argparse.Namespace) -> Iterator[Target]:
    """The leader of two masters on a 3-node ZooKeeper ensemble, each process on a network namespace host."""
    with ensemble_cluster(
        args.work_dir,
        "sparkdispatch-p2-",
        task_executors=args.taskexecutors,
        **{"taskexecutor.slots": "2", "heartbeat.interval": "1s", "heartbeat.timeout": "10s"},
    ) as ensemble:
        leader = ensemble.wait_for_leader()
        by_host = ensemble.pids()
        pids = {
            "master": by_host.pop(ensemble.host(leader)),
            "standby": by_host.pop(ensemble.host(1 - leader)),
            **by_host,
            "bench_client": os.getpid(),
        }
        extra = ensemble.cluster.extra
        yield Target(
            ensemble.masters[leader],
            f"leader {ensemble.masters[leader].base_url} of 2 masters on a "
            "3-node ZooKeeper ensemble (network namespaces)",
            pids,
            ensemble.cluster.quorum,
            extra["high-availability.zookeeper.path.root"],
            extra["high-availability.cluster-id"],
            ensemble.log_dir,
        )


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=32, help="concurrent HTTP clients")
    parser.add_argument("--jobs", type=int, default=3000, help="jobs to submit (after the warm-up)")
    parser.add_argument("--duration", type=float, default=30.0, help="stop submitting after this many seconds")
    parser.add_argument("--taskexecutors", type=int, default=1, help="TaskExecutors running the accepted jobs")
    parser.add_argument(
        "--ensemble",
        action="store_true",
        help="a leader and a standby on a 3-node ZooKeeper ensemble, on network namespaces (root)",
    )
    parser.add_argument("--profile", action="store_true", help="py-spy record the master during the load")
    parser.add_argument("--work-dir", type=Path, default=None, help="keep storage, logs and profiles here")
    args = parser.parse_args()

    report: dict[str, Any] = {
        "clients": args.clients,
        "jobs_requested": args.jobs,
        "duration_limit_s": args.duration,
        "taskexecutors": args.taskexecutors,
        "goal_jobs_per_s": GOAL_JOBS_PER_S,
        "load_average_at_start": load_average(),
    }
    if args.ensemble:
        report["ensemble"] = True
    spy: PySpy | None = None
    with (on_ensemble if args.ensemble else single_host)(args) as target:
        try:
            master = target.master
            artifact = master.upload_artifact(BENCH_TASKS)
            print(f"{target.description}, {args.taskexecutors} TaskExecutor(s); {args.clients} clients", flush=True)
            if args.profile:
                spy = PySpy(target.pids["master"], target.work_dir / "master-profile.txt")
                time.sleep(0.5)
            pids = target.pids
            cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            figures = asyncio.run(
                load(
                    master.base_url,
                    artifact,
                    clients=args.clients,
                    jobs=args.jobs,
                    duration=args.duration,
                    token=master.token,
                )
            )
            cpu_used = {name: round(cpu_seconds(pid) - cpu_before[name], 2) for name, pid in pids.items()}
            figures["cpu_s_during_load"] = cpu_used
            figures["master_cpu_ms_per_accepted_job"] = round(
                cpu_used["master"] * 1000 / max(1, figures["accepted"]), 2
            )
            if spy is not None:
                spy.stop()
                report["master_profile"] = spy.top(40)
            report.update(figures)
            report["jobgraphs_in_zookeeper"] = count_jobs_in_zookeeper(target.zookeeper, target.root, target.cluster_id)
            status, overview = master.request("GET", "/overview", timeout=30)
            report["overview_after"] = overview if status == 200 else None
        finally:  # before the cluster and its directory go
            if spy is not None:
                spy.stop()
    report["load_average_at_end"] = load_average()

    rate = report["accepted_per_s"]
    print()
    print_table(
        ["accepted", "sent", "seconds", "jobs/s", "median ms", "p99 ms", "max ms", "statuses"],
        [
            [
                report["accepted"],
                report["sent"],
                report["elapsed_s"],
                f"{rate:.0f}",
                report["latency_ms_median"],
                report["latency_ms_p99"],
                report["latency_ms_max"],
                report["statuses"],
            ]
        ],
    )
    print(
        f"CPU seconds used during the load ({report['elapsed_s']:.1f}s on {os.cpu_count()} cores): "
        + ", ".join(f"{name} {seconds:.1f}" for name, seconds in report["cpu_s_during_load"].items())
        + f"; master {report['master_cpu_ms_per_accepted_job']:.2f} ms CPU per accepted job"
    )
    persisted = report["jobgraphs_in_zookeeper"]
    print(
        f"JobGraphs in ZooKeeper afterwards: {persisted} (accepted incl. warm-up: "
        f"{report['accepted'] + report['warmup_statuses'].get(202, 0)}; finished jobs are removed)"
    )
    report["goal_met"] = rate >= GOAL_JOBS_PER_S
    print(
        f"goal >= {GOAL_JOBS_PER_S:g} jobs/s: {'met' if report['goal_met'] else 'MISSED'}; load average "
        f"{report['load_average_at_start']} -> {report['load_average_at_end']}"
    )
    if "master_profile" in report:
        print("master hot spots (py-spy, share of on-CPU samples of all threads, inclusive):")
        generic = ("threading.py", "runpy", "asyncio/runners", "cli.py", "concurrent/futures", "base_events.py")
        for entry in [e for e in report["master_profile"]["inclusive"] if not any(g in e["function"] for g in generic)]:
            print(f"  {entry['share'] * 100:5.1f}%  {entry['function']}")
        print("  own time:")
        for entry in report["master_profile"]["self"][:10]:
            print(f"  {entry['share'] * 100:5.1f}%  {entry['function']}")
    save_results("p2_submissions" + (".ensemble" if args.ensemble else ""), report)
    return 0


if __name__ == "__main__":
    bench_main(run)
