"""The JobResult store on the filesystem (Flink's FileSystemJobResultStore), for both HA modes.

`<directory>/<job-id>_DIRTY.json` is written atomically (temp file, fsync, link: never
overwriting) once a job is globally terminal and before its cleanup starts; `mark_clean`
deletes it, or renames it to `<job-id>.json` when `job-result-store.delete-on-commit` is
false. Content: `{"result": <JobResult>, "version": 1, "fingerprint": <the graph's>}` (entries
written before the fingerprint was kept lack it). A dirty entry tells the next leader to finish
the cleanup instead of running the job again. A repair of the job (`remove`) takes its entry
away first; the repair's end writes a new one.

Unlike Flink's, the writes are fenced: each commits only after the writer's leadership is
checked (`LeadershipCheck`, against the ZooKeeper latch in mode `zookeeper`), so a deposed
leader paused past its session cannot write a second JobResult.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from sparkdispatch.errors import InvalidJobGraph, JobResultEntryExists, NoSuchJobResult, StoreError
from sparkdispatch.ha.files import (
    LeadershipCheck,
    finish_in_thread,
    fsync_dir,
    is_temp,
    json_bytes,
    link_to,
    write_temp,
)
from sparkdispatch.ha.jobgraph_store import check_job_id
from sparkdispatch.model.job_graph import JOB_ID_PATTERN
from sparkdispatch.model.job_result import JobResult

log = logging.getLogger(__name__)

COMPONENT = "JobResult store"
DIRTY_SUFFIX = "_DIRTY.json"
CLEAN_SUFFIX = ".json"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class JobResultEntry:
    """A stored JobResult, and the fingerprint of its job's graph (None if the entry predates it)."""

    result: JobResult
    fingerprint: str | None = None


