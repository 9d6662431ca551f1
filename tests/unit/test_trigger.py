"""SparkDispatchJobTrigger: serialize round trip, exactly one event, failover, on_kill; against real masters."""

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

from sparkdispatch.client import RetryPolicy, SparkDispatchClient
from sparkdispatch.errors import UnknownJob
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.job_result import Failure
from sparkdispatch.model.rest_shapes import SubtaskLogSize
from sparkdispatch.operators import SparkDispatchJobTrigger
from sparkdispatch.testing.master import InProcessMaster, TaskOutcome, finish_every_task
from sparkdispatch.testing.proxy import RecordingProxy
from sparkdispatch.testing.waiting import eventually

JOB = "fedcba9876543210fedcba9876543210"
GRAPH = {
    "job_id": JOB,
    "name": "j",
    "vertices": [{"id": "a", "entrypoint": "m:f"}],
    "restart_strategy": {"type": "none"},
}
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
        monkeypatch.setenv(
            "AIRFLOW_CONN_SD_TRIGGER",
            json.dumps({"conn_type": "sparkdispatch", "host": "127.0.0.1", "port": server.port}),
        )
        yield server


async def events_of(trigger: SparkDispatchJobTrigger) -> list[Any]:
    return [event async for event in trigger.run()]


def test_serialize_round_trips() -> None:
    trigger = SparkDispatchJobTrigger(job_id=JOB, sparkdispatch_conn_id="c", poll_interval=0.5, cancel_on_kill=False)
    classpath, kwargs = trigger.serialize()
    assert classpath == "sparkdispatch.operators.triggers.SparkDispatchJobTrigger"
    json.dumps(kwargs)  # the triggerer stores them as JSON
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(__import__(module, fromlist=[name]), name)(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)


async def test_run_yields_exactly_one_event_with_the_job_result(master: InProcessMaster) -> None:
    trigger = SparkDispatchJobTrigger(job_id=JOB, sparkdispatch_conn_id="sd_trigger", poll_interval=0.02)
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
    trigger = SparkDispatchJobTrigger(job_id="0" * 32, sparkdispatch_conn_id="sd_trigger", poll_interval=0.02)
    (event,) = await asyncio.wait_for(events_of(trigger), 10)
    assert event.payload["status"] == "error" and "no job with id" in event.payload["message"]


async def failover_events(master: InProcessMaster, monkeypatch: pytest.MonkeyPatch, trigger_of: Any, polls: str) -> Any:
    """The one event of the trigger `trigger_of(conn_id)` makes, waiting while `master` stops (after
    two `GET polls` of the trigger) and, half a second later, a successor takes the stored job over
    and finishes its tasks."""
    successor = InProcessMaster(storage_dir=master.config.storage_dir, overrides=QUICK_POLLS, record_requests=True)
    monkeypatch.setenv(
        "AIRFLOW_CONN_SD_HA",
        json.dumps({"conn_type": "sparkdispatch", "host": f"127.0.0.1:{master.port},127.0.0.1:{successor.port}"}),
    )
    try:
        waiting = asyncio.create_task(events_of(trigger_of("sd_ha")))
        await eventually(lambda: proxy_of(master).count("GET", polls) >= 2, f"two GET {polls}")
        await master.stop()  # the leader is gone and nobody leads for a moment
        await asyncio.sleep(0.5)  # that moment: the trigger must wait through it
        assert not waiting.done()
        await successor.start()
        await successor.add_task_executor(script=finish_every_task)
        (event,) = await asyncio.wait_for(waiting, 60)
        return event
    finally:
        await successor.stop()


async def test_the_trigger_keeps_waiting_while_the_leader_changes(
    master: InProcessMaster, monkeypatch: pytest.MonkeyPatch
) -> None:
    event = await failover_events(
        master,
        monkeypatch,
        lambda conn_id: SparkDispatchJobTrigger(job_id=JOB, sparkdispatch_conn_id=conn_id, poll_interval=0.05),
        f"/jobs/{JOB}/execution-result",
    )
    assert event.payload["status"] == "terminal" and event.payload["result"]["status"] == "FINISHED"


async def test_on_kill_cancels_the_job_unless_told_not_to(master: InProcessMaster) -> None:
    await SparkDispatchJobTrigger(job_id=JOB, sparkdispatch_conn_id="sd_trigger", cancel_on_kill=False).on_kill()
    assert proxy_of(master).count("PATCH", f"/jobs/{JOB}") == 0
    await SparkDispatchJobTrigger(job_id=JOB, sparkdispatch_conn_id="sd_trigger").on_kill()
    assert proxy_of(master).count("PATCH", f"/jobs/{JOB}") == 1
    async with SparkDispatchClient(addresses=[master.url]) as client:
        assert (await client.job(JOB)).status == "CANCELED"


