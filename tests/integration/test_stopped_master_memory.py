"""A master that stops while large jobs run (leadership lost, shutdown) keeps no graph alive, nor
the heap frozen for them: each suspended JobMaster releases its ExecutionGraph, and the collector
frees the graph with the Dispatcher that held it, even though that Dispatcher is in a reference
cycle (its cancelled tasks' tracebacks) frozen with the graph. Over real HTTP, on an in-process master.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable

import pytest

from sparkdispatch.jobmaster.long_lived import LONG_LIVED_GRAPHS
from sparkdispatch.testing.http import request_json
from sparkdispatch.testing.master import InProcessMaster
from sparkdispatch.testing.waiting import eventually

VERTICES = 1_000  # a JobGraph body of about 80 KB: parsed off the loop, with collection paused


def large_graph() -> dict[str, object]:
    vertices = [{"id": f"v{index}", "entrypoint": "tasks:noop"} for index in range(VERTICES)]
    return {"name": "large", "vertices": vertices}


async def test_a_stopped_master_leaves_its_running_large_jobs_graphs_neither_frozen_nor_alive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[weakref.ref[object]] = []
    build = LONG_LIVED_GRAPHS.build

    def recording_build(make: Callable[[], object], *, subtasks: int) -> object:
        graph = build(make, subtasks=subtasks)
        built.append(weakref.ref(graph))
        return graph

    monkeypatch.setattr(LONG_LIVED_GRAPHS, "build", recording_build)
    gc.collect()
    alive_before = LONG_LIVED_GRAPHS.alive
    async with InProcessMaster() as master:
        await master.add_task_executor(slots=4)  # no script: its tasks run until the master stops
        status, body = await request_json("POST", f"{master.url}/jobs", large_graph(), timeout=60.0)
        assert status == 202, body
        job_url = f"{master.url}/jobs/{body['job_id']}"

        async def running() -> bool:
            status: object = (await request_json("GET", job_url))[1]["status"]
            return status == "RUNNING"

        await eventually(running, "the job to run")
        # its ExecutionGraph lives, frozen; the JobGraph parsed for it was released once submitted
        assert LONG_LIVED_GRAPHS.alive == alive_before + 1 and gc.get_freeze_count() > 0
        gc.collect()  # the Dispatcher, its tasks and the graph survive a full collection: frozen
    assert LONG_LIVED_GRAPHS.alive == alive_before
    if alive_before == 0:
        assert gc.get_freeze_count() == 0
    gc.collect()
    assert len(built) == 1 and built[0]() is None
