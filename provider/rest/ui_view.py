"""The data behind the web UI's pages, taken from the same places as the REST API."""

from __future__ import annotations

import asyncio

from sparkdispatch.model.rest_shapes import AttemptLog, JobSummary, Overview, TaskManager
from sparkdispatch.rest import views
from sparkdispatch.rest.handlers import MasterView, RestHandlers
from sparkdispatch.rest.inputs import checked_id
from sparkdispatch.rest.ui_render import RECENT_JOBS_SHOWN, JobPage


class RestUiView:
    """What `add_ui_routes` renders: overview, jobs, one job (with its result), TaskExecutors."""

    def __init__(self, master: MasterView, handlers: RestHandlers) -> None:
        self._master = master
        self._handlers = handlers

    async def overview(self) -> Overview:
        return await self._handlers.overview_body()

    async def jobs(self) -> list[JobSummary]:
        newest = self._master.leader_components().dispatcher.job_overviews()[:RECENT_JOBS_SHOWN]
        return [views.job_summary(job) for job in newest]

    async def job(self, job_id: str) -> JobPage:
        checked_id("job_id", job_id)
        dispatcher = self._master.leader_components().dispatcher
        snapshot = await dispatcher.job_snapshot(job_id)
        result = await dispatcher.job_result(job_id)

        def page() -> JobPage:  # reads immutable values only: may run in a thread
            return JobPage(views.job_details(snapshot), result)

        if len(snapshot.vertices) > views.LARGE_JOB_VERTICES:
            return await asyncio.to_thread(page)
        return page()

    async def attempt_log(self, job_id: str, vertex_id: str, subtask: int, attempt: int | None) -> AttemptLog | None:
        checked_id("job_id", job_id)
        checked_id("vertex_id", vertex_id)
        return await self._handlers.attempt_log_body(job_id, vertex_id, subtask, attempt, 0)

    async def taskmanagers(self) -> list[TaskManager]:
        return self._master.leader_components().resource_manager.task_executors()
