"""The TaskExecutor's master client gives up calls to a master that stopped leading."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from sparkdispatch.config import Configuration
from sparkdispatch.errors import ServiceUnavailable
from sparkdispatch.ha.leader import LeaderInfo
from sparkdispatch.model.protocol import SlotReport
from sparkdispatch.taskexecutor.master_client import MasterClient
from sparkdispatch.testing.waiting import eventually

OLD, NEW = "session-of-the-old-leader", "session-of-the-new-leader"


@pytest.fixture
async def silent_master() -> AsyncIterator[tuple[str, list[str]]]:
    """A master that takes every request and never answers (as one cut off by a partition): its
    address, and the paths of the requests it took."""
    taken: list[str] = []

    async def hang(request: web.Request) -> web.Response:
        taken.append(request.path)
        await asyncio.sleep(3600)  # the silence itself: the test ends first
        raise AssertionError("unreachable")

    app = web.Application()
    app.router.add_post("/{tail:.*}", hang)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", taken
    finally:
        await runner.cleanup()


async def test_a_new_leader_ends_calls_under_the_old_session_at_once(silent_master: tuple[str, list[str]]) -> None:
    address, taken = silent_master
    client = MasterClient(Configuration.from_mapping({}), timeout=30.0)

    def heartbeat(session_id: str) -> None:
        client.heartbeat(address, session_id, "te-1", slot_report=SlotReport.free(1), executions=[])

    try:
        old = asyncio.ensure_future(asyncio.to_thread(heartbeat, OLD))
        new = asyncio.ensure_future(asyncio.to_thread(heartbeat, NEW))
        await eventually(lambda: len(taken) == 2, "both heartbeats at the master")
        client.leader_changed(None)  # no leader known: nothing is abandoned
        await asyncio.sleep(0.2)  # room for a wrong abandonment, which must not come
        assert not old.done() and not new.done()
        client.leader_changed(LeaderInfo(address=address, session_id=NEW))
        with pytest.raises(ServiceUnavailable, match="no longer leads .*session-of-the-old-leader"):
            await asyncio.wait_for(old, 5.0)
        await asyncio.sleep(0.2)  # as above
        assert not new.done()  # a call under the new leader's session goes on
        client.leader_changed(LeaderInfo(address=address, session_id="a-third-session"))
        with pytest.raises(ServiceUnavailable):
            await asyncio.wait_for(new, 5.0)
    finally:
        await asyncio.to_thread(client.close)
