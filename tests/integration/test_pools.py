"""TaskExecutor pools on a real master over real HTTP: a job runs only on the TaskExecutors of its
JobGraph's `pool`, and a token limited to pools submits, cancels and repairs jobs of those pools only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sparkdispatch.testing.http import request_json
from sparkdispatch.testing.master import InProcessMaster
from sparkdispatch.testing.waiting import eventually

TEAM_A = "team-a-token-0123456789"
ADMIN = "legacy-admin-token-0123456789"


def graph(name: str, pool: str | None = None) -> dict[str, object]:
    body: dict[str, object] = {"name": name, "vertices": [{"id": "a", "entrypoint": "m:f", "parallelism": 2}]}
    return body if pool is None else {**body, "pool": pool}


@pytest.fixture
async def master(tmp_path: Path) -> AsyncIterator[InProcessMaster]:
    (tmp_path / "tokens").write_text(f"team-a submitter {TEAM_A} pools=team-a\n")
    overrides = {"rest.auth.tokens-file": str(tmp_path / "tokens"), "rest.auth.token": ADMIN}
    async with InProcessMaster(overrides=overrides) as running:
        yield running


async def placement(master: InProcessMaster, job_id: str) -> set[str]:
    """The TaskExecutors the job's subtasks were deployed to, once all of them were."""

    async def deployed() -> set[str] | None:
        status, body = await request_json("GET", f"{master.url}/jobs/{job_id}", token=ADMIN)
        assert status == 200, body
        places = [subtask["taskmanager"] for vertex in body["vertices"] for subtask in vertex["subtasks"]]
        return set(places) if all(places) else None

    return await eventually(deployed, f"every subtask of job {job_id} deployed")


async def test_a_job_runs_on_the_task_executors_of_its_pool_only(master: InProcessMaster) -> None:
    # te-a first: free slots are handed out last in, first out, so without pools job "a" would land on te-default
    await master.add_task_executor("te-a", slots=2, pool="team-a")
    await master.add_task_executor("te-default", slots=2)
    status, body = await request_json("GET", f"{master.url}/taskmanagers", token=ADMIN)
    assert {entry["id"]: entry["pool"] for entry in body["taskmanagers"]} == {"te-default": "default", "te-a": "team-a"}

    status, in_a = await request_json("POST", f"{master.url}/jobs", graph("a", "team-a"), token=TEAM_A)
    assert status == 202, in_a
    assert await placement(master, in_a["job_id"]) == {"te-a"}
    status, anywhere = await request_json("POST", f"{master.url}/jobs", graph("default"), token=ADMIN)
    assert status == 202, anywhere
    assert await placement(master, anywhere["job_id"]) == {"te-default"}

    # a pool no TaskExecutor serves: the job waits (and then fails with SlotRequestTimeout naming the pool)
    status, waiting = await request_json("POST", f"{master.url}/jobs", graph("gpu", "gpu"), token=ADMIN)
    assert status == 202, waiting
    status, body = await request_json("GET", f"{master.url}/jobs/{waiting['job_id']}", token=ADMIN)
    assert all(subtask["taskmanager"] is None for vertex in body["vertices"] for subtask in vertex["subtasks"])


async def test_a_token_limited_to_pools_acts_on_their_jobs_only(master: InProcessMaster) -> None:
    url = master.url
    for pool in (None, "team-b"):
        status, refused = await request_json("POST", f"{url}/jobs", graph("elsewhere", pool), token=TEAM_A)
        assert (status, refused["type"]) == (403, "Forbidden"), refused
        assert (
            f"team-a may submit jobs of the pools team-a only; this job runs in pool '{pool or 'default'}'"
            in (refused["errors"][0])
        )
    status, body = await request_json("GET", f"{url}/jobs", token=TEAM_A)
    assert (status, body["jobs"]) == (200, [])  # nothing was stored

    status, theirs = await request_json("POST", f"{url}/jobs", graph("b", "team-b"), token=ADMIN)
    assert status == 202, theirs
    status, refused = await request_json("PATCH", f"{url}/jobs/{theirs['job_id']}", token=TEAM_A)
    assert (status, refused["type"]) == (403, "Forbidden"), refused
    status, refused = await request_json(
        "POST", f"{url}/jobs/{theirs['job_id']}/repair", {"vertices": ["a"]}, token=TEAM_A
    )
    assert (status, refused["type"]) == (403, "Forbidden"), refused
    status, body = await request_json("GET", f"{url}/jobs/{theirs['job_id']}", token=TEAM_A)
    assert (status, body["status"]) == (200, "RUNNING")  # reading is not limited; the refused cancel changed nothing

    status, mine = await request_json("POST", f"{url}/jobs", graph("a", "team-a"), token=TEAM_A)
    assert status == 202, mine
    assert (await request_json("PATCH", f"{url}/jobs/{mine['job_id']}", token=TEAM_A))[0] == 202
    status, refused = await request_json("POST", f"{url}/jobs", {**graph("bad"), "pool": "../x"}, token=ADMIN)
    assert (status, list(refused["field_errors"])) == (400, ["pool"])
