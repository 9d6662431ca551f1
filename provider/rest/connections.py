"""How long the REST endpoint waits for a client: a slow or silent one is cut off (slowloris).

Measured on aiohttp 3.14.5 with a keep-alive timeout of 3 s: a request head sent a byte every
0.2 s was cut 3.0 s after the connection opened (the keep-alive timer, armed when a connection
opens and after each answer, is not re-armed by arriving bytes, and fires while no whole request
head has arrived); a kept-alive connection without a next request was closed after 3.0 s; a
handler reading a body that stopped after 3 of its 100 bytes still waited 12 s later, and would
for ever. With aiohttp's default of 3630 s the first two held a connection for an hour. So:

- `rest.idle-timeout` is aiohttp's keep-alive timeout;
- `rest.header-timeout`: a `TimedRequestHandler` closes a connection whose request head is not
  whole that long after its first byte (or after the connection opened);
- `rest.body-timeout`: `read_within` bounds each read of a body; a stall answers 408
  `RequestTimeout`, and the connection is closed (`answer_and_close`).

`TimedTCPSite` serves an `AppRunner`'s application with such handlers; the app's
`track_requests` middleware tells a connection's handler when a request is being answered (its
head is whole), and `BODY_TIMEOUT` holds the body timeout for `read_within`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

from aiohttp import web

from sparkdispatch.errors import RequestTimeout

log = logging.getLogger(__name__)

T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: `rest.body-timeout` (seconds) in the application; without it `read_within` waits as long as it takes.
BODY_TIMEOUT = web.AppKey("sparkdispatch_body_timeout", float)


class TimedRequestHandler(web.RequestHandler):
    """aiohttp's handler of one connection, which also closes it when a request head takes longer
    than `header_timeout` seconds from its first byte (from the opening, for the first request)."""

    def __init__(
        self,
        manager: web.Server,
        *,
        loop: asyncio.AbstractEventLoop,
        header_timeout: float,
        keepalive_timeout: float,
        max_line_size: int,
        max_field_size: int,
    ) -> None:
        # no access log (aiohttp's annotation leaves out the None it accepts, as AppRunner passes it)
        super().__init__(
            manager,
            loop=loop,
            keepalive_timeout=keepalive_timeout,
            max_line_size=max_line_size,
            max_field_size=max_field_size,
            access_log=cast(logging.Logger, None),
        )
        self._timed_loop = loop
        self._header_timeout = header_timeout
        self._header_deadline: asyncio.TimerHandle | None = None
        self._answering = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm_header_deadline()

    def data_received(self, data: bytes) -> None:
        if not self._answering:  # bytes between requests begin the next request's head
            self._arm_header_deadline()
        super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm_header_deadline()
        super().connection_lost(exc)

    def request_started(self) -> None:
        """A request's head arrived whole and its answer begins (`track_requests`)."""
        self._answering = True
        self._disarm_header_deadline()

    def request_ended(self) -> None:
        self._answering = False

    def _arm_header_deadline(self) -> None:
        if self._header_deadline is None:
            self._header_deadline = self._timed_loop.call_later(self._header_timeout, self._header_deadline_passed)

    def _disarm_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _header_deadline_passed(self) -> None:
        self._header_deadline = None
        if self._answering:
            return
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        log.info(
            "closing the connection of %s: no whole request head within %g s (rest.header-timeout)",
            peer,
            self._header_timeout,
        )
        self.force_close()


@web.middleware
async def track_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Tell the connection's `TimedRequestHandler` that a request is being answered, until it is."""
    protocol = request.protocol
    if not isinstance(protocol, TimedRequestHandler):
        return await handler(request)
    protocol.request_started()
    try:
        return await handler(request)
    finally:
        protocol.request_ended()


async def read_within(request: web.Request, read: Awaitable[T], *, what: str) -> T:
    """`await read` (a read of the request's body), refused with `RequestTimeout` when it waits
    longer than the application's `BODY_TIMEOUT`."""
    timeout = request.config_dict.get(BODY_TIMEOUT)
    if timeout is None:
        return await read
    try:
        async with asyncio.timeout(timeout):
            return await read
    except TimeoutError:
        raise RequestTimeout(
            f"{request.method} {request.path}: the {what} stopped coming for more than "
            f"{timeout:g} s (rest.body-timeout); the connection is closed"
        ) from None


async def answer_and_close(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    """Send `response` and close the connection at once, as after a stalled body: aiohttp would
    otherwise wait up to 10 s more (its lingering time) for the rest of the body."""
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    request.protocol.force_close()  # the answer written is still sent: the transport flushes before it closes
    return response


class TimedTCPSite(web.BaseSite):
    """A TCP site of `runner` on `host:port` whose connections are `TimedRequestHandler`s."""

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None,
        header_timeout: float,
        idle_timeout: float,
        max_line_size: int,
        max_field_size: int,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._app_runner = runner
        self._host = host
        self._port = port
        self._header_timeout = header_timeout
        self._idle_timeout = idle_timeout
        self._max_line_size = max_line_size
        self._max_field_size = max_field_size

    @property
    def name(self) -> str:
        return f"{'https' if self._ssl_context else 'http'}://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        server = self._app_runner.server
        assert server is not None, "the runner is set up before its sites start"

        def connection() -> TimedRequestHandler:
            return TimedRequestHandler(
                server,
                loop=loop,
                header_timeout=self._header_timeout,
                keepalive_timeout=self._idle_timeout,
                max_line_size=self._max_line_size,
                max_field_size=self._max_field_size,
            )

        self._server = await loop.create_server(
            connection, self._host, self._port, ssl=self._ssl_context, reuse_address=True
        )
