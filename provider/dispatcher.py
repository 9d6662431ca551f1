"""The Dispatcher: accepts jobs, runs one JobMaster each, and keeps every accepted job safe.

Mirrors Flink's Dispatcher under one leader session:

- `submit` persists the JobGraph before it answers; a job id with a JobResult (dirty or clean)
  or an archive entry is refused, the same id with the same graph is the same job.
- A globally terminated job goes archive → dirty JobResult → cleanup (JobGraph, progress,
  results per `results.retention`), retried with backoff until it succeeds → clean.
- On leadership (`start`), dirty JobResults are only cleaned up, never re-run (FLINK-11813);
  every other stored JobGraph resumes from its progress, finished subtasks reused.

All state lives on the master's loop.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from abc import abstractmethod
from dataclasses import dataclass
from typing import Protocol

from sparkdispatch.archive import ArchivedJob, JobArchive
from sparkdispatch.errors import (
    DuplicateJobSubmission,
    JobAlreadyTerminated,
    LeadershipLost,
    ServiceUnavailable,
    UnknownJob,
)
from sparkdispatch.ha.job_result_store import FileSystemJobResultStore
from sparkdispatch.ha.jobgraph_store import JobGraphStore
from sparkdispatch.ha.progress_store import JobProgress, ProgressStore
from sparkdispatch.jobgraph import JobGraph, JobResult, JobStatus
from sparkdispatch.jobmaster.gateways import JobMasterFactory, JobMasterGateway
from sparkdispatch.results import ResultLayout, remove_job_results
from sparkdispatch.settings import CleanupSettings
from sparkdispatch.snapshot import JobOverview, JobSnapshot

log = logging.getLogger(__name__)


class DispatcherGateway(Protocol):
    """What the REST endpoint calls on the Dispatcher, on the master's loop."""

    @abstractmethod
    async def submit(self, graph: JobGraph) -> tuple[str, bool]:
        """Accept a job: (job id, True) when new, (job id, False) for the same job again."""

    @abstractmethod
    async def cancel(self, job_id: str) -> None:
        """Cancel a running job; idempotent for a cancelled one."""

    @abstractmethod
    def job_overviews(self) -> list[JobOverview]:
        """Every job, running and finished, the most recently started first."""

    @abstractmethod
    async def job_snapshot(self, job_id: str) -> JobSnapshot:
        """One job with its vertices and subtasks; `UnknownJob` if there is no such job."""

    @abstractmethod
    async def job_result(self, job_id: str, *, wait_s: float = 0.0) -> JobResult | None:
        """The JobResult, waiting up to `wait_s` for a running job; None while it runs."""

    @abstractmethod
    def job_counts(self) -> dict[str, int]:
        """Jobs by status."""

    @abstractmethod
    def job_master(self, job_id: str) -> JobMasterGateway:
        """The running JobMaster of `job_id`; `UnknownJob` if it does not run here."""


@dataclass
class _Job:
    """A job this Dispatcher runs: reserved at submission, its JobMaster once persisted."""

    graph: JobGraph
    fingerprint: str
    persisted: asyncio.Future[None]
    job_master: JobMasterGateway | None = None
    watcher: asyncio.Task[None] | None = None
    terminal: bool = False


