"""The handlers of the public REST API (docs/rest-api.md), and what they need of the master process.

A standby answers `/overview` itself and every other call with `503` naming the leader (from
`MasterView.leader_components`), so clients can follow it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from abc import abstractmethod
from collections.abc import Iterable, Mapping
from typing import Protocol

import aiohttp
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from sparkdispatch.dispatcher.gateway import EVERY_POOL, DispatcherGateway, PoolAccess
from sparkdispatch.storage.attempt_logs import latest_log_sizes, read_attempt_log
from sparkdispatch.errors import (
    BlobError,
    InvalidRequest,
    InvalidShape,
    RequestTooLarge,
    RouteNotFound,
    ServiceUnavailable,
)
from sparkdispatch.ha.blob_store import BlobStore
from sparkdispatch.model.artifacts import ARTIFACT_SUFFIXES
from sparkdispatch.model.rest_shapes import (
    AttemptLog,
    Artifact,
    Empty,
    ExecutionResult,
    FlinkJobList,
    JobList,
    Overview,
    Submitted,
    TaskManagerList,
)
from sparkdispatch.model.states import JobStatus
from sparkdispatch.jobmaster import JobMasterGateway
from sparkdispatch.metrics.master import LeaderGauges, MasterMetrics
from sparkdispatch.resourcemanager import ResourceManagerGateway
from sparkdispatch.rest import views
from sparkdispatch.rest.connections import (
    read_within,
)
from sparkdispatch.jobmaster.long_lived import LONG_LIVED_GRAPHS
from sparkdispatch.rest.inputs import path_id, query_int, read_job_graph, read_json, repair_vertices
from sparkdispatch.rest.paging import PageRequest, page_of
from sparkdispatch.rest.settings import RestSettings
from sparkdispatch.rest.access import Role
from sparkdispatch.rest.gate import CALLER_KEY
from sparkdispatch.rest.responses import Handler, artifact_response, large_json_response, only, shape_response

log = logging.getLogger(__name__)


class LeaderView(Protocol):
    """The leader's components, as the REST handlers use them."""

    @property
    @abstractmethod
    def session_id(self) -> str: ...

    @property
    @abstractmethod
    def dispatcher(self) -> DispatcherGateway: ...

    @property
    @abstractmethod
    def resource_manager(self) -> ResourceManagerGateway: ...

    @property
    @abstractmethod
    def blob_store(self) -> BlobStore: ...

    @abstractmethod
    def job_master(self, job_id: str) -> JobMasterGateway:
        """The running JobMaster of `job_id`; `UnknownJob` if there is none."""

    @abstractmethod
    def ended_jobs(self, job_ids: Iterable[str]) -> list[str]:
        """Those of `job_ids` that ended (none while the jobs are being recovered)."""


class MasterView(Protocol):
    """What the REST server needs of the master process."""

    address: str
    metrics: MasterMetrics

    @abstractmethod
    def leader_components(self) -> LeaderView:
        """The leader's components; `ServiceUnavailable` naming the leader on a standby."""
        ...

    @abstractmethod
    def leader_address(self) -> str | None: ...


def leader_gauges(leader: LeaderView, job_counts: Mapping[str, int]) -> LeaderGauges:
    """The leader's TaskExecutors, slots and running jobs (`job_counts`: jobs by status)."""
    resources = leader.resource_manager.overview()
    running = sum(n for status, n in job_counts.items() if not JobStatus(status).is_terminal)
    return LeaderGauges(
        jobs_running=running,
        slots_total=resources.slots_total,
        slots_available=resources.slots_available,
        taskexecutors=resources.taskmanagers,
    )


