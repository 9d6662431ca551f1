"""A 3-node ZooKeeper ensemble, two masters and TaskExecutors on network namespaces (`--ensemble`)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.clusters import CLUSTER_START_TIMEOUT_S
from harness.rest import Rest
from harness.running import scratch_dir

from sparkdispatch.model.job_result import JobResult
from sparkdispatch.model.rest_shapes import Overview
from sparkdispatch.testing.hosts import CLUSTER_TOKEN, MultiHostCluster
from sparkdispatch.testing.http import http_json
from sparkdispatch.testing.job_result import wait_for_result
from sparkdispatch.testing.local_cluster import single_leader


class Ensemble:
    """A started MultiHostCluster (sparkdispatch.testing.hosts) as a benchmark on the bridge sees it:
    blocking calls to its masters (index 0 and 1, on hosts master-1 and master-2), which one leads,
    and a master cut off from the network (`cut`) and back (`heal`). A wait given it (`processes`) ends
    when one of its processes exits."""

    def __init__(self, cluster: MultiHostCluster) -> None:
        self.cluster = cluster
        self.masters = [Rest(url, token=CLUSTER_TOKEN) for url in cluster.master_addresses]
        self.cut_off: set[int] = set()

    @property
    def log_dir(self) -> Path:
        return self.cluster.workdir

    @staticmethod
    def host(index: int) -> str:
        return f"master-{index + 1}"

    def master_url(self, index: int) -> str:
        return self.masters[index].base_url

    def request(self, method: str, url: str, body: Any = None, *, timeout: float = 30.0) -> tuple[int, Any]:
        """One HTTP call with the cluster's token; (status, decoded JSON body or None)."""
        return http_json(method, url, body, token=CLUSTER_TOKEN, timeout=timeout)

    def submit(self, graph: dict[str, Any]) -> str:
        return self.masters[self.wait_for_leader()].submit(graph)

    def upload_artifact(self, path: Path) -> str:
        return self.masters[self.wait_for_leader()].upload_artifact(path)

    def pids(self) -> dict[str, int]:
        """Host name → pid of the process on it (`ip netns exec` runs the command in its own place)."""
        return {name: process.pid for name, process in self.cluster.processes.items()}

    def overview(self, index: int) -> Overview | None:
        """The master's own `/overview` (`is_leader`, `leader`, ...); None without an answer (a standby's
        asks the leader for its counts, for up to 2 s)."""
        try:
            status, body = self.masters[index].request("GET", "/overview", timeout=3)
        except OSError:
            return None
        return Overview.from_dict(body) if status == 200 else None

    def leads(self, index: int) -> bool:
        """Whether the master serves the leader-only `GET /jobs/overview` (a standby answers 503 at once)."""
        try:
            return self.masters[index].request("GET", "/jobs/overview", timeout=1)[0] == 200
        except OSError:
            return False

    def leaders(self) -> list[int]:
        """The masters not cut off whose `/overview` says they lead."""
        return [
            index
            for index in range(len(self.masters))
            if index not in self.cut_off and (overview := self.overview(index)) and overview.is_leader
        ]

    def wait_for_leader(self, *, timeout: float = 60.0) -> int:
        """The index of the one master that leads, once there is exactly one."""
        return single_leader(self.leaders, timeout=timeout, processes=[self])

    def cut(self, index: int) -> None:
        assert self.cluster.network is not None
        self.cluster.network.cut(self.host(index))
        self.cut_off.add(index)

    def heal(self, index: int) -> None:
        assert self.cluster.network is not None
        self.cluster.network.heal(self.host(index))
        self.cut_off.discard(index)

    def wait_for_result(self, job_id: str, *, timeout: float = 180.0) -> JobResult:
        """The job's JobResult, asked of every master not cut off (a standby answers 503)."""
        return wait_for_result(
            lambda: [self.master_url(index) for index in range(len(self.masters)) if index not in self.cut_off],
            job_id,
            token=CLUSTER_TOKEN,
            timeout=timeout,
        )

    def exited(self) -> str | None:
        for name, process in self.cluster.processes.items():
            if process.poll() is not None:
                return f"{name} exited with {process.returncode}:\n{self.cluster.log_tail(name)}"
        return None

    def logs(self) -> str:
        return f"logs in {self.log_dir}"


@contextlib.contextmanager
def ensemble_cluster(
    work_dir: Path | None, prefix: str, *, task_executors: int, session_timeout: str = "4s", **config: Any
) -> Iterator[Ensemble]:
    """A MultiHostCluster — ZooKeeper ×3, Redis, two masters and `task_executors` TaskExecutors, each on a
    network namespace host of its own, configured as the docker-compose cluster with the partition
    test's HA settings and `config` on top — in `scratch_dir(work_dir, prefix)`, yielded once one master
    leads and every TaskExecutor registered. Every process and namespace goes at the end."""
    extra = {
        "high-availability.zookeeper.session-timeout": session_timeout,
        "high-availability.zookeeper.path.root": f"/bench-{uuid.uuid4().hex[:10]}",
        "high-availability.cluster-id": "bench",
        "taskexecutor.registration.max-backoff": "1s",
        "spark.sql.shuffle.partitions": "1",
        **config,
    }
    with scratch_dir(work_dir, prefix) as scratch:
        cluster = MultiHostCluster(
            workdir=Path(scratch),
            task_executors=task_executors,
            extra={key: str(value) for key, value in extra.items()},
        )
        try:
            cluster.start()
            ensemble = Ensemble(cluster)
            leader = ensemble.masters[ensemble.wait_for_leader(timeout=CLUSTER_START_TIMEOUT_S)]
            leader.wait_for_task_executors(task_executors, timeout=CLUSTER_START_TIMEOUT_S, processes=[ensemble])
            yield ensemble
        finally:
            cluster.stop()
