"""The master's web UI: pages under ``/ui/`` rendered on the server, kept live by a script.

Every page is complete HTML built from the same data the REST API answers, so a job's id,
status, vertex states, subtasks, failure and results are readable without JavaScript (the
job page is the target of Airflow's extra link). The scripts in ``ui/`` then poll the REST
API about once a second and update the page in place until the job reaches a terminal state.
This module holds the routes and the page handlers; the HTML comes from `ui_render`.

Routes added by :func:`add_ui_routes`:

=========================  ===============================================================
``/ui/``                   overview: leader, TaskExecutors, slots, jobs by status, job list
``/ui/jobs/{job_id}``      one job: status, times, its graph coloured by state, subtasks,
                           failure with the remote traceback, result rows and paths, repairs
``/ui/jobs/{job_id}/log``  one subtask attempt's output (``?vertex=&subtask=&attempt=``),
                           followed while the job runs
``/ui/taskmanagers``       each TaskExecutor with its slots and the job running in each
``/ui/static/{name}``      the stylesheet and scripts shipped in this package
``/ui/login``, ``/logout`` with a token set: the login form and the end of a browser session
                           (ui_auth.py)
=========================  ===============================================================
"""

from __future__ import annotations

import asyncio
import importlib.resources
import logging
from functools import partial
from typing import Any, Protocol

from aiohttp import web

from sparkdispatch.errors import SparkDispatchError
from sparkdispatch.model.rest_shapes import AttemptLog, JobSummary, Overview, TaskManager
from sparkdispatch.rest.ui_render import (
    JobPage,
    leader_url,
    render_error_page,
    render_job,
    render_log_page,
    render_overview,
    render_page,
    render_taskmanagers,
)
from sparkdispatch.rest.inputs import query_int
from sparkdispatch.rest.access import Role
from sparkdispatch.rest.gate import CALLER_KEY
from sparkdispatch.rest.ui_auth import CSRF_KEY
from sparkdispatch.rest.views import LARGE_JOB_VERTICES

log = logging.getLogger(__name__)

_CONTENT_TYPES = {
    ".css": "text/css",
    ".js": "text/javascript",
    ".svg": "image/svg+xml",
    ".txt": "text/plain",
    ".html": "text/html",
}


class UIView(Protocol):
    """What the pages show, in the REST API's shapes (docs/rest-api.md, `model.rest_shapes`)."""

    async def overview(self) -> Overview:
        """The ``GET /overview`` body."""

    async def jobs(self) -> list[JobSummary]:
        """The newest entries of ``GET /jobs``, at least the ``RECENT_JOBS_SHOWN`` the overview shows."""

    async def job(self, job_id: str) -> JobPage:
        """The ``GET /jobs/{id}`` body, and the JobResult once terminal.

        Raises :class:`~sparkdispatch.errors.UnknownJob` for an id no job has.
        """

    async def attempt_log(self, job_id: str, vertex_id: str, subtask: int, attempt: int | None) -> AttemptLog | None:
        """The ``GET /jobs/{id}/vertices/{vertex}/log`` body from offset 0; None while there is no log."""

    async def taskmanagers(self) -> list[TaskManager]:
        """The entries of ``GET /taskmanagers``."""


def add_ui_routes(app: web.Application, view: UIView) -> None:
    """Serve the web UI from ``app`` under ``/ui/``, every page rendered from ``view``."""
    pages = _UIPages(view)
    app.router.add_get("/ui", pages.redirect_to_overview)
    app.router.add_get("/ui/", pages.overview)
    app.router.add_get("/ui/jobs/{job_id}", pages.job)
    app.router.add_get("/ui/jobs/{job_id}/log", pages.attempt_log)
    app.router.add_get("/ui/taskmanagers", pages.taskmanagers)
    app.router.add_get("/ui/static/{name}", serve_static_file)


# --------------------------------------------------------------------------------------------
# Static files


def static_file_names() -> frozenset[str]:
    """Names of the files shipped in ``sparkdispatch/rest/ui/`` (served under /ui/static/)."""
    root = importlib.resources.files("sparkdispatch.rest") / "ui"
    return frozenset(entry.name for entry in root.iterdir() if entry.is_file())


