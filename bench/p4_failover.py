"""P4 failover: SIGKILL the leading master mid-job; seconds until the standby serves and the job moves again.

    .venv/bin/python bench/p4_failover.py [--rounds 3] [--session-timeout 4s] [--vertices 6] [--vertex-seconds 1.5]
                                          [--ensemble]

Starts ZooKeeper, Redis, two masters (HA `zookeeper`, the given session timeout) and one
TaskExecutor. Per round: submits a chain of `--vertices` vertices (`bench_tasks:pause`, each
sleeping `--vertex-seconds`), waits until the second vertex runs, SIGKILLs the leader and polls
every 20 ms:

- serving: the standby's `GET /overview` says `is_leader: true`;
- progressing: the new leader's `GET /jobs/{id}` shows a subtask RUNNING or FINISHED that was not
  FINISHED before the kill (the interrupted vertex redeployed, or a later one).

Then it waits for the JobResult (it must be FINISHED) and restarts the killed master as the
next standby. Prints the seconds per round and their medians, and writes
bench/results/p4_failover.json. Goal: both within session timeout + 1 s.

With `--ensemble` (root: network namespaces) the cluster is sparkdispatch.testing.hosts'
MultiHostCluster: a 3-node ZooKeeper ensemble, Redis, the two masters and the TaskExecutor each
on a host (network namespace) of its own, heartbeat 500 ms / timeout 4 s as in
tests/integration/test_partitions.py. The leader is cut off (its link taken down) instead of
killed, and serving means the standby answers the leader-only `GET /jobs/overview` with 200 (its
`/overview` would first ask the cut-off leader for its counts, for up to 2 s). After the
JobResult the link comes back; the next round starts once the returned master answers as a
standby and exactly one master leads. Results: bench/results/p4_failover.ensemble.json.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from harness.clusters import BenchCluster, zookeeper_cluster
from harness.ensemble import Ensemble, ensemble_cluster
from harness.graphs import chain_graph
from harness.paths import BENCH_TASKS
from harness.reporting import load_average, median, print_table, save_results
from harness.running import bench_main

from sparkdispatch.config import parse_duration
from sparkdispatch.model.job_result import JobResult
from sparkdispatch.model.rest_shapes import JobDetails, Overview

POLL_S = 0.02
ROUND_TIMEOUT_S = 90.0


class Masters(Protocol):
    """What a round asks of the cluster: BenchCluster on this host, or Ensemble on network namespaces."""

    @property
    def log_dir(self) -> Path:
        """Where the processes' logs are."""

    def master_url(self, index: int) -> str:
        """The REST address of master `index`."""

    def request(self, method: str, url: str, body: Any = None, *, timeout: float = 30.0) -> tuple[int, Any]:
        """One HTTP call; (status, decoded JSON body or None)."""

    def submit(self, graph: dict[str, Any]) -> str:
        """POST the JobGraph to the leader; its job id."""

    def wait_for_result(self, job_id: str, *, timeout: float = 180.0) -> JobResult:
        """The job's JobResult, from whichever master leads."""

    def upload_artifact(self, path: Path) -> str:
        """Upload a file to the leader; its blob key."""


class Failover(Protocol):
    """How the leader goes away and comes back."""

    what: str  # "killed", "cut": the round's `<what>_master` and printed line

    @property
    def cluster(self) -> Masters:
        """The cluster whose leader fails."""

    def leader(self) -> int:
        """The index of the master that leads now (waiting for one)."""

    def fail(self, index: int) -> None:
        """Take the leading master away."""

    def serving(self, index: int) -> bool:
        """Whether master `index`, the standby until the failure, serves as the leader now."""

    def restore(self, index: int) -> None:
        """Bring the failed master back and wait until it is a standby."""


class KillLeader:
    """SIGKILL of the leader, restarted afterwards; serving: the standby's `/overview` says it leads."""

    what = "killed"

    def __init__(self, cluster: BenchCluster) -> None:
        self.cluster = cluster

    def leader(self) -> int:
        return self.cluster.wait_for_leader(timeout=60)

    def fail(self, index: int) -> None:
        self.cluster.kill_master(index, signal.SIGKILL)

    def serving(self, index: int) -> bool:
        status, overview = self.cluster.request("GET", self.cluster.master_url(index) + "/overview", timeout=2)
        return status == 200 and Overview.from_dict(overview).is_leader

    def restore(self, index: int) -> None:
        self.cluster.start_master(index)  # the next round's standby
        wait_for_standby(self.cluster, index)


