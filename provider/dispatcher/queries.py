"""The Dispatcher's read side: its jobs, running and archived, as the REST API and the
TaskExecutors' reports ask for them (`JobQueries`, which `Dispatcher` extends with the jobs'
lifecycle). Until the Dispatcher has recovered its jobs every query answers `RecoveryInProgress`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

from sparkdispatch.dispatcher.archive import JobArchive
from sparkdispatch.dispatcher.dispatched_job import DispatchedJob
from sparkdispatch.errors import RecoveryInProgress, RouteNotFound, ServiceUnavailable, UnknownJob
from sparkdispatch.jobmaster.gateways import JobMasterGateway
from sparkdispatch.model.job_result import JobResult, VertexResult
from sparkdispatch.model.snapshot import JobOverview, JobSnapshot
from sparkdispatch.model.states import JobStatus

RETRY_AFTER_S = 1  # what a caller hears while the Dispatcher recovers


class JobQueries:
    """The jobs a Dispatcher answers for (`_jobs`, until their cleanup starts) and its archive, read.

    `address` is this master's REST address, named in `RecoveryInProgress` answers.
    """

    def __init__(self, *, address: str, archive: JobArchive) -> None:
        self._address = address
        self._archive = archive
        self._jobs: dict[str, DispatchedJob] = {}
        self._recovering = True
        self._closed = False

    def job_overviews(self) -> list[JobOverview]:
        """Every job, running and finished, the most recently started first (`GET /jobs`, `/jobs/overview`)."""
        self._check_serving()
        overviews = [overview for job in self._jobs.values() if (overview := job.overview()) is not None]
        listed = {overview.job_id for overview in overviews}
        overviews += [o for o in self._archive.overviews() if o.job_id not in listed]
        # the id breaks ties, so the order does not change when a job moves to the archive
        return sorted(overviews, key=lambda o: (o.start_time, o.job_id), reverse=True)

    async def job_snapshot(self, job_id: str) -> JobSnapshot:
        """One job with its vertices and subtasks (`GET /jobs/{job_id}`); `UnknownJob` if unknown."""
        self._check_serving()
        job = await self._settled(job_id)
        if job is not None and (job.job_master is not None or job.result is not None):
            return await job.snapshot()
        archived = await self._archive.get(job_id)
        if archived is None:
            raise UnknownJob(job_id)
        return archived.snapshot

    async def job_result(self, job_id: str, *, wait_s: float = 0.0) -> JobResult | None:
        """The JobResult, waiting up to `wait_s` for a running job; None while it runs, and until its
        dirty JobResult is stored: a result answered before could be replaced by a later leader's
        run of the job, had leadership changed in between."""
        self._check_serving()
        job = self._jobs.get(job_id)
        if job is not None:
            if not job.result_stored.is_set() and wait_s > 0:
                try:
                    await asyncio.wait_for(job.result_stored.wait(), wait_s)
                except TimeoutError:
                    pass
            return job.result if job.result_stored.is_set() else None
        archived = await self._archive.get(job_id)
        if archived is None:
            raise UnknownJob(job_id)
        return archived.result

    async def vertex_result(self, job_id: str, vertex_id: str) -> tuple[JobStatus, VertexResult]:
        """The job's status and one vertex's outcome so far (`GET /jobs/{job_id}/vertices/{vertex_id}`)."""
        self._check_serving()
        job = await self._settled(job_id)
        vertex: VertexResult | None
        if job is not None and job.result is None and job.job_master is not None:
            status, vertex = job.job_master.status, job.job_master.vertex_result(vertex_id)
        else:
            result = await self._ended_result(job_id, job)
            status, vertex = result.status, result.vertices.get(vertex_id)
        if vertex is None:
            raise RouteNotFound(f"job {job_id} has no vertex {vertex_id!r}")
        return status, vertex

    async def vertex_results(self, job_id: str) -> tuple[JobStatus, dict[str, VertexResult]]:
        """The job's status and every vertex's outcome so far (`GET /jobs/{job_id}/progress`)."""
        self._check_serving()
        job = await self._settled(job_id)
        if job is not None and job.result is None and job.job_master is not None and job.graph is not None:
            master = job.job_master
            outcomes = {vertex.id: master.vertex_result(vertex.id) for vertex in job.graph.vertices}
            return master.status, {vertex_id: outcome for vertex_id, outcome in outcomes.items() if outcome is not None}
        result = await self._ended_result(job_id, job)
        return result.status, dict(result.vertices)

    async def _ended_result(self, job_id: str, job: DispatchedJob | None) -> JobResult:
        """The JobResult of a job that runs no JobMaster here: its own, or the archive's (archived,
        or reserved by a repair about to run); `UnknownJob`."""
        result = job.result if job is not None else None
        if result is None:
            archived = await self._archive.get(job_id)
            if archived is None:
                raise UnknownJob(job_id)
            result = archived.result
        return result

    def job_counts(self) -> dict[str, int]:
        """Jobs by status: running ones from their JobMasters, the rest from the archive."""
        counts = dict(self._archive.counts())
        for job in self._jobs.values():
            if job.job_master is not None and job.result is None:
                status = job.job_master.status.value
                counts[status] = counts.get(status, 0) + 1
        return counts

    def job_master(self, job_id: str) -> JobMasterGateway:
        """The running JobMaster of `job_id` (TaskExecutor reports go to it)."""
        job = self._jobs.get(job_id)
        if job is None or job.job_master is None:
            self._check_serving()  # a job not recovered yet is not unknown: the caller retries
            raise UnknownJob(job_id)
        return job.job_master

    def ended_jobs(self, job_ids: Iterable[str]) -> list[str]:
        """Those of `job_ids` that no longer run here: ended, or unknown to this master. None while
        it recovers its jobs (one not recovered yet is unknown, not ended) or shuts down."""
        if self._recovering or self._closed:
            return []
        return [job_id for job_id in job_ids if (job := self._jobs.get(job_id)) is None or job.result is not None]

    async def _settled(self, job_id: str) -> DispatchedJob | None:
        """The job `job_id` answers for, once its submission (or repair) settled: persisted and its
        JobMaster built, or refused (then None, unless another took the id meanwhile)."""
        job = self._jobs.get(job_id)
        if job is not None and not job.accepted.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(job.accepted)
            job = self._jobs.get(job_id)
        return job

    def _check_serving(self) -> None:
        if self._closed:
            raise ServiceUnavailable("the Dispatcher is shutting down; retry against the new leader")
        if self._recovering:
            raise RecoveryInProgress(
                f"this master has just become leader and is recovering its jobs; retry in {RETRY_AFTER_S}s",
                leader=self._address,
                retry_after=RETRY_AFTER_S,
            )
