"""What a new leader's Dispatcher finds in the HA stores before it serves, job by job.

`JobRecovery.stored_jobs` reads the stores as Flink's `SessionDispatcherLeaderProcess` does before
it creates the Dispatcher, and yields what to do with each job; the Dispatcher acts on each before
the next is read:

- a job with a dirty JobResult is only cleaned up, never run again (FLINK-11813), archived first
  from its result if the archive does not have it; one whose dirty JobResult cannot be read is
  recorded as FAILED and cleaned up all the same;
- a stored JobGraph of a job that already terminated (archived, or with a JobResult) only has its
  leftovers removed, unless it is an archived job's repair: no JobResult, and a progress naming
  a repair the archive has not seen (sparkdispatch.dispatcher.repair), which resumes;
- every other stored JobGraph resumes from its progress, or is cancelled when a former leader
  accepted its cancel (unless every subtask finished before the cancel took effect);
- a job whose stored state cannot be read, or whose graph is over today's limits (`JobLimits`:
  accepted under a higher `jobgraph.max-subtasks`), fails alone with a FAILED JobResult naming
  the cause: written as any other, it is final (no later leader retries the job), and the job's
  JobGraph is removed in its cleanup.

Reads ZooKeeper does not answer (`StoreUnavailable`) are retried with backoff until `stop`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from sparkdispatch.dispatcher.archive import ArchivedJob, JobArchive
from sparkdispatch.errors import (
    DuplicateJobSubmission,
    JobTooLarge,
    ServiceUnavailable,
    StoreError,
    StoreUnavailable,
)
from sparkdispatch.ha.job_result_store import FileSystemJobResultStore
from sparkdispatch.ha.jobgraph_store import JobGraphStore
from sparkdispatch.ha.progress_store import JobProgress, ProgressStore
from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.model.job_graph import JobGraph
from sparkdispatch.model.job_result import Failure, JobResult, VertexResult
from sparkdispatch.model.repair import Repair
from sparkdispatch.dispatcher.settings import JobLimits
from sparkdispatch.model.snapshot import JobSnapshot

log = logging.getLogger(__name__)

T = TypeVar("T")

UNREADABLE_JOB_NAME = "unreadable job"


@dataclass(frozen=True)
class JobToResume:
    """A stored job to run again from its progress; `cancel`: a former leader accepted its cancel;
    `repairs`: the job's repairs, the last one running (empty unless it runs a repair)."""

    job_id: str
    graph: JobGraph
    progress: JobProgress
    cancel: bool
    repairs: tuple[Repair, ...] = ()


@dataclass(frozen=True)
class JobToCleanUp:
    """A job that already terminated: archive `archived` (if set), then clean the job up; its JobResult
    is marked clean only if `mark_clean` (a dirty one)."""

    job_id: str
    archived: ArchivedJob | None
    mark_clean: bool


@dataclass(frozen=True)
class JobToFail:
    """A stored job that cannot run (its state unreadable, its graph over a limit): it ends with `result`
    (FAILED), concluded as any other; `fingerprint` is its graph's, when the graph could be read."""

    result: JobResult
    fingerprint: str | None = None


RecoveredJob = JobToResume | JobToCleanUp | JobToFail


