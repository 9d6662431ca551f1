"""The master's REST endpoint (aiohttp): ARCHITECTURE.md's REST contract, under `/` and `/v1/`.

One middleware turns sparkdispatch errors into `{"errors": [...]}` with their HTTP status, and
checks the bearer token when `rest.auth.token` is set. A standby answers `/overview` itself and
every other call with `503` naming the leader, so clients can follow it.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from abc import abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import aiohttp
from aiohttp import web

from sparkdispatch.config import Configuration
from sparkdispatch.errors import (
    BlobError,
    RequestTooLarge,
    ServiceUnavailable,
    SparkDispatchError,
    Unauthorized,
)
from sparkdispatch.jobgraph import JobGraph, JobStatus

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ARTIFACT_SUFFIXES = (".py", ".zip")


class LeaderView(Protocol):
    """The leader's components, as the REST handlers use them."""

    session_id: str
    dispatcher: Any
    resource_manager: Any
    blob_store: Any

    @abstractmethod
    def job_master(self, job_id: str) -> Any: ...


class MasterView(Protocol):
    """What the REST server needs of the master process."""

    address: str

    @abstractmethod
    def leader_components(self) -> LeaderView:
        """The leader's components; `ServiceUnavailable` naming the leader on a standby."""
        ...

    @abstractmethod
    def leader_address(self) -> str | None: ...


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.json_response(body, status=status, dumps=lambda v: json.dumps(v, separators=(",", ":")))


def error_response(exc: SparkDispatchError) -> web.Response:
    body: dict[str, Any] = {"errors": exc.messages()}
    if isinstance(exc, ServiceUnavailable) and exc.leader:
        body["leader"] = exc.leader
    return json_response(body, status=exc.http_status)


def create_error_middleware(config: Configuration) -> Any:
    token = config["rest.auth.token"]

    @web.middleware
    async def errors_and_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            if token and not _authorized(request, token):
                raise Unauthorized("missing or wrong bearer token: send `Authorization: Bearer <rest.auth.token>`")
            return await handler(request)
        except SparkDispatchError as exc:
            return error_response(exc)
        except web.HTTPRequestEntityTooLarge:
            return error_response(RequestTooLarge(
                f"request body is larger than the {config['rest.max-body-size']} bytes allowed "
                "(rest.max-body-size)"))
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            reason = exc.text if exc.text and not exc.text.startswith(str(exc.status)) else exc.reason
            return json_response({"errors": [f"{request.method} {request.path}: {reason}"]}, status=exc.status)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("internal error answering %s %s", request.method, request.path)
            return json_response({"errors": [f"internal error: {type(exc).__name__}: {exc}"]}, status=500)

    return errors_and_auth


def _authorized(request: web.Request, token: str) -> bool:
    header = request.headers.get("Authorization", "")
    offered = header[7:] if header.startswith("Bearer ") else request.cookies.get("sparkdispatch_token", "")
    return hmac.compare_digest(offered.encode(), token.encode())


