"""The web UI's pages, rendered from a fake view, through aiohttp's real loopback test server."""

from __future__ import annotations

import importlib.resources
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from sparkdispatch.errors import NoLeader, ServiceUnavailable, UnknownJob
from sparkdispatch.model.job_result import JobResult
from sparkdispatch.model.rest_shapes import AttemptLog, JobDetails, JobSummary, Overview, TaskManager, VertexDetails
from sparkdispatch.model.states import JobStatus
from sparkdispatch.rest.ui_render import JobPage, format_duration, format_time, layout_graph
from sparkdispatch.rest.ui_routes import add_ui_routes

JOB_ID = "0f0e0d0c0b0a09080706050403020100"
EVIL = '<script>alert("x")</script>&'

Client = TestClient[web.Request, web.Application]


class FakeView:
    """Canned answers in the REST shapes, kept as their JSON forms; `fail_with` makes every read raise."""

    def __init__(self) -> None:
        self.overview_body: dict[str, Any] = {
            "is_leader": True,
            "leader": "http://127.0.0.1:8081",
            "taskmanagers": 1,
            "slots_total": 4,
            "slots_available": 3,
            "jobs_running": 1,
            "jobs_finished": 2,
            "jobs_failed": 0,
            "jobs_cancelled": 0,
        }
        self.jobs_by_id: dict[str, dict[str, Any]] = {}
        self.tms: list[dict[str, Any]] = []
        self.fail_with: Exception | None = None
        self.standby_error: Exception | None = None  # raised by every read but overview()
        self.logs: dict[tuple[str, int, int | None], str] = {}  # (vertex, subtask, attempt) -> text

    async def overview(self) -> Overview:
        if self.fail_with:
            raise self.fail_with
        return Overview.from_dict(self.overview_body)

    async def jobs(self) -> list[JobSummary]:
        if self.standby_error:
            raise self.standby_error
        return [
            JobSummary.from_dict(
                {
                    "id": j["id"],
                    "name": j["name"],
                    "status": j["status"],
                    "start_time": j["start_time"],
                    "end_time": j["end_time"],
                    "duration_ms": None,
                }
            )
            for j in self.jobs_by_id.values()
        ]

    async def job(self, job_id: str) -> JobPage:
        if error := self.fail_with or self.standby_error:
            raise error
        if job_id not in self.jobs_by_id:
            raise UnknownJob(job_id)
        details = {"repairs": [], **self.jobs_by_id[job_id]}
        result = details.pop("result", None)
        return JobPage(JobDetails.from_dict(details), None if result is None else JobResult.from_dict(result))

    async def taskmanagers(self) -> list[TaskManager]:
        if self.standby_error:
            raise self.standby_error
        return [
            TaskManager.from_dict(
                {
                    "queue": "q",
                    "spark_master": "local[1]",
                    "registered_at": 0,
                    "idle_since": None,
                    "idle": False,
                    "executions": [],
                    **tm,
                }
            )
            for tm in self.tms
        ]

    async def attempt_log(self, job_id: str, vertex_id: str, subtask: int, attempt: int | None) -> AttemptLog | None:
        if job_id not in self.jobs_by_id:
            raise UnknownJob(job_id)
        text = self.logs.get((vertex_id, subtask, attempt))
        if text is None:
            return None
        return AttemptLog.from_dict(
            {
                "job_id": job_id,
                "job_status": self.jobs_by_id[job_id]["status"],
                "vertex": vertex_id,
                "vertex_state": "FINISHED",
                "subtask": subtask,
                "attempt": attempt or 0,
                "offset": 0,
                "next_offset": len(text.encode()),
                "text": text,
            }
        )


def vertex(vertex_id: str, state: str, inputs: list[str], *, parallelism: int = 1, attempt: int = 0) -> dict[str, Any]:
    return {
        "id": vertex_id,
        "state": state,
        "parallelism": parallelism,
        "inputs": inputs,
        "subtasks": [
            {"index": i, "state": state, "attempt": attempt, "taskmanager": "te-1"} for i in range(parallelism)
        ],
    }


def failed_job() -> dict[str, Any]:
    return {
        "id": JOB_ID,
        "name": "sales",
        "status": "FAILED",
        "start_time": 1_700_000_000_000,
        "end_time": 1_700_000_004_200,
        "vertices": [
            vertex("extract", "FINISHED", []),
            vertex("clean", "FAILED", ["extract"], parallelism=2, attempt=2),
        ],
        "result": {
            "job_id": JOB_ID,
            "name": "sales",
            "status": "FAILED",
            "start_time": 1_700_000_000_000,
            "end_time": 1_700_000_004_200,
            "duration_ms": 4200,
            "vertices": {
                "extract": {"state": "FINISHED", "attempts": 1, "rows": 1000, "result_path": "/results/extract/0"},
                "clean": {
                    "state": "FAILED",
                    "attempts": 3,
                    "failure": {"class": "ValueError", "message": "bad row", "traceback": "Traceback: line 7"},
                },
            },
            "failure": {"class": "ValueError", "message": "bad row", "traceback": "Traceback: line 7"},
        },
    }