class JobRecovery:
    """Reads one leader session's stored jobs for its Dispatcher (see the module docstring)."""

    def __init__(
        self,
        *,
        session_id: str,
        jobgraph_store: JobGraphStore,
        job_result_store: FileSystemJobResultStore,
        progress_store: ProgressStore,
        archive: JobArchive,
        initial_backoff: float,
        max_backoff: float,
        limits: JobLimits = JobLimits(),
    ) -> None:
        self._session_id = session_id
        self._limits = limits
        self._jobgraph_store = jobgraph_store
        self._job_result_store = job_result_store
        self._progress_store = progress_store
        self._archive = archive
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._stopped = False

    def stop(self) -> None:
        """The Dispatcher stopped: a read failing after this raises `ServiceUnavailable`, not retried."""
        self._stopped = True

    async def stored_jobs(self) -> AsyncGenerator[RecoveredJob, None]:
        """Load the archive; then every job with a dirty JobResult, then every other stored JobGraph
        (by id). What the caller archives before it asks for the next job is seen by the later reads."""
        await self._archive.load()
        dirty = await self._read(self._job_result_store.dirty_job_ids)
        for job_id in dirty:
            dirty_job = await self._dirty_job(job_id)
            if dirty_job is not None:
                yield dirty_job
        stored = await self._read(self._jobgraph_store.job_ids)
        for job_id in sorted(stored - set(dirty)):
            stored_job = await self._stored_job(job_id)
            if stored_job is not None:
                yield stored_job

    async def _read(self, read: Callable[[], Awaitable[T]]) -> T:
        """`read()`, retried with backoff while the store is unavailable (ZooKeeper connection loss)."""
        delay = self._initial_backoff
        while True:
            try:
                return await read()
            except StoreUnavailable as exc:
                if self._stopped:
                    raise ServiceUnavailable("the Dispatcher stopped while it recovered") from None
                log.warning("recovery read failed, retrying in %.1fs: %s [session %s]", delay, exc, self._session_id)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._max_backoff)

    async def _dirty_job(self, job_id: str) -> JobToCleanUp | None:
        """A job with a dirty JobResult: never run again, only cleaned up (even if unreadable);
        None if it was cleaned up meanwhile."""
        try:
            entry = await self._read(lambda: self._job_result_store.get(job_id))
        except ServiceUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - an unreadable JobResult fails its job alone
            log.error(
                "the dirty JobResult of job %s cannot be read (%s); the job is not run again: it is "
                "recorded as FAILED and cleaned up [session %s]",
                job_id,
                exc,
                self._session_id,
            )
            if job_id in self._archive:
                return JobToCleanUp(job_id, None, mark_clean=True)
            try:  # its graph, if still there, names the job and tells a resubmission apart
                graph = await self._jobgraph_store.get(job_id)
            except Exception:  # noqa: BLE001 - without its graph the job is only named less well
                graph = None
            result = result_without_run(job_id, graph, _recovery_failure(job_id, exc))
            fingerprint = graph.fingerprint() if graph is not None else None
            return JobToCleanUp(
                job_id, ArchivedJob(result, JobSnapshot.from_result(result), fingerprint), mark_clean=True
            )
        if entry is None:
            return None
        log.info(
            "job %s has a dirty JobResult (%s): cleaning up, not re-running [session %s]",
            job_id,
            entry.result.status.value,
            self._session_id,
        )
        archived = (
            None
            if job_id in self._archive
            else ArchivedJob(entry.result, JobSnapshot.from_result(entry.result), entry.fingerprint)
        )
        return JobToCleanUp(job_id, archived, mark_clean=True)

    async def _stored_job(self, job_id: str) -> RecoveredJob | None:
        """A stored JobGraph without a dirty JobResult; None if it was removed meanwhile."""
        leftovers = JobToCleanUp(job_id, None, mark_clean=False)
        if await self._read(lambda: self._job_result_store.has_entry(job_id)):
            log.warning("job %s is stored but already terminated; removing its leftovers", job_id)
            return leftovers
        try:
            graph = await self._read(lambda: self._jobgraph_store.get(job_id))
            if graph is None:
                return None
            if graph.job_id != job_id:
                raise StoreError(f"the JobGraph stored for job {job_id} names job {graph.job_id}")
            progress = await self._read(lambda: self._progress_store.get(job_id))
        except ServiceUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - this job only: the others are recovered all the same
            log.error("job %s cannot be recovered, it fails: %s [session %s]", job_id, exc, self._session_id)
            return JobToFail(result_without_run(job_id, None, _recovery_failure(job_id, exc)))
        repairs: tuple[Repair, ...] = ()
        if job_id in self._archive:
            archived = await _read_or_none(self._archive.get(job_id), f"archived job {job_id}")
            done = archived.snapshot.repairs if archived is not None else ()
            if archived is None or progress.repair is None or progress.repair.number <= len(done):
                log.warning("job %s is stored but already terminated; removing its leftovers", job_id)
                return leftovers
            repairs = (*done, progress.repair)
            log.info("job %s runs repair %d", job_id, progress.repair.number)
        try:
            self._limits.check(graph)
        except JobTooLarge as exc:
            log.error(
                "job %s is over today's limits, it fails instead of running: %s [session %s]",
                job_id,
                exc.message,
                self._session_id,
            )
            return JobToFail(result_without_run(job_id, graph, _recovery_failure(job_id, exc)), graph.fingerprint())
        # a job whose every subtask finished before its cancel took effect finishes, as it did
        cancel = progress.cancel_requested and not _all_finished(graph, progress)
        log.info(
            "recovering job %s (%s)%s [session %s]",
            job_id,
            graph.name,
            "; a former leader accepted its cancel" if cancel else "",
            self._session_id,
        )
        return JobToResume(job_id, graph, progress, cancel, repairs)


