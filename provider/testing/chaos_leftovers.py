"""What a chaos run leaves behind: the state the cluster keeps on disk and in ZooKeeper, and the
leftovers of jobs that are over (znodes, dirty JobResults, JobGraph files, result directories, kept
results on TaskExecutors, allocated slots). `sparkdispatch.testing.chaos_audit` reports them."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from sparkdispatch.config.options import HA_CLUSTER_ID, HA_ZOOKEEPER_PATH_ROOT, HA_ZOOKEEPER_QUORUM
from sparkdispatch.errors import InvalidShape
from sparkdispatch.model.rest_shapes import Overview, TaskManagerList
from sparkdispatch.testing.chaos_model import Finding, JobRecord
from sparkdispatch.testing.local_cluster import LocalCluster
from sparkdispatch.testing.waiting import eventually_blocking


@dataclass
class StoredState:
    """What the cluster keeps on disk and in ZooKeeper (`read` it once)."""

    job_results: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # id -> {dirty|clean: JobResult}
    archive: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> archived JobResult
    jobgraph_files: list[str] = field(default_factory=list)
    results_dir: str = ""
    result_dirs: list[str] = field(default_factory=list)  # job ids with a directory under results_dir
    kept_dirs: list[str] = field(default_factory=list)  # <TaskExecutor id>/<job id> of kept results
    zk_root: str = ""
    znodes: dict[str, list[str]] = field(default_factory=dict)  # jobgraphs|progress -> child names

    @classmethod
    def read(cls, cluster: LocalCluster, zookeeper: KazooClient) -> StoredState:
        config = cluster.config
        cluster_id = config.get(HA_CLUSTER_ID)
        storage = config.storage_dir
        state = cls(
            results_dir=config.results_dir,
            zk_root="/" + config.get(HA_ZOOKEEPER_PATH_ROOT).strip("/") + f"/{cluster_id}",
        )
        for path in _files(storage / "job-result-store" / cluster_id):
            dirty = path.name.endswith("_DIRTY.json")
            job_id = path.name.removesuffix("_DIRTY.json" if dirty else ".json")
            state.job_results.setdefault(job_id, {})["dirty" if dirty else "clean"] = read_json(path)["result"]
        state.archive = {path.stem: read_json(path)["result"] for path in _files(storage / "archive" / cluster_id)}
        state.jobgraph_files = [path.name for path in _files(storage / "jobgraphs" / cluster_id)]
        results = Path(config.results_dir)
        state.result_dirs = sorted(p.name for p in results.iterdir()) if results.is_dir() else []
        state.kept_dirs = sorted(
            f"{p.parent.parent.name}/{p.name}" for p in (storage / "te-work").glob("*/kept-results/*") if p.is_dir()
        )
        state.znodes = {kind: _children(zookeeper, f"{state.zk_root}/{kind}") for kind in ("jobgraphs", "progress")}
        return state


def _files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        return {"result": {"unreadable": str(exc)}}


def _children(zookeeper: KazooClient, path: str) -> list[str]:
    try:
        return sorted(zookeeper.get_children(path))
    except NoNodeError:
        return []


def zookeeper_client(cluster: LocalCluster) -> KazooClient:
    client = KazooClient(hosts=cluster.config.get(HA_ZOOKEEPER_QUORUM), timeout=10)
    client.start(timeout=30)
    return client


def _open_jobs(records: Iterable[JobRecord]) -> set[str]:
    """Accepted jobs without a result: they may still hold their znodes, files and slots."""
    return {r.spec.job_id for r in records if r.accepted_at is not None and r.result is None}


def leftovers(cluster: LocalCluster, records: list[JobRecord], stored: StoredState) -> list[Finding]:
    """What is left behind of jobs that are over: stored state, and slots."""
    return stored_leftovers(records, stored) + slot_leftovers(cluster, records)


def stored_leftovers(records: list[JobRecord], stored: StoredState) -> list[Finding]:
    """Znodes, dirty JobResults, JobGraph files and result directories of jobs that are over."""
    open_jobs = _open_jobs(records)
    names = {r.spec.job_id: f"chaos-{r.spec.index:04d}" for r in records}
    found: list[Finding] = []

    def left(job_id: str, what: str) -> None:
        if job_id not in open_jobs:
            found.append(Finding("leftover", job_id, what, job=names.get(job_id, "not a job of this run")))

    for kind, children in stored.znodes.items():
        for child in children:
            left(child, f"znode {stored.zk_root}/{kind}/{child} is left")
    for job_id, entries in stored.job_results.items():
        if "dirty" in entries:
            left(job_id, "its JobResult is still dirty: the cleanup did not finish")
    for name in stored.jobgraph_files:
        left(name[:32], f"JobGraph file {name} is left")  # <job-id>-<digest>.json
    for job_id in stored.result_dirs:
        left(job_id, f"result directory {stored.results_dir}/{job_id} is left")
    for kept in stored.kept_dirs:
        left(kept.rsplit("/", 1)[1], f"the kept results of TaskExecutor {kept.replace('/', ', job ')} are left")
    return found


def slot_leftovers(cluster: LocalCluster, records: list[JobRecord]) -> list[Finding]:
    """Slots still allocated when every job is over."""
    found: list[Finding] = []
    try:
        leader = leader_url(cluster)
        overview = Overview.from_dict(cluster.request("GET", leader + "/overview", timeout=10)[1])
        busy = overview.slots_total - overview.slots_available
        if busy and not _open_jobs(records):
            _, body = cluster.request("GET", leader + "/taskmanagers", timeout=10)
            held = [
                f"{te.id}#{slot.index}: {slot.job_id}"
                for te in TaskManagerList.from_dict(body).taskmanagers
                for slot in te.slots
                if slot.allocation_id
            ]
            found.append(
                Finding(
                    "leftover", "slots", f"{busy} of {overview.slots_total} slots still allocated: " + ", ".join(held)
                )
            )
    except (OSError, TimeoutError, KeyError, TypeError, InvalidShape) as exc:
        found.append(Finding("leftover", "slots", f"the leader's slots could not be read: {exc}"))
    return found


def leader_url(cluster: LocalCluster, timeout: float = 60.0) -> str:
    """The leader's REST address (`TimeoutError` if no master leads within `timeout`)."""
    return cluster.leader_url(timeout, watch=False)


def wait_for_cleanup(cluster: LocalCluster, records: list[JobRecord], *, timeout: float) -> None:
    """Wait until nothing is left behind (see `leftovers`), or `timeout` seconds."""
    zookeeper = zookeeper_client(cluster)
    try:
        eventually_blocking(
            lambda: not leftovers(cluster, records, StoredState.read(cluster, zookeeper)),
            "nothing left behind",
            timeout=timeout,
            interval=0.5,
        )
    except TimeoutError:
        pass  # what is left is what the audit reports
    finally:
        zookeeper.stop()
        zookeeper.close()
