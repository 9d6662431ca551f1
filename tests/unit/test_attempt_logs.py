"""Attempt logs: their files beside the results, reading them from an offset, and following them."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkdispatch.storage.attempt_logs import attempt_log_path, chained_log_path, read_attempt_log
from sparkdispatch.errors import RouteNotFound
from sparkdispatch.client.log_stream import LogFollower
from sparkdispatch.model.rest_shapes import AttemptLog
from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.storage.results import ResultLayout

JOB = "0123456789abcdef0123456789abcdef"


def test_an_attempts_log_lives_beside_its_partition_where_spark_readers_skip_it(tmp_path: Path) -> None:
    layout = ResultLayout(str(tmp_path))
    partition = layout.attempt_path(JOB, "clean", 1, "exec7")
    assert attempt_log_path(partition, 3) == tmp_path / JOB / "clean" / "_logs" / "1-3-exec7.log"
    assert attempt_log_path(f"file://{partition}", 3) == tmp_path / JOB / "clean" / "_logs" / "1-3-exec7.log"
    assert attempt_log_path(f"s3a://bucket/{JOB}/clean/1-exec7", 3) is None


def test_a_chained_subtasks_log_is_in_its_own_vertexs_logs_named_by_the_chains_attempt(tmp_path: Path) -> None:
    head = str(tmp_path / JOB / "report" / "0-exec7")
    log = chained_log_path(head, "clean", 1, 3)
    assert log is not None and log == tmp_path / JOB / "clean" / "_logs" / "1-3-exec7.log"
    log.parent.mkdir(parents=True)
    log.write_text("clean's line\n")
    piece = read_attempt_log(str(tmp_path), JOB, "clean", 1, None)
    assert piece is not None and (piece.attempt, piece.text) == (3, "clean's line\n")
    assert chained_log_path(f"s3a://bucket/{JOB}/report/0-exec7", "clean", 1, 3) is None


def test_reading_gives_the_latest_attempt_from_an_offset(tmp_path: Path) -> None:
    logs = tmp_path / JOB / "clean" / "_logs"
    logs.mkdir(parents=True)
    (logs / "0-0-e1.log").write_text("first try\n")
    (logs / "0-1-e2.log").write_text("second try\nmore\n")
    (logs / "1-0-e3.log").write_text("other subtask\n")
    latest = read_attempt_log(str(tmp_path), JOB, "clean", 0, None)
    assert latest is not None and (latest.attempt, latest.text, latest.next_offset) == (1, "second try\nmore\n", 16)
    rest = read_attempt_log(str(tmp_path), JOB, "clean", 0, None, offset=11)
    assert rest is not None and rest.text == "more\n"
    first = read_attempt_log(str(tmp_path), JOB, "clean", 0, 0)
    assert first is not None and first.text == "first try\n"
    assert read_attempt_log(str(tmp_path), JOB, "clean", 2, None) is None
    assert read_attempt_log(str(tmp_path), JOB, "report", 0, None) is None


class FakeMaster:
    """The log endpoint over in-memory attempt logs: subtask -> attempts' texts."""

    def __init__(self) -> None:
        self.logs: dict[int, list[str]] = {}

    def fetch(self, subtask: int, attempt: int | None, offset: int) -> AttemptLog:
        attempts = self.logs.get(subtask)
        if not attempts:
            raise RouteNotFound("no log yet")
        attempt = len(attempts) - 1 if attempt is None else attempt
        data = attempts[attempt].encode()[offset:]
        return AttemptLog(
            job_id=JOB,
            job_status=JobStatus.RUNNING,
            vertex="clean",
            vertex_state=ExecutionState.RUNNING,
            subtask=subtask,
            attempt=attempt,
            offset=offset,
            next_offset=offset + len(data),
            text=data.decode(),
        )


def test_the_follower_gives_complete_lines_once_and_finishes_an_attempt_before_the_next() -> None:
    master = FakeMaster()
    follower = LogFollower("clean", parallelism=2)
    assert follower.poll(master.fetch) == []  # nothing started
    master.logs[0] = ["hello\npart"]
    assert follower.poll(master.fetch) == ["clean[0] attempt 0: hello"]  # the partial line waits
    master.logs[0] = ["hello\npartial line\ncrash\n"]
    master.logs[1] = ["ünïcode\n"]
    assert follower.poll(master.fetch) == [
        "clean[0] attempt 0: partial line",
        "clean[0] attempt 0: crash",
        "clean[1] attempt 0: ünïcode",
    ]
    master.logs[0] = ["hello\npartial line\ncrash\nlast words\n", "again\n"]  # a new attempt
    assert follower.poll(master.fetch) == ["clean[0] attempt 0: last words", "clean[0] attempt 1: again"]
    assert follower.poll(master.fetch) == []


@pytest.mark.asyncio
async def test_the_async_follower_does_the_same() -> None:
    master = FakeMaster()
    follower = LogFollower("v", parallelism=1)

    async def fetch(subtask: int, attempt: int | None, offset: int) -> AttemptLog:
        return master.fetch(subtask, attempt, offset)

    master.logs[0] = ["a\nb"]
    assert await follower.apoll(fetch) == ["v[0] attempt 0: a"]
    master.logs[0] = ["a\nbc\n", "new\n"]
    assert await follower.apoll(fetch) == ["v[0] attempt 0: bc", "v[0] attempt 1: new"]
