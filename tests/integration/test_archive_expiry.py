"""The archive of finished jobs expires by count and by age on a real master (real REST, real stores),
and stays expired when another master starts on the same storage; the JobResult store keeps its
entries by its own rule (`job-result-store.delete-on-commit`), so an expired job still is not run again."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from sparkdispatch.model.job_graph import JobGraph
from sparkdispatch.testing.http import request_json
from sparkdispatch.testing.master import InProcessMaster, finish_every_task
from sparkdispatch.testing.waiting import eventually

WAIT = 60.0
JOBS = ["a1" * 16, "a2" * 16, "a3" * 16]


def graph(job_id: str) -> dict[str, Any]:
    return JobGraph.from_dict(
        {"job_id": job_id, "name": f"job-{job_id[:2]}", "vertices": [{"id": "only", "entrypoint": "tasks:noop"}]}
    ).to_dict()


async def finished(url: str, job_id: str) -> bool:
    status, body = await request_json("GET", f"{url}/jobs/{job_id}/execution-result")
    assert status == 200, body
    return bool(body["status"]["id"] == "COMPLETED")


async def listed(url: str) -> list[str]:
    status, body = await request_json("GET", f"{url}/jobs")
    assert status == 200, body
    return sorted(job["id"] for job in body["jobs"])


def archived_files(storage: Path) -> list[str]:
    return sorted(p.name for p in storage.glob("archive/*/*.json"))


async def test_finished_jobs_expire_by_count_then_by_age_and_a_restarted_master_keeps_them_expired(
    tmp_path: Path,
) -> None:
    storage = tmp_path / "storage"
    keep_results = {"job-result-store.delete-on-commit": "false", "jobstore.max-capacity": "2"}
    async with InProcessMaster(storage_dir=storage, overrides=keep_results) as master:
        await master.add_task_executor(script=finish_every_task)
        for job_id in JOBS:  # one after another: each ends after the one before
            assert (await request_json("POST", f"{master.url}/jobs", graph(job_id)))[0] == 202
            await eventually(partial(finished, master.url, job_id), f"job {job_id} ends", timeout=WAIT, interval=0.05)
        # the oldest left the archive, in memory and on disk, once the third was archived
        await eventually(
            lambda: archived_files(storage) == [f"{JOBS[1]}.json", f"{JOBS[2]}.json"],
            "the oldest archived job's file removed",
            timeout=WAIT,
        )
        assert await listed(master.url) == JOBS[1:]
        assert (await request_json("GET", f"{master.url}/jobs/{JOBS[0]}"))[0] == 404

    async with InProcessMaster(storage_dir=storage, overrides=keep_results) as restarted:
        assert await listed(restarted.url) == JOBS[1:]

    async with InProcessMaster(
        storage_dir=storage, overrides={**keep_results, "jobstore.expiration-time": "1s"}
    ) as expiring:
        # the two jobs ended longer ago than that by the time this master leads, or soon after
        await eventually(partial(no_jobs_listed, expiring.url), "every archived job expired", timeout=WAIT)
        await eventually(lambda: archived_files(storage) == [], "their entry files removed", timeout=WAIT)
        # the JobResult store keeps what its retention says: the same job is answered, not run again
        assert sorted(p.name for p in storage.glob("job-result-store/**/*.json")) == [f"{j}.json" for j in JOBS]
        status, body = await request_json("POST", f"{expiring.url}/jobs", graph(JOBS[0]))
        assert (status, body["status"]) == (200, "FINISHED"), body
        assert await expiring.master.ha.jobgraph_store.job_ids() == set()


async def no_jobs_listed(url: str) -> bool:
    return await listed(url) == []
