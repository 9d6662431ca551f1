"""The job archive: entries on shared storage, read back by any master, old entries converted,
a new leader's load reading the index instead of every entry."""

from __future__ import annotations

import dataclasses
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
    result = JobResult(
        job_id=job_id,
        name="sales",
        status=status,
        start_time=1_000,
        end_time=4_000,
        vertices={"only": VertexResult(ExecutionState.FINISHED, 1, rows=3, result_path="/r/only")},
    )
    overview = JobOverview(
        job_id=job_id,
        name="sales",
        status=status,
        start_time=1_000,
        end_time=4_000,
        duration_ms=3_000,
        last_modification=3_900,
        tasks={ExecutionState.FINISHED: 2},
    )
    snapshot = JobSnapshot(
        overview,
        (
            VertexSnapshot(
                "only",
                ExecutionState.FINISHED,
                2,
                subtasks=(
                    SubtaskSnapshot(0, ExecutionState.FINISHED, 0, "te-1"),
                    SubtaskSnapshot(1, ExecutionState.FINISHED, 1, "te-2"),
                ),
            ),
        ),
    )
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
        "id": JOB_ID,
        "name": "sales",
        "status": "FINISHED",
        "start_time": 1_000,
        "end_time": 4_000,
        "vertices": [
            {
                "id": "only",
                "state": "FINISHED",
                "parallelism": 2,
                "inputs": [],
                "subtasks": [
                    {"index": 0, "state": "FINISHED", "attempt": 0, "taskmanager": "te-1"},
                    {"index": 1, "state": "FINISHED", "attempt": 1, "taskmanager": "te-2"},
                ],
            }
        ],
    }
    flink: dict[str, Any] = {
        "jid": JOB_ID,
        "name": "sales",
        "state": "FINISHED",
        "start-time": 1_000,
        "end-time": 4_000,
        "duration": 3_000,
        "last-modification": 3_900,
        "pending-operators": 0,
        "tasks": {
            "created": 0,
            "scheduled": 0,
            "deploying": 0,
            "running": 0,
            "finished": 2,
            "canceling": 0,
            "canceled": 0,
            "failed": 0,
            "reconciling": 0,
            "initializing": 0,
            "total": 2,
        },
    }
    directory = tmp_path / "archive"
    directory.mkdir()
    (directory / f"{JOB_ID}.json").write_text(
        json.dumps({"result": result.to_dict(), "details": details, "flink_details": flink, "version": 1})
    )

    old = archive(tmp_path)
    await old.load()

    [overview] = old.overviews()
    assert flink_job_details(overview).to_dict() == flink
    assert job_summary(overview).to_dict() == {
        "id": JOB_ID,
        "name": "sales",
        "status": "FINISHED",
        "start_time": 1_000,
        "end_time": 4_000,
        "duration_ms": 3_000,
    }
    entry = await old.get(JOB_ID)
    assert entry is not None and entry.result == result
    assert job_details(entry.snapshot).to_dict() == {**details, "repairs": []}
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


def ended_at(job_id: str, end_ms: int) -> ArchivedJob:
    """A finished job that ended at `end_ms`."""
    job = finished_job(job_id)
    overview = dataclasses.replace(job.snapshot.overview, end_time=end_ms)
    return dataclasses.replace(
        job,
        result=dataclasses.replace(job.result, end_time=end_ms),
        snapshot=dataclasses.replace(job.snapshot, overview=overview),
    )


def expiring(tmp_path: Path, *, expiration_s: float = 3600.0, max_capacity: int = 100) -> JobArchive:
    return JobArchive(
        ArchiveSettings(directory=tmp_path / "archive", capacity=2, expiration=expiration_s, max_capacity=max_capacity),
        check=leading,
    )


def entry_files(tmp_path: Path) -> set[str]:
    return {p.name.removesuffix(".json") for p in (tmp_path / "archive").iterdir() if p.name != "index.jsonl"}


async def test_jobs_beyond_the_max_capacity_leave_memory_and_disk_oldest_end_first(tmp_path: Path) -> None:
    jobs = expiring(tmp_path, max_capacity=2)
    for job_id, end in (("a1" * 16, 3_000), ("a2" * 16, 1_000), ("a3" * 16, 2_000)):  # put in another order
        await jobs.put(SESSION, ended_at(job_id, end))
    assert jobs.over_capacity

    assert await jobs.expire(SESSION, now_ms=5_000) == ["a2" * 16]

    assert not jobs.over_capacity and "a2" * 16 not in jobs and await jobs.get("a2" * 16) is None
    assert entry_files(tmp_path) == {"a1" * 16, "a3" * 16}
    restarted = expiring(tmp_path, max_capacity=2)
    await restarted.load()
    assert {o.job_id for o in restarted.overviews()} == {"a1" * 16, "a3" * 16}
    assert await restarted.expire(SESSION, now_ms=5_000) == []


async def test_jobs_ended_longer_ago_than_the_expiration_leave_it_unless_kept(tmp_path: Path) -> None:
    jobs = expiring(tmp_path, expiration_s=10)
    for job_id, end in (("b1" * 16, 1_000), ("b2" * 16, 2_000), ("b3" * 16, 20_000)):
        await jobs.put(SESSION, ended_at(job_id, end))

    assert await jobs.expire(SESSION, now_ms=11_500, keep={"b2" * 16}) == ["b1" * 16]
    assert await jobs.expire(SESSION, now_ms=29_000) == ["b2" * 16]  # 27 s after its end; b3 ended 9 s ago

    assert [o.job_id for o in jobs.overviews()] == ["b3" * 16] and entry_files(tmp_path) == {"b3" * 16}
    assert jobs.counts() == {"FINISHED": 1}


async def test_a_writer_that_no_longer_leads_expires_nothing(tmp_path: Path) -> None:
    await expiring(tmp_path, expiration_s=1).put(SESSION, ended_at("c1" * 16, 1_000))
    deposed = expiring(tmp_path, expiration_s=1)
    await deposed.load()
    with pytest.raises(LeadershipLost):
        await deposed.expire("a-former-session", now_ms=60_000)
    assert "c1" * 16 in deposed and entry_files(tmp_path) == {"c1" * 16}


async def test_the_index_loses_the_lines_of_expired_jobs_once_most_are_stale(tmp_path: Path) -> None:
    jobs = expiring(tmp_path, max_capacity=1)
    for n in range(120):
        await jobs.put(SESSION, ended_at(f"{n:032x}", 1_000 + n))
        await jobs.expire(SESSION, now_ms=2_000)
    index = (tmp_path / "archive" / "index.jsonl").read_text().splitlines()
    assert len(index) <= 2 * 1 + 100 + 1  # rewritten when it passed that, appended since
    assert json.loads(index[-1])["job_id"] == f"{119:032x}" and entry_files(tmp_path) == {f"{119:032x}"}
