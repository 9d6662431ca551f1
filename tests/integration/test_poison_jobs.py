"""No request or stored job stops a master: the JobGraph of the round-3 report (10,000 vertices of
parallelism 10,000, 10^8 subtasks) is refused over real HTTP and leaves no trace; stored jobs that
cannot be read or run, left in the stores of both HA modes (files, and the real ZooKeeper) next to a
good one, fail alone when a real master recovers them, finally, while the good one runs to FINISHED.
"""

from __future__ import annotations

import asyncio
import json
from functools import partial
from typing import Any

import pytest

from sparkdispatch.config import Configuration
from sparkdispatch.config.options import HA_MODE
from sparkdispatch.ha import HighAvailabilityServices, JobProgress, create_ha_services
from sparkdispatch.ha.services import ZooKeeperHaServices
from sparkdispatch.model.job_graph import JobGraph
from sparkdispatch.jobmaster.long_lived import LONG_LIVED_GRAPHS
from sparkdispatch.testing.contender import leading
from sparkdispatch.testing.http import request_json
from sparkdispatch.testing.master import InProcessMaster, finish_every_task
from sparkdispatch.testing.waiting import eventually

WAIT = 60.0
GOOD, TOO_LARGE, CORRUPT, WRONG_SCHEMA, MISFILED = "a" * 32, "b" * 32, "c" * 32, "d" * 32, "e" * 32


def report_graph(job_id: str | None = None) -> dict[str, Any]:
    """The JobGraph of the round-3 report: 10,000 vertices of parallelism 10,000, every field within
    its own limit (779 KB of JSON)."""
    vertices = [
        {
            "id": f"v{index}",
            "entrypoint": "tasks:noop",
            "parallelism": 10_000,
            "inputs": [f"v{index - 1}"] if index else [],
        }
        for index in range(10_000)
    ]
    return {"job_id": job_id, "name": "poison", "vertices": vertices}


def good_graph() -> JobGraph:
    return JobGraph.from_dict(
        {
            "job_id": GOOD,
            "name": "good",
            "vertices": [
                {"id": "extract", "entrypoint": "tasks:noop", "parallelism": 2},
                {"id": "load", "entrypoint": "tasks:noop", "inputs": ["extract"]},
            ],
        }
    )


async def test_the_graph_of_the_report_is_refused_with_400_naming_the_limit_and_nothing_is_stored() -> None:
    alive_before = LONG_LIVED_GRAPHS.alive
    async with InProcessMaster() as master:
        await master.add_task_executor(script=finish_every_task)
        status, body = await request_json("POST", f"{master.url}/jobs", report_graph(TOO_LARGE), timeout=WAIT)

        assert status == 400 and body["type"] == "JobTooLarge"
        assert (body["subtasks"], body["limit"], body["option"]) == (100_000_000, 100_000, "jobgraph.max-subtasks")
        assert body["errors"] == [
            "vertices: the job has 100000000 subtasks (the sum of its vertices' parallelism); "
            "jobgraph.max-subtasks allows at most 100000"
        ]
        ha = master.master.ha
        assert await ha.jobgraph_store.job_ids() == set()
        assert await ha.progress_store.get(TOO_LARGE) == JobProgress(TOO_LARGE)
        assert await ha.job_result_store.dirty_job_ids() == [] and not await ha.job_result_store.has_entry(TOO_LARGE)
        assert (await request_json("GET", f"{master.url}/jobs"))[1] == {"jobs": [], "next": None}
        assert (await request_json("GET", f"{master.url}/jobs/{TOO_LARGE}"))[0] == 404
        # the refused graph keeps nothing alive, not even the heap frozen for it
        assert LONG_LIVED_GRAPHS.alive == alive_before
        # the master serves on
        status, accepted = await request_json("POST", f"{master.url}/jobs", good_graph().to_dict())
        assert status == 202
        result = await eventually(lambda: finished(master.url, GOOD), "the good job ends", timeout=WAIT, interval=0.05)
        assert result["status"] == "FINISHED"


async def finished(url: str, job_id: str) -> dict[str, Any] | None:
    """The job's JobResult once it is terminal, else None."""
    status, body = await request_json("GET", f"{url}/jobs/{job_id}/execution-result")
    assert status == 200, body
    return body["job_execution_result"] if body["status"]["id"] == "COMPLETED" else None


@pytest.fixture(params=["none", "zookeeper"])
def ha_config(request: pytest.FixtureRequest, tmp_path: Any) -> Configuration:
    """A cluster's configuration in either HA mode: file stores, or the session's real ZooKeeper."""
    if request.param == "zookeeper":
        config: Configuration = request.getfixturevalue("zk_config")
        return config
    return Configuration.from_mapping({"storage.dir": str(tmp_path / "storage")})


def write_record(services: HighAvailabilityServices, job_id: str, data: bytes) -> None:
    """Store `data` as the JobGraph record of `job_id`, as a broken disk or another release may leave it:
    a file in mode `none`, the job's znode (graph inline) in mode `zookeeper`."""
    if isinstance(services, ZooKeeperHaServices):
        services.client.create(f"{services.paths.jobgraphs}/{job_id}", data)
    else:
        directory = services.store_dir("jobgraphs")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{job_id}.json").write_bytes(data)