@pytest.fixture
def view() -> FakeView:
    return FakeView()


@pytest.fixture
async def client(view: FakeView) -> AsyncIterator[Client]:
    app = web.Application()
    add_ui_routes(app, view)
    async with TestClient(TestServer(app, host="127.0.0.1")) as test_client:
        yield test_client


async def get_page(client: Client, path: str, *, status: int = 200) -> str:
    response = await client.get(path)
    assert response.status == status, await response.text()
    assert response.content_type == "text/html"
    return await response.text()


# --- job page -------------------------------------------------------------------------------


async def test_job_page_shows_essentials_without_javascript(client: Client, view: FakeView) -> None:
    view.jobs_by_id[JOB_ID] = failed_job()

    page = await get_page(client, f"/ui/jobs/{JOB_ID}")

    assert f'id="job-id">{JOB_ID}<' in page
    assert '<span class="badge state-FAILED">FAILED</span>' in page
    assert 'data-vertex="extract" data-layer="0"' in page and 'class="vertex state-FINISHED"' in page
    assert 'data-vertex="clean" data-layer="1"' in page and 'class="vertex state-FAILED"' in page
    assert page.count('class="edge"') == 1 and 'data-from="extract" data-to="clean"' in page
    assert "attempts 3" in page  # from the JobResult
    assert "Traceback: line 7" in page and "ValueError" in page
    assert "/results/extract/0" in page and ">1000<" in page
    assert page.count("te-1") == 3  # one row per subtask
    assert 'data-status="FAILED"' in page and 'src="../static/job.js"' in page


async def test_job_page_lists_repairs_and_links_each_attempts_log(client: Client, view: FakeView) -> None:
    job = failed_job()
    job["repairs"] = [
        {
            "number": 1,
            "requested": ["clean"],
            "vertices": ["clean"],
            "requested_at": 1_700_000_009_000,
            "status": "FAILED",
        },
        {"number": 2, "requested": ["clean"], "vertices": ["clean"], "requested_at": 1_700_000_019_000, "status": None},
    ]
    view.jobs_by_id[JOB_ID] = job
    view.logs[("clean", 1, 2)] = f"row 7 is bad {EVIL}\n"

    page = await get_page(client, f"/ui/jobs/{JOB_ID}")

    assert "<h2>Repairs</h2>" in page and page.index(">RUNNING<") < page.index(">FAILED</span></td></tr>")
    assert f'href="{JOB_ID}/log?vertex=clean&amp;subtask=1&amp;attempt=2">log<' in page
    log_page = await get_page(client, f"/ui/jobs/{JOB_ID}/log?vertex=clean&subtask=1&attempt=2")
    assert "Log of clean[1], attempt 3" in log_page  # counted from 1 for people
    assert "row 7 is bad &lt;script&gt;" in log_page and EVIL not in log_page
    assert 'data-next-offset="' in log_page and 'src="../../static/log.js"' in log_page
    no_output = await get_page(client, f"/ui/jobs/{JOB_ID}/log?vertex=clean&subtask=0")
    assert "No output yet." in no_output
    await get_page(client, f"/ui/jobs/{'e' * 32}/log?vertex=clean&subtask=0", status=404)
    await get_page(client, f"/ui/jobs/{JOB_ID}/log?vertex=clean&subtask=x", status=400)


async def test_running_job_page_shows_live_attempts_and_no_failure(client: Client, view: FakeView) -> None:
    view.jobs_by_id[JOB_ID] = {
        "id": JOB_ID,
        "name": "sales",
        "status": "RUNNING",
        "start_time": 1_700_000_000_000,
        "end_time": None,
        "vertices": [vertex("only", "RUNNING", [], attempt=1)],
    }

    page = await get_page(client, f"/ui/jobs/{JOB_ID}")

    assert 'data-status="RUNNING"' in page and "attempt 2" in page  # counted from 1 for people
    assert "<td>2</td>" in page  # the subtask table too
    assert "Failure" not in page
    assert 'id="job-end">—<' in page


