"""The data behind the web UI's pages, taken from the same places as the REST API."""

from __future__ import annotations

from typing import Any

from sparkdispatch.rest import views
from sparkdispatch.rest.inputs import checked_id
from sparkdispatch.rest.server import MasterView, RestHandlers


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
        details = views.job_details(await dispatcher.job_snapshot(job_id))
        result = await dispatcher.job_result(job_id)
        if result is not None:
            details["result"] = result.to_dict()
        return details

    async def taskmanagers(self) -> list[dict[str, Any]]:
        return list(self._master.leader_components().resource_manager.task_executors())
