"""The Dispatcher's settings, read once from a `Configuration`: limits on a whole job, the cleanup of
finished jobs, the archive of finished jobs and the removal of unused artifacts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparkdispatch.config import Configuration
from sparkdispatch.config.options import (
    BLOB_CLEANUP_INTERVAL,
    BLOB_RETENTION,
    CLEANUP_INITIAL_BACKOFF,
    CLEANUP_MAX_BACKOFF,
    HA_CLUSTER_ID,
    JOBGRAPH_MAX_SUBTASKS,
    JOBSTORE_EXPIRATION_TIME,
    JOBSTORE_MAX_CAPACITY,
    JOBSTORE_MAX_IN_MEMORY,
    RESULTS_RETENTION,
)
from sparkdispatch.errors import JobTooLarge
from sparkdispatch.model.job_graph import JobGraph


@dataclass(frozen=True)
class JobLimits:
    """Limits on a whole job, beyond those of each field of its JobGraph: `jobgraph.max-subtasks`."""

    max_subtasks: int = JOBGRAPH_MAX_SUBTASKS.default

    def check(self, graph: JobGraph) -> JobGraph:
        """`graph` if it is within the limits; `JobTooLarge` naming the limit otherwise."""
        subtasks = graph.subtask_count
        if subtasks > self.max_subtasks:
            raise JobTooLarge(subtasks=subtasks, limit=self.max_subtasks, option=JOBGRAPH_MAX_SUBTASKS.key)
        return graph

    @classmethod
    def from_config(cls, config: Configuration) -> JobLimits:
        return cls(max_subtasks=config.get(JOBGRAPH_MAX_SUBTASKS))


@dataclass(frozen=True)
class CleanupSettings:
    """How the Dispatcher cleans up a finished job: retry backoff (seconds) and its results."""

    initial_backoff: float
    max_backoff: float
    delete_results: bool  # `results.retention: delete`
    results_dir: str
    storage_dir: Path  # named in the warning of a failing cleanup

    @classmethod
    def from_config(cls, config: Configuration) -> CleanupSettings:
        return cls(
            initial_backoff=config.get(CLEANUP_INITIAL_BACKOFF),
            max_backoff=config.get(CLEANUP_MAX_BACKOFF),
            delete_results=config.get(RESULTS_RETENTION) == "delete",
            results_dir=config.results_dir,
            storage_dir=config.storage_dir,
        )


@dataclass(frozen=True)
class BlobCleanupSettings:
    """When the leader removes unused artifacts: `blob.retention` and `blob.cleanup-interval` (seconds)."""

    retention: float
    interval: float

    @classmethod
    def from_config(cls, config: Configuration) -> BlobCleanupSettings:
        return cls(retention=config.get(BLOB_RETENTION), interval=config.get(BLOB_CLEANUP_INTERVAL))


@dataclass(frozen=True)
class ArchiveSettings:
    """Where archived jobs live (`<storage.dir>/archive/<cluster-id>`), how many stay in memory whole,
    and when they expire: `expiration` seconds after their end, or beyond `max_capacity` jobs."""

    directory: Path
    capacity: int
    expiration: float = JOBSTORE_EXPIRATION_TIME.default
    max_capacity: int = JOBSTORE_MAX_CAPACITY.default

    @classmethod
    def from_config(cls, config: Configuration) -> ArchiveSettings:
        return cls(
            directory=config.storage_dir / "archive" / config.get(HA_CLUSTER_ID),
            capacity=config.get(JOBSTORE_MAX_IN_MEMORY),
            expiration=config.get(JOBSTORE_EXPIRATION_TIME),
            max_capacity=config.get(JOBSTORE_MAX_CAPACITY),
        )
