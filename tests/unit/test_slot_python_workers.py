"""`PythonWorkerStart`: one UDF over as many partitions as workers wanted, interrupted by its tag alone
for a job that takes its session (the real server's side: tests/integration/test_slot_pool.py)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sparkdispatch.taskexecutor.slot_python_workers import TAG, PythonWorkerStart


class Frame:
    def __init__(self, session: FakeSession) -> None:
        self.session = session

    def select(self, *columns: Any) -> Frame:
        self.session.selected.append(columns)
        return self

    def collect(self) -> list[Any]:
        self.session.collecting.set()
        if not self.session.interrupted.wait(10):
            raise AssertionError("never interrupted")
        raise RuntimeError("OPERATION_CANCELED")


class FakeSession:
    """A session whose UDF runs until its tag is interrupted."""

    def __init__(self) -> None:
        self.ranges: list[tuple[int, ...]] = []
        self.selected: list[tuple[Any, ...]] = []
        self.tags: list[str] = []
        self.collecting = threading.Event()
        self.interrupted = threading.Event()

    def range(self, *bounds: int) -> Frame:
        self.ranges.append(bounds)
        return Frame(self)

    def addTag(self, tag: str) -> None:
        self.tags.append(tag)

    def removeTag(self, tag: str) -> None:
        self.tags.remove(tag)

    def interruptTag(self, tag: str) -> list[str]:
        assert tag == TAG
        self.interrupted.set()
        return []


@pytest.fixture(autouse=True)
def connect_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")  # as in a slot process: no SparkContext


def test_a_running_start_is_interrupted_by_its_tag_alone_and_warns_of_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = FakeSession()
    start = PythonWorkerStart(3)
    running = threading.Thread(target=start.run, args=(session,))
    running.start()
    assert session.collecting.wait(10)
    assert session.tags == [TAG]
    start.stop()  # a job takes the session
    running.join(10)
    assert not running.is_alive() and session.interrupted.is_set() and session.tags == []
    assert session.ranges == [(0, 3, 1, 3)] and len(session.selected) == 1  # one UDF over 3 partitions
    assert "failed" not in caplog.text


def test_a_start_stopped_before_it_began_runs_nothing() -> None:
    session = FakeSession()
    start = PythonWorkerStart(2)
    start.stop()
    start.run(session)  # type: ignore[arg-type]
    assert session.ranges == [] and session.tags == []