# -- the vertex triggers: one watcher per job, failovers, log errors, on_kill ------------------------

GROUP_JOB = "0123456789abcdef0123456789abcdef"
GROUP = {
    "job_id": GROUP_JOB,
    "name": "g",
    "restart_strategy": {"type": "none"},
    "vertices": [{"id": v, "entrypoint": "m:f"} for v in ("a", "b", "c")],
}


async def start_group(master: InProcessMaster) -> None:
    """GROUP_JOB on `master`, its three tasks running on a TaskExecutor of their own until told to end."""
    await master.add_task_executor("te-group", slots=3)
    async with SparkDispatchClient(addresses=[master.url]) as client:
        await client.submit(GROUP)
    while len(master.gateway.of_job(GROUP_JOB)) < 3:
        await asyncio.sleep(0.01)


def write_attempt_log(master: InProcessMaster, vertex: str, text: str) -> None:
    """What a slot process writes for subtask 0's attempt 0 of `vertex` (docs: attempt_logs)."""
    directory = Path(master.config.results_dir) / GROUP_JOB / vertex / "_logs"
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "0-0-e1.log", "a") as log:
        log.write(text)


def vertex_triggers(**kwargs: Any) -> list[Any]:
    from sparkdispatch.operators import SparkDispatchVertexTrigger

    return [
        SparkDispatchVertexTrigger(
            job_id=GROUP_JOB, vertex_id=v, sparkdispatch_conn_id="sd_trigger", poll_interval=0.05, **kwargs
        )
        for v in ("a", "b", "c")
    ]


async def test_the_vertex_triggers_of_a_job_share_one_watcher_one_client_and_one_poll(
    master: InProcessMaster, capfd: pytest.CaptureFixture[str]
) -> None:
    from sparkdispatch.operators import job_watch

    await start_group(master)
    triggers = vertex_triggers()
    runs = [asyncio.create_task(events_of(t)) for t in triggers]
    while proxy_of(master).count("GET", f"/jobs/{GROUP_JOB}/progress") < 3:
        await asyncio.sleep(0.01)
    registry = job_watch._registry()
    assert list(registry.watchers) == [("sd_trigger", GROUP_JOB)] and list(registry.clients) == ["sd_trigger"]
    write_attempt_log(master, "b", "b says hello\n")
    await master.task_executors[-1].end_job(GROUP_JOB, TaskOutcome(rows=3))
    events = [event for (event,) in await asyncio.wait_for(asyncio.gather(*runs), 30)]
    assert [e.payload["status"] for e in events] == ["concluded"] * 3
    assert [e.payload["body"]["vertex"] for e in events] == ["a", "b", "c"]
    assert all(e.payload["body"]["result"]["state"] == "FINISHED" for e in events)
    # one poll of the whole job serves the three; no vertex is asked about on its own
    assert all(proxy_of(master).count("GET", f"/jobs/{GROUP_JOB}/vertices/{v}") == 0 for v in "abc")
    assert "b[0] attempt 0: b says hello" in capfd.readouterr().out  # in the trigger's log
    assert registry.watchers == {} and registry.clients == {}  # the last to leave closed them


