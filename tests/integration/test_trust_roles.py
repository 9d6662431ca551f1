"""Who may do what on a real master over real HTTP: users' named tokens with roles, the cluster
secret that alone reaches the TaskExecutor routes, and a TaskExecutor's report that names a result
the master did not assign."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from sparkdispatch.model.protocol import ExecutionReport, SlotReport, SlotStatus, TaskDeploymentDescriptor
from sparkdispatch.taskexecutor.master_client import AsyncMasterClient
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.testing.http import request_json
from sparkdispatch.testing.master import InProcessMaster, TaskOutcome
from sparkdispatch.testing.waiting import eventually

VIEWER = "viewer-token-0123456789"
SUBMITTER = "submitter-token-0123456789"
ADMIN = "legacy-admin-token-0123456789"
SECRET = "cluster-secret-0123456789"
GRAPH = {"name": "roles", "vertices": [{"id": "a", "entrypoint": "m:f", "parallelism": 2}]}


@pytest.fixture
async def master(tmp_path: Path) -> AsyncIterator[InProcessMaster]:
    (tmp_path / "tokens").write_text(f"grafana viewer {VIEWER}\nci submitter {SUBMITTER}\n")
    async with InProcessMaster(
        overrides={
            "rest.auth.tokens-file": str(tmp_path / "tokens"),
            "rest.auth.token": ADMIN,
            "cluster.secret": SECRET,
        }
    ) as running:
        yield running


async def jobs(master: InProcessMaster) -> list[object]:
    status, body = await request_json("GET", f"{master.url}/jobs", token=ADMIN)
    assert status == 200, body
    return list(body["jobs"])


async def registered(master: InProcessMaster) -> list[str]:
    status, body = await request_json("GET", f"{master.url}/taskmanagers", token=ADMIN)
    assert status == 200, body
    return [entry["id"] for entry in body["taskmanagers"]]


async def test_each_role_does_its_own_part_and_a_refusal_changes_nothing(master: InProcessMaster) -> None:
    url = master.url
    assert (await request_json("GET", f"{url}/jobs"))[0] == 401
    assert (await request_json("GET", f"{url}/jobs", token=VIEWER))[0] == 200
    status, refused = await request_json("POST", f"{url}/jobs", GRAPH, token=VIEWER)
    assert status == 403 and refused["type"] == "Forbidden"
    assert "needs the role submitter; grafana is a viewer" in refused["errors"][0]
    assert await jobs(master) == []
    # the cluster secret is no user's: it reaches the overview a standby asks for, not a submission
    assert (await request_json("GET", f"{url}/overview", token=SECRET))[0] == 200
    status, refused = await request_json("POST", f"{url}/jobs", GRAPH, token=SECRET)
    assert status == 403 and "does not reach users' calls" in refused["errors"][0]
    assert await jobs(master) == []

    status, submitted = await request_json("POST", f"{url}/jobs", GRAPH, token=SUBMITTER)
    assert status == 202, submitted
    status, _ = await request_json("PATCH", f"{url}/jobs/{submitted['job_id']}", token=SUBMITTER)
    assert status == 202
    status, _ = await request_json("PATCH", f"{url}/jobs/{submitted['job_id']}", token=VIEWER)
    assert status == 403


async def test_only_the_cluster_secret_reaches_the_taskexecutor_routes(master: InProcessMaster) -> None:
    deployed: list[TaskDeploymentDescriptor] = []
    te = await master.add_task_executor("te-1", script=deployed.append)  # registers with the cluster secret
    registration = {
        "task_executor_id": "te-1",
        "hostname": "evil",
        "queue": "evil",
        "slots": 2,
        "slot_report": SlotReport.free(2).to_dict(),
        "spark_master": "local[1]",
    }
    for token in (VIEWER, SUBMITTER, ADMIN, ""):
        status, refused = await request_json("POST", f"{master.url}/taskexecutors", registration, token=token)
        assert status == 401, (token, refused)
        assert "takes the cluster secret" in refused["errors"][0]
    assert await registered(master) == ["te-1"]  # the live TaskExecutor was not evicted

    status, submitted = await request_json("POST", f"{master.url}/jobs", GRAPH, token=SUBMITTER)
    assert status == 202
    await eventually(lambda: len(deployed) == 2, "both subtasks deployed")
    heartbeat = AsyncMasterClient(token=SECRET)
    try:
        await heartbeat.heartbeat(
            master.url,
            master.session_id,
            "te-1",
            slot_report=SlotReport(tuple(SlotStatus(t.slot_index, t.allocation_id, t.job_id) for t in deployed)),
            executions=[ExecutionReport(t.job_id, t.execution_id, ExecutionState.RUNNING).to_dict() for t in deployed],
        )
    finally:
        await heartbeat.close()
    assert await _executions(master, ADMIN) == sorted(t.execution_id for t in deployed)
    assert await _executions(master, SUBMITTER) == sorted(t.execution_id for t in deployed)
    assert await _executions(master, VIEWER) == [None, None]  # a viewer sees what runs, not the attempts' ids
    await te.end_job(submitted["job_id"], lambda tdd: TaskOutcome(rows=1, result_path=tdd.result_path))

    async def finished() -> bool:
        status, job = await request_json("GET", f"{master.url}/jobs/{submitted['job_id']}", token=VIEWER)
        return status == 200 and job["status"] == "FINISHED"

    await eventually(finished, "the job to finish")


async def _executions(master: InProcessMaster, token: str) -> list[object]:
    status, body = await request_json("GET", f"{master.url}/taskmanagers", token=token)
    assert status == 200, body
    ids = [e["execution_id"] for entry in body["taskmanagers"] for e in entry["executions"]]
    return ids if None in ids else sorted(ids)


async def test_a_finished_report_naming_another_result_is_refused(master: InProcessMaster) -> None:
    elsewhere = "/tmp/another-job/a/0"
    te = await master.add_task_executor("te-1", script=lambda tdd: TaskOutcome(rows=1, result_path=elsewhere))
    status, submitted = await request_json("POST", f"{master.url}/jobs", GRAPH, token=SUBMITTER)
    assert status == 202
    await eventually(lambda: len(te.refused) >= 2, "both reports refused")
    assert {type(r).__name__ for r in te.refused} == {"InvalidRequest"}
    assert "result_path" in str(te.refused[0])
    assert "is not where this master asked the attempt to write" in str(te.refused[0])
    status, job = await request_json("GET", f"{master.url}/jobs/{submitted['job_id']}", token=VIEWER)
    assert status == 200 and job["status"] != "FINISHED"
    assert all(s["state"] != ExecutionState.FINISHED.value for v in job["vertices"] for s in v["subtasks"])


async def test_a_token_removed_from_the_file_is_refused_without_a_restart(
    master: InProcessMaster, tmp_path: Path
) -> None:
    assert (await request_json("GET", f"{master.url}/jobs", token=VIEWER))[0] == 200
    (tmp_path / "tokens").write_text(f"ci submitter {SUBMITTER}\n")

    async def refused() -> bool:
        return (await request_json("GET", f"{master.url}/jobs", token=VIEWER))[0] == 401

    await eventually(refused, "the viewer's token to be refused", interval=0.2)
    assert (await request_json("GET", f"{master.url}/jobs", token=SUBMITTER))[0] == 200


async def test_the_web_ui_names_the_user_and_offers_a_viewer_no_cancel(master: InProcessMaster) -> None:
    status, submitted = await request_json("POST", f"{master.url}/jobs", GRAPH, token=SUBMITTER)
    assert status == 202
    pages = {}
    for name, token in (("grafana", VIEWER), ("ci", SUBMITTER)):
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:  # an IP host
            async with browser.post(
                f"{master.url}/ui/login", data={"token": token, "next": "/ui/"}, allow_redirects=False
            ) as login:
                assert login.status == 303
            async with browser.get(f"{master.url}/ui/jobs/{submitted['job_id']}") as page:
                assert page.status == 200
                pages[name] = await page.text()
    assert 'id="user">grafana <span class="role">viewer</span>' in pages["grafana"]
    assert 'id="cancel-job"' not in pages["grafana"]
    assert 'id="user">ci <span class="role">submitter</span>' in pages["ci"] and 'id="cancel-job"' in pages["ci"]
    async with (
        aiohttp.ClientSession() as browser,
        browser.post(f"{master.url}/ui/login", data={"token": SECRET, "next": "/ui/"}, allow_redirects=False) as login,
    ):
        assert login.status == 401  # the cluster secret is no user's login