class FileSystemJobResultStore:
    """Dirty and clean JobResult entries as files in one directory; writes fenced by `check`."""

    def __init__(self, directory: Path, *, delete_on_commit: bool, check: LeadershipCheck) -> None:
        self.directory = directory
        self._delete_on_commit = delete_on_commit
        self._check = check
        self._lock = threading.Lock()
        # Ids this store marked clean and deleted: a repeated mark_clean stays a no-op.
        self._cleaned: set[str] = set()

    def _dirty(self, job_id: str) -> Path:
        return self.directory / f"{check_job_id(job_id)}{DIRTY_SUFFIX}"

    def _clean(self, job_id: str) -> Path:
        return self.directory / f"{check_job_id(job_id)}{CLEAN_SUFFIX}"

    async def create_dirty(self, session_id: str, entry: JobResultEntry) -> None:
        """Record a globally terminal job; `JobResultEntryExists` if it has any entry already,
        `LeadershipLost` unless `session_id` leads, `StoreError` naming the file and the cause if it
        cannot be written (no temp file is left then)."""
        result = entry.result
        path = self._dirty(result.job_id)
        try:
            # a large job's result takes long to encode: off the loop
            temp = await asyncio.to_thread(lambda: write_temp(path, _encode(entry)))
            try:
                await self._check(session_id, COMPONENT)
                await finish_in_thread(self._link_dirty, result.job_id, temp)
            finally:
                temp.unlink(missing_ok=True)
        except OSError as exc:  # a full disk, an I/O error: nothing of this write is left behind
            raise StoreError(
                f"the JobResult of job {result.job_id} cannot be written to {path}: {exc.strerror or exc}"
            ) from exc
        log.info("stored dirty JobResult of job %s (%s)", result.job_id, result.status.value)

    def _link_dirty(self, job_id: str, temp: Path) -> None:
        with self._lock:
            if self._clean(job_id).exists() or job_id in self._cleaned or not link_to(temp, self._dirty(job_id)):
                raise JobResultEntryExists(f"job {job_id} has a JobResult stored already; it is not written twice")

    async def mark_clean(self, session_id: str, job_id: str) -> None:
        """The job's cleanup is done; idempotent. `NoSuchJobResult` for a job with no entry,
        `LeadershipLost` unless `session_id` leads."""
        await self._check(session_id, COMPONENT)
        if await finish_in_thread(self._mark_clean, job_id):
            log.info("marked JobResult of job %s clean", job_id)

    def _mark_clean(self, job_id: str) -> bool:
        dirty, clean = self._dirty(job_id), self._clean(job_id)
        with self._lock:
            if clean.exists() or job_id in self._cleaned:
                return False
            if not dirty.exists():
                raise NoSuchJobResult(f"no JobResult of job {job_id} is stored, so it cannot be marked clean")
            if self._delete_on_commit:
                dirty.unlink()
                self._cleaned.add(job_id)
            else:
                os.rename(dirty, clean)
            fsync_dir(self.directory)
        return True

    async def remove(self, session_id: str, job_id: str) -> None:
        """Forget the job's entry, dirty or clean (a repair runs the job again); idempotent.
        `LeadershipLost` unless `session_id` leads."""
        await self._check(session_id, COMPONENT)
        if await finish_in_thread(self._remove, job_id):
            log.info("removed the JobResult of job %s: the job runs a repair", job_id)

    def _remove(self, job_id: str) -> bool:
        with self._lock:
            removed = job_id in self._cleaned
            self._cleaned.discard(job_id)
            for path in (self._dirty(job_id), self._clean(job_id)):
                if path.exists():
                    path.unlink()
                    removed = True
            if removed:
                fsync_dir(self.directory)
        return removed

    async def has_entry(self, job_id: str) -> bool:
        """Whether a JobResult of the job is stored, dirty or clean (readable or not)."""
        return await asyncio.to_thread(self._has, job_id)

    def _has(self, job_id: str) -> bool:
        with self._lock:
            return self._dirty(job_id).exists() or job_id in self._cleaned or self._clean(job_id).exists()

    async def dirty_job_ids(self) -> list[str]:
        """The jobs with a dirty entry, whose cleanup a new leader must finish; nothing is read."""
        return await asyncio.to_thread(self._dirty_job_ids)

    def _dirty_job_ids(self) -> list[str]:
        with self._lock:
            if not self.directory.is_dir():
                return []
            return sorted(
                p.name[: -len(DIRTY_SUFFIX)]
                for p in self.directory.iterdir()
                if p.name.endswith(DIRTY_SUFFIX)
                and not is_temp(p)
                and JOB_ID_PATTERN.fullmatch(p.name[: -len(DIRTY_SUFFIX)])
            )

    async def get(self, job_id: str) -> JobResultEntry | None:
        """The job's entry, dirty or clean; None if there is none, `StoreError` if it cannot be read."""
        return await asyncio.to_thread(self._get, job_id)

    def _get(self, job_id: str) -> JobResultEntry | None:
        with self._lock:
            for path in (self._dirty(job_id), self._clean(job_id)):
                if path.exists():
                    return self._read(path)
        return None

    @staticmethod
    def _read(path: Path) -> JobResultEntry:
        try:
            raw = json.loads(path.read_bytes())
            if raw.get("version") != FORMAT_VERSION:
                raise StoreError(
                    f"JobResult file {path} has version {raw.get('version')!r}; "
                    f"this release reads version {FORMAT_VERSION}"
                )
            fingerprint = raw.get("fingerprint")
            if fingerprint is not None and not isinstance(fingerprint, str):
                raise ValueError(f"fingerprint must be a string, not {fingerprint!r}")
            return JobResultEntry(JobResult.from_dict(raw["result"]), fingerprint)
        except (OSError, ValueError, KeyError, TypeError, AttributeError, InvalidJobGraph) as exc:
            raise StoreError(f"JobResult file {path} cannot be read: {exc}") from None


def _encode(entry: JobResultEntry) -> bytes:
    body: dict[str, object] = {"result": entry.result.to_dict(), "version": FORMAT_VERSION}
    if entry.fingerprint is not None:
        body["fingerprint"] = entry.fingerprint
    return json_bytes(body, sort_keys=True)  # in a thread (create_dirty)