class RestHandlers:
    """The handlers of the public REST API."""

    def __init__(self, master: MasterView, config: Configuration) -> None:
        self.master = master
        self.config = config

    async def overview(self, request: web.Request) -> web.Response:
        return json_response(await self.overview_body())

    async def overview_body(self) -> dict[str, Any]:
        """The `GET /overview` body: this master's own answer, leader or standby."""
        try:
            leader = self.master.leader_components()
        except ServiceUnavailable:
            return await self._standby_overview()
        return self._leader_overview(leader)

    def _leader_overview(self, leader: LeaderView) -> dict[str, Any]:
        resources = leader.resource_manager.overview()
        counts = leader.dispatcher.job_counts()
        running = sum(n for status, n in counts.items() if not JobStatus(status).is_terminal)
        return {
            "is_leader": True, "leader": self.master.address,
            "taskmanagers": resources.taskmanagers, "slots_total": resources.slots_total,
            "slots_available": resources.slots_available, "jobs_running": running,
            "jobs_finished": counts.get("FINISHED", 0), "jobs_failed": counts.get("FAILED", 0),
            "jobs_cancelled": counts.get("CANCELED", 0),
        }

    async def _standby_overview(self) -> dict[str, Any]:
        leader = self.master.leader_address()
        body: dict[str, Any] = {"is_leader": False, "leader": leader, "taskmanagers": 0, "slots_total": 0,
                                "slots_available": 0, "jobs_running": 0, "jobs_finished": 0, "jobs_failed": 0,
                                "jobs_cancelled": 0}
        if leader and leader != self.master.address:
            try:
                timeout = aiohttp.ClientTimeout(total=2)
                headers = _auth_headers(self.config)
                async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
                    async with session.get(f"{leader}/overview") as answer:
                        if answer.status == 200:
                            remote = await answer.json()
                            body.update({k: remote[k] for k in body if k not in ("is_leader", "leader") and k in remote})
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                log.debug("the leader %s did not answer /overview: %s", leader, exc)
        return body

    async def submit_job(self, request: web.Request) -> web.Response:
        leader = self.master.leader_components()
        limit = self.config["rest.max-body-size"]
        if request.content_length is not None and request.content_length > limit:
            raise RequestTooLarge(f"the JobGraph is {request.content_length} bytes; rest.max-body-size allows {limit}")
        body = await request.read()
        if len(body) > limit:
            raise RequestTooLarge(f"the JobGraph is {len(body)} bytes; rest.max-body-size allows {limit}")
        graph = JobGraph.from_json(body)
        job_id, created = await leader.dispatcher.submit(graph)
        return json_response({"job_id": job_id, "jobUrl": f"/jobs/{job_id}"}, status=202 if created else 200)

    async def list_jobs(self, request: web.Request) -> web.Response:
        return json_response({"jobs": self.master.leader_components().dispatcher.list_jobs()})

    async def jobs_overview(self, request: web.Request) -> web.Response:
        return json_response({"jobs": self.master.leader_components().dispatcher.flink_jobs_overview()})

    async def job_details(self, request: web.Request) -> web.Response:
        dispatcher = self.master.leader_components().dispatcher
        return json_response(await dispatcher.job_details(request.match_info["job_id"]))

    async def execution_result(self, request: web.Request) -> web.Response:
        dispatcher = self.master.leader_components().dispatcher
        result = await dispatcher.job_result(request.match_info["job_id"],
                                             wait_s=self.config["rest.execution-result.long-poll"])
        if result is None:
            return json_response({"status": {"id": "IN_PROGRESS"}})
        return json_response({"status": {"id": "COMPLETED"}, "job_execution_result": result.to_dict()})

    async def cancel_job(self, request: web.Request) -> web.Response:
        mode = request.query.get("mode", "cancel")
        if mode != "cancel":
            return json_response({"errors": [f"mode={mode!r} is not supported; use mode=cancel"]}, status=400)
        await self.master.leader_components().dispatcher.cancel(request.match_info["job_id"])
        return json_response({}, status=202)

    async def taskmanagers(self, request: web.Request) -> web.Response:
        leader = self.master.leader_components()
        return json_response({"taskmanagers": leader.resource_manager.task_executors()})

    async def upload_artifact(self, request: web.Request) -> web.Response:
        leader = self.master.leader_components()
        if not request.content_type.startswith("multipart/"):
            raise BlobError("POST /artifacts takes multipart/form-data with the file in the field `file`")
        reader = await request.multipart()
        limit = self.config["blob.max-size"]
        async for part in reader:
            if not isinstance(part, aiohttp.BodyPartReader) or part.name != "file":
                continue
            filename = part.filename or ""
            if not filename.endswith(ARTIFACT_SUFFIXES):
                raise BlobError(f"artifact {filename!r} must be a .py or .zip file")
            data = bytearray()
            while chunk := await part.read_chunk(1 << 16):
                data += chunk
                if len(data) > limit:
                    raise RequestTooLarge(f"artifact {filename!r} is larger than blob.max-size ({limit} bytes)")
            key = await leader.blob_store.put(bytes(data), filename)
            return json_response({"key": key, "filename": filename}, status=201)
        raise BlobError("POST /artifacts found no multipart field named `file`")

    def routes(self) -> list[tuple[str, str, Handler]]:
        # /jobs/overview before /jobs/{job_id}: aiohttp matches in registration order
        return [
            ("GET", "/overview", self.overview),
            ("GET", "/jobs/overview", self.jobs_overview),
            ("GET", "/jobs", self.list_jobs),
            ("POST", "/jobs", self.submit_job),
            ("GET", "/jobs/{job_id}", self.job_details),
            ("PATCH", "/jobs/{job_id}", self.cancel_job),
            ("GET", "/jobs/{job_id}/execution-result", self.execution_result),
            ("GET", "/taskmanagers", self.taskmanagers),
            ("POST", "/artifacts", self.upload_artifact),
        ]


def _auth_headers(config: Configuration) -> dict[str, str]:
    token = config["rest.auth.token"]
    return {"Authorization": f"Bearer {token}"} if token else {}


def create_app(master: MasterView, config: Configuration) -> web.Application:
    """The aiohttp application of the master: REST API, TaskExecutor calls, OpenAPI and web UI."""
    from sparkdispatch.rest.openapi import openapi_document
    from sparkdispatch.rest.taskexecutor_routes import add_task_executor_routes
    from sparkdispatch.rest.ui_routes import add_ui_routes
    from sparkdispatch.rest.ui_view import RestUiView

    client_max_size = max(config["rest.max-body-size"], config["blob.max-size"] + (1 << 16))
    app = web.Application(client_max_size=client_max_size, middlewares=[create_error_middleware(config)])
    handlers = RestHandlers(master, config)
    spec = openapi_document()

    async def openapi(request: web.Request) -> web.Response:
        return json_response(spec)

    for prefix in ("", "/v1"):
        for method, path, handler in handlers.routes():
            app.router.add_route(method, prefix + path, handler)
        app.router.add_get(prefix + "/openapi.json", openapi)
    add_task_executor_routes(app, master.leader_components)
    add_ui_routes(app, RestUiView(master, handlers))
    return app


class RestServer:
    """Runs the application on `rest.bind-address:rest.port`; `port` is the bound one."""

    def __init__(self, master: MasterView, config: Configuration) -> None:
        self._master = master
        self._config = config
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> None:
        app = create_app(self._master, self._config)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        host = self._config["rest.bind-address"] or self._config["rest.address"]
        site = web.TCPSite(self._runner, host, self._config["rest.port"], reuse_address=True)
        await site.start()
        server = site._server  # the bound socket tells the real port when rest.port is 0
        assert server is not None and server.sockets
        self.port = server.sockets[0].getsockname()[1]
        log.info("REST endpoint and web UI on http://%s:%d", host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