class Dispatcher:
    """One leader session's Dispatcher (fencing token: `session_id`).

    `new_job_master(graph, recovered_progress)` builds the JobMaster of a job (under the same
    session); the Dispatcher only starts, watches, cancels and suspends it.
    """

    def __init__(self, *, session_id: str, jobgraph_store: JobGraphStore,
                 job_result_store: FileSystemJobResultStore, progress_store: ProgressStore, archive: JobArchive,
                 new_job_master: JobMasterFactory, cleanup: CleanupSettings) -> None:
        self.session_id = session_id
        self._jobgraph_store = jobgraph_store
        self._job_result_store = job_result_store
        self._progress_store = progress_store
        self._archive = archive
        self._new_job_master = new_job_master
        self._cleanup_settings = cleanup
        self._jobs: dict[str, _Job] = {}
        self._cleanups: dict[str, asyncio.Task[None]] = {}
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Recover: clean up dirty results, resume every other stored JobGraph."""
        await self._archive.load()
        dirty = await self._job_result_store.dirty_results()
        dirty_ids = {result.job_id for result in dirty}
        for result in dirty:
            log.info("job %s has a dirty JobResult (%s): cleaning up, not re-running [session %s]",
                     result.job_id, result.status.value, self.session_id)
            if result.job_id not in self._archive:
                await self._archive_quietly(ArchivedJob(result, JobSnapshot.from_result(result)))
            self._start_cleanup(result.job_id)
        for job_id in sorted(await self._jobgraph_store.job_ids()):
            if job_id in dirty_ids:
                continue
            if await self._job_result_store.has_entry(job_id) or job_id in self._archive:
                log.warning("job %s is stored but already terminated; removing its leftovers", job_id)
                self._start_cleanup(job_id, mark_clean=False)
                continue
            graph = await self._jobgraph_store.get(job_id)
            if graph is None:
                continue
            progress = await self._progress_store.get(job_id)
            log.info("recovering job %s (%s) [session %s]", job_id, graph.name, self.session_id)
            job = _Job(graph, graph.fingerprint(), asyncio.get_running_loop().create_future())
            job.persisted.set_result(None)
            self._jobs[job_id] = job
            self._run(job_id, job, recovered=progress)

    async def stop(self) -> None:
        """Leadership lost or shutdown: suspend every job; nothing is removed from the HA stores."""
        self._closed = True
        for task in self._cleanups.values():
            task.cancel()
        jobs = list(self._jobs.items())
        for job_id, job in jobs:
            if job.watcher is not None:
                job.watcher.cancel()
            if job.job_master is not None and not job.terminal:
                try:
                    job.job_master.suspend()
                except Exception:
                    log.exception("suspending job %s failed", job_id)
        await asyncio.gather(*self._cleanups.values(), *(j.watcher for _, j in jobs if j.watcher),
                             return_exceptions=True)
        self._cleanups.clear()

    # -- submission and cancellation -----------------------------------------------------------

    async def submit(self, graph: JobGraph) -> tuple[str, bool]:
        """Accept `graph`; returns (job id, True) when new, (job id, False) for the same job again."""
        self._check_open()
        chosen_id = graph.job_id is not None
        job_id = graph.job_id or uuid.uuid4().hex
        graph = graph.with_job_id(job_id)
        fingerprint = graph.fingerprint()
        existing = self._jobs.get(job_id)
        if existing is not None:
            if existing.fingerprint != fingerprint:
                raise DuplicateJobSubmission(job_id, "a job with this id runs with another graph")
            await asyncio.shield(existing.persisted)
            if existing.job_master is not None and existing.job_master.result_future.done():
                # its result is out: answer as for an archived job, even before the archive has it
                raise DuplicateJobSubmission(job_id, "it already reached a globally terminal state")
            return job_id, False
        # reserve the id before the first await, so concurrent submissions of it wait for this one
        job = _Job(graph, fingerprint, asyncio.get_running_loop().create_future())
        self._jobs[job_id] = job
        try:
            # an id generated here is new: only a client's own id can have a JobResult already
            if job_id in self._cleanups or job_id in self._archive or \
                    (chosen_id and await self._job_result_store.has_entry(job_id)):
                raise DuplicateJobSubmission(job_id, "it already reached a globally terminal state")
            await self._jobgraph_store.put(self.session_id, graph)
        except BaseException as exc:
            del self._jobs[job_id]
            job.persisted.set_exception(exc)
            job.persisted.exception()  # retrieved: waiters re-raise it themselves
            raise
        job.persisted.set_result(None)
        log.info("job %s (%s) submitted with %d vertices [session %s]", job_id, graph.name,
                 len(graph.vertices), self.session_id)
        self._run(job_id, job, recovered=None)
        return job_id, True

    async def cancel(self, job_id: str) -> None:
        """Cancel a running job; idempotent for a cancelled one; `JobAlreadyTerminated` otherwise."""
        job = self._jobs.get(job_id)
        if job is not None and not job.terminal:
            await asyncio.shield(job.persisted)
            if job.job_master is not None:
                await job.job_master.cancel()
            return
        if job is not None:
            status = job.job_master.status if job.job_master else JobStatus.CANCELED
        else:
            archived = await self._archive.get(job_id)
            if archived is None:
                raise UnknownJob(job_id)
            status = archived.result.status
        if status is not JobStatus.CANCELED:
            raise JobAlreadyTerminated(job_id, status.value)

    # -- queries ------------------------------------------------------------------------------

    def job_overviews(self) -> list[JobOverview]:
        """Every job, running and finished, the most recently started first (`GET /jobs`, `/jobs/overview`)."""
        overviews = [job.job_master.overview() for job in self._jobs.values() if job.job_master]
        running = {overview.job_id for overview in overviews}
        overviews += [o for o in self._archive.overviews() if o.job_id not in running]
        # the id breaks ties, so the order does not change when a job moves to the archive
        return sorted(overviews, key=lambda o: (o.start_time, o.job_id), reverse=True)

    async def job_snapshot(self, job_id: str) -> JobSnapshot:
        """One job with its vertices and subtasks (`GET /jobs/{job_id}`); `UnknownJob` if unknown."""
        job = self._jobs.get(job_id)
        if job is not None and job.job_master is not None:
            return job.job_master.snapshot()
        archived = await self._archive.get(job_id)
        if archived is None:
            raise UnknownJob(job_id)
        return archived.snapshot

    async def job_result(self, job_id: str, *, wait_s: float = 0.0) -> JobResult | None:
        """The JobResult, waiting up to `wait_s` for a running job; None while it runs."""
        job = self._jobs.get(job_id)
        if job is not None and job.job_master is not None:
            future = job.job_master.result_future
            if not future.done() and wait_s > 0:
                try:
                    await asyncio.wait_for(asyncio.shield(future), wait_s)
                except (TimeoutError, asyncio.CancelledError):
                    pass
            if future.done() and not future.cancelled():
                return future.result()
            return None
        if job is not None:
            return None
        archived = await self._archive.get(job_id)
        if archived is None:
            raise UnknownJob(job_id)
        return archived.result

    def job_counts(self) -> dict[str, int]:
        """Jobs by status: running ones from their JobMasters, the rest from the archive."""
        counts = dict(self._archive.counts())
        for job in self._jobs.values():
            if job.job_master is not None and not job.terminal:
                status = job.job_master.status.value
                counts[status] = counts.get(status, 0) + 1
        return counts

    def job_master(self, job_id: str) -> JobMasterGateway:
        """The running JobMaster of `job_id` (TaskExecutor reports go to it)."""
        job = self._jobs.get(job_id)
        if job is None or job.job_master is None:
            raise UnknownJob(job_id)
        return job.job_master

    # -- running and terminating jobs ---------------------------------------------------------

    def _run(self, job_id: str, job: _Job, *, recovered: JobProgress | None) -> None:
        job.job_master = self._new_job_master(job.graph, recovered)
        job.job_master.start()
        job.watcher = asyncio.create_task(self._watch(job_id, job), name=f"job-{job_id}")

    async def _watch(self, job_id: str, job: _Job) -> None:
        assert job.job_master is not None
        result = await job.job_master.result_future
        job.terminal = True
        log.info("job %s reached %s [session %s]", job_id, result.status.value, self.session_id)
        await self._archive_quietly(ArchivedJob(result, job.job_master.snapshot()))
        await self._write_dirty_result(result)
        self._jobs.pop(job_id, None)
        self._start_cleanup(job_id)

    async def _archive_quietly(self, archived: ArchivedJob) -> None:
        try:
            await self._archive.put(archived)
        except Exception:  # as in Flink, archiving failures are only logged
            log.exception("archiving job %s failed", archived.result.job_id)

    async def _write_dirty_result(self, result: JobResult) -> None:
        store = self._job_result_store
        delay = self._cleanup_settings.initial_backoff
        while True:
            try:
                if not await store.has_entry(result.job_id):
                    await store.create_dirty(result)
                return
            except Exception:
                # Without its dirty entry a finished job could run again: keep trying.
                log.exception("writing the JobResult of job %s failed; retrying in %.1fs", result.job_id, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._cleanup_settings.max_backoff)

    def _start_cleanup(self, job_id: str, *, mark_clean: bool = True) -> None:
        if job_id not in self._cleanups and not self._closed:
            task = asyncio.create_task(self._cleanup(job_id, mark_clean), name=f"cleanup-{job_id}")
            self._cleanups[job_id] = task
            task.add_done_callback(lambda _: self._cleanups.pop(job_id, None))

    async def _cleanup(self, job_id: str, mark_clean: bool) -> None:
        settings = self._cleanup_settings
        delay = settings.initial_backoff
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._jobgraph_store.remove(self.session_id, job_id)
                await self._progress_store.remove(self.session_id, job_id)
                if settings.delete_results:
                    await asyncio.to_thread(remove_job_results, ResultLayout(settings.results_dir), job_id)
                if mark_clean:
                    await self._job_result_store.mark_clean(job_id)
                log.info("job %s cleaned up after %d attempt(s) [session %s]", job_id, attempt, self.session_id)
                return
            except LeadershipLost:
                return
            except Exception as exc:
                # FLINK-26652: a failing cleanup never takes the master down; it is retried, and the
                # dirty JobResult hands it to the next leader if this one goes away.
                log.warning("cleanup of job %s failed (attempt %d), retrying in %.1fs: %s; check %s",
                            job_id, attempt, delay, exc, settings.storage_dir)
                await asyncio.sleep(delay)
                delay = min(delay * 2, settings.max_backoff)

    def _check_open(self) -> None:
        if self._closed:
            raise ServiceUnavailable("the Dispatcher is shutting down; retry against the new leader")
