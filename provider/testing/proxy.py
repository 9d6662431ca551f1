"""A recording HTTP proxy on loopback, in front of a real master.

Tests that must see what a client sent (how often it retried, which headers it set) put a
`RecordingProxy` between the client and the master. `inject()` makes the proxy answer the
next calls to a path itself, as a load balancer or gateway in front of a master would (a 502
page, a 429, a redirect); every other call gets the master's own answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

# hop-by-hop headers and those aiohttp sets itself from the body
_NOT_FORWARDED = {
    "host",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-connection",
    "content-encoding",
}


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the proxy received it."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes


@dataclass
class _Injected:
    status: int
    text: str
    headers: Mapping[str, str] = field(default_factory=dict)
    times: int | None = 1  # None: every call


class RecordingProxy:
    """Forwards every request to `target` (a base URL) and records it; start with `start()`."""

    def __init__(self, target: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.target = target.rstrip("/")
        self.host = host
        self.port = port
        self.requests: list[RecordedRequest] = []
        self._injected: dict[tuple[str, str], list[_Injected]] = {}
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port, reuse_address=True).start()
        self.port = int(self._runner.addresses[0][1])  # the bound one when port is 0
        self._session = aiohttp.ClientSession(auto_decompress=False)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def inject(
        self,
        method: str,
        path: str,
        *,
        status: int,
        text: str = "",
        headers: Mapping[str, str] | None = None,
        times: int | None = 1,
    ) -> None:
        """Answer the next `times` calls of `method path` (None: all of them) without the master."""
        self._injected.setdefault((method, path), []).append(_Injected(status, text, dict(headers or {}), times))

    def count(self, method: str, path: str) -> int:
        """How many `method path` requests arrived (query strings aside)."""
        return sum(1 for r in self.requests if (r.method, r.path) == (method, path))

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(RecordedRequest(request.method, request.path, dict(request.headers), body))
        queued = self._injected.get((request.method, request.path))
        if queued:
            answer = queued[0]
            if answer.times is not None:
                answer.times -= 1
                if answer.times <= 0:
                    queued.pop(0)
            return web.Response(status=answer.status, text=answer.text, headers=answer.headers)
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _NOT_FORWARDED}
        try:
            async with self._session.request(
                request.method, self.target + request.path_qs, data=body, headers=headers, allow_redirects=False
            ) as upstream:
                payload = await upstream.read()
                forwarded = {k: v for k, v in upstream.headers.items() if k.lower() not in _NOT_FORWARDED}
                return web.Response(status=upstream.status, body=payload, headers=forwarded)
        except (TimeoutError, aiohttp.ClientError) as exc:
            return web.Response(status=502, text=f"proxy: the master at {self.target} did not answer: {exc}")