async def serve_static_file(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    # Only a file that ships in ui/ itself: a name from the listing, never a path.
    if name not in static_file_names():
        raise web.HTTPNotFound(text=f"no static file {name!r}")
    suffix = name[name.rfind(".") :] if "." in name else ""
    data = (importlib.resources.files("sparkdispatch.rest") / "ui" / name).read_bytes()
    return web.Response(
        body=data,
        content_type=_CONTENT_TYPES.get(suffix, "application/octet-stream"),
        charset="utf-8" if suffix in _CONTENT_TYPES else None,
        headers={"Cache-Control": "no-cache"},
    )


# --------------------------------------------------------------------------------------------
# Page handlers


class _UIPages:
    def __init__(self, view: UIView) -> None:
        self._view = view

    async def redirect_to_overview(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/ui/")

    async def overview(self, request: web.Request) -> web.Response:
        view = self._view
        try:
            overview = await view.overview()
        except SparkDispatchError as exc:
            return _error_response(exc, root="./", overview=None)
        # A standby answers the overview but not the lists: show what there is and say why.
        unavailable = None
        try:
            jobs = await view.jobs()
            taskmanagers = await view.taskmanagers()
        except SparkDispatchError as exc:
            jobs, taskmanagers, unavailable = [], [], exc.message
        body = render_overview(overview, jobs, taskmanagers, unavailable=unavailable)
        return _html_response(
            render_page(title="Overview", root="./", page="overview", overview=overview, body=body, **_session(request))
        )

    async def job(self, request: web.Request) -> web.Response:
        job_id = request.match_info["job_id"]
        view = self._view
        overview = await _overview_or_none(view)
        try:
            job = await view.job(job_id)
        except SparkDispatchError as exc:
            return _error_response(
                exc, root="../", overview=overview, elsewhere=leader_url(overview, f"/ui/jobs/{job_id}")
            )
        details = job.details
        large = len(details.vertices) > LARGE_JOB_VERTICES
        session = _session(request)
        may_cancel = session["user"] is None or session["user"].role.permits(Role.SUBMITTER)
        body = (
            await asyncio.to_thread(partial(render_job, job, may_cancel=may_cancel))
            if large
            else render_job(job, may_cancel=may_cancel)
        )
        return _html_response(
            render_page(
                title=f"Job {details.name or job_id}",
                root="../",
                page="job",
                overview=overview,
                body=body,
                data={"job-id": details.id, "status": details.status.value},
                **session,
            )
        )

    async def attempt_log(self, request: web.Request) -> web.Response:
        job_id = request.match_info["job_id"]
        view = self._view
        overview = await _overview_or_none(view)
        try:
            vertex_id = request.query.get("vertex", "")
            subtask, attempt = query_int(request, "subtask") or 0, query_int(request, "attempt")
            piece = await view.attempt_log(job_id, vertex_id, subtask, attempt)
        except SparkDispatchError as exc:
            return _error_response(exc, root="../../", overview=overview)
        data = {
            "job-id": job_id,
            "vertex": vertex_id,
            "subtask": str(subtask),
            "attempt": "" if attempt is None else str(attempt),
            "next-offset": str(piece.next_offset if piece is not None else 0),
            "status": piece.job_status.value if piece is not None else "",
        }
        return _html_response(
            render_page(
                title=f"Log of {vertex_id}[{subtask}]",
                root="../../",
                page="log",
                overview=overview,
                body=render_log_page(job_id, vertex_id, subtask, attempt, piece),
                data=data,
                **_session(request),
            )
        )

    async def taskmanagers(self, request: web.Request) -> web.Response:
        view = self._view
        overview = await _overview_or_none(view)
        try:
            taskmanagers = await view.taskmanagers()
        except SparkDispatchError as exc:
            return _error_response(exc, root="./", overview=overview)
        return _html_response(
            render_page(
                title="TaskManagers",
                root="./",
                page="taskmanagers",
                overview=overview,
                body=render_taskmanagers(taskmanagers),
                **_session(request),
            )
        )


def _session(request: web.Request) -> dict[str, Any]:
    """What a page shows of the browser's session: its CSRF token and the user logged in."""
    caller = request.get(CALLER_KEY)
    return {"csrf": request.get(CSRF_KEY), "user": caller.principal if caller is not None and caller.csrf else None}


async def _overview_or_none(view: UIView) -> Overview | None:
    """The overview for the leader banner; a page still renders when it cannot be had."""
    try:
        return await view.overview()
    except SparkDispatchError as exc:
        log.warning("web UI: no overview for the leader banner: %s", exc)
        return None


def _html_response(text: str, *, status: int = 200) -> web.Response:
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")


def _error_response(
    exc: SparkDispatchError, *, root: str, overview: Overview | None, elsewhere: str | None = None
) -> web.Response:
    return _html_response(
        render_error_page(exc, root=root, overview=overview, elsewhere=elsewhere), status=exc.http_status
    )