def inline(graph: bytes, services: HighAvailabilityServices) -> bytes:
    """A graph's JSON as its store keeps it inline."""
    return b'{"graph": ' + graph + b', "version": 1}' if isinstance(services, ZooKeeperHaServices) else graph


async def store_poison_jobs(config: Configuration) -> None:
    """A good job and four that cannot run, stored directly in the cluster's stores."""
    services = create_ha_services(config)
    await services.start()
    try:
        session = await leading(services.election)
        await services.jobgraph_store.put(session, good_graph())
        await services.jobgraph_store.put(session, JobGraph.from_dict(report_graph(TOO_LARGE)))  # an older release's
        wrong = {
            "job_id": WRONG_SCHEMA,
            "name": "wrong",
            "vertices": [{"id": "a", "entrypoint": "tasks:noop", "parallelism": "many"}],
        }
        write_record(services, CORRUPT, b'\x00\xff{"graph": not json')
        write_record(services, WRONG_SCHEMA, inline(json.dumps(wrong).encode(), services))
        write_record(services, MISFILED, inline(good_graph().to_json().encode(), services))
    finally:
        services.election.stop()
        await services.close()


async def test_stored_jobs_that_cannot_be_read_or_run_fail_alone_finally_and_the_master_serves_the_rest(
    ha_config: Configuration,
) -> None:
    await store_poison_jobs(ha_config)
    overrides = ha_config.to_flat()
    master = InProcessMaster(storage_dir=ha_config.storage_dir, overrides=overrides)
    starting = asyncio.create_task(master.start())
    try:
        # /overview answers while the master recovers (it parses and refuses the 10^8-subtask graph meanwhile)
        await eventually(
            lambda: overview_of(master.url), "/overview answers during recovery", timeout=WAIT, interval=0.05
        )
        await starting
        await master.wait_for_leadership(timeout=WAIT)
        await master.add_task_executor(script=finish_every_task)

        results = {
            job_id: await eventually(
                partial(finished, master.url, job_id), f"job {job_id} ends", timeout=WAIT, interval=0.05
            )
            for job_id in (GOOD, TOO_LARGE, CORRUPT, WRONG_SCHEMA, MISFILED)
        }
        assert results[GOOD]["status"] == "FINISHED"
        expected = {
            TOO_LARGE: ("JobTooLarge", "has 100000000 subtasks"),
            CORRUPT: (
                "StoreError",
                "cannot be read" if ha_config.get(HA_MODE) == "none" else "holds no JobGraph record",
            ),
            WRONG_SCHEMA: ("StoreError", "vertices[0].parallelism: Not a valid integer"),
            MISFILED: ("StoreError", f"names job {GOOD}"),
        }
        for job_id, (cls, cause) in expected.items():
            result = results[job_id]
            assert result["status"] == "FAILED", job_id
            assert result["failure"]["class"] == cls and cause in result["failure"]["message"], result["failure"]
            assert job_id in result["failure"]["message"]
        assert results[TOO_LARGE]["name"] == "poison" and len(results[TOO_LARGE]["vertices"]) == 10_000
        assert "jobgraph.max-subtasks allows at most 100000" in results[TOO_LARGE]["failure"]["message"]
        # terminal as any failed job: its JobGraph removed, its JobResult written and cleaned up
        store = master.master.ha.jobgraph_store
        await eventually(lambda: empty(store.job_ids()), "every JobGraph removed", timeout=WAIT, interval=0.05)
        await eventually(
            lambda: empty(master.master.ha.job_result_store.dirty_job_ids()),
            "every JobResult clean",
            timeout=WAIT,
            interval=0.05,
        )
        overview = await overview_of(master.url)
        assert overview is not None and (overview["jobs_finished"], overview["jobs_failed"]) == (1, 4)
    finally:
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await master.stop()

    # a later leader retries none of them: they stay FAILED, each listed once
    async with InProcessMaster(storage_dir=ha_config.storage_dir, overrides=overrides) as later:
        await later.wait_for_leadership(timeout=WAIT)
        assert await later.master.ha.jobgraph_store.job_ids() == set()
        status, listed = await request_json("GET", f"{later.url}/jobs")
        assert status == 200 and sorted((job["id"], job["status"]) for job in listed["jobs"]) == [
            (GOOD, "FINISHED"),
            *((job_id, "FAILED") for job_id in (TOO_LARGE, CORRUPT, WRONG_SCHEMA, MISFILED)),
        ]
        for job_id in expected:
            assert (await finished(later.url, job_id)) == results[job_id]


async def overview_of(url: str) -> dict[str, Any] | None:
    """`GET /overview`'s answer; None while nothing listens yet."""
    try:
        status, body = await request_json("GET", f"{url}/overview", timeout=WAIT)
    except ConnectionError:
        return None
    assert status == 200, body
    return body if isinstance(body, dict) else None


async def empty(collection: Any) -> bool:
    return not await collection