class CutLeader:
    """The leader's host cut off (link down), healed afterwards; serving: the standby answers the
    leader-only `GET /jobs/overview`."""

    what = "cut"

    def __init__(self, cluster: Ensemble) -> None:
        self.cluster = cluster

    def leader(self) -> int:
        return self.cluster.wait_for_leader(timeout=60)

    def fail(self, index: int) -> None:
        self.cluster.cut(index)

    def serving(self, index: int) -> bool:
        return self.cluster.leads(index)

    def restore(self, index: int, timeout: float = 60.0) -> None:
        """Heal the link; wait until the master answers as a standby that knows the leader from ZooKeeper
        again (its session back) and exactly one master leads: the other."""
        self.cluster.heal(index)
        leader_url = self.cluster.master_url(1 - index)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            overview = self.cluster.overview(index)
            if (
                overview
                and not overview.is_leader
                and overview.leader == leader_url
                and self.cluster.leaders() == [1 - index]
            ):
                return
            time.sleep(0.1)
        raise TimeoutError(
            f"master {index} did not come back as the one standby within {timeout:.0f}s; logs in {self.cluster.log_dir}"
        )


def subtask_states(body: object) -> dict[tuple[str, int], str]:
    """(vertex, subtask index) → state, from a `GET /jobs/{id}` answer."""
    return {
        (vertex.id, subtask.index): subtask.state.value
        for vertex in JobDetails.from_dict(body).vertices
        for subtask in vertex.subtasks
    }


def wait_until_running(cluster: Masters, url: str, job_id: str, vertex_id: str) -> dict[tuple[str, int], str]:
    deadline = time.monotonic() + ROUND_TIMEOUT_S
    while time.monotonic() < deadline:
        status, details = cluster.request("GET", f"{url}/jobs/{job_id}", timeout=5)
        if status == 200:
            states = subtask_states(details)
            if states.get((vertex_id, 0)) == "RUNNING":
                return states
        time.sleep(POLL_S)
    raise TimeoutError(f"vertex {vertex_id} of job {job_id} did not start within {ROUND_TIMEOUT_S:.0f}s")


def one_round(failover: Failover, artifact: str, *, number: int, vertices: int, vertex_s: float) -> dict[str, Any]:
    cluster = failover.cluster
    leader = failover.leader()
    standby = 1 - leader
    leader_url, standby_url = cluster.master_url(leader), cluster.master_url(standby)
    # each vertex a task of its own, so the failover falls between tasks of the job, as it measures
    graph = chain_graph(
        f"p4-{number}",
        vertices,
        entrypoint="bench_tasks:pause",
        artifact=artifact,
        params={"seconds": vertex_s},
        durable=True,
    )
    job_id = cluster.submit(graph)
    wait_until_running(cluster, leader_url, job_id, "v01")
    time.sleep(min(0.3, vertex_s / 4))  # mid-vertex
    _, details = cluster.request("GET", f"{leader_url}/jobs/{job_id}", timeout=5)
    before = subtask_states(details)
    finished_before = {key for key, state in before.items() if state == "FINISHED"}

    failed_at = time.monotonic()
    failover.fail(leader)
    serving_s = progress_s = None
    progressed: str | None = None
    deadline = failed_at + ROUND_TIMEOUT_S
    while time.monotonic() < deadline and (serving_s is None or progress_s is None):
        try:
            if serving_s is None and failover.serving(standby):
                serving_s = time.monotonic() - failed_at
            if serving_s is not None:
                status, details = cluster.request("GET", f"{standby_url}/jobs/{job_id}", timeout=2)
                if status == 200:
                    for key, state in subtask_states(details).items():
                        if state in ("RUNNING", "FINISHED") and key not in finished_before:
                            progress_s = time.monotonic() - failed_at
                            progressed = f"{key[0]}[{key[1]}] {state}"
                            break
        except OSError:
            pass
        time.sleep(POLL_S)
    if serving_s is None or progress_s is None:
        raise TimeoutError(
            f"round {number}: no takeover within {ROUND_TIMEOUT_S:.0f}s "
            f"(serving {serving_s}, progress {progress_s}); logs in {cluster.log_dir}"
        )
    result = cluster.wait_for_result(job_id, timeout=120)
    failover.restore(leader)
    return {
        "job_id": job_id,
        f"{failover.what}_master": leader,
        "finished_before_kill": sorted(f"{v}[{i}]" for v, i in finished_before),
        "serving_s": round(serving_s, 3),
        "progress_s": round(progress_s, 3),
        "progressed": progressed,
        "job_status": result.status.value,
        "attempts": {vid: v.attempts for vid, v in result.vertices.items()},
    }


