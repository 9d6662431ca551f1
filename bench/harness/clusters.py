"""Clusters of real local processes for the benchmarks: masters and TaskExecutors (`BenchCluster`),
their configuration, and ZooKeeper and Redis with them (`zookeeper_cluster`)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.running import scratch_dir

from sparkdispatch.config import Configuration
from sparkdispatch.testing.local_cluster import LocalCluster
from sparkdispatch.testing.services import RedisServer, ZooKeeperServer

CLUSTER_START_TIMEOUT_S = 240.0


class BenchCluster(LocalCluster):
    """A LocalCluster whose processes log at `log_level` (DEBUG for profiling runs)."""

    def __init__(self, config: Configuration, *, log_level: str = "INFO", **kwargs: Any) -> None:
        super().__init__(config, log_level=log_level, **kwargs)

    def pid(self, kind: str, index: int = 0) -> int:
        processes = self.masters if kind == "master" else self.taskexecutors
        process = processes[index]
        if process is None:
            raise RuntimeError(f"{kind} {index} is not running")
        return process.pid


def cluster_config(
    storage: Path,
    *,
    broker_url: str,
    zookeeper_hosts: str | None = None,
    session_timeout: str = "4s",
    slots: int = 1,
    **extra: Any,
) -> Configuration:
    """A benchmark cluster's configuration: HA `zookeeper` when `zookeeper_hosts`, else `none`."""
    mapping: dict[str, Any] = {
        "storage.dir": str(storage),
        "broker.url": broker_url,
        "heartbeat.interval": "1s",
        "heartbeat.timeout": "10s",
        "taskexecutor.slots": slots,
        "rest.execution-result.long-poll": "5s",
        "spark.master": "local[2]",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
    }
    if zookeeper_hosts:
        mapping.update(
            {
                "high-availability.mode": "zookeeper",
                "high-availability.zookeeper.quorum": zookeeper_hosts,
                "high-availability.zookeeper.path.root": f"/bench-{uuid.uuid4().hex[:10]}",
                "high-availability.zookeeper.session-timeout": session_timeout,
            }
        )
    mapping.update(extra)
    return Configuration.from_mapping(mapping)


@contextlib.contextmanager
def zookeeper_cluster(
    work_dir: Path | None, prefix: str, *, masters: int, taskexecutors: int, **config: Any
) -> Iterator[tuple[BenchCluster, ZooKeeperServer, RedisServer]]:
    """ZooKeeper, Redis and a started BenchCluster with ZooKeeper HA on them, storage and logs in
    `scratch_dir(work_dir, prefix)`; `config` goes to `cluster_config`. Everything is stopped at the
    end, the cluster before the directory its processes write into goes."""
    zookeeper, redis = ZooKeeperServer(), RedisServer()
    with zookeeper, redis, scratch_dir(work_dir, prefix) as scratch:
        storage = Path(scratch)
        cluster = BenchCluster(
            cluster_config(storage, broker_url=redis.url, zookeeper_hosts=zookeeper.hosts, **config),
            masters=masters,
            taskexecutors=taskexecutors,
            log_dir=storage / "log",
        )
        try:
            cluster.start(timeout=CLUSTER_START_TIMEOUT_S)
            yield cluster, zookeeper, redis
        finally:
            cluster.stop()
