"""The Dispatcher: accepts jobs, runs one JobMaster each, and keeps every accepted job safe.

Mirrors Flink's Dispatcher under one leader session:

- `start` recovers before the Dispatcher serves: it takes over every stored job `JobRecovery`
  reads (sparkdispatch.dispatcher.recovery); until it is done every call answers
  `RecoveryInProgress` (503 with `Retry-After`), so no accepted job is reported unknown, run by
  a second JobMaster or run again meanwhile (Flink exposes the Dispatcher gateway only after
  recovery).
- `submit` checks the graph's limits and artifacts, persists the JobGraph and has its JobMaster
  built (a large job's ExecutionGraph in a thread, so the loop keeps answering) before it
  answers; the same id with the same graph (fingerprint) is the same job, running or
  terminated, never a second run; another graph under a taken id is refused.
- `cancel` persists the cancel with the job before it answers, so the next leader finishes it.
- `repair` runs some vertices of an ended job again under the same id, from its archive entry
  (sparkdispatch.dispatcher.repair), persisted before it answers.
- A job that reaches a globally terminal state, or whose JobMaster cannot be built or started,
  or whose stored state cannot be recovered, goes archive → dirty JobResult → cleanup (JobGraph,
  progress, results per `results.retention`), retried with backoff until it succeeds → clean:
  its FAILED JobResult makes it final, so no later leader retries it.

Its read side (the queries of running and archived jobs) is `JobQueries`
(sparkdispatch.dispatcher.queries), which it extends. All state lives on the master's loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from contextlib import aclosing

from sparkdispatch.dispatcher.archive import ArchivedJob, JobArchive
from sparkdispatch.dispatcher.dispatched_job import DispatchedJob
from sparkdispatch.dispatcher.gateway import EVERY_POOL, PoolAccess, Submission
from sparkdispatch.dispatcher.queries import JobQueries
from sparkdispatch.errors import (
    DuplicateJobSubmission,
    JobAlreadyTerminated,
    JobResultEntryExists,
    LeadershipLost,
    RepairNotPossible,
    StoreError,
    UnknownJob,
)
from sparkdispatch.dispatcher.recovery import (
    JobRecovery,
    JobToCleanUp,
    JobToFail,
    JobToResume,
    RecoveredJob,
    result_without_run,
    terminated_status,
)
from sparkdispatch.dispatcher.repair import persist_repair, plan_repair
from sparkdispatch.ha.blob_store import BlobStore, claim_artifacts
from sparkdispatch.ha.job_result_store import FileSystemJobResultStore, JobResultEntry
from sparkdispatch.ha.jobgraph_store import JobGraphStore
from sparkdispatch.ha.progress_store import JobProgress, ProgressStore
from sparkdispatch.model.states import JobStatus
from sparkdispatch.model.job_graph import DEFAULT_POOL, JobGraph
from sparkdispatch.model.job_result import Failure, JobResult
from sparkdispatch.jobmaster.gateways import JobMasterFactory, JobMasterGateway
from sparkdispatch.log_context import log_context
from sparkdispatch.metrics.events import EventCounts, JobEvents
from sparkdispatch.model.repair import RepairAnswer, check_requested
from sparkdispatch.storage.results import ResultLayout, remove_job_results
from sparkdispatch.dispatcher.settings import CleanupSettings, JobLimits

log = logging.getLogger(__name__)

CLEANUP_WAIT_S = 10.0  # how long a repair waits for the cleanup of a job that has just ended


class Dispatcher(JobQueries):
    """One leader session's Dispatcher (fencing token: `session_id`).

    `new_job_master(graph, recovered_progress)` builds the JobMaster of a job (under the same
    session); the Dispatcher only starts, watches, cancels and suspends it. `address` is this
    master's REST address, named in `RecoveryInProgress` answers. A graph over `limits` is refused at
    submission and fails at recovery.
    """

    def __init__(
        self,
        *,
        session_id: str,
        address: str,
        jobgraph_store: JobGraphStore,
        job_result_store: FileSystemJobResultStore,
        progress_store: ProgressStore,
        archive: JobArchive,
        blob_store: BlobStore,
        new_job_master: JobMasterFactory,
        cleanup: CleanupSettings,
        events: JobEvents | None = None,
        limits: JobLimits = JobLimits(),
    ) -> None:
        super().__init__(address=address, archive=archive)
        self.session_id = session_id
        self._limits = limits
        self._events = events if events is not None else EventCounts()
        self._jobgraph_store = jobgraph_store
        self._job_result_store = job_result_store
        self._progress_store = progress_store
        self._blob_store = blob_store
        self._new_job_master = new_job_master
        self._cleanup_settings = cleanup
        self._recovery = JobRecovery(
            session_id=session_id,
            jobgraph_store=jobgraph_store,
            job_result_store=job_result_store,
            progress_store=progress_store,
            archive=archive,
            initial_backoff=cleanup.initial_backoff,
            max_backoff=cleanup.max_backoff,
            limits=limits,
        )
        self._cleanups: dict[str, asyncio.Task[None]] = {}
        self._expiry: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Recover: take over every stored job (clean up, resume, cancel or fail it); then serve."""
        began = time.monotonic()
        finished = 0
        async with aclosing(self._recovery.stored_jobs()) as stored_jobs:
            async for found in stored_jobs:
                if isinstance(found, JobToCleanUp) and found.mark_clean:
                    finished += 1
                await self._take_over(found)
        self._recovering = False
        self._expiry = asyncio.create_task(self._expire_archive(), name="archive-expiry")
        log.info(
            "recovered %d job(s) and %d finished one(s) to clean up in %.2fs; serving [session %s]",
            len(self._jobs),
            finished,
            time.monotonic() - began,
            self.session_id,
        )

    async def stop(self) -> None:
        """Leadership lost or shutdown: suspend every job; nothing is removed from the HA stores."""
        self._closed = True
        self._recovery.stop()
        if self._expiry is not None:
            self._expiry.cancel()
            await asyncio.gather(self._expiry, return_exceptions=True)
        for task in self._cleanups.values():
            task.cancel()
        jobs = list(self._jobs.items())
        for job_id, job in jobs:
            if job.watcher is not None:
                job.watcher.cancel()
            if job.job_master is not None and job.result is None:
                try:
                    job.job_master.suspend()
                except Exception:
                    log.exception("suspending job %s failed", job_id)
        await asyncio.gather(
            *self._cleanups.values(), *(j.watcher for _, j in jobs if j.watcher), return_exceptions=True
        )
        self._cleanups.clear()
        # A cancelled watcher keeps its CancelledError, whose traceback holds the watcher's frame and
        # so the job: without this the job's JobMaster (and its graph) would outlive the leadership.
        for _, job in jobs:
            job.watcher = None

    async def _take_over(self, found: RecoveredJob) -> None:
        """Act on one job recovery found, before it reads the next."""
        match found:
            case JobToCleanUp(job_id=job_id, archived=archived, mark_clean=mark_clean):
                if archived is not None:
                    await self._archive_quietly(archived)
                self._start_cleanup(job_id, mark_clean=mark_clean)
            case JobToFail(result=result, fingerprint=fingerprint):
                job = self._jobs[result.job_id] = DispatchedJob(None, fingerprint, _persisted(), result=result)
                job.watcher = asyncio.create_task(
                    self._conclude(result.job_id, job, result), name=f"job-{result.job_id}"
                )
            case JobToResume(job_id=job_id, graph=graph, progress=progress, cancel=cancel, repairs=repairs):
                job = self._jobs[job_id] = DispatchedJob(
                    graph,
                    graph.fingerprint(),
                    asyncio.get_running_loop().create_future(),
                    cancel_recorded=cancel,
                    repairs=repairs,
                )
                await self._run(job_id, job, recovered=progress)

    # -- submission and cancellation -----------------------------------------------------------

    async def submit(self, graph: JobGraph, *, access: PoolAccess = EVERY_POOL) -> Submission:
        """Accept `graph` (`created`), or answer for the same job submitted before; `JobTooLarge` for
        a graph over the limits and `Forbidden` for a pool `access` does not reach, before anything
        is stored."""
        access.check(graph.pool, "submit")
        self._check_serving()
        self._limits.check(graph)
        chosen_id = graph.job_id is not None
        job_id = graph.job_id or uuid.uuid4().hex
        graph = graph.with_job_id(job_id)
        fingerprint = graph.fingerprint()
        existing = self._jobs.get(job_id)
        if existing is not None:
            if existing.fingerprint != fingerprint:
                # the same words whether or not the ended job has reached the archive yet
                reason = (
                    "it already reached a globally terminal state with another graph"
                    if existing.result is not None
                    else "a job with this id runs with another graph"
                )
                raise DuplicateJobSubmission(job_id, reason)
            terminated = await asyncio.shield(existing.accepted)
            return Submission(job_id, False, terminated or existing.status)
        # reserve the id before the first await, so concurrent submissions of it wait for this one
        job = DispatchedJob(graph, fingerprint, asyncio.get_running_loop().create_future())
        self._jobs[job_id] = job
        try:
            # an id generated here is new: only a client's own id can have been used already
            terminated = (
                await terminated_status(
                    job_id,
                    fingerprint,
                    archive=self._archive,
                    job_result_store=self._job_result_store,
                    cleaning=job_id in self._cleanups,
                )
                if chosen_id
                else None
            )
            if terminated is None:
                await self._check_artifacts(graph)
                await self._jobgraph_store.put(self.session_id, graph)
        except BaseException as exc:
            del self._jobs[job_id]
            job.accepted.set_exception(exc)
            job.accepted.exception()  # retrieved: waiters re-raise it themselves
            raise
        if terminated is not None:
            job.accepted.set_result(terminated)
            del self._jobs[job_id]
            return Submission(job_id, False, terminated)
        log.info(
            "job %s (%s) submitted with %d vertices, %d subtasks [session %s]",
            job_id,
            graph.name,
            len(graph.vertices),
            graph.subtask_count,
            self.session_id,
        )
        self._events.job_submitted()
        await self._run(job_id, job, recovered=None)
        return Submission(job_id, True, job.status)

    async def _check_artifacts(self, graph: JobGraph, *, repairing: str | None = None) -> None:
        """`claim_artifacts`: an error naming each artifact the blob store lacks; their retention restarts."""
        wheels = {field: key for key, field in graph.wheel_keys().items()}
        named = {**{f"artifacts[{i}]": key for i, key in enumerate(graph.artifacts)}, **wheels}
        if named:
            await asyncio.to_thread(claim_artifacts, self._blob_store, named, wheels=wheels.keys(), repairing=repairing)

    async def _checked_job(
        self, job_id: str, access: PoolAccess, action: str
    ) -> tuple[DispatchedJob | None, ArchivedJob | None]:
        """The job as this Dispatcher holds it, else its archive entry (`UnknownJob` without one),
        once `access` is found to reach its pool (`Forbidden` otherwise): one lookup decides both."""
        job = await self._settled(job_id)  # None also when its submission failed: unknown
        archived = None
        if job is None:
            archived = await self._archive.get(job_id)
            if archived is None:
                raise UnknownJob(job_id)
        graph = job.graph if job is not None else archived.graph if archived is not None else None
        access.check(graph.pool if graph is not None else DEFAULT_POOL, action)
        return job, archived

    async def cancel(self, job_id: str, *, access: PoolAccess = EVERY_POOL) -> None:
        """Cancel a running job, persisting the cancel first; idempotent for a cancelled one;
        `JobAlreadyTerminated` for a job that ended otherwise; `Forbidden` for a pool `access` does
        not reach."""
        self._check_serving()
        job, archived = await self._checked_job(job_id, access, "cancel")
        status: JobStatus | None = None
        if job is not None and job.result is not None:
            status = job.result.status
        elif job is not None and job.job_master is not None:
            job_master, outcome = job.job_master, job.job_master.result_future
            if not outcome.done():
                if not job.cancel_recorded:
                    await self._progress_store.record_cancel(self.session_id, job_id)
                    job.cancel_recorded = True
                await job_master.cancel()
                return
            if not outcome.cancelled():
                status = outcome.result().status  # it ended; this Dispatcher has not concluded it yet
        if status is None:
            if archived is None:
                archived = await self._archive.get(job_id)
            if archived is None:
                raise UnknownJob(job_id)
            status = archived.result.status
        if status is not JobStatus.CANCELED:
            raise JobAlreadyTerminated(job_id, status.value)

    async def repair(self, job_id: str, vertices: Sequence[str], *, access: PoolAccess = EVERY_POOL) -> RepairAnswer:
        """Run `vertices` of an ended job again, with their consumers, reusing the other results
        (`POST /jobs/{job_id}/repair`); persisted before it answers. A job that runs a repair
        covering `vertices` answers with it; `RepairNotPossible` (`running`) while it runs otherwise;
        `Forbidden` for a pool `access` does not reach."""
        self._check_serving()
        job, archived = await self._checked_job(job_id, access, "repair")
        if job is not None:
            repair = job.running_repair
            if (
                job.result is None
                and repair is not None
                and job.graph is not None
                and repair.covers(check_requested(job.graph, vertices))
            ):
                return RepairAnswer(job_id, created=False, repair=repair)
            raise RepairNotPossible(
                job_id, f"it has not ended yet ({job.status.value}); ask again once it has", running=True
            )
        cleanup = self._cleanups.get(job_id)
        if cleanup is not None:  # it has just ended: its JobGraph and progress are being removed
            try:
                await asyncio.wait_for(asyncio.shield(cleanup), CLEANUP_WAIT_S)
            except TimeoutError:
                raise RepairNotPossible(
                    job_id, "its cleanup is not done yet; ask again shortly", running=True
                ) from None
        plan = plan_repair(
            job_id,
            archived,  # a cleanup leaves the archive entry as it is
            vertices,
            results_deleted=self._cleanup_settings.delete_results,
            now_ms=int(time.time() * 1000),
        )
        self._limits.check(plan.graph)  # it ran under a higher limit
        await self._check_artifacts(plan.graph, repairing=job_id)
        if job_id in self._jobs:  # another repair or a resubmission took it meanwhile
            return await self.repair(job_id, vertices, access=access)
        job = DispatchedJob(
            plan.graph, plan.graph.fingerprint(), asyncio.get_running_loop().create_future(), repairs=plan.repairs
        )
        self._jobs[job_id] = job
        try:
            await persist_repair(
                self.session_id,
                plan,
                progress_store=self._progress_store,
                jobgraph_store=self._jobgraph_store,
                job_result_store=self._job_result_store,
            )
        except BaseException as exc:
            del self._jobs[job_id]
            job.accepted.set_exception(exc)
            job.accepted.exception()
            raise
        repair = plan.repairs[-1]
        log.info(
            "job %s: repair %d runs %s again (asked for %s) [session %s]",
            job_id,
            repair.number,
            ", ".join(repair.vertices),
            ", ".join(repair.requested),
            self.session_id,
        )
        await self._run(job_id, job, recovered=plan.progress)
        return RepairAnswer(job_id, created=True, repair=repair)

    # -- running and terminating jobs ---------------------------------------------------------

    async def _run(self, job_id: str, job: DispatchedJob, *, recovered: JobProgress | None) -> None:
        """Start the job's task, which builds its JobMaster and runs it to the job's end; return once
        the JobMaster is built and started (or the job concluded because it cannot be)."""
        with log_context(job_id=job_id):  # the JobMaster's tasks and the job's task inherit it
            task = job.watcher = asyncio.create_task(self._drive(job_id, job, recovered), name=f"job-{job_id}")
        # cancelled before it settled (this Dispatcher stopped): the job is stored for the next leader
        task.add_done_callback(lambda _: None if job.accepted.done() else job.accepted.set_result(None))
        await asyncio.shield(job.accepted)  # the job's task goes on if this caller is cancelled

    async def _drive(self, job_id: str, job: DispatchedJob, recovered: JobProgress | None) -> None:
        """The job's task: build and start its JobMaster (a recovered job whose cancel was accepted is
        cancelled instead), settle `job.accepted`, then watch the job to its end; a job whose JobMaster
        cannot be built or started fails with the cause."""
        if self._closed:
            return  # persisted just as this Dispatcher stopped: the next leader runs it
        failure = await self._start(job_id, job, recovered)
        if failure is not None:
            job.conclude(result_without_run(job_id, job.graph, failure))
        job.accepted.set_result(None)
        if job.result is not None:
            await self._conclude(job_id, job, job.result)
        else:
            await self._watch(job_id, job)

    async def _start(self, job_id: str, job: DispatchedJob, recovered: JobProgress | None) -> Failure | None:
        """Build and start the job's JobMaster; the failure if it cannot be."""
        assert job.graph is not None
        job_master: JobMasterGateway | None = None
        try:
            job_master = await self._new_job_master(job.graph, recovered)
            if not job.cancel_recorded:
                job_master.start()
        except Exception as exc:
            log.error(
                "the JobMaster of job %s cannot be built or started, the job fails: %s [session %s]",
                job_id,
                exc,
                self.session_id,
                exc_info=exc,
            )
            if job_master is not None:
                self._release(job_id, job_master)
            return Failure.from_exception(exc)
        job.job_master = job_master
        return None

    @staticmethod
    def _release(job_id: str, job_master: JobMasterGateway) -> None:
        try:
            job_master.suspend()  # gives back whatever it took before it failed
        except Exception:
            log.exception("stopping the failed JobMaster of job %s failed too", job_id)

    async def _watch(self, job_id: str, job: DispatchedJob) -> None:
        job_master = job.job_master
        assert job_master is not None
        if job.cancel_recorded and job_master.status is JobStatus.INITIALIZING:
            log.info("job %s: cancelling it, as a former leader accepted [session %s]", job_id, self.session_id)
            try:
                await job_master.cancel()
            except Exception as exc:
                log.error("cancelling recovered job %s failed, the job fails: %s", job_id, exc, exc_info=exc)
                self._release(job_id, job_master)
                job.job_master = None
                await self._conclude(
                    job_id, job, job.conclude(result_without_run(job_id, job.graph, Failure.from_exception(exc)))
                )
                return
        await self._conclude(job_id, job, job.conclude(await job_master.result_future))

    async def _conclude(self, job_id: str, job: DispatchedJob, result: JobResult) -> None:
        """Archive the terminated job, write its dirty JobResult, then clean it up."""
        log.info("job %s reached %s [session %s]", job_id, result.status.value, self.session_id)
        self._events.job_finished(result.status.value)
        # The job is globally terminal: its graph no longer changes, and a large one's walk (100,000
        # subtasks: 0.4 s) is better taken in a thread than on the loop.
        finished = await asyncio.to_thread(job.job_master.finished) if job.job_master is not None else None
        await self._archive_quietly(
            ArchivedJob(result, await job.snapshot(), job.fingerprint, graph=job.graph, finished=finished)
        )
        written = await self._write_dirty_result(JobResultEntry(result, job.fingerprint))
        if written:
            job.result_stored.set()
        self._jobs.pop(job_id, None)
        if written:
            self._start_cleanup(job_id)

    async def _archive_quietly(self, archived: ArchivedJob) -> None:
        try:
            await self._archive.put(self.session_id, archived)
        except LeadershipLost:
            log.info("job %s not archived: leadership session %s ended", archived.result.job_id, self.session_id)
        except Exception:  # as in Flink, archiving failures are only logged
            log.exception("archiving job %s failed", archived.result.job_id)
            return
        if self._archive.over_capacity:
            await self._expire_archived_jobs()

    async def _expire_archive(self) -> None:
        """While this Dispatcher serves: archived jobs past `jobstore.expiration-time` leave the archive."""
        while True:
            await self._expire_archived_jobs()
            await asyncio.sleep(self._archive.check_interval)

    async def _expire_archived_jobs(self) -> None:
        try:
            # a job still held here (repaired, cleaning up) stays: its entry is read or rewritten soon
            await self._archive.expire(
                self.session_id, int(time.time() * 1000), keep=self._jobs.keys() | self._cleanups.keys()
            )
        except LeadershipLost:
            pass  # the next leader expires them
        except Exception as exc:  # noqa: BLE001 - the archive's disk: tried again at the next check
            log.warning("expiring archived jobs failed; tried again in %.1fs: %s", self._archive.check_interval, exc)

    async def _write_dirty_result(self, entry: JobResultEntry) -> bool:
        """Write the dirty JobResult, retrying until it is stored; False if leadership ended first."""
        job_id = entry.result.job_id
        delay = self._cleanup_settings.initial_backoff
        failures = 0
        cause = ""
        while True:
            try:
                await self._job_result_store.create_dirty(self.session_id, entry)
            except JobResultEntryExists:
                return True  # written before, by this leader or a former one
            except LeadershipLost:
                log.info(
                    "JobResult of job %s not written: leadership session %s ended; the next leader finishes the job",
                    job_id,
                    self.session_id,
                )
                return False
            except Exception as exc:
                # Without its dirty entry a finished job could run again: keep trying. A full disk
                # fails every retry alike: its cause is logged once, and again only when it changes.
                failures += 1
                self._events.job_result_write_failed()
                if str(exc) != cause:
                    cause = str(exc)
                    log.error(
                        "writing the JobResult of job %s failed; retrying every %.1fs up to %.1fs until it "
                        "is written: %s",
                        job_id,
                        delay,
                        self._cleanup_settings.max_backoff,
                        cause,
                        exc_info=None if isinstance(exc, StoreError) else exc,
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._cleanup_settings.max_backoff)
            else:
                if failures:
                    log.info("JobResult of job %s written after %d failed attempt(s)", job_id, failures)
                return True

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
                    await self._job_result_store.mark_clean(self.session_id, job_id)
                log.info("job %s cleaned up after %d attempt(s) [session %s]", job_id, attempt, self.session_id)
                return
            except LeadershipLost:
                return
            except Exception as exc:  # noqa: BLE001 - whatever failed, the cleanup is retried
                # FLINK-26652: a failing cleanup never takes the master down; it is retried, and the
                # dirty JobResult hands it to the next leader if this one goes away.
                log.warning(
                    "cleanup of job %s failed (attempt %d), retrying in %.1fs: %s; check %s",
                    job_id,
                    attempt,
                    delay,
                    exc,
                    settings.storage_dir,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, settings.max_backoff)


def _persisted() -> asyncio.Future[JobStatus | None]:
    """The `accepted` future of a job recovered from the stores."""
    future: asyncio.Future[JobStatus | None] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future
