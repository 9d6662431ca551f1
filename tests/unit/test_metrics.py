"""GET /metrics of a real master (in process, real HTTP), parsed with prometheus_client's parser."""

from __future__ import annotations

import errno
import os
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.job_result import Failure
from sparkdispatch.model.protocol import TaskDeploymentDescriptor
from sparkdispatch.testing.master import InProcessMaster, TaskOutcome
from sparkdispatch.testing.waiting import eventually

TOKEN = "metrics-test-token"


async def scrape(url: str, *, token: str | None = TOKEN) -> tuple[int, dict[str, float]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as http, http.get(url + "/metrics", headers=headers) as answer:
        if answer.status != 200:
            return answer.status, {}
        assert answer.headers["Content-Type"].startswith("text/plain; version=")
        samples: dict[str, float] = {}
        for family in text_string_to_metric_families(await answer.text()):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return 200, samples


async def submit(url: str, graph: dict[str, Any]) -> str:
    async with (
        aiohttp.ClientSession() as http,
        http.post(url + "/jobs", json=graph, headers={"Authorization": f"Bearer {TOKEN}"}) as answer,
    ):
        assert answer.status == 202, await answer.text()
        return str((await answer.json())["job_id"])


async def status(url: str, job_id: str) -> str:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{url}/jobs/{job_id}", headers={"Authorization": f"Bearer {TOKEN}"}) as answer,
    ):
        return str((await answer.json())["status"])


def fail_vertex_b(tdd: TaskDeploymentDescriptor) -> TaskOutcome:
    if tdd.vertex_id == "b":
        return TaskOutcome(ExecutionState.FAILED, Failure("ValueError", "bad row"))
    return TaskOutcome(rows=1)


async def test_metrics_count_submitted_finished_jobs_and_their_tasks_and_show_the_slots() -> None:
    async with InProcessMaster(overrides={"rest.auth.token": TOKEN}) as master:
        await master.wait_for_leadership()
        assert (await scrape(master.url, token=None))[0] == 401  # behind the token, as the API
        _, before = await scrape(master.url)
        assert before["sparkdispatch_is_leader"] == 1
        assert before["sparkdispatch_jobs_submitted_total"] == 0
        assert before["sparkdispatch_taskexecutors"] == 0 and before["sparkdispatch_slots_total"] == 0
        assert "sparkdispatch_event_loop_lag_seconds" in before
        assert before["sparkdispatch_leader_changes_total"] == 1

        await master.add_task_executor(slots=3, script=fail_vertex_b)
        finished = await submit(
            master.url, {"name": "ok", "vertices": [{"id": "a", "entrypoint": "m:f", "parallelism": 2}]}
        )
        failed = await submit(
            master.url,
            {"name": "bad", "restart_strategy": {"type": "none"}, "vertices": [{"id": "b", "entrypoint": "m:f"}]},
        )

        async def both_ended() -> bool:
            return {await status(master.url, finished), await status(master.url, failed)} == {"FINISHED", "FAILED"}

        await eventually(both_ended, "one job FINISHED and one FAILED")
        _, after = await scrape(master.url)
        assert after["sparkdispatch_jobs_submitted_total"] == 2
        assert after["sparkdispatch_jobs_finished_total{status=FINISHED}"] == 1
        assert after["sparkdispatch_jobs_finished_total{status=FAILED}"] == 1
        assert after["sparkdispatch_task_deployments_total"] == 3
        assert after["sparkdispatch_task_failures_total"] == 1
        assert after["sparkdispatch_task_duration_seconds_count{state=FINISHED}"] == 2
        assert after["sparkdispatch_task_duration_seconds_count{state=FAILED}"] == 1
        assert after["sparkdispatch_jobs_running"] == 0
        assert (
            after["sparkdispatch_taskexecutors"],
            after["sparkdispatch_slots_total"],
            after["sparkdispatch_slots_available"],
        ) == (1, 3, 3)

        await master.step_down()
        _, standby = await scrape(master.url)
        assert standby["sparkdispatch_is_leader"] == 0
        assert "sparkdispatch_slots_total" not in standby  # a standby has no leader gauges
        assert standby["sparkdispatch_jobs_submitted_total"] == 2  # what it counted while it led


async def test_a_job_result_write_failing_on_a_full_disk_is_counted_until_it_succeeds(monkeypatch: Any) -> None:
    real_fsync = os.fsync
    failures = {"left": 3}

    def full_disk(fd: int) -> None:  # only the JobResult's temp file finds the disk full
        if "_DIRTY.json.tmp-" in os.readlink(f"/proc/self/fd/{fd}") and failures["left"]:
            failures["left"] -= 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_disk)
    async with InProcessMaster(
        overrides={
            "rest.auth.token": TOKEN,
            "cleanup-strategy.initial-backoff": "10ms",
            "cleanup-strategy.max-backoff": "20ms",
        }
    ) as master:
        await master.add_task_executor(script=lambda tdd: TaskOutcome(rows=1))
        job_id = await submit(master.url, {"name": "ok", "vertices": [{"id": "a", "entrypoint": "m:f"}]})

        async def cleaned_up() -> bool:
            store = master.master.ha.job_result_store
            return failures["left"] == 0 and not await store.dirty_job_ids() and await store.has_entry(job_id)

        await eventually(cleaned_up, "the JobResult written once the disk had room, and the job cleaned up")
        _, after = await scrape(master.url)
        assert after["sparkdispatch_job_result_write_failures_total"] == 3
        assert await status(master.url, job_id) == "FINISHED"
