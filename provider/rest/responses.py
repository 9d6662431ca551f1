"""How the master answers: JSON bodies, the one REST form of an error, and the middleware that turns
every error into it.

The middleware answers every error with its REST body, `{"errors": [...], "type": "<ErrorClass>",
...fields}` (`SparkDispatchError.to_body`), and the class's HTTP status: sparkdispatch errors,
aiohttp's own refusals (no route, wrong method, body too large) and, as `InternalError`, any
other exception. Before a handler runs it checks what a browser page may do (browser_guard.py:
`Host`, `Origin`), then who calls and whether they may (gate.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from sparkdispatch.errors import (
    ERROR_HEADER,
    InternalError,
    MethodNotAllowed,
    RequestTimeout,
    RequestTooLarge,
    RouteNotFound,
    SparkDispatchError,
    error_header,
)
from sparkdispatch.ha.blob_store import BlobReader
from sparkdispatch.model.codec import Shape
from sparkdispatch.model.protocol import ARTIFACT_NAME_HEADER
from sparkdispatch.rest.browser_guard import BrowserGuard
from sparkdispatch.rest.connections import (
    answer_and_close,
)
from sparkdispatch.rest.gate import CALLER_KEY, Gate
from sparkdispatch.rest.ui_auth import CSRF_KEY, UiSessions
from sparkdispatch.rest.settings import RestSettings
from sparkdispatch.rest.session_revocations import SessionRevocations
from pathlib import Path

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_response(body: Any, status: int = 200, *, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.json_response(body, status=status, headers=headers, dumps=_dumps)


def shape_response(body: Shape, status: int = 200) -> web.Response:
    """An answer of the REST API: `body`'s JSON form (`sparkdispatch.model.rest_shapes`)."""
    return json_response(body.to_dict(), status=status)


async def large_json_response(build: Callable[[], Any], *, large: bool) -> web.Response:
    """`json_response(build())`; when `large`, the body is built and dumped in a thread (it must only
    read immutable values), so the loop keeps answering meanwhile."""
    if not large:
        return json_response(build())
    text = await asyncio.to_thread(lambda: _dumps(build()))
    return web.Response(text=text, content_type="application/json")


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def error_response(
    exc: SparkDispatchError, request: web.Request, *, headers: Mapping[str, str] | None = None
) -> web.Response:
    """The one REST form of an error: its body (`to_body()`) with its class's HTTP status.

    Under `/v1/`, Flink's REST version prefix, the body is Flink's own ErrorResponseBody,
    `{"errors": [...]}` and nothing else: Flink's REST client (`flink cancel -m ...`) reads an
    error body with any other field as a success. The rest of the body (type and
    fields) then goes in the `X-SparkDispatch-Error` header; sparkdispatch's clients read both.
    The error's own headers (`http_headers()`, e.g. `Retry-After`) go with either form.
    """
    headers = {**exc.http_headers(), **(headers or {})}
    if request.path.startswith("/v1/"):
        flink_headers = {**(headers or {}), ERROR_HEADER: error_header(exc)}
        return json_response({"errors": exc.messages()}, status=exc.http_status, headers=flink_headers)
    return json_response(exc.to_body(), status=exc.http_status, headers=headers)


def create_error_middleware(
    settings: RestSettings, gate: Gate | None = None, guard: BrowserGuard | None = None
) -> Middleware:
    """The middleware that answers every error as `error_response` does, refuses what `guard` refuses
    (browser_guard.py), and lets a call through only when `gate` does (gate.py: tokens, the web UI's
    session, the cluster secret, roles); `gate` defaults to the one `settings` describe."""
    if gate is None:
        gate = gate_of(settings)[0]

    @web.middleware
    async def errors_and_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            if guard is not None:
                guard.check(request)
            if (caller := gate.check(request)) is not None:
                request[CALLER_KEY] = caller
                if caller.csrf:
                    request[CSRF_KEY] = caller.csrf
            return await handler(request)
        except SparkDispatchError as exc:
            if isinstance(exc, RequestTimeout):
                return await answer_and_close(request, error_response(exc, request))
            return error_response(exc, request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            # aiohttp's answer for 405 names the allowed methods in `Allow`; ours must too
            allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
            return error_response(_http_error(request, exc, settings), request, headers=allow)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("internal error answering %s %s", request.method, request.path)
            return error_response(InternalError(f"internal error: {type(exc).__name__}: {exc}"), request)

    return errors_and_auth


def gate_of(settings: RestSettings) -> tuple[Gate, UiSessions | None]:
    """The gate `settings` describe, and the web UI's sessions when users need a token."""
    users = settings.authenticator()
    revocations = SessionRevocations(Path(settings.sessions_dir) if settings.sessions_dir else None)
    sessions = UiSessions(users, revocations=revocations) if users.users_authenticate else None
    return Gate(users, sessions), sessions


def _http_error(request: web.Request, exc: web.HTTPException, settings: RestSettings) -> SparkDispatchError:
    """The sparkdispatch error for one of aiohttp's own refusals."""
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return RequestTooLarge(
            f"request body is larger than the {settings.max_body_size} bytes allowed (rest.max-body-size)"
        )
    if isinstance(exc, web.HTTPMethodNotAllowed):
        return MethodNotAllowed(request.method, request.path, exc.allowed_methods)
    reason = exc.text if exc.text and not exc.text.startswith(str(exc.status)) else exc.reason
    message = f"{request.method} {request.path}: {reason}"
    if isinstance(exc, web.HTTPNotFound):
        return RouteNotFound(message)
    error = SparkDispatchError(message)
    error.http_status = exc.status
    return error


async def artifact_response(blobs: BlobReader, key: str) -> web.FileResponse:
    """`GET /artifacts/{key}`: the blob's file, checked against its key, its name in a header."""
    path = await asyncio.to_thread(blobs.path_blocking, key)
    return web.FileResponse(path, headers={"Content-Type": "application/octet-stream", ARTIFACT_NAME_HEADER: path.name})


def only(*methods: str) -> Handler:
    """A handler for the other methods of a resource that takes only `methods`: 405 naming them."""

    async def method_not_allowed(request: web.Request) -> web.StreamResponse:
        raise web.HTTPMethodNotAllowed(request.method, methods)

    return method_not_allowed