async def test_a_vertex_trigger_skips_a_log_it_cannot_read_and_reads_it_on_the_next_poll(
    master: InProcessMaster, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The client's 8 tries of a call pause 17.75 s in all; what counts here is that they run out.
    monkeypatch.setattr(RetryPolicy, "backoff", lambda self, attempt: 0.01)
    await start_group(master)
    write_attempt_log(master, "a", "first line\n")
    proxy_of(master).inject("GET", f"/jobs/{GROUP_JOB}/vertices/a/log", status=500, text="boom", times=8)
    trigger = vertex_triggers()[0]
    run = asyncio.create_task(events_of(trigger))
    output = ""
    while "first line" not in output:
        assert not run.done(), run.result()
        await asyncio.sleep(0.02)
        output += capfd.readouterr().out
    assert proxy_of(master).count("GET", f"/jobs/{GROUP_JOB}/vertices/a/log") > 8  # read after the 8 refusals
    await master.task_executors[-1].end_job(GROUP_JOB, TaskOutcome(rows=3))
    (event,) = await asyncio.wait_for(run, 30)
    assert event.payload["status"] == "concluded"
    output += capfd.readouterr().out
    assert output.count("a[0] attempt 0: first line") == 1


async def test_a_vertex_trigger_waits_out_a_failover(master: InProcessMaster, monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkdispatch.operators import SparkDispatchVertexTrigger

    await start_group(master)
    event = await failover_events(
        master,
        monkeypatch,
        lambda conn_id: SparkDispatchVertexTrigger(
            job_id=GROUP_JOB, vertex_id="b", sparkdispatch_conn_id=conn_id, poll_interval=0.05
        ),
        f"/jobs/{GROUP_JOB}/progress",
    )
    assert event.payload["status"] == "concluded" and event.payload["body"]["result"]["state"] == "FINISHED"


async def test_a_vertex_trigger_killed_leaves_its_job_running_unless_its_run_timed_out(
    master: InProcessMaster, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from sparkdispatch.operators import triggers

    await start_group(master)
    asked: list[Any] = []
    timed_out = False

    def stopped_by_run_timeout(ref: Any) -> bool:  # Airflow's answer, faked: the unit tests have no supervisor
        asked.append(ref)
        return timed_out

    monkeypatch.setattr(triggers, "stopped_by_run_timeout", stopped_by_run_timeout)
    trigger = vertex_triggers()[1]
    trigger.task_instance = SimpleNamespace(dag_id="d", run_id="r", task_id="g.b", map_index=-1)
    await trigger.on_kill()  # a clear, or a mark success or failed
    assert proxy_of(master).count("PATCH", f"/jobs/{GROUP_JOB}") == 0
    assert [(a.dag_id, a.run_id, a.task_id, a.map_index) for a in asked] == [("d", "r", "g.b", -1)]
    timed_out = True
    await trigger.on_kill()  # the DAG run's timeout
    assert proxy_of(master).count("PATCH", f"/jobs/{GROUP_JOB}") == 1
    async with SparkDispatchClient(addresses=[master.url]) as client:
        assert (await client.job(GROUP_JOB)).status == "CANCELED"


async def test_a_vertex_trigger_with_cancel_on_kill_cancels_its_job(master: InProcessMaster) -> None:
    await start_group(master)
    await vertex_triggers(cancel_on_kill=True)[0].on_kill()
    assert proxy_of(master).count("PATCH", f"/jobs/{GROUP_JOB}") == 1


async def test_the_progress_endpoint_answers_every_vertex_and_its_log_lengths_in_one_call(
    master: InProcessMaster,
) -> None:
    await start_group(master)
    write_attempt_log(master, "c", "twelve bytes")
    async with SparkDispatchClient(addresses=[master.url]) as client:
        answer = await client.job_progress(GROUP_JOB)
        assert answer.job_id == GROUP_JOB and answer.job_status == "RUNNING"
        assert [v.vertex for v in answer.vertices] == ["a", "b", "c"]  # the graph's order
        assert [v.logs for v in answer.vertices] == [(), (), (SubtaskLogSize(subtask=0, attempt=0, size=12),)]
        assert all(v.result.state in ("DEPLOYING", "RUNNING") for v in answer.vertices)
        _, spec = await client._request("GET", "/openapi.json")
        assert set(spec["components"]["schemas"]["JobProgress"]["properties"]) == set(answer.to_dict())
        with pytest.raises(UnknownJob, match="no job with id"):
            await client.job_progress("0" * 32)


async def test_a_watcher_that_cannot_read_an_answer_fails_its_watches_instead_of_leaving_them_waiting() -> None:
    from sparkdispatch.operators.job_watch import JobWatcher, VertexWatch, WatchFailed

    class MalformedAnswers:  # a fake client: the master's answer lacks every field
        async def patiently(self, call: Any, what: str) -> dict[str, Any]:
            return {}

        def job_progress(self, job_id: str) -> Any:
            return None

    watcher = JobWatcher(MalformedAnswers(), GROUP_JOB)  # type: ignore[arg-type]
    watch = VertexWatch("a", 1, 0.01)
    watcher.add(watch)
    events = [event async for event in watch.events()]
    assert len(events) == 1 and isinstance(events[0], WatchFailed) and "AttributeError" in events[0].message
    assert watcher.remove(watch)
    await watcher.stop()


async def test_a_watch_that_joins_while_the_last_watch_of_its_job_leaves_is_still_served(
    master: InProcessMaster,
) -> None:
    """A cleared vertex task: its old trigger's watch leaves and its new trigger's joins in one turn of the loop."""
    from sparkdispatch.operators.job_watch import follow_vertex, watch_vertex

    await start_group(master)
    watching, leave = asyncio.Event(), asyncio.Event()

    async def old_trigger() -> None:
        async with watch_vertex("sd_trigger", GROUP_JOB, "a", parallelism=1, poll_interval=0.05):
            watching.set()
            await leave.wait()

    old = asyncio.create_task(old_trigger())
    await watching.wait()
    leave.set()  # the old watch leaves, stopping its watcher's poll, while the new one joins
    new = asyncio.create_task(
        follow_vertex("sd_trigger", GROUP_JOB, "a", parallelism=1, poll_interval=0.05, emit=lambda line: None)
    )
    await old
    await master.task_executors[-1].end_job(GROUP_JOB, TaskOutcome(rows=3))
    body = await asyncio.wait_for(new, 10)
    assert body.vertex == "a" and body.result.state is ExecutionState.FINISHED
