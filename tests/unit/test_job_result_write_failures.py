"""A JobResult write that fails on the disk (ENOSPC, EIO) leaves no temp file and says which file and why."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from sparkdispatch.errors import StoreError
from sparkdispatch.ha import files
from sparkdispatch.ha.job_result_store import FileSystemJobResultStore, JobResultEntry
from sparkdispatch.model.job_result import JobResult
from sparkdispatch.model.states import JobStatus

JOB_ID = "ab" * 16


async def always_leading(session_id: str, component: str) -> None:
    """The leadership check of a writer that leads."""


def failing_fsync(monkeypatch: Any, code: int) -> list[str]:
    """`os.fsync` of the stores fails with `code` on a dirty JobResult's temp file, after its bytes
    were written (a disk that filled up under the write); the paths it failed on."""
    real_fsync = os.fsync
    failed: list[str] = []

    def fsync(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if "_DIRTY.json" + files.TEMP_MARK in path:
            failed.append(path)
            raise OSError(code, os.strerror(code), path)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return failed


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
async def test_a_failed_write_leaves_no_temp_file_and_names_the_file_and_the_cause(
    tmp_path: Path, monkeypatch: Any, code: int
) -> None:
    store = FileSystemJobResultStore(tmp_path / "job-results", delete_on_commit=True, check=always_leading)
    failed = failing_fsync(monkeypatch, code)
    entry = JobResultEntry(JobResult(job_id=JOB_ID, name="j", status=JobStatus.FINISHED, start_time=1, end_time=2))
    for _ in range(3):  # the Dispatcher's retries: none leaves a file behind
        with pytest.raises(StoreError) as raised:
            await store.create_dirty("session", entry)
        assert f"{tmp_path / 'job-results' / JOB_ID}_DIRTY.json" in str(raised.value)
        assert os.strerror(code) in str(raised.value)
    assert len(set(failed)) == 3 and not any(Path(path).exists() for path in failed)
    assert list((tmp_path / "job-results").iterdir()) == []
    assert not await store.has_entry(JOB_ID)
    monkeypatch.undo()
    await store.create_dirty("session", entry)  # the disk has room again
    assert [p.name for p in (tmp_path / "job-results").iterdir()] == [f"{JOB_ID}_DIRTY.json"]
