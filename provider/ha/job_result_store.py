"""The JobResult store on the filesystem (Flink's FileSystemJobResultStore), for both HA modes.

`<directory>/<job-id>_DIRTY.json` is written atomically (temp file, fsync, link: never
overwriting) once a job is globally terminal and before its cleanup starts; `mark_clean`
deletes it, or renames it to `<job-id>.json` when `job-result-store.delete-on-commit` is
false. Content: `{"result": <JobResult>, "version": 1}`. A dirty entry tells the next leader
to finish the cleanup instead of running the job again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from pathlib import Path

from sparkdispatch.errors import InvalidJobGraph, JobResultEntryExists, NoSuchJobResult, StoreError
from sparkdispatch.ha.files import create_atomic, fsync_dir, is_temp
from sparkdispatch.ha.jobgraph_store import check_job_id
from sparkdispatch.jobgraph import JOB_ID_PATTERN, JobResult

log = logging.getLogger(__name__)

DIRTY_SUFFIX = "_DIRTY.json"
CLEAN_SUFFIX = ".json"
FORMAT_VERSION = 1


class FileSystemJobResultStore:
    """Dirty and clean JobResult entries as files in one directory; not fenced (as Flink's)."""

    def __init__(self, directory: Path, *, delete_on_commit: bool) -> None:
        self.directory = directory
        self._delete_on_commit = delete_on_commit
        self._lock = threading.Lock()
        # Ids this store marked clean and deleted: a repeated mark_clean stays a no-op.
        self._cleaned: set[str] = set()

    def _dirty(self, job_id: str) -> Path:
        return self.directory / f"{check_job_id(job_id)}{DIRTY_SUFFIX}"

    def _clean(self, job_id: str) -> Path:
        return self.directory / f"{check_job_id(job_id)}{CLEAN_SUFFIX}"

    async def create_dirty(self, result: JobResult) -> None:
        """Record a globally terminal job; `JobResultEntryExists` if it has any entry already."""
        await asyncio.to_thread(self._create_dirty, result)

    def _create_dirty(self, result: JobResult) -> None:
        dirty, clean = self._dirty(result.job_id), self._clean(result.job_id)
        body = json.dumps({"result": result.to_dict(), "version": FORMAT_VERSION}, sort_keys=True).encode()
        with self._lock:
            if clean.exists() or result.job_id in self._cleaned or not create_atomic(dirty, body):
                raise JobResultEntryExists(f"job {result.job_id} has a JobResult stored already; it is not "
                                           "written twice")
        log.info("stored dirty JobResult of job %s (%s)", result.job_id, result.status.value)

    async def mark_clean(self, job_id: str) -> None:
        """The job's cleanup is done; idempotent. `NoSuchJobResult` for a job with no entry."""
        await asyncio.to_thread(self._mark_clean, job_id)

    def _mark_clean(self, job_id: str) -> None:
        dirty, clean = self._dirty(job_id), self._clean(job_id)
        with self._lock:
            if clean.exists() or job_id in self._cleaned:
                return
            if not dirty.exists():
                raise NoSuchJobResult(f"no JobResult of job {job_id} is stored, so it cannot be marked clean")
            if self._delete_on_commit:
                dirty.unlink()
                self._cleaned.add(job_id)
            else:
                os.rename(dirty, clean)
            fsync_dir(self.directory)
        log.info("marked JobResult of job %s clean", job_id)

    async def has_entry(self, job_id: str) -> bool:
        """Whether a JobResult of the job is stored, dirty or clean."""
        return await asyncio.to_thread(self._has, job_id)

    def _has(self, job_id: str) -> bool:
        with self._lock:
            return (self._dirty(job_id).exists() or job_id in self._cleaned
                    or self._clean(job_id).exists())

    async def dirty_results(self) -> list[JobResult]:
        """Every dirty entry: the jobs whose cleanup a new leader must finish."""
        return await asyncio.to_thread(self._dirty_results)

    def _dirty_results(self) -> list[JobResult]:
        with self._lock:
            if not self.directory.is_dir():
                return []
            paths = sorted(p for p in self.directory.iterdir()
                           if p.name.endswith(DIRTY_SUFFIX) and not is_temp(p) and p.is_file()
                           and JOB_ID_PATTERN.match(p.name[:-len(DIRTY_SUFFIX)]))
            return [self._read(p) for p in paths]

    async def get(self, job_id: str) -> JobResult | None:
        return await asyncio.to_thread(self._get, job_id)

    def _get(self, job_id: str) -> JobResult | None:
        with self._lock:
            for path in (self._dirty(job_id), self._clean(job_id)):
                if path.exists():
                    return self._read(path)
        return None

    @staticmethod
    def _read(path: Path) -> JobResult:
        try:
            raw = json.loads(path.read_bytes())
            if raw.get("version") != FORMAT_VERSION:
                raise StoreError(f"JobResult file {path} has version {raw.get('version')!r}; "
                                 f"this release reads version {FORMAT_VERSION}")
            return JobResult.from_dict(raw["result"])
        except (ValueError, KeyError, TypeError, AttributeError, InvalidJobGraph) as exc:
            raise StoreError(f"JobResult file {path} cannot be read: {exc}") from None
