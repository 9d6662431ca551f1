"""High-availability services: leader election and retrieval, JobGraph, JobResult, progress and blob stores.

`create_ha_services(config)` picks the masters' implementation `high-availability.mode` names:
`none` (embedded: always leader, files under `storage.dir`) or `zookeeper` (kazoo). Processes
that are not masters (TaskExecutors, the REST client) need only `create_leader_retrieval(config)`,
which creates nothing (TaskExecutors get blobs from the leader over HTTP). The contracts the other components use
are in docs/internals.md, "HA services".
"""

from sparkdispatch.ha.access import create_leader_retrieval
from sparkdispatch.ha.blob_store import BlobReader, BlobStore
from sparkdispatch.ha.job_result_store import FileSystemJobResultStore
from sparkdispatch.ha.jobgraph_store import JobGraphStore
from sparkdispatch.ha.leader import (
    STANDALONE_SESSION_ID,
    ClosableLeaderRetrieval,
    LeaderContender,
    LeaderElection,
    LeaderInfo,
    LeaderListener,
    LeaderRetrieval,
)
from sparkdispatch.ha.progress_store import JobProgress, ProgressStore, SubtaskProgress
from sparkdispatch.ha.services import HighAvailabilityServices, create_ha_services

__all__ = [
    "STANDALONE_SESSION_ID",
    "BlobReader",
    "BlobStore",
    "ClosableLeaderRetrieval",
    "FileSystemJobResultStore",
    "HighAvailabilityServices",
    "JobGraphStore",
    "JobProgress",
    "LeaderContender",
    "LeaderElection",
    "LeaderInfo",
    "LeaderListener",
    "LeaderRetrieval",
    "ProgressStore",
    "SubtaskProgress",
    "create_ha_services",
    "create_leader_retrieval",
]