async def test_every_value_from_the_data_is_escaped(client: Client, view: FakeView) -> None:
    job = failed_job()
    job["name"] = EVIL
    job["vertices"][0]["subtasks"][0]["taskmanager"] = EVIL
    job["result"]["failure"]["traceback"] = EVIL
    job["result"]["vertices"]["extract"]["result_path"] = EVIL
    view.jobs_by_id[JOB_ID] = job
    view.tms = [
        {
            "id": EVIL,
            "hostname": EVIL,
            "slots_total": 1,
            "slots_free": 0,
            "slots": [{"index": 0, "allocation_id": EVIL, "job_id": EVIL}],
            "last_heartbeat": None,
        }
    ]
    view.jobs_by_id[EVIL] = {**job, "id": EVIL}

    for path in (f"/ui/jobs/{JOB_ID}", "/ui/", "/ui/taskmanagers"):
        page = await get_page(client, path)
        assert "<script>alert" not in page, path
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;" in page, path


async def test_unknown_job_is_a_404_page(client: Client) -> None:
    page = await get_page(client, "/ui/jobs/<nope>", status=404)

    assert "Job not found" in page
    assert "No job with id &lt;nope&gt;" in page


async def test_a_view_error_becomes_a_page_with_its_status(client: Client, view: FakeView) -> None:
    view.fail_with = NoLeader("no master leads at the moment")

    page = await get_page(client, f"/ui/jobs/{JOB_ID}", status=NoLeader.http_status)

    assert "no master leads at the moment" in page


# --- overview, task managers, standby banner -----------------------------------------------


async def test_overview_lists_counts_jobs_and_taskexecutors(client: Client, view: FakeView) -> None:
    view.jobs_by_id[JOB_ID] = failed_job()
    view.tms = [
        {
            "id": "te-1",
            "hostname": "host-a",
            "slots_total": 4,
            "slots_free": 3,
            "slots": [],
            "last_heartbeat": 1_700_000_003_000,
        }
    ]

    page = await get_page(client, "/ui/")

    assert 'id="ov-slots">1 / 4<' in page and 'id="ov-jobs-finished">2<' in page
    assert 'id="ov-leader">this master<' in page
    assert f'href="./jobs/{JOB_ID}"' in page and ">sales<" in page
    assert "te-1" in page and "host-a" in page and "2023-11-14 22:13:23" in page
    assert 'id="leader-banner" class="banner" hidden' in page


async def test_ui_without_slash_redirects_to_overview(client: Client) -> None:
    response = await client.get("/ui", allow_redirects=False)

    assert response.status == 302 and response.headers["Location"] == "/ui/"


async def test_taskmanagers_page_shows_each_slot_and_its_job(client: Client, view: FakeView) -> None:
    view.tms = [
        {
            "id": "te-1",
            "hostname": "host-a",
            "slots_total": 2,
            "slots_free": 1,
            "last_heartbeat": None,
            "slots": [
                {"index": 0, "allocation_id": "a-1", "job_id": JOB_ID},
                {"index": 1, "allocation_id": None, "job_id": None},
            ],
        }
    ]

    page = await get_page(client, "/ui/taskmanagers")

    assert '<div class="slot busy" title="allocation a-1">' in page
    assert f'href="./jobs/{JOB_ID}"' in page
    assert page.count('class="slot free"') == 1


@pytest.mark.parametrize("path", ["/ui/", f"/ui/jobs/{JOB_ID}", "/ui/taskmanagers"])
async def test_standby_pages_name_the_leader(client: Client, view: FakeView, path: str) -> None:
    view.jobs_by_id[JOB_ID] = failed_job()
    view.overview_body = {**view.overview_body, "is_leader": False, "leader": "http://10.1.2.3:8081/"}

    page = await get_page(client, path)

    assert '<div id="leader-banner" class="banner">This master is a standby.' in page
    assert '<a href="http://10.1.2.3:8081/ui/">' in page


async def test_standby_banner_without_leader_and_without_a_link_for_odd_addresses(
    client: Client, view: FakeView
) -> None:
    view.overview_body = {**view.overview_body, "is_leader": False, "leader": None}
    assert "no master leads at the moment" in await get_page(client, "/ui/taskmanagers")

    view.overview_body = {**view.overview_body, "leader": "javascript:alert(1)"}
    page = await get_page(client, "/ui/taskmanagers")
    assert "javascript:alert(1)" in page and 'href="javascript' not in page


async def test_a_standby_that_refuses_the_lists_still_shows_its_overview(client: Client, view: FakeView) -> None:
    view.overview_body = {**view.overview_body, "is_leader": False, "leader": "http://10.1.2.3:8081"}
    view.standby_error = ServiceUnavailable("this master is a standby; the leader is http://10.1.2.3:8081")

    page = await get_page(client, "/ui/")
    assert 'class="empty unavailable">this master is a standby' in page
    assert '<a href="http://10.1.2.3:8081/ui/">' in page

    job_page = await get_page(client, f"/ui/jobs/{JOB_ID}", status=503)
    assert f'<a href="http://10.1.2.3:8081/ui/jobs/{JOB_ID}">This page on the leading master</a>' in job_page


