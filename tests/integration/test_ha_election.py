"""Leader election and retrieval against a real ZooKeeper: in-process and SIGKILLed contenders."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
from functools import partial
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
from kazoo.client import KazooClient

from sparkdispatch.config import Configuration
from sparkdispatch.config.options import HA_ZOOKEEPER_SESSION_TIMEOUT
from sparkdispatch.ha import LeaderInfo, create_ha_services
from sparkdispatch.ha.services import ZooKeeperHaServices
from sparkdispatch.testing.contender import ContenderProcess, first_grant
from sparkdispatch.testing.services import ZooKeeperServer
from sparkdispatch.testing.waiting import eventually

WAIT = 30.0  # generous upper bound for anything to happen; no timing is asserted


class Timeline:
    """Leadership intervals of all contenders, on one monotonic clock."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str, str]] = []  # (t, name, "grant" | "revoke")

    def intervals(self) -> list[tuple[float, float, str]]:
        open_at: dict[str, float] = {}
        result = []
        for t, name, kind in self.events:
            if kind == "grant":
                assert name not in open_at, f"{name} granted twice without a revoke"
                open_at[name] = t
            else:
                result.append((open_at.pop(name), t, name))
        result += [(start, float("inf"), name) for name, start in open_at.items()]
        return sorted(result)

    def assert_no_overlap(self) -> None:
        intervals = self.intervals()
        for (s1, e1, n1), (s2, _, n2) in itertools.pairwise(intervals):
            assert e1 <= s2, f"{n1} led {s1:.3f}-{e1:.3f} while {n2} led from {s2:.3f}"


class Contender:
    """Records grants and revokes, confirms each grant, and lets tests await them."""

    def __init__(self, name: str, timeline: Timeline, services: ZooKeeperHaServices) -> None:
        self.name = name
        self.timeline = timeline
        self.services = services
        self.session_id: str | None = None
        self.grants: list[str] = []
        self.changed = asyncio.Event()

    @property
    def address(self) -> str:
        return f"http://{self.name}.example:8081"

    def grant_leadership(self, session_id: str) -> None:
        asyncio.get_running_loop()  # raises unless called on the loop
        self.timeline.events.append((time.monotonic(), self.name, "grant"))
        self.session_id = session_id
        self.grants.append(session_id)
        self.services.election.confirm_leadership(session_id, self.address)
        self.changed.set()

    def revoke_leadership(self) -> None:
        asyncio.get_running_loop()
        self.timeline.events.append((time.monotonic(), self.name, "revoke"))
        self.session_id = None
        self.changed.set()


@asynccontextmanager
async def contenders(
    config: Configuration, names: list[str], timeline: Timeline
) -> AsyncIterator[dict[str, Contender]]:
    started: dict[str, Contender] = {}
    try:
        for name in names:
            services = create_ha_services(config)
            assert isinstance(services, ZooKeeperHaServices)
            await services.start()
            contender = Contender(name, timeline, services)
            started[name] = contender
            services.election.start(contender)
        yield started
    finally:
        for contender in started.values():
            await contender.services.close()


def another_leads(group: dict[str, Contender], former: Contender) -> bool:
    """Exactly one contender of `group` leads, and it is not `former`."""
    return len(current := leaders(group)) == 1 and current[0] is not former


def leaders(group: dict[str, Contender]) -> list[Contender]:
    return [c for c in group.values() if c.session_id is not None]


@pytest.mark.parametrize("count", [2, 3])
async def test_exactly_one_of_several_contenders_leads(zk_config: Configuration, count: int) -> None:
    timeline = Timeline()
    async with contenders(zk_config, [f"c{i}" for i in range(count)], timeline) as group:
        await eventually(lambda: len(leaders(group)) == 1, what="a leader")
        await asyncio.sleep(0.5)  # nobody else gets granted later
        [leader] = leaders(group)
        assert len(timeline.events) == 1 and leader.session_id is not None
        retrieval = leader.services.create_retrieval()
        retrieval.start()
        info = retrieval.wait_for_leader(WAIT)
        assert info == LeaderInfo(leader.address, leader.session_id)
    timeline.assert_no_overlap()