def wait_for_standby(cluster: BenchCluster, index: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            status, overview = cluster.request("GET", cluster.master_url(index) + "/overview", timeout=2)
            if status == 200 and Overview.from_dict(overview).leader:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"master {index} did not come back as a standby within {timeout:.0f}s")


@contextlib.contextmanager
def failover_of(args: argparse.Namespace) -> Iterator[Failover]:
    """Two masters, one TaskExecutor of 2 slots: on this host (SIGKILL) or on the ensemble (partition)."""
    heartbeat = {"heartbeat.interval": "500ms", "heartbeat.timeout": "4s"}
    if args.ensemble:
        with ensemble_cluster(
            args.work_dir,
            "sparkdispatch-p4-",
            task_executors=1,
            session_timeout=args.session_timeout,
            **{"taskexecutor.slots": "2", **heartbeat},
        ) as ensemble:
            yield CutLeader(ensemble)
    else:
        with zookeeper_cluster(
            args.work_dir,
            "sparkdispatch-p4-",
            masters=2,
            taskexecutors=1,
            session_timeout=args.session_timeout,
            slots=2,
            **heartbeat,
        ) as (cluster, _, _):
            yield KillLeader(cluster)


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--session-timeout", default="4s", help="high-availability.zookeeper.session-timeout")
    parser.add_argument("--vertices", type=int, default=6)
    parser.add_argument("--vertex-seconds", type=float, default=1.5)
    parser.add_argument(
        "--ensemble",
        action="store_true",
        help="a 3-node ZooKeeper ensemble on network namespaces (root); the leader cut off, not killed",
    )
    parser.add_argument("--work-dir", type=Path, default=None, help="keep storage and logs here")
    args = parser.parse_args()
    session_timeout = parse_duration(args.session_timeout)
    target = session_timeout + 1.0

    rounds: list[dict[str, Any]] = []
    report: dict[str, Any] = {
        "session_timeout_s": session_timeout,
        "target_s": target,
        "vertices": args.vertices,
        "vertex_seconds": args.vertex_seconds,
        "load_average_at_start": load_average(),
    }
    if args.ensemble:
        report["ensemble"] = True
    with failover_of(args) as failover:
        artifact = failover.cluster.upload_artifact(BENCH_TASKS)
        for number in range(1, args.rounds + 1):
            figures = one_round(failover, artifact, number=number, vertices=args.vertices, vertex_s=args.vertex_seconds)
            rounds.append(figures)
            print(
                f"round {number}: {failover.what} master {figures[f'{failover.what}_master']}; standby serving after "
                f"{figures['serving_s']:.2f}s, job progressing after {figures['progress_s']:.2f}s "
                f"({figures['progressed']}); job {figures['job_status']}",
                flush=True,
            )

    serving = [r["serving_s"] for r in rounds]
    progress = [r["progress_s"] for r in rounds]
    report.update(
        {
            "rounds": rounds,
            "serving_s_median": round(median(serving), 3),
            "progress_s_median": round(median(progress), 3),
            "load_average_at_end": load_average(),
            "serving_goal_met": median(serving) <= target,
            "progress_goal_met": median(progress) <= target,
            "all_jobs_finished": all(r["job_status"] == "FINISHED" for r in rounds),
        }
    )
    print()
    print_table(
        ["round", "standby serving (s)", "job progressing (s)", "job"],
        [[i, r["serving_s"], r["progress_s"], r["job_status"]] for i, r in enumerate(rounds, 1)]
        + [["median", report["serving_s_median"], report["progress_s_median"], ""]],
    )
    print(
        f"goal <= session timeout + 1 s = {target:g}s: serving {'met' if report['serving_goal_met'] else 'MISSED'}, "
        f"progressing {'met' if report['progress_goal_met'] else 'MISSED'}"
    )
    save_results("p4_failover" + (".ensemble" if args.ensemble else ""), report)
    return 0


if __name__ == "__main__":
    bench_main(run)
