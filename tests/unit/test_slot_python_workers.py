"""`PythonWorkerStart`: one UDF over as many partitions as workers wanted, cut short for a job (the
real server's side: tests/integration/test_slot_pool.py)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sparkdispatch.taskexecutor.slot_python_workers import PythonWorkerStart


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
    """A session whose UDF runs until `interruptAll`."""

    def __init__(self) -> None:
        self.ranges: list[tuple[int, ...]] = []
        self.selected: list[tuple[Any, ...]] = []
        self.collecting = threading.Event()
        self.interrupted = threading.Event()

    def range(self, *bounds: int) -> Frame:
        self.ranges.append(bounds)
        return Frame(self)

    def interruptAll(self) -> list[str]:
        self.interrupted.set()
        return []


@pytest.fixture(autouse=True)
def connect_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")  # as in a slot process: no SparkContext


def test_a_start_cut_short_by_a_job_interrupts_its_udf_and_warns_of_nothing(caplog: pytest.LogCaptureFixture) -> None:
    session = FakeSession()
    start = PythonWorkerStart(session, 3)  # type: ignore[arg-type]
    running = threading.Thread(target=start.run)
    running.start()
    assert session.collecting.wait(10)
    start.stop()
    running.join(10)
    assert not running.is_alive() and session.interrupted.is_set()
    assert session.ranges == [(0, 3, 1, 3)] and len(session.selected) == 1  # one UDF over 3 partitions
    assert "failed" not in caplog.text


def test_a_start_stopped_before_it_began_runs_nothing() -> None:
    session = FakeSession()
    start = PythonWorkerStart(session, 2)  # type: ignore[arg-type]
    start.stop()
    start.run()
    assert session.ranges == [] and not session.interrupted.is_set()
