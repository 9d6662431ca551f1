"""When and how a TaskExecutor replaces its Spark Connect server (`ServerRecycler`), with fakes."""

from __future__ import annotations

import pytest

from sparkdispatch.errors import ConnectServerError
from sparkdispatch.taskexecutor.process_usage import ProcessUsage
from sparkdispatch.taskexecutor.server_recycling import RETRY_AFTER_S, ConnectServers, ServerRecycler
from sparkdispatch.taskexecutor.settings import RecyclePolicy
from sparkdispatch.testing.clock import ManualClock


class FakeServer:
    def __init__(self, port: int, *, fails: bool = False) -> None:
        self.port = port
        self.fails = fails
        self.starts = 0
        self.running = False
        self.pid: int | None = None
        self.warm_usage: ProcessUsage | None = None
        self.log_path = f"connect-server-{port}.log"

    @property
    def serving_url(self) -> str | None:
        return f"sc://127.0.0.1:{self.port}" if self.running else None

    @property
    def url(self) -> str:
        assert self.running
        return f"sc://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.starts += 1
        if self.fails:
            raise ConnectServerError("it did not start", log_file=self.log_path)
        self.running = True
        self.pid = 4000 + self.port
        self.warm_usage = ProcessUsage(threads=200, open_files=300)

    def is_alive(self) -> bool:
        return self.running

    def stop(self) -> None:
        self.running, self.pid = False, None


class FakePool:
    def __init__(self, url: str) -> None:
        self.url = url
        self.sessions = 0
        self.running: dict[str, int] = {}

    def switch_server(self, connect_url: str) -> None:
        self.url, self.sessions = connect_url, 0

    def attempts_on(self, connect_url: str) -> int:
        return self.running.get(connect_url, 0)

    def sessions_made(self, connect_url: str) -> int:
        return self.sessions if connect_url == self.url else 0


class Cluster:
    def __init__(self, policy: RecyclePolicy, *, failing_successors: int = 0) -> None:
        self.first = FakeServer(1)
        self.first.start()
        self.made: list[FakeServer] = []
        self.failing = failing_successors

        def successor() -> FakeServer:
            server = FakeServer(2 + len(self.made), fails=self.failing > 0)
            self.failing -= 1
            self.made.append(server)
            return server

        self.servers = ConnectServers(self.first, successor=successor)  # type: ignore[arg-type]
        self.pool = FakePool(self.first.url)
        self.clock = ManualClock()
        self.usage: dict[int, ProcessUsage] = {}  # by pid; the warm usage when not given
        self.recycler = ServerRecycler(
            self.servers,
            self.pool,
            policy,
            clock=self.clock,
            usage=lambda pid: self.usage.get(pid, ProcessUsage(200, 300)),
        )

    @property
    def current(self) -> object:
        """The current server (a FakeServer, which ConnectServers' types do not know)."""
        return self.servers.current

    @property
    def draining(self) -> object:
        return self.servers.draining


def test_the_policy_names_the_bound_a_server_reached_and_zero_disables_one() -> None:
    policy = RecyclePolicy(sessions=10, thread_growth=100, open_file_growth=500)
    warm = ProcessUsage(threads=200, open_files=300)
    assert policy.reason(sessions=9, usage=ProcessUsage(299, 799), warm=warm) is None
    assert "10 job sessions" in (policy.reason(sessions=10, usage=None, warm=None) or "")
    assert "300 threads, 100 more" in (policy.reason(sessions=0, usage=ProcessUsage(300, 300), warm=warm) or "")
    assert "800 open files, 500 more" in (policy.reason(sessions=0, usage=ProcessUsage(200, 800), warm=warm) or "")
    never = RecyclePolicy(sessions=0, thread_growth=0, open_file_growth=0)
    assert never.reason(sessions=10**6, usage=ProcessUsage(10**5, 10**5), warm=warm) is None


def test_a_server_due_is_replaced_and_stopped_only_once_its_attempts_ended() -> None:
    cluster = Cluster(RecyclePolicy(sessions=3, thread_growth=0, open_file_growth=0))
    old_url = cluster.first.url
    cluster.pool.sessions = 2
    cluster.recycler.check()
    assert cluster.made == [] and cluster.current is cluster.first
    cluster.pool.sessions = 3
    cluster.pool.running[old_url] = 1
    cluster.recycler.check()
    [successor] = cluster.made
    assert cluster.current is successor and cluster.pool.url == successor.url
    assert cluster.draining == (cluster.first, old_url) and cluster.first.running
    cluster.pool.sessions = 50  # the successor is not replaced while its predecessor drains
    cluster.recycler.check()
    assert cluster.made == [successor] and cluster.first.running
    cluster.pool.running[old_url] = 0
    cluster.recycler.check()
    assert not cluster.first.running and cluster.draining is None
    assert (cluster.servers.starts, cluster.servers.recycles) == (1, 1)  # a replacement is no restart
    cluster.recycler.check()  # 50 sessions on the successor: it is replaced in turn
    assert len(cluster.made) == 2 and cluster.current is cluster.made[1]


def test_a_draining_server_that_died_is_given_up_at_once() -> None:
    cluster = Cluster(RecyclePolicy(sessions=1, thread_growth=0, open_file_growth=0))
    cluster.pool.sessions = 1
    cluster.pool.running[cluster.first.url] = 2
    cluster.recycler.check()
    cluster.first.running = False  # died under its attempts: they fail on their own
    cluster.recycler.check()
    assert cluster.draining is None


def test_a_successor_that_cannot_start_leaves_the_server_serving_and_is_tried_again_later() -> None:
    cluster = Cluster(RecyclePolicy(sessions=1, thread_growth=0, open_file_growth=0), failing_successors=1)
    cluster.pool.sessions = 1
    cluster.recycler.check()
    assert len(cluster.made) == 1 and cluster.current is cluster.first and cluster.draining is None
    cluster.clock.advance(RETRY_AFTER_S - 1)
    cluster.recycler.check()
    assert len(cluster.made) == 1
    cluster.clock.advance(1)
    cluster.recycler.check()
    assert len(cluster.made) == 2 and cluster.current is cluster.made[1]


def test_growth_is_measured_against_the_servers_own_usage_after_its_warm_up() -> None:
    cluster = Cluster(RecyclePolicy(sessions=0, thread_growth=0, open_file_growth=100))
    assert cluster.first.pid is not None
    cluster.usage[cluster.first.pid] = ProcessUsage(threads=900, open_files=399)
    cluster.recycler.check()
    assert cluster.made == []
    cluster.usage[cluster.first.pid] = ProcessUsage(threads=200, open_files=400)
    cluster.recycler.check()
    [successor] = cluster.made
    assert successor.pid is not None
    cluster.pool.running.clear()
    cluster.recycler.check()  # the former stops
    cluster.usage[successor.pid] = ProcessUsage(threads=200, open_files=399)
    cluster.recycler.check()
    assert cluster.made == [successor]  # the successor's growth counts from its own warm-up


def test_take_over_refuses_a_second_replacement_while_one_drains() -> None:
    cluster = Cluster(RecyclePolicy())
    cluster.servers.take_over(FakeServer(7))  # type: ignore[arg-type]
    with pytest.raises(ConnectServerError, match="drains"):
        cluster.servers.take_over(FakeServer(8))  # type: ignore[arg-type]
