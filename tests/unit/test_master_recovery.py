"""A real master over REST (an InProcessMaster): it answers for its jobs only once it has
recovered them, `503` with `Retry-After` meanwhile while TaskExecutors are served all the same;
the same job submitted again after it ended is answered with its status, never run again; a
graph naming an artifact the master does not have is refused."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sparkdispatch.dispatcher.dispatcher import Dispatcher
from sparkdispatch.model.job_result import JobResult
from sparkdispatch.testing.master import InProcessMaster, finish_every_task
from sparkdispatch.testing.waiting import eventually
from sparkdispatch.testing.job_result import wait_for_result

JOB = "ab" * 16
GRAPH: dict[str, Any] = {"name": "sales", "job_id": JOB, "vertices": [{"id": "extract", "entrypoint": "m:f"}]}


async def call(method: str, url: str, body: Any = None) -> tuple[int, Any, Mapping[str, str]]:
    """(status, decoded JSON body, headers) of one HTTP call."""
    async with aiohttp.ClientSession() as session:
        async with session.request(method, url, json=body) as answer:
            text = await answer.text()
            return answer.status, json.loads(text) if text else None, dict(answer.headers)


async def result_of(master: InProcessMaster, job_id: str) -> JobResult:
    """The JobResult; every answer on the way is a 200 (the master serves the job all along)."""
    return await asyncio.to_thread(wait_for_result, lambda: [master.url], job_id, timeout=30, strict=True)


async def test_a_new_leader_answers_503_with_retry_after_until_it_has_recovered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with InProcessMaster(storage_dir=tmp_path) as first:
        assert (await call("POST", first.url + "/jobs", GRAPH))[0] == 202
    # the job stays in the stores; the next master's recovery is held back at its start
    entered, gate = asyncio.Event(), asyncio.Event()
    real_start = Dispatcher.start

    async def held_start(self: Dispatcher) -> None:
        entered.set()
        await gate.wait()
        await real_start(self)

    monkeypatch.setattr(Dispatcher, "start", held_start)
    master = InProcessMaster(storage_dir=tmp_path)
    starting = asyncio.create_task(master.start())
    try:
        await entered.wait()
        for method, path, body in (
            ("GET", f"/jobs/{JOB}", None),
            ("GET", f"/jobs/{JOB}/execution-result", None),
            ("POST", "/jobs", GRAPH),
            ("GET", "/jobs", None),
            ("PATCH", f"/jobs/{JOB}?mode=cancel", None),
            ("GET", f"/v1/jobs/{JOB}", None),
        ):
            status, answer, headers = await call(method, master.url + path, body)
            assert status == 503 and headers.get("Retry-After") == "1", (method, path, status, answer)
            if not path.startswith("/v1/"):
                assert answer["type"] == "RecoveryInProgress" and answer["leader"] == master.url
                assert answer["retry_after"] == 1
        assert (await call("GET", master.url + "/overview"))[0] == 200
        await master.add_task_executor()  # the ResourceManager serves TaskExecutors meanwhile
        gate.set()
        await starting
        status, details, _ = await call("GET", f"{master.url}/jobs/{JOB}")
        assert status == 200 and details["status"] == "RUNNING"
        status, answer, _ = await call("POST", master.url + "/jobs", GRAPH)
        assert status == 200 and answer == {"job_id": JOB, "jobUrl": f"/jobs/{JOB}", "status": "RUNNING"}
        await eventually(lambda: len(master.gateway.of_job(JOB)) == 1, "one deployment of the job")
        await asyncio.sleep(0.2)  # room for a second deployment, which must not come
        assert len(master.gateway.of_job(JOB)) == 1  # one JobMaster ran it, once
    finally:
        gate.set()
        await asyncio.gather(starting, return_exceptions=True)
        await master.stop()


async def test_the_same_job_submitted_after_it_ended_is_answered_and_not_run_again(tmp_path: Path) -> None:
    async with InProcessMaster(storage_dir=tmp_path) as master:
        await master.add_task_executor(script=finish_every_task)
        assert (await call("POST", master.url + "/jobs", GRAPH))[0] == 202
        assert (await result_of(master, JOB)).status == "FINISHED"
        status, answer, _ = await call("POST", master.url + "/jobs", GRAPH)
        assert status == 200 and answer == {"job_id": JOB, "jobUrl": f"/jobs/{JOB}", "status": "FINISHED"}
        status, answer, _ = await call("POST", master.url + "/jobs", {**GRAPH, "name": "other"})
        assert status == 409 and answer["type"] == "DuplicateJobSubmission"
        assert len(master.gateway.of_job(JOB)) == 1
    async with InProcessMaster(storage_dir=tmp_path) as restarted:  # a later leader knows it from the archive
        await restarted.add_task_executor(script=finish_every_task)
        status, answer, _ = await call("POST", restarted.url + "/jobs", GRAPH)
        assert status == 200 and answer["status"] == "FINISHED"
        assert restarted.gateway.of_job(JOB) == []


async def test_a_graph_naming_an_artifact_the_master_lacks_is_refused_naming_it() -> None:
    missing = "0f" * 32
    async with InProcessMaster() as master:
        status, answer, _ = await call("POST", master.url + "/jobs", {**GRAPH, "artifacts": [missing]})
        assert status == 400 and answer["type"] == "InvalidJobGraph", answer
        assert list(answer["field_errors"]) == ["artifacts[0]"] and missing in answer["errors"][0]
        status, jobs, _ = await call("GET", master.url + "/jobs")
        assert status == 200 and jobs["jobs"] == []