async def test_graceful_stop_hands_over_and_intervals_never_overlap(zk_config: Configuration) -> None:
    timeline = Timeline()
    async with contenders(zk_config, ["a", "b", "c"], timeline) as group:
        seen_sessions: set[str] = set()
        for _ in range(2):
            await eventually(lambda: len(leaders(group)) == 1, what="a leader")
            [leader] = leaders(group)
            assert leader.session_id is not None and leader.session_id not in seen_sessions
            seen_sessions.add(leader.session_id)
            stopped = time.monotonic()
            await leader.services.close()
            await eventually(partial(another_leads, group, leader), what="a new leader")
            print(f"graceful handover took {time.monotonic() - stopped:.3f}s")
    timeline.assert_no_overlap()
    assert len({session for c in group.values() for session in c.grants}) == 3  # fresh uuid per grant


async def test_stale_confirmation_is_ignored(zk_config: Configuration) -> None:
    timeline = Timeline()
    async with contenders(zk_config, ["a"], timeline) as group:
        contender = group["a"]
        session_id = await eventually(lambda: contender.session_id, what="a leader")
        election = contender.services.election
        assert election.confirm_leadership("1e5ca1e0-0000-4000-8000-000000000000", "http://stale:1") is False
        assert election.has_leadership(session_id)
        assert not election.has_leadership("1e5ca1e0-0000-4000-8000-000000000000")
        retrieval = contender.services.create_retrieval()
        retrieval.start()
        await eventually(lambda: retrieval.current() is not None, what="leader info")
        assert retrieval.current() == LeaderInfo(contender.address, session_id)


async def test_deleted_or_changed_leader_info_is_rewritten(
    zk_config: Configuration, zookeeper_server: ZooKeeperServer
) -> None:
    timeline = Timeline()
    async with contenders(zk_config, ["a"], timeline) as group:
        contender = group["a"]
        services = contender.services
        retrieval = services.create_retrieval()
        retrieval.start()
        await eventually(lambda: retrieval.current() is not None, what="leader info")
        expected = LeaderInfo(contender.address, contender.session_id or "")
        assert retrieval.current() == expected
        intruder = KazooClient(hosts=zookeeper_server.hosts, timeout=4.0)
        intruder.start()
        path = services.paths.connection_info

        def stored() -> LeaderInfo | None:
            return LeaderInfo.from_bytes(intruder.get(path)[0]) if intruder.exists(path) else None

        try:
            before = intruder.exists(path)
            intruder.delete(path)
            await eventually(
                lambda: (s := intruder.exists(path)) is not None and s.czxid != before.czxid,
                what="the deleted info to be written again",
            )
            assert stored() == expected
            intruder.set(path, b'{"address": "http://evil:1", "session_id": "x"}')
            await eventually(lambda: stored() == expected, what="the changed info to be rewritten")
            await eventually(lambda: retrieval.current() == expected, what="retrieval of the rewritten info")
        finally:
            intruder.stop()
            intruder.close()
        assert contender.grants == [expected.session_id]  # healing never re-granted


async def test_paused_zookeeper_revokes_then_a_leader_returns(
    zk_config: Configuration, zookeeper_server: ZooKeeperServer
) -> None:
    timeline = Timeline()
    async with contenders(zk_config, ["a", "b"], timeline) as group:
        await eventually(lambda: len(leaders(group)) == 1, what="a leader")
        [first] = leaders(group)
        retrieval = first.services.create_retrieval()
        retrieval.start()
        await eventually(lambda: retrieval.current() is not None, what="leader info")
        zookeeper_server.pause()
        try:
            paused = time.monotonic()
            await eventually(
                lambda: not leaders(group) and retrieval.current() is None,
                timeout=15,
                what="revocation while ZooKeeper is paused",
            )
            print(f"leader revoked {time.monotonic() - paused:.2f}s after the pause")
        finally:
            zookeeper_server.resume()
        await eventually(lambda: len(leaders(group)) == 1, what="a leader after resume")
        [leader] = leaders(group)
        await eventually(
            lambda: retrieval.current() == LeaderInfo(leader.address, leader.session_id or ""),
            what="retrievers to see the new leader",
        )
        assert leader.session_id != first.grants[0]
    timeline.assert_no_overlap()


