"""The leader removes artifacts nobody uses (`blob.retention`), never one a stored job names.

A real master in the test process (real HTTP, scripted TaskExecutors) with a retention of 1 s.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from sparkdispatch.dispatcher.blob_cleanup import BlobCleaner
from sparkdispatch.client import SparkDispatchClient
from sparkdispatch.errors import BlobNotFound, RepairNotPossible
from sparkdispatch.ha.blob_store import BlobStore
from sparkdispatch.testing.master import InProcessMaster, TaskOutcome
from sparkdispatch.testing.waiting import eventually

RETENTION = {"blob.retention": "1s", "blob.cleanup-interval": "100ms"}


def code(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_text(f"def run(ctx):\n    return None  # {name}\n")
    return path


def graph(key: str, name: str = "uses-code") -> dict[str, object]:
    return {
        "name": name,
        "artifacts": [key],
        "restart_strategy": {"type": "none"},
        "vertices": [{"id": "only", "entrypoint": "job:run", "parallelism": 1}],
    }


async def stored(master: InProcessMaster, key: str) -> bool:
    try:
        await asyncio.to_thread(master.master.ha.blob_store.path_blocking, key)
    except BlobNotFound:
        return False
    return True


async def wait_until_removed(master: InProcessMaster, key: str) -> None:
    async def removed() -> bool:
        return not await stored(master, key)

    await eventually(removed, f"blob {key} to be removed", interval=0.1)


async def test_an_unused_artifact_goes_and_one_a_waiting_job_names_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rounds: list[float] = []  # when each cleanup round began (monotonic)
    sweep = BlobCleaner.sweep

    async def counted(self: BlobCleaner) -> list[str]:
        rounds.append(time.monotonic())
        return await sweep(self)

    monkeypatch.setattr(BlobCleaner, "sweep", counted)
    async with InProcessMaster(overrides=RETENTION) as master, SparkDispatchClient(addresses=[master.url]) as client:
        unused = await client.upload_artifact(code(tmp_path, "unused.py"))
        named = await client.upload_artifact(code(tmp_path, "named.py"))
        # no TaskExecutor: the job waits for slots, its JobGraph stored
        job_id = (await client.submit(graph(named))).job_id
        past_retention = time.monotonic() + 1.0  # its last use: the submission
        await wait_until_removed(master, unused)
        await eventually(
            lambda: sum(began > past_retention for began in rounds) >= 2,
            "two cleanup rounds past the retention of the named artifact",
        )
        assert await stored(master, named)
        await client.cancel(job_id)
        await asyncio.wait_for(client.wait_for_result(job_id, poll_interval=0.1), 30)
        await wait_until_removed(master, named)  # its job ended and was cleaned up


async def test_a_repair_of_a_job_whose_code_was_removed_is_refused_naming_why(tmp_path: Path) -> None:
    async with InProcessMaster(overrides=RETENTION) as master, SparkDispatchClient(addresses=[master.url]) as client:
        await master.add_task_executor(script=lambda tdd: TaskOutcome(rows=1, result_path=tdd.result_path))
        key = await client.upload_artifact(code(tmp_path, "job.py"))
        job_id = (await client.submit(graph(key))).job_id
        assert (await asyncio.wait_for(client.wait_for_result(job_id, poll_interval=0.1), 30)).status == "FINISHED"
        await wait_until_removed(master, key)
        with pytest.raises(RepairNotPossible, match="its code is no longer stored .*no artifact with key"):
            await client.repair(job_id, ["only"])
        # uploaded again, the same code has the same key: the repair runs
        assert await client.upload_artifact(code(tmp_path, "job.py")) == key
        answer = await client.repair(job_id, ["only"])
        assert answer.created
        assert (await asyncio.wait_for(client.wait_for_result(job_id, poll_interval=0.1), 30)).status == "FINISHED"


def test_a_sweep_keeps_what_is_named_or_recent_and_drops_abandoned_uploads(tmp_path: Path) -> None:
    store = BlobStore(tmp_path, max_size=1 << 20)
    old, kept, fresh = (store.put_blocking(f"x = {n}\n".encode(), f"m{n}.py") for n in range(3))
    abandoned = tmp_path / f"{'0' * 64}.tmp-123"
    abandoned.mkdir()
    an_hour_ago = time.time() - 3600
    for path in (tmp_path / old, tmp_path / kept, abandoned):
        os.utime(path, (an_hour_ago, an_hour_ago))
    assert store.sweep_blocking(60.0, keep={kept}) == [old]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([kept, fresh])
    # uploading the same content again counts as a use
    os.utime(tmp_path / kept, (an_hour_ago, an_hour_ago))
    store.put_blocking(b"x = 1\n", "again.py")
    assert store.sweep_blocking(60.0, keep=set()) == []
