"""The worker daemons of released Connect sessions end; those of live sessions stay."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from sparkdispatch.taskexecutor.python_workers import KEEP_RELEASED_S, ReleasedSessions, WorkerDaemonReaper
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
