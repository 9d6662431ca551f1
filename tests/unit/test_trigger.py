"""JobResultTrigger: serialize round trip, exactly one event, failover, on_kill."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import AsyncIterator
from typing import Any

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="sparkdispatch-airflow-home-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

import pytest  # noqa: E402
from aiohttp import web  # noqa: E402

from sparkdispatch.operators import JobResultTrigger  # noqa: E402
from sparkdispatch.testing.services import free_port  # noqa: E402

JOB = "fedcba9876543210fedcba9876543210"


class Master:
    """A fake master that knows one job: IN_PROGRESS until `finish()` or a cancel."""

    def __init__(self, *, leader: bool = True) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.is_leader = leader
        self.result: dict[str, Any] | None = None
        self.cancels = 0
        self.polls = 0
        self.runner: web.AppRunner | None = None

    def finish(self, status: str = "FINISHED") -> None:
        self.result = {"job_id": JOB, "name": "j", "status": status, "vertices": {}}

    async def start(self) -> None:
        async def overview(request: web.Request) -> web.Response:
            return web.json_response({"is_leader": self.is_leader, "leader": self.url if self.is_leader else None})

        async def result(request: web.Request) -> web.Response:
            if request.match_info["job_id"] != JOB:
                return web.json_response({"errors": ["no job with id " + request.match_info["job_id"]]}, status=404)
            self.polls += 1
            if self.result is None:
                return web.json_response({"status": {"id": "IN_PROGRESS"}})
            return web.json_response({"status": {"id": "COMPLETED"}, "job_execution_result": self.result})

        async def cancel(request: web.Request) -> web.Response:
            self.cancels += 1
            self.finish("CANCELED")
            return web.json_response({}, status=202)

        app = web.Application()
        app.router.add_get("/overview", overview)
        app.router.add_get("/jobs/{job_id}/execution-result", result)
        app.router.add_patch("/jobs/{job_id}", cancel)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


@pytest.fixture
async def master(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Master]:
    server = Master()
    await server.start()
    monkeypatch.setenv("AIRFLOW_CONN_SD_TRIGGER", json.dumps(
        {"conn_type": "sparkdispatch", "host": "127.0.0.1", "port": server.port}))
    try:
        yield server
    finally:
        await server.stop()


async def events_of(trigger: JobResultTrigger) -> list[Any]:
    return [event async for event in trigger.run()]


def test_serialize_round_trips() -> None:
    trigger = JobResultTrigger(job_id=JOB, conn_id="c", poll_interval=0.5, cancel_on_kill=False)
    classpath, kwargs = trigger.serialize()
    assert classpath == "sparkdispatch.operators.triggers.JobResultTrigger"
    json.dumps(kwargs)  # the triggerer stores them as JSON
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(__import__(module, fromlist=[name]), name)(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)


async def test_run_yields_exactly_one_event_with_the_job_result(master: Master) -> None:
    trigger = JobResultTrigger(job_id=JOB, conn_id="sd_trigger", poll_interval=0.02)
    waiting = asyncio.create_task(events_of(trigger))
    while master.polls < 3:
        await asyncio.sleep(0.01)
    assert not waiting.done()
    master.finish("FAILED")
    (event,) = await asyncio.wait_for(waiting, 10)
    assert event.payload == {"status": "terminal", "job_id": JOB, "result": master.result}


async def test_an_unknown_job_gives_one_error_event(master: Master) -> None:
    trigger = JobResultTrigger(job_id="0" * 32, conn_id="sd_trigger", poll_interval=0.02)
    (event,) = await asyncio.wait_for(events_of(trigger), 10)
    assert event.payload["status"] == "error" and "no job with id" in event.payload["message"]


async def test_the_trigger_keeps_waiting_while_the_leader_changes(master: Master,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    successor = Master(leader=False)
    await successor.start()
    monkeypatch.setenv("AIRFLOW_CONN_SD_HA", json.dumps(
        {"conn_type": "sparkdispatch", "host": f"127.0.0.1:{master.port},127.0.0.1:{successor.port}"}))
    try:
        waiting = asyncio.create_task(events_of(JobResultTrigger(job_id=JOB, conn_id="sd_ha", poll_interval=0.05)))
        while master.polls < 2:
            await asyncio.sleep(0.01)
        await master.stop()  # the leader is gone and nobody leads for a moment
        await asyncio.sleep(0.5)
        assert not waiting.done()
        successor.is_leader = True
        successor.finish()
        (event,) = await asyncio.wait_for(waiting, 30)
        assert event.payload["status"] == "terminal" and event.payload["result"]["status"] == "FINISHED"
    finally:
        await successor.stop()


async def test_on_kill_cancels_the_job_unless_told_not_to(master: Master) -> None:
    await JobResultTrigger(job_id=JOB, conn_id="sd_trigger", cancel_on_kill=False).on_kill()
    assert master.cancels == 0
    await JobResultTrigger(job_id=JOB, conn_id="sd_trigger").on_kill()
    assert master.cancels == 1
