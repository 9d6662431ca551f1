"""Finished jobs, kept queryable after their JobMaster is gone (Flink's ExecutionGraphInfoStore).

Each archived job is one JSON file `<storage.dir>/archive/<cluster-id>/<job-id>.json` holding its
JobResult, its last snapshot and its graph's fingerprint, so every master of the cluster (and a
new leader after a failover) answers for it, and knows a resubmission of the same graph; and,
from format 4, its graph and its FINISHED subtasks, which a repair starts from
(`sparkdispatch.model.repair`). Files of the first format (REST bodies instead of a snapshot) are
converted as they are read; entries of the first two formats have no fingerprint, those before
format 4 cannot be repaired.

`index.jsonl` beside them holds one line per `put`, the job's overview, appended durably after
the entry's file: a new leader reads the index and lists the directory, and reads an entry file
only when the index lacks its job (written before the index, or by a writer that died between
the two). Writes are fenced: an entry is committed only after the writer's leadership is checked.
The overview of every archived job stays in memory for listings; full entries are cached for the
`jobstore.max-in-memory` most recent.

Archived jobs expire (`expire`, which the leader runs after each put and periodically): a job
ended more than `jobstore.expiration-time` ago, and the oldest beyond `jobstore.max-capacity`
jobs, oldest end first, leave the memory and the disk (their entry file; the index is rewritten
without them once most of its lines are stale). The JobResult store keeps its own entries by its
own rule (`job-result-store.delete-on-commit`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkdispatch.ha.files import LeadershipCheck, finish_in_thread, fsync_dir, json_bytes, write_atomic, write_temp
from sparkdispatch.ha.jobgraph_store import check_job_id
from sparkdispatch.ha.progress_store import Finished, finished_from_dict, finished_to_dict
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.job_graph import JOB_ID_PATTERN, JobGraph
from sparkdispatch.model.job_result import JobResult
from sparkdispatch.dispatcher.settings import ArchiveSettings
from sparkdispatch.model.snapshot import JobOverview, JobSnapshot, SubtaskSnapshot, VertexSnapshot

log = logging.getLogger(__name__)

COMPONENT = "job archive"
FORMAT_VERSION = 4
INDEX = "index.jsonl"
ENTRY_SUFFIX = ".json"


@dataclass(frozen=True)
class ArchivedJob:
    """A globally terminated job: its JobResult, its last snapshot and its graph's fingerprint
    (None when unknown: archived before fingerprints were kept, or its graph could not be read);
    its graph and FINISHED subtasks when known (a job that ran). Its repairs are in the snapshot."""

    result: JobResult
    snapshot: JobSnapshot
    fingerprint: str | None = None
    graph: JobGraph | None = None
    finished: Finished | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": FORMAT_VERSION,
            "result": self.result.to_dict(),
            "snapshot": self.snapshot.to_dict(),
            "fingerprint": self.fingerprint,
            "graph": None if self.graph is None else self.graph.to_dict(),
            "finished": None if self.finished is None else finished_to_dict(self.finished),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ArchivedJob:
        result = JobResult.from_dict(data["result"])
        if data.get("version", 1) == 1:
            return cls(result, _snapshot_from_rest_bodies(result, data["details"], data["flink_details"]))
        fingerprint = data.get("fingerprint")
        if fingerprint is not None and not isinstance(fingerprint, str):
            raise ValueError(f"fingerprint must be a string, not {fingerprint!r}")
        graph, finished = data.get("graph"), data.get("finished")
        return cls(
            result,
            JobSnapshot.from_dict(data["snapshot"]),
            fingerprint,
            graph=None if graph is None else JobGraph.from_dict(graph),
            finished=None if finished is None else finished_from_dict(finished),
        )


def _snapshot_from_rest_bodies(
    result: JobResult, details: Mapping[str, Any], flink_details: Mapping[str, Any]
) -> JobSnapshot:
    """The snapshot of a version 1 entry, which kept the `GET /jobs/{id}` and `/jobs/overview` bodies."""
    tasks = {state: int(flink_details["tasks"].get(state.value.lower(), 0)) for state in ExecutionState}
    overview = JobOverview.of_ended(
        result,
        duration_ms=int(flink_details["duration"]),
        last_modification=int(flink_details["last-modification"]),
        tasks=tasks,
    )
    vertices = tuple(
        VertexSnapshot(
            id=str(v["id"]),
            state=ExecutionState(v["state"]),
            parallelism=v["parallelism"],
            inputs=tuple(v.get("inputs") or ()),
            attempts=v.get("attempts"),
            subtasks=tuple(
                SubtaskSnapshot(
                    index=s["index"],
                    state=ExecutionState(s["state"]),
                    attempt=s["attempt"],
                    task_executor_id=s["taskmanager"],
                )
                for s in v["subtasks"]
            ),
        )
        for v in details["vertices"]
    )
    return JobSnapshot(overview, vertices)


def _ended(overview: JobOverview) -> int:
    """When an archived job ended (ms since the epoch)."""
    return overview.end_time if overview.end_time is not None else overview.last_modification


def _index_line(overview: JobOverview) -> bytes:
    return json.dumps(overview.to_dict(), sort_keys=True, separators=(",", ":")).encode() + b"\n"


class JobArchive:
    """Archived jobs on shared storage, with a bounded in-memory cache; writes fenced by `check`."""

    def __init__(self, settings: ArchiveSettings, *, check: LeadershipCheck) -> None:
        self.directory = settings.directory
        self._capacity = settings.capacity
        self._check = check
        self._expiration_ms = settings.expiration * 1000
        self._max_capacity = settings.max_capacity
        self._cache: OrderedDict[str, ArchivedJob] = OrderedDict()
        self._index: dict[str, JobOverview] = {}  # every archived job
        self._index_lines = 0  # lines in the index file, stale ones included
        self._writing = asyncio.Lock()  # an expiry's index rewrite never drops a put's line

    async def load(self) -> None:
        """Read the overviews of every archived job (at leadership start): the index, a listing
        of the directory, and the entries the index lacks (which are then added to it)."""
        self._index = await asyncio.to_thread(self._load_index)
        self._index_lines = await asyncio.to_thread(lambda: self._read_index().count(b"\n"))

    def _load_index(self) -> dict[str, JobOverview]:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return {}
        stored = {
            name[: -len(ENTRY_SUFFIX)]
            for name in names
            if name.endswith(ENTRY_SUFFIX) and JOB_ID_PATTERN.fullmatch(name[: -len(ENTRY_SUFFIX)])
        }
        index: dict[str, JobOverview] = {}
        text = self._read_index()
        lines = text.splitlines()
        for line in lines:
            try:
                overview = JobOverview.from_dict(json.loads(line))
            except (ValueError, KeyError, TypeError):
                continue  # a line torn by a crash; its entry is read below
            if overview.job_id in stored:  # an entry file removed by hand is no longer archived
                index[overview.job_id] = overview  # a later line of the same job wins
        missing = sorted(stored - index.keys())
        added = [job for job in map(self._read_entry, missing) if job is not None]
        for job in added:
            index[job.result.job_id] = job.snapshot.overview
        if len(lines) > 2 * len(index) + 100:
            self._rewrite_index(index)  # mostly lines of replaced or removed entries
        elif added:
            torn = b"\n" if text and not text.endswith(b"\n") else b""  # end a torn last line first
            self._append_index(torn + b"".join(_index_line(job.snapshot.overview) for job in added))
        if missing:
            log.info("archive index: added %d of %d archived jobs it lacked", len(added), len(missing))
        return index

    def _read_index(self) -> bytes:
        try:
            return (self.directory / INDEX).read_bytes()
        except FileNotFoundError:
            return b""

    def _read_entry(self, job_id: str) -> ArchivedJob | None:
        path = self.directory / f"{job_id}{ENTRY_SUFFIX}"
        try:
            return ArchivedJob.from_dict(json.loads(path.read_bytes()))
        except Exception as exc:  # noqa: BLE001 - a damaged archive entry must not stop the master
            log.warning("ignoring unreadable archived job %s: %s", path, exc)
            return None

    def _append_index(self, lines: bytes) -> None:
        with open(self.directory / INDEX, "ab") as handle:
            handle.write(lines)
            handle.flush()
            os.fsync(handle.fileno())

    def _rewrite_index(self, index: dict[str, JobOverview]) -> None:
        write_atomic(self.directory / INDEX, b"".join(_index_line(o) for o in index.values()))

    async def put(self, session_id: str, job: ArchivedJob) -> None:
        """Archive `job` (replacing an entry of the same job); `LeadershipLost` unless `session_id` leads."""
        path = self.directory / f"{check_job_id(job.result.job_id)}{ENTRY_SUFFIX}"
        # a large job's entry takes long to encode: off the loop
        temp = await asyncio.to_thread(lambda: write_temp(path, json_bytes(job.to_dict())))
        try:
            async with self._writing:
                await self._check(session_id, COMPONENT)
                await finish_in_thread(self._commit, temp, path, job.snapshot.overview)
                self._index_lines += 1
        finally:
            temp.unlink(missing_ok=True)
        self._remember(job)
        self._index[job.result.job_id] = job.snapshot.overview

    def _commit(self, temp: Path, path: Path, overview: JobOverview) -> None:
        os.replace(temp, path)
        self._append_index(_index_line(overview))
        fsync_dir(self.directory)  # the rename, and the index when this put created it

    def _remember(self, job: ArchivedJob) -> None:
        self._cache[job.result.job_id] = job
        self._cache.move_to_end(job.result.job_id)
        while len(self._cache) > self._capacity:
            self._cache.popitem(last=False)

    @property
    def over_capacity(self) -> bool:
        """More jobs archived than `jobstore.max-capacity`."""
        return len(self._index) > self._max_capacity

    @property
    def check_interval(self) -> float:
        """How often (seconds) the leader looks for expired jobs: a tenth of the expiration, 0.1 s to 10 min."""
        return min(max(self._expiration_ms / 10_000, 0.1), 600.0)

    def expired(self, now_ms: int, *, keep: Collection[str] = ()) -> list[str]:
        """The archived jobs to expire at `now_ms`, oldest end first: those ended more than
        `jobstore.expiration-time` ago and the oldest beyond `jobstore.max-capacity`; never one of `keep`."""
        by_age = sorted((o for o in self._index.values() if o.job_id not in keep), key=_ended)
        beyond = max(0, len(self._index) - self._max_capacity)
        return [o.job_id for rank, o in enumerate(by_age) if rank < beyond or _ended(o) < now_ms - self._expiration_ms]

    async def expire(self, session_id: str, now_ms: int, *, keep: Collection[str] = ()) -> list[str]:
        """Remove the `expired` jobs from memory and disk; the ids removed. `LeadershipLost` unless
        `session_id` leads (then nothing is removed)."""
        job_ids = self.expired(now_ms, keep=keep)
        if not job_ids:
            return []
        async with self._writing:
            await self._check(session_id, COMPONENT)
            for job_id in job_ids:
                self._index.pop(job_id, None)
                self._cache.pop(job_id, None)
            remaining = dict(self._index)
            compact = self._index_lines > 2 * len(remaining) + 100
            await finish_in_thread(self._remove_entries, job_ids, remaining if compact else None)
            if compact:
                self._index_lines = len(remaining)
        log.info(
            "archive: %d finished job(s) expired (jobstore.expiration-time, jobstore.max-capacity), the "
            "oldest %s; %d kept",
            len(job_ids),
            job_ids[0],
            len(self._index),
        )
        return job_ids

    def _remove_entries(self, job_ids: list[str], index: dict[str, JobOverview] | None) -> None:
        for job_id in job_ids:
            (self.directory / f"{job_id}{ENTRY_SUFFIX}").unlink(missing_ok=True)
        if index is not None:
            self._rewrite_index(index)  # the removed jobs' lines, and lines of replaced entries
        fsync_dir(self.directory)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._index

    async def get(self, job_id: str) -> ArchivedJob | None:
        """The archived job; None if there is none (or `job_id` is not a job id)."""
        if job_id in self._cache:
            self._cache.move_to_end(job_id)
            return self._cache[job_id]
        if not JOB_ID_PATTERN.fullmatch(job_id):
            return None
        path = self.directory / f"{job_id}{ENTRY_SUFFIX}"
        try:
            text = await asyncio.to_thread(path.read_bytes)
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