# --- static files ----------------------------------------------------------------------------


def shipped_ui_files() -> list[Path]:
    root = importlib.resources.files("sparkdispatch.rest") / "ui"
    return sorted(Path(str(entry)) for entry in root.iterdir() if entry.is_file())


async def test_every_shipped_file_is_served_with_its_type(client: Client) -> None:
    files = shipped_ui_files()
    assert {f.name for f in files} >= {"ui.css", "common.js", "job.js", "overview.js", "taskmanagers.js"}
    for file in files:
        response = await client.get(f"/ui/static/{file.name}")
        assert response.status == 200, file.name
        assert await response.read() == file.read_bytes()
        if file.suffix == ".js":
            assert response.content_type == "text/javascript"
        if file.suffix == ".css":
            assert response.content_type == "text/css"


@pytest.mark.parametrize("name", ["missing.js", "..%2Fui_routes.py", "__init__.py", "ui.css%00"])
async def test_only_shipped_files_are_served(client: Client, name: str) -> None:
    response = await client.get(f"/ui/static/{name}")

    assert response.status == 404


async def test_pages_reference_only_shipped_files(client: Client, view: FakeView) -> None:
    view.jobs_by_id[JOB_ID] = failed_job()
    names = {f.name for f in shipped_ui_files()}
    for path in ("/ui/", f"/ui/jobs/{JOB_ID}", "/ui/taskmanagers"):
        page = await get_page(client, path)
        referenced = re.findall(r'(?:src|href)="(?:\./|\.\./)?static/([^"]+)"', page)
        assert referenced and set(referenced) <= names, (path, referenced)


def test_no_shipped_file_names_an_external_url() -> None:
    for file in shipped_ui_files():
        text = file.read_text(encoding="utf-8")
        assert "http://" not in text and "https://" not in text and "//cdn" not in text, file.name


# --- layout and formatting ------------------------------------------------------------------


def test_layout_puts_each_vertex_one_layer_after_its_deepest_input() -> None:
    graph = [
        vertex("a", "CREATED", []),
        vertex("b", "CREATED", ["a"]),
        vertex("c", "CREATED", ["a", "b"]),
        vertex("d", "CREATED", []),
        vertex("e", "CREATED", ["d", "c"]),
    ]

    placed, edges, width, height = layout_graph([VertexDetails.from_dict(v) for v in graph])

    layers = {p.vertex_id: p.layer for p in placed}
    assert layers == {"a": 0, "d": 0, "b": 1, "c": 2, "e": 3}
    assert sorted(edges) == [("a", "b"), ("a", "c"), ("b", "c"), ("c", "e"), ("d", "e")]
    assert len({(p.x, p.y) for p in placed}) == len(placed)  # no two boxes overlap
    assert all(0 <= p.x < width and 0 <= p.y < height for p in placed)


def test_layout_ignores_unknown_inputs_and_survives_a_cycle() -> None:
    graph = [vertex("a", "CREATED", ["b", "ghost"]), vertex("b", "CREATED", ["a"])]

    placed, edges, _, _ = layout_graph([VertexDetails.from_dict(v) for v in graph])

    assert {p.vertex_id for p in placed} == {"a", "b"}
    assert ("ghost", "a") not in edges


def test_times_and_durations_read_as_a_person_writes_them() -> None:
    assert format_time(0) == "1970-01-01 00:00:00"
    assert format_time(-1) == format_time(None) == "—"
    assert [format_duration(ms) for ms in (850, 4200, 182_000, 3_900_000, None)] == [
        "850 ms",
        "4.2 s",
        "3 min 02 s",
        "1 h 05 min",
        "—",
    ]


async def test_pages_hand_the_scripts_the_terminal_statuses_of_the_model(client: Client, view: FakeView) -> None:
    view.jobs_by_id[JOB_ID] = failed_job()
    for path in ("/ui/", f"/ui/jobs/{JOB_ID}", "/ui/taskmanagers"):
        page = await get_page(client, path)
        found = re.search(r'data-terminal-statuses="([^"]*)"', page)
        assert found is not None, path
        assert (
            set(found.group(1).split())
            == {s.value for s in JobStatus if s.is_terminal}
            == {"FINISHED", "FAILED", "CANCELED", "SUSPENDED"}
        )
    script = (importlib.resources.files("sparkdispatch.rest") / "ui" / "common.js").read_text(encoding="utf-8")
    assert "terminalStatuses" in script and "FINISHED" not in script  # no copy of the set in the script
