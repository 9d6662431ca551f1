"""The master's end of the TaskExecutor protocol (docs/internals.md): the leader session,
register, heartbeat, unregister, state.

Every call but the first carries the leader session id the TaskExecutor registered under
(`X-SparkDispatch-Session`); another id is refused with 409 before anything is touched.
Each route is served under `/v1` and without the prefix.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from aiohttp import web

from sparkdispatch.errors import FencingTokenMismatch, InvalidRequest, SparkDispatchError
from sparkdispatch.jobmaster import JobMasterGateway
from sparkdispatch.log_context import log_context
from sparkdispatch.model.protocol import ExecutionStateUpdate, HeartbeatPayload, TaskExecutorRegistration
from sparkdispatch.model.rest_shapes import Empty, HeartbeatAnswer, LeaderSession, Unregistered
from sparkdispatch.resourcemanager import ResourceManagerGateway
from sparkdispatch.rest.inputs import path_id, read_json
from sparkdispatch.rest.responses import error_response

log = logging.getLogger(__name__)

SESSION_HEADER = "X-SparkDispatch-Session"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class LeaderForTaskExecutors(Protocol):
    """The leading master's parts a TaskExecutor calls (a subset of the REST server's LeaderView)."""

    @property
    @abstractmethod
    def session_id(self) -> str: ...

    @property
    @abstractmethod
    def resource_manager(self) -> ResourceManagerGateway: ...

    @abstractmethod
    def job_master(self, job_id: str) -> JobMasterGateway:
        """The running JobMaster of `job_id`; `UnknownJob` if there is none."""

    @abstractmethod
    def ended_jobs(self, job_ids: Iterable[str]) -> list[str]:
        """Those of `job_ids` that ended (none while the jobs are being recovered)."""


def add_task_executor_routes(
    app: web.Application, get_master: Callable[[], LeaderForTaskExecutors], *, max_body_size: int = 10 * 1024 * 1024
) -> None:
    """Add the TaskExecutor → master calls; `get_master()` gives the leading master's parts.

    A body over `max_body_size` bytes (`rest.max-body-size`, 10 MiB by default) is refused unread.
    """
    routes = TaskExecutorRoutes(get_master, max_body_size=max_body_size)
    for prefix in ("/v1", ""):
        app.router.add_get(f"{prefix}/taskexecutors/leader-session", routes.leader_session)
        app.router.add_post(f"{prefix}/taskexecutors", routes.register)
        app.router.add_post(prefix + "/taskexecutors/{task_executor_id}/heartbeat", routes.heartbeat)
        app.router.add_post(prefix + "/taskexecutors/{task_executor_id}/unregister", routes.unregister)
        app.router.add_post(prefix + "/jobs/{job_id}/executions/{execution_id}/state", routes.execution_state)


class TaskExecutorRoutes:
    """Handlers of the TaskExecutor protocol."""

    def __init__(self, get_master: Callable[[], LeaderForTaskExecutors], *, max_body_size: int) -> None:
        self._get_master = get_master
        self._max_body_size = max_body_size

    async def leader_session(self, request: web.Request) -> web.Response:
        """The session to register under, for a TaskExecutor that cannot read it from ZooKeeper
        (mode `none`); the cluster secret guards it as every TaskExecutor route."""

        async def handle() -> web.Response:
            return web.json_response(LeaderSession(self._get_master().session_id).to_dict())

        return await _answer(request, handle)

    async def register(self, request: web.Request) -> web.Response:
        async def handle() -> web.Response:
            master, session_id = self._fenced_master(request)
            body = await self._json_body(request, "TaskExecutor registration")
            registration = TaskExecutorRegistration.from_dict(body)
            ack = master.resource_manager.register_task_executor(session_id, registration)
            log.info(
                "TaskExecutor %s (%s) registered with %d slots (session %s)",
                registration.task_executor_id,
                registration.hostname,
                registration.slots,
                session_id,
            )
            return web.json_response(ack.to_dict())

        return await _answer(request, handle)

    async def heartbeat(self, request: web.Request) -> web.Response:
        async def handle() -> web.Response:
            task_executor_id = path_id(request, "task_executor_id")
            master, session_id = self._fenced_master(request)
            payload = HeartbeatPayload.from_dict(await self._json_body(request, "heartbeat"))
            master.resource_manager.heartbeat(session_id, task_executor_id, payload.slot_report, payload.executions)
            return web.json_response(HeartbeatAnswer(tuple(master.ended_jobs(payload.kept_jobs))).to_dict())

        return await _answer(request, handle)

    async def unregister(self, request: web.Request) -> web.Response:
        """A stopping TaskExecutor leaves at once (Flink's FLINK-25277): its JobMasters fail its
        tasks over now, not after the heartbeat timeout. `{"registration_id": ...}` names the
        registration it ends, so a late call of a former process removes no newer one."""

        async def handle() -> web.Response:
            task_executor_id = path_id(request, "task_executor_id")
            master, _ = self._fenced_master(request)
            body = await self._json_body(request, "unregistration")
            registration_id = body.get("registration_id") if isinstance(body, dict) else None
            if not isinstance(registration_id, str) or not registration_id:
                raise InvalidRequest("unregistration", {"registration_id": ["must be the registration's id"]})
            removed = master.resource_manager.unregister_task_executor(
                task_executor_id, "it stopped and unregistered", registration_id=registration_id
            )
            if removed:
                log.info("TaskExecutor %s unregistered (registration %s)", task_executor_id, registration_id)
            return web.json_response(Unregistered(removed).to_dict())

        return await _answer(request, handle)

    async def execution_state(self, request: web.Request) -> web.Response:
        async def handle() -> web.Response:
            path = {name: path_id(request, name) for name in ("job_id", "execution_id")}
            master, _ = self._fenced_master(request)
            body = await self._json_body(request, "execution state update")
            for name, value in path.items():
                if isinstance(body, dict) and body.get(name) != value:
                    raise InvalidRequest(
                        "execution state update", {name: [f"must equal the {name} of the path, {value!r}"]}
                    )
            try:
                update = ExecutionStateUpdate.from_dict(body)
            except SparkDispatchError as exc:
                raise InvalidRequest("execution state update", {"body": exc.messages()}) from None
            with log_context(job_id=update.job_id):
                master.job_master(update.job_id).update_execution_state(update)
            return web.json_response(Empty().to_dict())

        return await _answer(request, handle)

    async def _json_body(self, request: web.Request, what: str) -> Any:
        return await read_json(request, limit=self._max_body_size, what=what)

    def _fenced_master(self, request: web.Request) -> tuple[LeaderForTaskExecutors, str]:
        master = self._get_master()
        received = request.headers.get(SESSION_HEADER)
        if received is None:
            raise InvalidRequest(
                "TaskExecutor call",
                {SESSION_HEADER: ["missing: send the leader session the TaskExecutor registered under"]},
            )
        if received != master.session_id:
            raise FencingTokenMismatch("master", master.session_id, received)
        return master, received


async def _answer(request: web.Request, handle: Callable[[], Awaitable[web.Response]]) -> web.Response:
    # The master's middleware answers errors the same way; answering here too keeps these routes
    # whole on an application without it (the TaskExecutor integration tests serve them alone).
    try:
        return await handle()
    except SparkDispatchError as exc:
        if exc.http_status >= 500:
            log.warning("TaskExecutor call failed: %s", exc)
        return error_response(exc, request)
