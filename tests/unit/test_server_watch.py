"""`ConnectServerWatch`: when the TaskExecutor restarts its Spark Connect server."""

from __future__ import annotations

from sparkdispatch.taskexecutor.server_recycling import ConnectServers
from sparkdispatch.taskexecutor.server_watch import UNHEALTHY_CHECKS, ConnectServerWatch


class FakeServer:
    def __init__(self) -> None:
        self.alive = True
        self.healthy = True
        self.restarts = 0
        self.url = "sc://127.0.0.1:1"
        self.log_path = "connect-server.log"

    def is_alive(self) -> bool:
        return self.alive

    def is_healthy(self) -> bool:
        return self.healthy

    def restart(self) -> None:
        self.restarts += 1
        self.alive = self.healthy = True
        self.url = f"sc://127.0.0.1:{self.restarts + 1}"


class FakePool:
    def __init__(self) -> None:
        self.urls: list[str] = []

    def reconnect(self, connect_url: str) -> None:
        self.urls.append(connect_url)


def watch() -> tuple[ConnectServerWatch, FakeServer, FakePool]:
    server, pool = FakeServer(), FakePool()
    servers = ConnectServers(server, successor=FakeServer)  # type: ignore[arg-type]
    return ConnectServerWatch(servers, pool), server, pool  # type: ignore[arg-type]


def test_a_healthy_server_is_left_alone() -> None:
    check, server, pool = watch()
    for _ in range(5):
        check.check()
    assert server.restarts == 0 and pool.urls == []


def test_a_dead_server_is_restarted_at_once_and_the_slot_processes_follow_its_new_address() -> None:
    check, server, pool = watch()
    server.alive = False
    check.check()
    assert server.restarts == 1 and pool.urls == ["sc://127.0.0.1:2"]


def test_a_live_server_that_stops_answering_is_restarted_only_after_several_checks() -> None:
    check, server, pool = watch()
    server.healthy = False
    for _ in range(UNHEALTHY_CHECKS - 1):
        check.check()
    assert server.restarts == 0
    check.check()
    assert server.restarts == 1 and len(pool.urls) == 1


def test_one_answer_resets_the_count_of_missed_checks() -> None:
    check, server, _ = watch()
    for _ in range(3):
        server.healthy = False
        for _ in range(UNHEALTHY_CHECKS - 1):
            check.check()
        server.healthy = True
        check.check()
    assert server.restarts == 0
