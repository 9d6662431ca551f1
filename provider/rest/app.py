"""The master's REST endpoint (aiohttp): the REST contract of docs/rest-api.md, under `/` and `/v1/`.

`create_app` assembles the handlers (handlers.py), the TaskExecutors' routes, the OpenAPI document
and the web UI behind the error and auth middleware (responses.py); `RestServer` serves it. Every
answer carries the browser guard's security headers; connections.py bounds how long a client may take.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from sparkdispatch.errors import (
    ServiceUnavailable,
)
from sparkdispatch.metrics.master import CONTENT_TYPE as METRICS_CONTENT_TYPE
from sparkdispatch.rest.browser_guard import BrowserGuard, add_security_headers, machine_names
from sparkdispatch.rest.connections import (
    BODY_TIMEOUT,
    TimedTCPSite,
    track_requests,
)
from sparkdispatch.rest.login_throttle import LoginThrottle
from sparkdispatch.rest.ui_auth import add_login_routes
from sparkdispatch.rest.settings import RestSettings
from sparkdispatch.rest.handlers import MasterView, RestHandlers, leader_gauges
from sparkdispatch.rest.responses import create_error_middleware, gate_of, json_response

log = logging.getLogger(__name__)

#: Longest request line and header the HTTP layer reads (aiohttp's default: 8190 bytes).
MAX_LINE_SIZE = 64 * 1024


def create_app(master: MasterView, settings: RestSettings, guard: BrowserGuard) -> web.Application:
    """The aiohttp application of the master: REST API, TaskExecutor calls, OpenAPI and web UI,
    behind `guard` (the master's names and the origins allowed to change state)."""
    from sparkdispatch.rest.openapi import openapi_document
    from sparkdispatch.rest.taskexecutor_routes import add_task_executor_routes
    from sparkdispatch.rest.ui_routes import add_ui_routes
    from sparkdispatch.rest.ui_view import RestUiView

    client_max_size = max(settings.max_body_size, settings.blob_max_size + (1 << 16))
    gate, sessions = gate_of(settings)
    app = web.Application(
        client_max_size=client_max_size, middlewares=[track_requests, create_error_middleware(settings, gate, guard)]
    )
    app[BODY_TIMEOUT] = settings.timeouts.body
    app.on_response_prepare.append(add_security_headers)
    handlers = RestHandlers(master, settings)
    spec = openapi_document()

    async def openapi(request: web.Request) -> web.Response:
        return json_response(spec)

    async def metrics(request: web.Request) -> web.Response:
        """Prometheus' text format (not in the OpenAPI document, which describes JSON answers)."""
        try:
            leader = master.leader_components()
        except ServiceUnavailable:
            gauges = None
        else:
            gauges = leader_gauges(leader, leader.dispatcher.job_counts())
        return web.Response(body=master.metrics.exposition(gauges), headers={"Content-Type": METRICS_CONTENT_TYPE})

    for prefix in ("", "/v1"):
        for method, path, handler in handlers.routes():
            app.router.add_route(method, prefix + path, handler)
        app.router.add_get(prefix + "/openapi.json", openapi)
    app.router.add_get("/metrics", metrics)
    add_task_executor_routes(app, master.leader_components, max_body_size=settings.max_body_size)
    add_ui_routes(app, RestUiView(master, handlers))
    limits = settings.login_limits
    add_login_routes(app, sessions, LoginThrottle(max_failures=limits.max_failures, window=limits.window))
    return app


class RestServer:
    """Runs the application on `rest.bind-address:rest.port`; `port` is the bound one."""

    def __init__(self, master: MasterView, settings: RestSettings) -> None:
        self._master = master
        self._settings = settings
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> None:
        guard = BrowserGuard.for_master(self._settings, await asyncio.to_thread(machine_names))
        app = create_app(self._master, self._settings, guard)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        host = self._settings.bind_address
        tls = self._settings.tls
        timeouts = self._settings.timeouts
        # aiohttp answers a longer request line or header itself, before the middleware, in plain
        # text: above its default of 8190 bytes, as a long query string of repeated parameters
        # reached it (schemathesis did), so that every answer a client can provoke is JSON
        site = TimedTCPSite(
            self._runner,
            host,
            self._settings.port,
            ssl_context=tls.context() if tls is not None else None,
            header_timeout=timeouts.header,
            idle_timeout=timeouts.idle,
            max_line_size=MAX_LINE_SIZE,
            max_field_size=MAX_LINE_SIZE,
        )
        await site.start()
        # the bound socket tells the real port when rest.port is 0
        self.port = int(self._runner.addresses[0][1])
        log.info(
            "REST endpoint and web UI on %s://%s:%d%s",
            self._settings.scheme,
            host,
            self.port,
            " (client certificates required)" if tls is not None and tls.client_ca else "",
        )

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
