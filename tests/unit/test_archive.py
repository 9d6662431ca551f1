"""The job archive: entries on shared storage, read back by any master, old entries converted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparkdispatch.archive import ArchivedJob, JobArchive
from sparkdispatch.jobgraph import ExecutionState, JobResult, JobStatus, VertexResult
from sparkdispatch.rest.views import flink_job_details, job_details, job_summary
from sparkdispatch.settings import ArchiveSettings
from sparkdispatch.snapshot import JobOverview, JobSnapshot, SubtaskSnapshot, VertexSnapshot

JOB_ID = "cd" * 16


def archive(tmp_path: Path) -> JobArchive:
    return JobArchive(ArchiveSettings(directory=tmp_path / "archive", capacity=2))


def finished_job() -> ArchivedJob:
    result = JobResult(job_id=JOB_ID, name="sales", status=JobStatus.FINISHED, start_time=1_000, end_time=4_000,
                       vertices={"only": VertexResult(ExecutionState.FINISHED, 1, rows=3, result_path="/r/only")})
    overview = JobOverview(job_id=JOB_ID, name="sales", status=JobStatus.FINISHED, start_time=1_000, end_time=4_000,
                           duration_ms=3_000, last_modification=3_900, tasks={ExecutionState.FINISHED: 2})
    snapshot = JobSnapshot(overview, (VertexSnapshot("only", ExecutionState.FINISHED, 2, subtasks=(
        SubtaskSnapshot(0, ExecutionState.FINISHED, 0, "te-1"), SubtaskSnapshot(1, ExecutionState.FINISHED, 1, "te-2"))),))
    return ArchivedJob(result, snapshot)


async def test_an_archived_job_is_read_back_by_another_master(tmp_path: Path) -> None:
    job = finished_job()
    await archive(tmp_path).put(job)

    other = archive(tmp_path)
    await other.load()

    assert JOB_ID in other and other.overviews() == [job.snapshot.overview]
    assert other.counts() == {"FINISHED": 1}
    assert await other.get(JOB_ID) == job
    assert await other.get("ef" * 16) is None


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
    assert entry is not None and entry.result == result and job_details(entry.snapshot) == details


async def test_a_damaged_entry_is_skipped(tmp_path: Path) -> None:
    await archive(tmp_path).put(finished_job())
    (tmp_path / "archive" / ("ef" * 16 + ".json")).write_text("{not json")

    other = archive(tmp_path)
    await other.load()

    assert [o.job_id for o in other.overviews()] == [JOB_ID]
