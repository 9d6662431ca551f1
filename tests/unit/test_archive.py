"""The job archive: entries on shared storage, read back by any master, old entries converted,
a new leader's load reading the index instead of every entry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparkdispatch.dispatcher import archive as archive_module
from sparkdispatch.dispatcher.archive import ArchivedJob, JobArchive
from sparkdispatch.errors import LeadershipLost
from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.model.job_result import JobResult, VertexResult
from sparkdispatch.rest.views import flink_job_details, job_details, job_summary
from sparkdispatch.dispatcher.settings import ArchiveSettings
from sparkdispatch.model.snapshot import JobOverview, JobSnapshot, SubtaskSnapshot, VertexSnapshot

JOB_ID = "cd" * 16
SESSION = "the-leader-session"


async def leading(session_id: str, component: str) -> None:
    """The leadership check of a writer that leads under SESSION only."""
    if session_id != SESSION:
        raise LeadershipLost(component)


def archive(tmp_path: Path) -> JobArchive:
    return JobArchive(ArchiveSettings(directory=tmp_path / "archive", capacity=2), check=leading)


def finished_job(job_id: str = JOB_ID, status: JobStatus = JobStatus.FINISHED) -> ArchivedJob:
    result = JobResult(job_id=job_id, name="sales", status=status, start_time=1_000, end_time=4_000,
                       vertices={"only": VertexResult(ExecutionState.FINISHED, 1, rows=3, result_path="/r/only")})
    overview = JobOverview(job_id=job_id, name="sales", status=status, start_time=1_000, end_time=4_000,
                           duration_ms=3_000, last_modification=3_900, tasks={ExecutionState.FINISHED: 2})
    snapshot = JobSnapshot(overview, (VertexSnapshot("only", ExecutionState.FINISHED, 2, subtasks=(
        SubtaskSnapshot(0, ExecutionState.FINISHED, 0, "te-1"),
        SubtaskSnapshot(1, ExecutionState.FINISHED, 1, "te-2"))),))
    return ArchivedJob(result, snapshot, fingerprint="f1" * 32)


async def test_an_archived_job_is_read_back_by_another_master(tmp_path: Path) -> None:
    job = finished_job()
    await archive(tmp_path).put(SESSION, job)

    other = archive(tmp_path)
    await other.load()

    assert JOB_ID in other and other.overviews() == [job.snapshot.overview]
    assert other.counts() == {"FINISHED": 1}
    assert await other.get(JOB_ID) == job
    assert await other.get("ef" * 16) is None
    assert await other.get("../../../etc/passwd") is None


async def test_an_entry_of_the_first_format_is_converted_as_it_is_read(tmp_path: Path) -> None:
    result = finished_job().result
    details: dict[str, Any] = {
        "id": JOB_ID, "name": "sales", "status": "FINISHED", "start_time": 1_000, "end_time": 4_000,
        "vertices": [{"id": "only", "state": "FINISHED", "parallelism": 2, "inputs": [], "subtasks": [
            {"index": 0, "state": "FINISHED", "attempt": 0, "taskmanager": "te-1"},
            {"index": 1, "state": "FINISHED", "attempt": 1, "taskmanager": "te-2"}]}]}
    flink: dict[str, Any] = {
        "jid": JOB_ID, "name": "sales", "state": "FINISHED", "start-time": 1_000, "end-time": 4_000,
        "duration": 3_000, "last-modification": 3_900, "pending-operators": 0,
        "tasks": {"created": 0, "scheduled": 0, "deploying": 0, "running": 0, "finished": 2, "canceling": 0,
                  "canceled": 0, "failed": 0, "reconciling": 0, "initializing": 0, "total": 2}}
    directory = tmp_path / "archive"
    directory.mkdir()
    (directory / f"{JOB_ID}.json").write_text(json.dumps(
        {"result": result.to_dict(), "details": details, "flink_details": flink, "version": 1}))

    old = archive(tmp_path)
    await old.load()

    [overview] = old.overviews()
    assert flink_job_details(overview) == flink
    assert job_summary(overview) == {"id": JOB_ID, "name": "sales", "status": "FINISHED", "start_time": 1_000,
                                     "end_time": 4_000, "duration_ms": 3_000}
    entry = await old.get(JOB_ID)
    assert entry is not None and entry.result == result and job_details(entry.snapshot) == {**details, "repairs": []}
    assert entry.fingerprint is None


async def test_a_damaged_entry_is_skipped(tmp_path: Path) -> None:
    await archive(tmp_path).put(SESSION, finished_job())
    (tmp_path / "archive" / ("ef" * 16 + ".json")).write_text("{not json")

    other = archive(tmp_path)
    await other.load()

    assert [o.job_id for o in other.overviews()] == [JOB_ID]


def count_entry_reads(monkeypatch: Any) -> list[str]:
    """The job ids of the entries read from here on."""
    reads: list[str] = []
    real_from_dict = ArchivedJob.from_dict.__func__  # type: ignore[attr-defined]

    def from_dict(cls: type[ArchivedJob], data: Any) -> ArchivedJob:
        reads.append(data["result"]["job_id"])
        return real_from_dict(cls, data)  # type: ignore[no-any-return]

    monkeypatch.setattr(ArchivedJob, "from_dict", classmethod(from_dict))
    return reads


async def test_a_new_leader_reads_the_index_not_every_entry(tmp_path: Path, monkeypatch: Any) -> None:
    writer = archive(tmp_path)
    ids = [f"{n:032x}" for n in range(1, 51)]
    for job_id in ids:
        await writer.put(SESSION, finished_job(job_id))
    await writer.put(SESSION, finished_job(ids[0], JobStatus.CANCELED))  # a later put of a job wins
    reads = count_entry_reads(monkeypatch)

    reader = archive(tmp_path)
    await reader.load()

    assert reads == []  # no entry file was read
    assert sorted(o.job_id for o in reader.overviews()) == ids
    assert reader.counts() == {"FINISHED": 49, "CANCELED": 1}


async def test_entries_the_index_lacks_are_read_and_added_to_it(tmp_path: Path, monkeypatch: Any) -> None:
    first, second, gone = "a1" * 16, "b2" * 16, "c3" * 16
    writer = archive(tmp_path)
    for job_id in (first, second, gone):
        await writer.put(SESSION, finished_job(job_id))
    directory = tmp_path / "archive"
    lines = (directory / "index.jsonl").read_bytes().splitlines(keepends=True)
    # the second entry's line never made it (a crash between its file and its line, or an entry
    # written before the index existed), the index ends torn, and an entry was removed by hand
    (directory / "index.jsonl").write_bytes(lines[0] + lines[2] + b'{"job_id": "torn')
    (directory / f"{gone}.json").unlink()

    reads = count_entry_reads(monkeypatch)
    reader = archive(tmp_path)
    await reader.load()
    assert reads == [second] and sorted(o.job_id for o in reader.overviews()) == [first, second]

    reads.clear()
    again = archive(tmp_path)  # the missing line was appended: nothing is left to read
    await again.load()
    assert reads == [] and sorted(o.job_id for o in again.overviews()) == [first, second]


async def test_an_index_of_mostly_stale_lines_is_rewritten(tmp_path: Path, monkeypatch: Any) -> None:
    writer = archive(tmp_path)
    for _ in range(150):
        await writer.put(SESSION, finished_job())
    reader = archive(tmp_path)
    await reader.load()
    assert len((tmp_path / "archive" / "index.jsonl").read_bytes().splitlines()) == 1
    assert [o.job_id for o in reader.overviews()] == [JOB_ID]


async def test_a_writer_that_no_longer_leads_changes_nothing(tmp_path: Path) -> None:
    await archive(tmp_path).put(SESSION, finished_job())
    deposed = archive(tmp_path)
    with pytest.raises(LeadershipLost):
        await deposed.put("a-former-session", finished_job(status=JobStatus.CANCELED))
    reader = archive(tmp_path)
    await reader.load()
    entry = await reader.get(JOB_ID)
    assert entry is not None and entry.result.status is JobStatus.FINISHED
    assert sorted(p.name for p in (tmp_path / "archive").iterdir()) == [f"{JOB_ID}.json", "index.jsonl"]
    assert archive_module.FORMAT_VERSION == json.loads((tmp_path / "archive" / f"{JOB_ID}.json").read_text())["version"]
