"""The data behind the web UI's pages, taken from the same places as the REST API."""

from __future__ import annotations

import asyncio
from typing import Any

from sparkdispatch.rest import views
from sparkdispatch.rest.inputs import checked_id
from sparkdispatch.rest.handlers import MasterView, RestHandlers


class RestUiView:
    """What `add_ui_routes` renders: overview, jobs, one job (with its result), TaskExecutors."""

    def __init__(self, master: MasterView, handlers: RestHandlers) -> None:
        self._master = master
        self._handlers = handlers

    async def overview(self) -> dict[str, Any]:
        return await self._handlers.overview_body()

    async def jobs(self) -> list[dict[str, Any]]:
        return [views.job_summary(job) for job in self._master.leader_components().dispatcher.job_overviews()]

    async def job(self, job_id: str) -> dict[str, Any]:
        checked_id("job_id", job_id)
        dispatcher = self._master.leader_components().dispatcher
        snapshot = await dispatcher.job_snapshot(job_id)
        result = await dispatcher.job_result(job_id)

        def details() -> dict[str, Any]:  # reads immutable values only: may run in a thread
            body = views.job_details(snapshot)
            if result is not None:
                body["result"] = result.to_dict()
            return body

        if len(snapshot.vertices) > views.LARGE_JOB_VERTICES:
            return await asyncio.to_thread(details)
        return details()

    async def attempt_log(self, job_id: str, vertex_id: str, subtask: int,
                          attempt: int | None) -> dict[str, Any] | None:
        checked_id("job_id", job_id)
        checked_id("vertex_id", vertex_id)
        return await self._handlers.attempt_log_body(job_id, vertex_id, subtask, attempt, 0)

    async def taskmanagers(self) -> list[dict[str, Any]]:
        return list(self._master.leader_components().resource_manager.task_executors())