async def test_tolerated_suspension_keeps_leadership(
    zk_config: Configuration, zookeeper_server: ZooKeeperServer
) -> None:
    config = zk_config.with_overrides({"high-availability.zookeeper.tolerate-suspended-connections": "true"})
    timeline = Timeline()
    async with contenders(config, ["a"], timeline) as group:
        contender = group["a"]
        await eventually(lambda: contender.session_id is not None, what="a leader")
        session = contender.session_id
        states: list[str] = []
        contender.services.client.add_listener(states.append)
        zookeeper_server.pause()
        try:
            await eventually(lambda: "SUSPENDED" in states, timeout=15, what="a suspended connection")
        finally:
            zookeeper_server.resume()
        await eventually(lambda: states[-1] == "CONNECTED", what="the reconnect")
        assert contender.session_id == session
        assert contender.grants == [session]


# ---------------------------------------------------------------------------- other processes


@contextmanager
def contender_processes(config: Configuration, names: list[str]) -> Iterator[dict[str, ContenderProcess]]:
    started: dict[str, ContenderProcess] = {}
    try:
        for name in names:
            started[name] = ContenderProcess(name, config.to_overrides(), address=f"http://{name}.example:8081")
            assert started[name].next_event(WAIT)["event"] == "started"
        yield started
    finally:
        for child in started.values():
            child.kill()


def granted_first(children: dict[str, ContenderProcess]) -> tuple[str, dict[str, Any]]:
    contender, event = first_grant(children.values(), WAIT)
    return contender.name, event


async def test_sigkilled_leader_process_is_replaced(zk_config: Configuration) -> None:
    with contender_processes(zk_config, ["p1", "p2", "p3"]) as children:
        leader_name, granted = await asyncio.to_thread(granted_first, children)
        observer = create_ha_services(zk_config)
        await observer.start()
        try:
            retrieval = observer.create_retrieval()
            retrieval.start()
            info = await asyncio.to_thread(retrieval.wait_for_leader, WAIT)
            assert info.session_id == granted["session_id"]
            killed_at = time.monotonic()
            os.kill(children[leader_name].process.pid, signal.SIGKILL)
            children[leader_name].process.wait(timeout=10)
            rest = {n: c for n, c in children.items() if n != leader_name}
            new_name, new_grant = await asyncio.to_thread(granted_first, rest)
            takeover = new_grant["t"] - killed_at
            session_timeout = zk_config.get(HA_ZOOKEEPER_SESSION_TIMEOUT)
            print(f"SIGKILL takeover: {takeover:.2f}s (session timeout {session_timeout:g}s)")

            def names_the_new_leader() -> LeaderInfo | None:
                info = retrieval.current()
                return info if info is not None and info.session_id == new_grant["session_id"] else None

            info = await eventually(names_the_new_leader, what="retrieval of the new leader")
            assert info.address == f"http://{new_name}.example:8081"
            # the survivor that was not granted stays a standby
            [standby] = [c for n, c in rest.items() if n != new_name]
            await asyncio.sleep(0.3)  # room for a second grant, which must not come
            assert all(e["event"] != "granted" for e in list(standby.events.queue))
        finally:
            await observer.close()


async def test_sigterm_hands_over_to_another_process(zk_config: Configuration) -> None:
    with contender_processes(zk_config, ["p1", "p2"]) as children:
        leader_name, _ = await asyncio.to_thread(granted_first, children)
        stopped_at = time.monotonic()
        children[leader_name].process.terminate()
        rest = {n: c for n, c in children.items() if n != leader_name}
        _, granted = await asyncio.to_thread(granted_first, rest)
        print(f"graceful handover between processes: {granted['t'] - stopped_at:.3f}s")
        assert children[leader_name].process.wait(timeout=WAIT) == 0