class RestHandlers:
    """The handlers of the public REST API."""

    def __init__(self, master: MasterView, settings: RestSettings) -> None:
        self.master = master
        self.settings = settings
        self._leader_ssl = settings.client_tls.context()  # read once, not per standby /overview

    async def overview(self, request: web.Request) -> web.Response:
        return shape_response(await self.overview_body())

    async def overview_body(self) -> Overview:
        """The `GET /overview` body: this master's own answer, leader or standby."""
        try:
            leader = self.master.leader_components()
        except ServiceUnavailable:
            return await self._standby_overview()
        return self._leader_overview(leader)

    def _leader_overview(self, leader: LeaderView) -> Overview:
        counts = leader.dispatcher.job_counts()
        gauges = leader_gauges(leader, counts)
        return Overview(
            is_leader=True,
            leader=self.master.address,
            taskmanagers=gauges.taskexecutors,
            slots_total=gauges.slots_total,
            slots_available=gauges.slots_available,
            jobs_running=gauges.jobs_running,
            jobs_finished=counts.get("FINISHED", 0),
            jobs_failed=counts.get("FAILED", 0),
            jobs_cancelled=counts.get("CANCELED", 0),
        )

    async def _standby_overview(self) -> Overview:
        """A standby's overview: the leader's counts when it answers, else zeros."""
        leader = self.master.leader_address()
        body = Overview(
            is_leader=False,
            leader=leader,
            taskmanagers=0,
            slots_total=0,
            slots_available=0,
            jobs_running=0,
            jobs_finished=0,
            jobs_failed=0,
            jobs_cancelled=0,
        )
        if leader and leader != self.master.address:
            try:
                timeout = aiohttp.ClientTimeout(total=2)
                headers = _auth_headers(self.settings)
                connector = aiohttp.TCPConnector(ssl=self._leader_ssl)
                async with aiohttp.ClientSession(timeout=timeout, headers=headers, connector=connector) as session:
                    async with session.get(f"{leader}/overview") as answer:
                        if answer.status == 200:
                            remote = Overview.from_dict(await answer.json())
                            body = dataclasses.replace(remote, is_leader=False, leader=leader)
            except (aiohttp.ClientError, TimeoutError, ValueError, InvalidShape) as exc:
                log.debug("the leader %s did not answer /overview: %s", leader, exc)
        return body

    async def submit_job(self, request: web.Request) -> web.Response:
        leader = self.master.leader_components()
        graph = await read_job_graph(request, limit=self.settings.max_body_size)
        try:
            submission = await leader.dispatcher.submit(graph, access=_pool_access(request))
        finally:
            # the job's ExecutionGraph is built by now, and kept out of the collector's walks if large
            LONG_LIVED_GRAPHS.release(graph)
        job_id = submission.job_id
        return shape_response(
            Submitted(job_id=job_id, job_url=f"/jobs/{job_id}", status=submission.status),
            status=202 if submission.created else 200,
        )

    async def list_jobs(self, request: web.Request) -> web.Response:
        asked = PageRequest.of(request, page_size=self.settings.list_page_size)
        overviews = self.master.leader_components().dispatcher.job_overviews()
        page = page_of(overviews, lambda job: (job.start_time, job.job_id), asked, descending=True)
        return shape_response(JobList(tuple(views.job_summary(job) for job in page.entries), next=page.next))

    async def jobs_overview(self, request: web.Request) -> web.Response:
        overviews = self.master.leader_components().dispatcher.job_overviews()
        return shape_response(FlinkJobList(tuple(views.flink_job_details(job) for job in overviews)))

    async def job_details(self, request: web.Request) -> web.Response:
        job_id = path_id(request, "job_id")
        dispatcher = self.master.leader_components().dispatcher
        snapshot = await dispatcher.job_snapshot(job_id)
        return await large_json_response(
            lambda: views.job_details(snapshot).to_dict(), large=len(snapshot.vertices) > views.LARGE_JOB_VERTICES
        )

    async def execution_result(self, request: web.Request) -> web.Response:
        job_id = path_id(request, "job_id")
        dispatcher = self.master.leader_components().dispatcher
        result = await dispatcher.job_result(job_id, wait_s=self.settings.execution_result_long_poll)
        if result is None:
            return shape_response(ExecutionResult.of(None))
        return await large_json_response(
            lambda: ExecutionResult.of(result).to_dict(), large=len(result.vertices) > views.LARGE_JOB_VERTICES
        )

    async def vertex_result(self, request: web.Request) -> web.Response:
        job_id = path_id(request, "job_id")
        vertex_id = path_id(request, "vertex_id")
        status, vertex = await self.master.leader_components().dispatcher.vertex_result(job_id, vertex_id)
        return shape_response(views.vertex_result(job_id, status, vertex_id, vertex))

    async def job_progress(self, request: web.Request) -> web.Response:
        """Every vertex's outcome so far and the size of each subtask's latest attempt log, in one
        answer: one call per poll for all the Airflow tasks that follow the job's vertices."""
        job_id = path_id(request, "job_id")
        status, vertices = await self.master.leader_components().dispatcher.vertex_results(job_id)
        results_dir = self.settings.results_dir
        logs = await asyncio.to_thread(
            lambda: {vertex_id: latest_log_sizes(results_dir, job_id, vertex_id) for vertex_id in vertices}
        )
        return shape_response(views.job_progress(job_id, status, vertices, logs))

    async def vertex_log(self, request: web.Request) -> web.Response:
        """One attempt's log from `offset` (`?subtask=0&attempt=<latest>&offset=0`)."""
        job_id = path_id(request, "job_id")
        vertex_id = path_id(request, "vertex_id")
        subtask, attempt = query_int(request, "subtask") or 0, query_int(request, "attempt")
        body = await self.attempt_log_body(job_id, vertex_id, subtask, attempt, query_int(request, "offset") or 0)
        if body is None:
            raise RouteNotFound(
                f"no log of job {job_id} vertex {vertex_id!r} subtask {subtask}"
                + (f" attempt {attempt}" if attempt is not None else "")
                + " (yet)"
            )
        return shape_response(body)

    async def attempt_log_body(
        self, job_id: str, vertex_id: str, subtask: int, attempt: int | None, offset: int
    ) -> AttemptLog | None:
        """The log endpoint's answer; None while the attempt has no log. `UnknownJob`, or
        `RouteNotFound` for a vertex the job does not have."""
        status, vertex = await self.master.leader_components().dispatcher.vertex_result(job_id, vertex_id)
        piece = await asyncio.to_thread(
            read_attempt_log, self.settings.results_dir, job_id, vertex_id, subtask, attempt, offset
        )
        if piece is None:
            return None
        return views.attempt_log(job_id, status, vertex_id, vertex.state, piece)

    async def cancel_job(self, request: web.Request) -> web.Response:
        job_id = path_id(request, "job_id")
        mode = request.query.get("mode", "cancel")
        if mode != "cancel":
            raise InvalidRequest("cancel request", {"mode": [f"{mode!r} is not supported; use mode=cancel"]})
        await self.master.leader_components().dispatcher.cancel(job_id, access=_pool_access(request))
        return shape_response(Empty(), status=202)

    async def repair_job(self, request: web.Request) -> web.Response:
        """Run vertices of an ended job again (`{"vertices": [...]}`): 202 a new repair, 200 one that runs."""
        job_id = path_id(request, "job_id")
        vertices = repair_vertices(await read_json(request, limit=self.settings.max_body_size, what="repair request"))
        dispatcher = self.master.leader_components().dispatcher
        answer = await dispatcher.repair(job_id, vertices, access=_pool_access(request))
        return shape_response(answer, status=202 if answer.created else 200)

    async def taskmanagers(self, request: web.Request) -> web.Response:
        asked = PageRequest.of(request, page_size=self.settings.list_page_size)
        leader = self.master.leader_components()
        everyone = sorted(leader.resource_manager.task_executors(), key=lambda entry: entry.id)
        page = page_of(everyone, lambda entry: (entry.id,), asked, descending=False)
        entries = list(page.entries)
        caller = request.get(CALLER_KEY)
        if caller is not None and not caller.principal.role.permits(Role.SUBMITTER):
            # a viewer sees what runs where, not the attempts' ids
            entries = [entry.without_execution_ids() for entry in entries]
        return shape_response(TaskManagerList(tuple(entries), next=page.next))

    async def upload_artifact(self, request: web.Request) -> web.Response:
        leader = self.master.leader_components()
        if not request.content_type.startswith("multipart/"):
            raise BlobError("POST /artifacts takes multipart/form-data with the file in the field `file`")
        try:
            upload = await self._read_artifact(request)
        except (ValueError, HttpProcessingError) as exc:  # aiohttp's refusals of a malformed multipart body
            raise BlobError(f"POST /artifacts: not a well-formed multipart body: {exc}") from None
        if upload is None:
            raise BlobError("POST /artifacts found no multipart field named `file`")
        filename, data = upload
        key = await leader.blob_store.put(data, filename)
        return shape_response(Artifact(key=key, filename=filename), status=201)

    async def download_artifact(self, request: web.Request) -> web.StreamResponse:
        """An artifact's bytes, checked against its key: where TaskExecutors get a job's code (Flink's
        BlobServer), so their hosts need no mount of the masters' storage."""
        return await artifact_response(self.master.leader_components().blob_store, request.match_info["key"])

    async def _read_artifact(self, request: web.Request) -> tuple[str, bytes] | None:
        """The filename and content of the multipart field `file`; None without one. Each read waits
        at most `rest.body-timeout` (`read_within`)."""
        limit = self.settings.blob_max_size
        reader = await request.multipart()
        while (part := await read_within(request, reader.next(), what="artifact upload")) is not None:
            if not isinstance(part, aiohttp.BodyPartReader) or part.name != "file":
                continue
            filename = part.filename or ""
            if not filename.endswith(ARTIFACT_SUFFIXES):
                raise BlobError(f"artifact {filename!r} must be a .py, .zip or .whl file")
            data = bytearray()
            while chunk := await read_within(request, part.read_chunk(1 << 16), what="artifact upload"):
                data += chunk
                if len(data) > limit:
                    raise RequestTooLarge(f"artifact {filename!r} is larger than blob.max-size ({limit} bytes)")
            return filename, bytes(data)
        return None

    def routes(self) -> list[tuple[str, str, Handler]]:
        # /jobs/overview before /jobs/{job_id}: aiohttp matches in registration order; its other
        # methods answer 405 instead of falling through to /jobs/{job_id} with the id "overview"
        return [
            ("GET", "/overview", self.overview),
            ("GET", "/jobs/overview", self.jobs_overview),
            ("*", "/jobs/overview", only("GET")),
            ("GET", "/jobs", self.list_jobs),
            ("POST", "/jobs", self.submit_job),
            ("GET", "/jobs/{job_id}", self.job_details),
            ("PATCH", "/jobs/{job_id}", self.cancel_job),
            ("POST", "/jobs/{job_id}/repair", self.repair_job),
            ("GET", "/jobs/{job_id}/execution-result", self.execution_result),
            ("GET", "/jobs/{job_id}/progress", self.job_progress),
            ("GET", "/jobs/{job_id}/vertices/{vertex_id}", self.vertex_result),
            ("GET", "/jobs/{job_id}/vertices/{vertex_id}/log", self.vertex_log),
            ("GET", "/taskmanagers", self.taskmanagers),
            ("POST", "/artifacts", self.upload_artifact),
            ("GET", "/artifacts/{key}", self.download_artifact),
        ]


def _auth_headers(settings: RestSettings) -> dict[str, str]:
    """A standby's credential towards the leader: a master is a member of the cluster."""
    token = settings.cluster_secret or settings.auth_token
    return {"Authorization": f"Bearer {token}"} if token else {}


def _pool_access(request: web.Request) -> PoolAccess:
    """The TaskExecutor pools whose jobs the caller's token may submit, cancel and repair."""
    caller = request.get(CALLER_KEY)
    return EVERY_POOL if caller is None else caller.principal.pool_access()
