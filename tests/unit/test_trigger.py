"""JobResultTrigger: serialize round trip, exactly one event, failover, on_kill; against real masters."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="sparkdispatch-airflow-home-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

import pytest

from sparkdispatch.client import SparkDispatchClient
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.job_result import Failure
from sparkdispatch.operators import JobResultTrigger
from sparkdispatch.testing.master import InProcessMaster, TaskOutcome, finish_every_task
from sparkdispatch.testing.proxy import RecordingProxy
from sparkdispatch.testing.waiting import eventually

JOB = "fedcba9876543210fedcba9876543210"
GRAPH = {"job_id": JOB, "name": "j", "vertices": [{"id": "a", "entrypoint": "m:f"}],
         "restart_strategy": {"type": "none"}}
QUICK_POLLS = {"rest.execution-result.long-poll": "50ms"}


def proxy_of(master: InProcessMaster) -> RecordingProxy:
    assert master.proxy is not None
    return master.proxy


def result_polls(master: InProcessMaster) -> int:
    return proxy_of(master).count("GET", f"/jobs/{JOB}/execution-result")


async def submit(master: InProcessMaster) -> None:
    """JOB on `master`, its one task running on a TaskExecutor until told to end."""
    async with SparkDispatchClient(addresses=[master.url]) as client:
        await client.submit(GRAPH)
    await eventually(lambda: master.gateway.of_job(JOB), "the job's task deployed")


@pytest.fixture
async def master(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AsyncIterator[InProcessMaster]:
    """A real master running JOB, IN_PROGRESS until its TaskExecutor ends it."""
    async with InProcessMaster(storage_dir=tmp_path, overrides=QUICK_POLLS, record_requests=True) as server:
        await server.add_task_executor()
        await submit(server)
        monkeypatch.setenv("AIRFLOW_CONN_SD_TRIGGER", json.dumps(
            {"conn_type": "sparkdispatch", "host": "127.0.0.1", "port": server.port}))
        yield server


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


async def test_run_yields_exactly_one_event_with_the_job_result(master: InProcessMaster) -> None:
    trigger = JobResultTrigger(job_id=JOB, conn_id="sd_trigger", poll_interval=0.02)
    waiting = asyncio.create_task(events_of(trigger))
    await eventually(lambda: result_polls(master) >= 3, "three polls of the result")
    assert not waiting.done()
    (task_executor,) = master.task_executors
    await task_executor.end_job(JOB, TaskOutcome(ExecutionState.FAILED, Failure("ValueError", "bad row 7")))
    (event,) = await asyncio.wait_for(waiting, 10)
    async with SparkDispatchClient(addresses=[master.url]) as client:
        result = await client.execution_result(JOB)
    assert result is not None and result.status == "FAILED"
    assert event.payload == {"status": "terminal", "job_id": JOB, "result": result.to_dict()}


async def test_an_unknown_job_gives_one_error_event(master: InProcessMaster) -> None:
    trigger = JobResultTrigger(job_id="0" * 32, conn_id="sd_trigger", poll_interval=0.02)
    (event,) = await asyncio.wait_for(events_of(trigger), 10)
    assert event.payload["status"] == "error" and "no job with id" in event.payload["message"]


async def test_the_trigger_keeps_waiting_while_the_leader_changes(master: InProcessMaster,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # the successor takes the stored job over once the master is gone
    successor = InProcessMaster(storage_dir=master.config.storage_dir, overrides=QUICK_POLLS, record_requests=True)
    monkeypatch.setenv("AIRFLOW_CONN_SD_HA", json.dumps(
        {"conn_type": "sparkdispatch", "host": f"127.0.0.1:{master.port},127.0.0.1:{successor.port}"}))
    try:
        waiting = asyncio.create_task(events_of(JobResultTrigger(job_id=JOB, conn_id="sd_ha", poll_interval=0.05)))
        await eventually(lambda: result_polls(master) >= 2, "two polls of the result")
        await master.stop()  # the leader is gone and nobody leads for a moment
        await asyncio.sleep(0.5)  # that moment: the trigger must wait through it
        assert not waiting.done()
        await successor.start()
        await successor.add_task_executor(script=finish_every_task)
        (event,) = await asyncio.wait_for(waiting, 30)
        assert event.payload["status"] == "terminal" and event.payload["result"]["status"] == "FINISHED"
    finally:
        await successor.stop()


async def test_on_kill_cancels_the_job_unless_told_not_to(master: InProcessMaster) -> None:
    await JobResultTrigger(job_id=JOB, conn_id="sd_trigger", cancel_on_kill=False).on_kill()
    assert proxy_of(master).count("PATCH", f"/jobs/{JOB}") == 0
    await JobResultTrigger(job_id=JOB, conn_id="sd_trigger").on_kill()
    assert proxy_of(master).count("PATCH", f"/jobs/{JOB}") == 1
    async with SparkDispatchClient(addresses=[master.url]) as client:
        assert (await client.job(JOB)).status == "CANCELED"
