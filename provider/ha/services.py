"""`create_ha_services(config)`: the HA services of `high-availability.mode` `none` or `zookeeper`.

Files of a cluster live under `storage.dir`, one directory per kind and cluster id:
`job-result-store/<cluster-id>`, `blobs/<cluster-id>`, `jobgraphs/<cluster-id>` and (mode
`none`) `progress/<cluster-id>`. `check_leadership` fences the writes of the stores that keep
files (JobResults, archived jobs): in mode `zookeeper` it asks the server about the latch.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from abc import ABC, abstractmethod
from pathlib import Path

from kazoo.client import KazooClient

from sparkdispatch.config import Configuration
from sparkdispatch.config.options import (
    BLOB_MAX_SIZE,
    HA_MODE,
    HA_ZOOKEEPER_INLINE_LIMIT,
    HA_ZOOKEEPER_QUORUM,
    HA_ZOOKEEPER_SESSION_TIMEOUT,
    HA_ZOOKEEPER_TOLERATE_SUSPENDED_CONNECTIONS,
    JOB_RESULT_STORE_DELETE_ON_COMMIT,
)
from sparkdispatch.ha.access import cluster_dir, cluster_id
from sparkdispatch.ha.blob_store import BlobStore
from sparkdispatch.ha.election import ZooKeeperLeaderElection
from sparkdispatch.ha.job_result_store import FileSystemJobResultStore
from sparkdispatch.ha.jobgraph_store import FileJobGraphStore, JobGraphStore, ZooKeeperJobGraphStore
from sparkdispatch.ha.leader import (
    LeaderElection,
    LeaderRetrieval,
    StandaloneLeaderElection,
    StandaloneLeaderRetrieval,
)
from sparkdispatch.ha.progress_store import FileProgressStore, ProgressStore, ZooKeeperProgressStore
from sparkdispatch.ha.retrieval import ZooKeeperLeaderRetrieval
from sparkdispatch.ha.zookeeper import ZooKeeperPaths, create_client, ensure_cluster_paths, start_client

log = logging.getLogger(__name__)


class HighAvailabilityServices(ABC):
    """Election, retrieval and the stores of one cluster, for one process."""

    mode: str  # `high-availability.mode`
    election: LeaderElection
    jobgraph_store: JobGraphStore
    progress_store: ProgressStore

    def __init__(self, config: Configuration) -> None:
        self.config = config
        self.cluster_id = cluster_id(config)
        self.job_result_store = FileSystemJobResultStore(
            self.store_dir("job-result-store"),
            delete_on_commit=config.get(JOB_RESULT_STORE_DELETE_ON_COMMIT),
            check=self.check_leadership,
        )
        self.blob_store = BlobStore(self.store_dir("blobs"), max_size=config.get(BLOB_MAX_SIZE))

    def store_dir(self, kind: str) -> Path:
        """`<storage.dir>/<kind>/<cluster-id>`."""
        return cluster_dir(self.config, kind)

    @abstractmethod
    async def start(self) -> None:
        """Connect (mode `zookeeper`); call before using any service."""

    @abstractmethod
    async def check_leadership(self, session_id: str, component: str) -> None:
        """`LeadershipLost` unless `session_id` leads now: a `LeadershipCheck` for file writes."""

    @abstractmethod
    def create_retrieval(self) -> LeaderRetrieval:
        """A new leader retrieval on this process's connection (a standby follows the leader with it);
        call `start()` on it. Processes that are not masters use `access.create_leader_retrieval`."""

    @abstractmethod
    async def close(self) -> None:
        """Stop the election and disconnect; all data stays."""


class EmbeddedHaServices(HighAvailabilityServices):
    """Mode `none`: always leader, stores on the local filesystem, the leader address from config."""

    mode = "none"

    def __init__(self, config: Configuration) -> None:
        super().__init__(config)
        self.election = StandaloneLeaderElection()
        self.jobgraph_store = FileJobGraphStore(self.store_dir("jobgraphs"), self.election)
        self.progress_store = FileProgressStore(self.store_dir("progress"), self.election)

    async def start(self) -> None:
        """Nothing to connect to: the stores are files and the election is decided."""

    async def check_leadership(self, session_id: str, component: str) -> None:
        self.election.fence(session_id, component)

    def create_retrieval(self) -> StandaloneLeaderRetrieval:
        return StandaloneLeaderRetrieval(self.config.rest_url)

    async def close(self) -> None:
        self.election.stop()


class ZooKeeperHaServices(HighAvailabilityServices):
    """Mode `zookeeper`: one kazoo client; election, retrieval and JobGraph/progress stores on it."""

    mode = "zookeeper"

    def __init__(self, config: Configuration, *, client: KazooClient | None = None) -> None:
        super().__init__(config)
        self.paths = ZooKeeperPaths.from_config(config)
        self.client = client if client is not None else create_client(config)
        self._tolerate = config.get(HA_ZOOKEEPER_TOLERATE_SUSPENDED_CONNECTIONS)
        self.election: ZooKeeperLeaderElection = ZooKeeperLeaderElection(
            self.client,
            self.paths,
            identifier=f"{socket.gethostname()}:{os.getpid()}",
            tolerate_suspended=self._tolerate,
        )
        write_timeout = config.get(HA_ZOOKEEPER_SESSION_TIMEOUT)
        self._write_timeout = write_timeout
        self.jobgraph_store = ZooKeeperJobGraphStore(
            self.client,
            self.paths.jobgraphs,
            self.election,
            files=self.store_dir("jobgraphs"),
            inline_limit=config.get(HA_ZOOKEEPER_INLINE_LIMIT),
            write_timeout=write_timeout,
        )
        self.progress_store = ZooKeeperProgressStore(
            self.client, self.paths.progress, self.election, write_timeout=write_timeout
        )
        self._retrievals: list[ZooKeeperLeaderRetrieval] = []
        self._closed = False

    async def start(self) -> None:
        await asyncio.to_thread(start_client, self.client, self.config)
        await asyncio.to_thread(ensure_cluster_paths, self.client, self.paths)
        log.info(
            "connected to ZooKeeper at %s, cluster %s under %s",
            self.config.get(HA_ZOOKEEPER_QUORUM),
            self.cluster_id,
            self.paths.cluster,
        )

    async def check_leadership(self, session_id: str, component: str) -> None:
        await self.election.check_on_server(session_id, component, timeout=self._write_timeout)

    def create_retrieval(self) -> ZooKeeperLeaderRetrieval:
        retrieval = ZooKeeperLeaderRetrieval(self.client, self.paths.connection_info, tolerate_suspended=self._tolerate)
        self._retrievals.append(retrieval)
        return retrieval

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.election.stop()
        # The driver deletes the latch node before the session ends: a standby takes over at once.
        await asyncio.to_thread(self.election.join, 5.0)
        for retrieval in self._retrievals:
            retrieval.stop()
        await asyncio.to_thread(self.client.stop)
        await asyncio.to_thread(self.client.close)


def create_ha_services(config: Configuration) -> HighAvailabilityServices:
    """The HA services `high-availability.mode` names; `await services.start()` before use."""
    if config.get(HA_MODE) == "zookeeper":
        return ZooKeeperHaServices(config)
    return EmbeddedHaServices(config)
