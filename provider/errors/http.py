"""Errors of the REST endpoint's doors: body limits, media type, authentication, the browser guards, routing."""

from __future__ import annotations

from collections.abc import Iterable

from sparkdispatch.errors.base import SparkDispatchError


class RequestTooLarge(SparkDispatchError):
    http_status = 413


class RequestTimeout(SparkDispatchError):
    """A request body that sent nothing for longer than `rest.body-timeout`; the connection is closed."""

    http_status = 408


class UnsupportedMediaType(SparkDispatchError):
    """A body the endpoint reads as JSON sent with another `Content-Type` (a browser's form or
    `text/plain` request, which another site's page can send without asking)."""

    http_status = 415


class Unauthorized(SparkDispatchError):
    http_status = 401


class Forbidden(SparkDispatchError):
    """A caller the master knows asked for what its role may not do (a viewer submitting, a user
    token on a TaskExecutor route, the cluster secret on a user's route)."""

    http_status = 403


class CsrfRefused(SparkDispatchError):
    """A state-changing call authenticated by the web UI's session cookie without the session's
    `X-CSRF-Token`: it may come from another site's page."""

    http_status = 403


class HostRefused(SparkDispatchError):
    """A call whose `Host` header names none of the master's own names (`rest.allowed-hosts`): a
    web page of another site that made its name resolve to the master (DNS rebinding)."""

    http_status = 403


class OriginRefused(SparkDispatchError):
    """A state-changing call sent by a web page of another origin than the master's own and those
    of `rest.allowed-origins`."""

    http_status = 403


class TooManyLoginAttempts(SparkDispatchError):
    """Too many failed logins from one client address: the next is heard after `retry_after`
    seconds (also its `Retry-After` header)."""

    http_status = 429
    retry_after: int

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def http_headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class RouteNotFound(SparkDispatchError):
    """No REST resource at the requested path (aiohttp's own 404)."""

    http_status = 404


class MethodNotAllowed(SparkDispatchError):
    """The path exists but does not take the method; `allowed` lists the methods it takes."""

    http_status = 405
    method: str
    path: str
    allowed: list[str]

    def __init__(self, method: str, path: str, allowed: Iterable[str]) -> None:
        self.method = method
        self.path = path
        self.allowed = sorted(allowed)
        super().__init__(f"{method} {path}: Method Not Allowed (allowed: {', '.join(self.allowed) or 'none'})")


class InternalError(SparkDispatchError):
    """The master failed on an unexpected exception; its log has the traceback."""

    http_status = 500