def result_without_run(job_id: str, graph: JobGraph | None, failure: Failure) -> JobResult:
    """The FAILED JobResult of a job that could not run (its stored state or its JobMaster failed)."""
    now = int(time.time() * 1000)
    vertices = (
        {v.id: VertexResult(state=ExecutionState.CREATED, attempts=0) for v in graph.vertices}
        if graph is not None
        else {}
    )
    return JobResult(
        job_id=job_id,
        name=graph.name if graph is not None else UNREADABLE_JOB_NAME,
        status=JobStatus.FAILED,
        start_time=now,
        end_time=now,
        vertices=vertices,
        failure=failure,
    )


def _all_finished(graph: JobGraph, progress: JobProgress) -> bool:
    return all(set(progress.finished.get(v.id, {})) >= set(range(v.parallelism)) for v in graph.vertices)


def _recovery_failure(job_id: str, exc: BaseException) -> Failure:
    return Failure(type(exc).__name__, f"job {job_id} could not be recovered: {exc}")


async def terminated_status(
    job_id: str, fingerprint: str, *, archive: JobArchive, job_result_store: FileSystemJobResultStore, cleaning: bool
) -> JobStatus | None:
    """The status of the same job (graph `fingerprint`) if `job_id` already terminated, from the
    archive or the JobResult store (`cleaning`: its cleanup runs); None if it is new.
    `DuplicateJobSubmission` if it terminated with another graph, or one it cannot tell."""
    status: JobStatus | None = None
    stored: str | None = None
    if job_id in archive:
        archived = await _read_or_none(archive.get(job_id), f"archived job {job_id}")
        if archived is not None:
            status, stored = archived.result.status, archived.fingerprint
    if status is None and (cleaning or await job_result_store.has_entry(job_id)):
        entry = await _read_or_none(job_result_store.get(job_id), f"the JobResult of job {job_id}")
        if entry is None:
            raise DuplicateJobSubmission(job_id, "it already reached a globally terminal state")
        status, stored = entry.result.status, entry.fingerprint
    if status is None:
        return None
    if stored is None:
        raise DuplicateJobSubmission(
            job_id,
            f"it already reached a globally terminal state ({status.value}) "
            "and its graph is not known, so this cannot be the same job",
        )
    if stored != fingerprint:
        raise DuplicateJobSubmission(job_id, "it already reached a globally terminal state with another graph")
    return status


async def _read_or_none(read: Awaitable[T], what: str) -> T | None:
    """`read` awaited, or None if it fails (logged as `what` cannot be read)."""
    try:
        return await read
    except Exception as exc:  # noqa: BLE001 - logged; the caller goes on without it
        log.warning("%s cannot be read: %s", what, exc)
        return None
