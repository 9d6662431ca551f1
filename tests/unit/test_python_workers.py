"""The worker daemons of released Connect sessions end; those of live sessions stay."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from sparkdispatch.config.configuration import Configuration
from sparkdispatch.taskexecutor.python_workers import KEEP_RELEASED_S, ReleasedSessions, WorkerDaemonReaper
from sparkdispatch.taskexecutor.server_recycling import ConnectServers
from sparkdispatch.taskexecutor.server_watch import ConnectServerWatchStep, WorkerDaemonReaperStep
from sparkdispatch.testing.clock import ManualClock

WAIT_S = 30.0


@pytest.fixture
def daemons() -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """Two processes that look like Spark's worker daemons of sessions `gone` and `live` (children of
    this process, as the daemons are children of the server)."""
    started = {
        session: subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(120)", "-m", "pyspark.daemon"],
            env={**os.environ, "SPARK_JOB_ARTIFACT_UUID": session},
        )
        for session in ("gone", "live")
    }
    try:
        yield started
    finally:
        for process in started.values():
            process.kill()
            process.wait()


def test_only_the_daemon_of_a_released_session_is_ended(daemons: dict[str, subprocess.Popen[bytes]]) -> None:
    released = ReleasedSessions()
    reaper = WorkerDaemonReaper(lambda: [os.getpid()], released)
    assert reaper.check() == 0
    released.add("gone")
    released.add(None)  # a session the server never answered for has no daemon
    assert reaper.check() == 1
    assert daemons["gone"].wait(WAIT_S) != 0
    assert daemons["live"].poll() is None and reaper.ended == 1


def test_released_sessions_are_forgotten_after_a_while() -> None:
    clock = ManualClock()
    released = ReleasedSessions(clock=clock)
    released.add("a")
    clock.advance(KEEP_RELEASED_S / 2)
    released.add("b")
    assert released.recent() == {"a", "b"}
    clock.advance(KEEP_RELEASED_S / 2 + 1)
    assert released.recent() == {"b"}


class HeldServer:
    """A Connect server (this process: the fake daemons are its children) whose check holds the
    server watch's thread until `free` is set, as the start of a successor does for 10-50 s."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.serving_url: str | None = None  # so the recycler, next on the watch's thread, does nothing
        self.held = threading.Event()
        self.free = threading.Event()

    def is_alive(self) -> bool:
        self.held.set()
        self.free.wait(WAIT_S)
        return True

    def is_healthy(self, timeout: float = 2.0) -> bool:
        return True


def test_daemons_of_released_sessions_end_while_the_server_watch_is_held(
    daemons: dict[str, subprocess.Popen[bytes]],
) -> None:
    server = HeldServer()
    runtime = SimpleNamespace(
        servers=ConnectServers(server, successor=HeldServer),  # type: ignore[arg-type]
        pool=SimpleNamespace(released_sessions=ReleasedSessions()),
        config=Configuration.from_mapping(),
    )
    worker = SimpleNamespace(app=SimpleNamespace(task_executor=runtime))
    steps = [ConnectServerWatchStep(worker), WorkerDaemonReaperStep(worker)]
    for step in steps:
        step.start(worker)
    try:
        assert server.held.wait(WAIT_S)
        runtime.pool.released_sessions.add("gone")
        assert daemons["gone"].wait(WAIT_S) != 0
        assert daemons["live"].poll() is None
    finally:
        server.free.set()
        for step in steps:
            step.stop(worker)
