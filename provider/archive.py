"""Finished jobs, kept queryable after their JobMaster is gone (Flink's ExecutionGraphInfoStore).

Each archived job is one JSON file `<storage.dir>/archive/<cluster-id>/<job-id>.json` holding its
JobResult, its last details and its Flink overview entry, so every master of the cluster (and a
new leader after a failover) answers for it. A small summary of every archived job stays in
memory for listings; full entries are cached for the `jobstore.max-in-memory` most recent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkdispatch.config import Configuration
from sparkdispatch.jobgraph import JobResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ArchivedJob:
    """A globally terminated job as the REST endpoint shows it."""

    result: JobResult
    details: dict[str, Any]
    flink_details: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"result": self.result.to_dict(), "details": self.details, "flink_details": self.flink_details,
                "version": 1}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ArchivedJob:
        return cls(JobResult.from_dict(data["result"]), data["details"], data["flink_details"])

    def summary(self) -> dict[str, Any]:
        """The `GET /jobs` entry."""
        r = self.result
        return {"id": r.job_id, "name": r.name, "status": r.status.value, "start_time": r.start_time,
                "end_time": r.end_time, "duration_ms": r.duration_ms}


class JobArchive:
    """Archived jobs on shared storage, with a bounded in-memory cache."""

    def __init__(self, config: Configuration) -> None:
        self.directory = config.storage_dir / "archive" / config["high-availability.cluster-id"]
        self._capacity = config["jobstore.max-in-memory"]
        self._cache: OrderedDict[str, ArchivedJob] = OrderedDict()
        # job id -> (GET /jobs entry, GET /jobs/overview entry), for every archived job
        self._index: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}

    async def load(self) -> None:
        """Read the summaries of every archived job (at leadership start)."""
        self._index = await asyncio.to_thread(self._read_index)

    def _read_index(self) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
        index: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        if not self.directory.is_dir():
            return index
        for path in self.directory.glob("*.json"):
            try:
                job = ArchivedJob.from_dict(json.loads(path.read_text()))
            except Exception as exc:  # a damaged archive entry must not stop the master
                log.warning("ignoring unreadable archived job %s: %s", path, exc)
                continue
            index[job.result.job_id] = (job.summary(), job.flink_details)
        return index

    async def put(self, job: ArchivedJob) -> None:
        await asyncio.to_thread(self._write, job)
        self._remember(job)
        self._index[job.result.job_id] = (job.summary(), job.flink_details)

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
        self._index.setdefault(job_id, (job.summary(), job.flink_details))
        return job

    def summaries(self) -> list[dict[str, Any]]:
        """`GET /jobs` entries of every archived job."""
        return [summary for summary, _ in self._index.values()]

    def flink_details(self) -> list[dict[str, Any]]:
        """`GET /jobs/overview` entries of every archived job."""
        return [flink for _, flink in self._index.values()]

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for summary, _ in self._index.values():
            counts[summary["status"]] = counts.get(summary["status"], 0) + 1
        return counts
