"""Finished jobs, kept queryable after their JobMaster is gone (Flink's ExecutionGraphInfoStore).

Each archived job is one JSON file `<storage.dir>/archive/<cluster-id>/<job-id>.json` holding its
JobResult and its last snapshot, so every master of the cluster (and a new leader after a
failover) answers for it. Files of the first format (REST bodies instead of a snapshot) are
converted as they are read. The overview of every archived job stays in memory for listings;
full entries are cached for the `jobstore.max-in-memory` most recent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkdispatch.jobgraph import ExecutionState, JobResult
from sparkdispatch.settings import ArchiveSettings
from sparkdispatch.snapshot import JobOverview, JobSnapshot, SubtaskSnapshot, VertexSnapshot

log = logging.getLogger(__name__)

FORMAT_VERSION = 2


@dataclass(frozen=True)
class ArchivedJob:
    """A globally terminated job: its JobResult and its last snapshot."""

    result: JobResult
    snapshot: JobSnapshot

    def to_dict(self) -> dict[str, Any]:
        return {"version": FORMAT_VERSION, "result": self.result.to_dict(), "snapshot": self.snapshot.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ArchivedJob:
        result = JobResult.from_dict(data["result"])
        if data.get("version", 1) == 1:
            return cls(result, _snapshot_from_rest_bodies(result, data["details"], data["flink_details"]))
        return cls(result, JobSnapshot.from_dict(data["snapshot"]))


def _snapshot_from_rest_bodies(result: JobResult, details: Mapping[str, Any],
                               flink_details: Mapping[str, Any]) -> JobSnapshot:
    """The snapshot of a version 1 entry, which kept the `GET /jobs/{id}` and `/jobs/overview` bodies."""
    tasks = {state: int(flink_details["tasks"].get(state.value.lower(), 0)) for state in ExecutionState}
    overview = JobOverview(job_id=result.job_id, name=result.name, status=result.status,
                           start_time=result.start_time, end_time=result.end_time,
                           duration_ms=int(flink_details["duration"]),
                           last_modification=int(flink_details["last-modification"]),
                           tasks=tasks)
    vertices = tuple(
        VertexSnapshot(id=str(v["id"]), state=ExecutionState(v["state"]), parallelism=v["parallelism"],
                       inputs=tuple(v.get("inputs") or ()), attempts=v.get("attempts"),
                       subtasks=tuple(SubtaskSnapshot(index=s["index"], state=ExecutionState(s["state"]),
                                                      attempt=s["attempt"], task_executor_id=s["taskmanager"])
                                      for s in v["subtasks"]))
        for v in details["vertices"])
    return JobSnapshot(overview, vertices)


class JobArchive:
    """Archived jobs on shared storage, with a bounded in-memory cache."""

    def __init__(self, settings: ArchiveSettings) -> None:
        self.directory = settings.directory
        self._capacity = settings.capacity
        self._cache: OrderedDict[str, ArchivedJob] = OrderedDict()
        self._index: dict[str, JobOverview] = {}  # every archived job

    async def load(self) -> None:
        """Read the overviews of every archived job (at leadership start)."""
        self._index = await asyncio.to_thread(self._read_index)

    def _read_index(self) -> dict[str, JobOverview]:
        index: dict[str, JobOverview] = {}
        if not self.directory.is_dir():
            return index
        for path in self.directory.glob("*.json"):
            try:
                job = ArchivedJob.from_dict(json.loads(path.read_text()))
            except Exception as exc:  # a damaged archive entry must not stop the master
                log.warning("ignoring unreadable archived job %s: %s", path, exc)
                continue
            index[job.result.job_id] = job.snapshot.overview
        return index

    async def put(self, job: ArchivedJob) -> None:
        await asyncio.to_thread(self._write, job)
        self._remember(job)
        self._index[job.result.job_id] = job.snapshot.overview

    def _write(self, job: ArchivedJob) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".archive-", suffix=".tmp")
        with os.fdopen(fd, "w") as handle:
            json.dump(job.to_dict(), handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.directory / f"{job.result.job_id}.json")

    def _remember(self, job: ArchivedJob) -> None:
        self._cache[job.result.job_id] = job
        self._cache.move_to_end(job.result.job_id)
        while len(self._cache) > self._capacity:
            self._cache.popitem(last=False)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._index

    async def get(self, job_id: str) -> ArchivedJob | None:
        if job_id in self._cache:
            self._cache.move_to_end(job_id)
            return self._cache[job_id]
        path = self.directory / f"{job_id}.json"
        try:
            text = await asyncio.to_thread(path.read_text)
        except FileNotFoundError:
            return None
        job = ArchivedJob.from_dict(json.loads(text))
        self._remember(job)
        self._index.setdefault(job_id, job.snapshot.overview)
        return job

    def overviews(self) -> list[JobOverview]:
        """The overview of every archived job."""
        return list(self._index.values())

    def counts(self) -> dict[str, int]:
        """Archived jobs by status."""
        counts: dict[str, int] = {}
        for overview in self._index.values():
            status = overview.status.value
            counts[status] = counts.get(status, 0) + 1
        return counts
