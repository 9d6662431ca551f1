"""The web UI in a real headless Chromium (Debian's `chromium`), driven by Python's Playwright.

The server under test is made by one fixture, `ui_server`: an aiohttp app with the UI routes
and the REST JSON endpoints, both fed by a `ScriptedView` whose state each test changes.
Screenshots go to tests/output/ (git-ignored) for a person to look at.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest
from aiohttp import web

from sparkdispatch.config import Configuration
from sparkdispatch.errors import UnknownJob
from sparkdispatch.model.job_result import JobResult
from sparkdispatch.model.rest_shapes import (
    AttemptLog,
    JobDetails,
    JobList,
    JobSummary,
    Overview,
    TaskManager,
    TaskManagerList,
)
from sparkdispatch.rest.ui_render import JobPage
from sparkdispatch.rest.ui_routes import add_ui_routes
from sparkdispatch.testing.chromium import CHROMIUM, browser_missing, chromium_args
from sparkdispatch.testing.local_cluster import LocalCluster
from sparkdispatch.testing.services import free_port

pytestmark = pytest.mark.slow

UNDER_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
OUTPUT = Path(__file__).resolve().parents[1] / "output"
TERMINAL = {"FINISHED", "FAILED", "CANCELED"}
POLL_WAIT_MS = 15_000  # generous: the page polls every second; this only bounds a hang

JOB_ID = "4f1c2a9be07d4c6d8a3e5b7f90a1c2d3"
TE_IDS = ["te-alpha-0001", "te-beta-0002"]


# --------------------------------------------------------------------------------------------
# The data behind the server: REST-shaped dicts a test mutates


def subtasks(state: str, parallelism: int, te: str | None, attempt: int = 0) -> list[dict[str, Any]]:
    return [{"index": i, "state": state, "attempt": attempt, "taskmanager": te} for i in range(parallelism)]


def sales_job(*, status: str, states: dict[str, str]) -> dict[str, Any]:
    """A four-vertex diamond: extract -> (clean, enrich) -> report."""
    shape = [
        ("extract", 1, []),
        ("clean", 2, ["extract"]),
        ("enrich", 2, ["extract"]),
        ("report", 1, ["clean", "enrich"]),
    ]
    return {
        "id": JOB_ID,
        "name": "nightly-sales",
        "status": status,
        "start_time": 1_763_800_000_000,
        "end_time": 1_763_800_004_200 if status in TERMINAL else None,
        "vertices": [
            {
                "id": vid,
                "state": states[vid],
                "parallelism": p,
                "inputs": inputs,
                "subtasks": subtasks(states[vid], p, TE_IDS[0] if states[vid] != "CREATED" else None),
            }
            for vid, p, inputs in shape
        ],
    }


def sales_result() -> dict[str, Any]:
    return {
        "job_id": JOB_ID,
        "name": "nightly-sales",
        "status": "FINISHED",
        "start_time": 1_763_800_000_000,
        "end_time": 1_763_800_004_200,
        "duration_ms": 4200,
        "vertices": {
            vid: {"state": "FINISHED", "attempts": 1, "rows": rows, "result_path": f"/data/results/{JOB_ID}/{vid}"}
            for vid, rows in [("extract", 1000), ("clean", 990), ("enrich", 1000), ("report", 12)]
        },
    }


@dataclass
class ScriptedView:
    """The reads the UI needs, answered from dicts the test sets (the UIView protocol: their shapes)."""

    jobs_by_id: dict[str, dict[str, Any]] = field(default_factory=dict)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    tms: list[dict[str, Any]] = field(default_factory=list)
    is_leader: bool = True
    leader: str | None = None
    requests: list[str] = field(default_factory=list)

    async def overview(self) -> Overview:
        statuses = [job["status"] for job in self.jobs_by_id.values()]
        return Overview(
            is_leader=self.is_leader,
            leader=self.leader,
            taskmanagers=len(self.tms),
            slots_total=sum(tm["slots_total"] for tm in self.tms),
            slots_available=sum(tm["slots_free"] for tm in self.tms),
            jobs_running=sum(s not in TERMINAL for s in statuses),
            jobs_finished=statuses.count("FINISHED"),
            jobs_failed=statuses.count("FAILED"),
            jobs_cancelled=statuses.count("CANCELED"),
        )

    async def jobs(self) -> list[JobSummary]:
        return [
            JobSummary.from_dict(
                {
                    "id": job["id"],
                    "name": job["name"],
                    "status": job["status"],
                    "start_time": job["start_time"],
                    "end_time": job["end_time"],
                    "duration_ms": None,
                }
            )
            for job in self.jobs_by_id.values()
        ]

    async def job(self, job_id: str) -> JobPage:
        if job_id not in self.jobs_by_id:
            raise UnknownJob(job_id)
        result = self.results.get(job_id)
        return JobPage(
            JobDetails.from_dict({"repairs": [], **self.jobs_by_id[job_id]}),
            None if result is None else JobResult.from_dict(result),
        )

    async def taskmanagers(self) -> list[TaskManager]:
        return [TaskManager.from_dict(tm) for tm in self.tms]

    async def attempt_log(self, job_id: str, vertex_id: str, subtask: int, attempt: int | None) -> AttemptLog | None:
        return None  # no attempt of a scripted job wrote a log


def taskmanager(te_id: str, *, busy_with: str | None) -> dict[str, Any]:
    slots = [
        {"index": 0, "allocation_id": "alloc-1" if busy_with else None, "job_id": busy_with},
        {"index": 1, "allocation_id": None, "job_id": None},
    ]
    return {
        "id": te_id,
        "hostname": f"{te_id}.local",
        "queue": f"sparkdispatch.te.{te_id}",
        "spark_master": "local[2]",
        "registered_at": 1_763_799_000_000,
        "slots_total": 2,
        "slots_free": 1 if busy_with else 2,
        "slots": slots,
        "idle_since": None,
        "idle": False,
        "last_heartbeat": 1_763_800_003_000,
        "executions": [],
    }


def add_rest_routes(app: web.Application, view: ScriptedView) -> None:
    """The REST contract's read endpoints over the same view (docs/rest-api.md shapes)."""

    async def overview(request: web.Request) -> web.Response:
        return web.json_response((await view.overview()).to_dict())

    async def jobs(request: web.Request) -> web.Response:
        return web.json_response(JobList(tuple(await view.jobs())).to_dict())

    async def job(request: web.Request) -> web.Response:
        view.requests.append(request.path)
        try:
            page = await view.job(request.match_info["job_id"])
        except UnknownJob as exc:
            return web.json_response({"errors": exc.messages()}, status=404)
        return web.json_response(page.details.to_dict())

    async def execution_result(request: web.Request) -> web.Response:
        view.requests.append(request.path)
        job_id = request.match_info["job_id"]
        if job_id not in view.jobs_by_id:
            return web.json_response({"errors": [f"no job with id {job_id}"]}, status=404)
        if job_id not in view.results:
            return web.json_response({"status": {"id": "IN_PROGRESS"}})
        return web.json_response({"status": {"id": "COMPLETED"}, "job_execution_result": view.results[job_id]})

    async def taskmanagers(request: web.Request) -> web.Response:
        return web.json_response(TaskManagerList(tuple(await view.taskmanagers())).to_dict())

    for prefix in ("", "/v1"):
        app.router.add_get(f"{prefix}/overview", overview)
        app.router.add_get(f"{prefix}/jobs", jobs)
        app.router.add_get(f"{prefix}/jobs/{{job_id}}", job)
        app.router.add_get(f"{prefix}/jobs/{{job_id}}/execution-result", execution_result)
        app.router.add_get(f"{prefix}/taskmanagers", taskmanagers)


# --------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture
def view() -> ScriptedView:
    return ScriptedView(tms=[taskmanager(TE_IDS[0], busy_with=JOB_ID), taskmanager(TE_IDS[1], busy_with=None)])


@pytest.fixture
async def ui_server(view: ScriptedView) -> AsyncIterator[str]:
    """The master's HTTP side on a loopback port; yields its base URL."""
    app = web.Application()
    add_ui_routes(app, view)
    add_rest_routes(app, view)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    try:
        await site.start()
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def chromium_page(profile: Path) -> AsyncIterator[Any]:
    """A page of a fresh headless Chromium (own user-data-dir); fails the test on any JS error."""
    if (reason := browser_missing()) is not None:
        missing(reason)
    from playwright.async_api import async_playwright

    errors: list[str] = []
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=chromium_args(),
            viewport={"width": 1280, "height": 900},
        )
        try:
            browser_page = context.pages[0] if context.pages else await context.new_page()
            browser_page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
            browser_page.on(
                "console", lambda msg: errors.append(f"console {msg.type}: {msg.text}") if msg.type == "error" else None
            )
            yield browser_page
        finally:
            await context.close()
    assert errors == [], errors


@pytest.fixture
async def page(ui_server: str, tmp_path: Path) -> AsyncIterator[Any]:
    """A browser page; depends on `ui_server` so the browser closes before the server stops."""
    async with chromium_page(tmp_path / "chromium-profile") as browser_page:
        yield browser_page


def missing(reason: str) -> NoReturn:
    if UNDER_CI:
        pytest.fail(f"required for the browser tests under CI: {reason}")
    pytest.skip(reason)  # only outside CI: under CI the line above failed the test


async def screenshot(page: Any, name: str) -> None:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(OUTPUT / name), full_page=True)


async def vertex_states(page: Any) -> dict[str, str]:
    """What the graph shows: each vertex box's id -> its state text."""
    states: dict[str, str] = await page.eval_on_selector_all(
        "#job-graph g.vertex",
        "boxes => Object.fromEntries(boxes.map(b => [b.dataset.vertex, b.querySelector('.v-state').textContent]))",
    )
    return states


# --------------------------------------------------------------------------------------------
# Tests


async def test_finished_job_page_shows_id_every_vertex_and_state(ui_server: str, view: ScriptedView, page: Any) -> None:
    states = dict.fromkeys(["extract", "clean", "enrich", "report"], "FINISHED")
    view.jobs_by_id[JOB_ID] = sales_job(status="FINISHED", states=states)
    view.results[JOB_ID] = sales_result()

    await page.goto(f"{ui_server}/ui/jobs/{JOB_ID}")

    assert await page.text_content("#job-id") == JOB_ID
    assert await page.text_content("#job-status") == "FINISHED"
    assert await vertex_states(page) == states
    assert await page.locator("#job-graph path.edge").count() == 4
    for vertex_id in states:
        box = page.locator(f'#job-graph g.vertex[data-vertex="{vertex_id}"] rect')
        # FINISHED is drawn green (Flink's colour), whatever the exact shade.
        fill = await box.evaluate("rect => getComputedStyle(rect).fill")
        red, green, blue = (int(c) for c in fill[fill.index("(") + 1 : -1].split(","))
        assert green > red and green > blue, fill
    assert f"/data/results/{JOB_ID}/report" in await page.inner_text("#vertices-body")
    await screenshot(page, "job-finished.png")


async def test_running_job_page_updates_without_reload(ui_server: str, view: ScriptedView, page: Any) -> None:
    view.jobs_by_id[JOB_ID] = sales_job(
        status="RUNNING", states={"extract": "FINISHED", "clean": "RUNNING", "enrich": "DEPLOYING", "report": "CREATED"}
    )
    await page.goto(f"{ui_server}/ui/jobs/{JOB_ID}")
    assert (await vertex_states(page))["clean"] == "RUNNING"
    await page.evaluate("window.__loadedOnce = 'same document'")
    await screenshot(page, "job-running.png")

    view.jobs_by_id[JOB_ID] = sales_job(
        status="FAILED", states={"extract": "FINISHED", "clean": "FAILED", "enrich": "CANCELED", "report": "CANCELED"}
    )
    view.results[JOB_ID] = {
        **sales_result(),
        "status": "FAILED",
        "vertices": {
            "extract": {"state": "FINISHED", "attempts": 1, "rows": 1000, "result_path": "/r/extract"},
            "clean": {
                "state": "FAILED",
                "attempts": 3,
                "failure": {
                    "class": "ValueError",
                    "message": "negative amount <-5>",
                    "traceback": 'Traceback (most recent call last):\n  File "sales.py", line 9\nValueError',
                },
            },
            "enrich": {"state": "CANCELED", "attempts": 1},
            "report": {"state": "CANCELED", "attempts": 1},
        },
        "failure": {"class": "ValueError", "message": "negative amount <-5>", "traceback": "Traceback ..."},
    }

    await page.wait_for_function("document.body.dataset.polling === 'stopped'", timeout=POLL_WAIT_MS)

    assert await page.evaluate("window.__loadedOnce") == "same document"  # no reload happened
    assert await page.text_content("#job-status") == "FAILED"
    assert await vertex_states(page) == {
        "extract": "FINISHED",
        "clean": "FAILED",
        "enrich": "CANCELED",
        "report": "CANCELED",
    }
    assert await page.get_attribute('#job-graph g.vertex[data-vertex="clean"]', "class") == "vertex state-FAILED"
    assert "negative amount <-5>" in await page.inner_text("#job-failures")
    assert 'File "sales.py", line 9' in await page.inner_text("#job-failures")
    assert "attempts 3" in await page.text_content('#job-graph g.vertex[data-vertex="clean"]')
    await screenshot(page, "job-failed-live.png")

    # Polling stopped at the terminal state: no more calls about the job.
    calls = len(view.requests)
    await page.wait_for_timeout(2500)
    assert len(view.requests) == calls


async def test_overview_lists_the_job_and_the_taskexecutors(ui_server: str, view: ScriptedView, page: Any) -> None:
    view.jobs_by_id[JOB_ID] = sales_job(
        status="RUNNING", states=dict.fromkeys(["extract", "clean", "enrich", "report"], "RUNNING")
    )
    await page.goto(f"{ui_server}/ui/")

    assert JOB_ID in await page.inner_text("#jobs-body")
    assert "nightly-sales" in await page.inner_text("#jobs-body")
    taskexecutors = await page.inner_text("#tm-body")
    assert all(te in taskexecutors for te in TE_IDS)
    assert await page.text_content("#ov-jobs-running") == "1"

    # A job submitted later appears without a reload.
    later = "0123456789abcdef0123456789abcdef"
    view.jobs_by_id[later] = {
        **sales_job(status="FINISHED", states=dict.fromkeys(["extract", "clean", "enrich", "report"], "FINISHED")),
        "id": later,
        "name": "later-job",
        "start_time": 1_763_800_100_000,
        "end_time": 1_763_800_165_000,
    }
    await page.wait_for_selector(f'#jobs-body tr[data-job-id="{later}"]', timeout=POLL_WAIT_MS)
    assert await page.text_content("#ov-jobs-finished") == "1"
    await screenshot(page, "overview.png")

    await page.click(f'#jobs-body tr[data-job-id="{JOB_ID}"] td:first-child a')
    await page.wait_for_url(f"**/ui/jobs/{JOB_ID}")
    assert await page.text_content("#job-id") == JOB_ID


async def test_taskmanagers_page_shows_slots_and_their_jobs(ui_server: str, view: ScriptedView, page: Any) -> None:
    view.jobs_by_id[JOB_ID] = sales_job(
        status="RUNNING", states=dict.fromkeys(["extract", "clean", "enrich", "report"], "RUNNING")
    )
    await page.goto(f"{ui_server}/ui/taskmanagers")
    busy = page.locator(f'section[data-tm-id="{TE_IDS[0]}"] .slot.busy')
    assert await busy.count() == 1
    assert JOB_ID in await busy.inner_text()
    assert await page.locator(f'section[data-tm-id="{TE_IDS[1]}"] .slot.free').count() == 2
    await screenshot(page, "taskmanagers.png")

    # The job ends and frees its slot: the page follows.
    view.tms[0] = taskmanager(TE_IDS[0], busy_with=None)
    await page.wait_for_function(
        f"document.querySelectorAll('section[data-tm-id=\"{TE_IDS[0]}\"] .slot.free').length === 2",
        timeout=POLL_WAIT_MS,
    )


async def test_standby_pages_name_the_leader(ui_server: str, view: ScriptedView, page: Any) -> None:
    view.is_leader = False
    view.leader = "http://127.0.0.1:8099"
    await page.goto(f"{ui_server}/ui/taskmanagers")
    banner = page.locator("#leader-banner")
    assert await banner.is_visible()
    assert await banner.locator("a").get_attribute("href") == "http://127.0.0.1:8099/ui/"

    # Leadership comes back to this master: the banner goes away without a reload.
    view.is_leader = True
    await page.wait_for_function("document.getElementById('leader-banner').hidden", timeout=POLL_WAIT_MS)


# --------------------------------------------------------------------------------------------
# The same pages served by a real master, with a real TaskExecutor running a real job

TASKS = Path(__file__).resolve().parents[1] / "integration" / "job_tasks.py"


@pytest.fixture(scope="module")
def live_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    config = Configuration.from_mapping(
        {
            "storage.dir": str(tmp_path_factory.mktemp("ui-live")),
            "broker.url": "filesystem://",
            "taskexecutor.slots": 2,
            "heartbeat.interval": "500ms",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
        }
    )
    cluster = LocalCluster(config, masters=1, taskexecutors=1)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


async def test_a_real_job_page_follows_the_job_to_its_end(live_cluster: LocalCluster, tmp_path: Path) -> None:
    key = live_cluster.upload_artifact(TASKS)
    job_id = live_cluster.submit(
        {
            "name": "live-ui",
            "artifacts": [key],
            "vertices": [
                {"id": "numbers", "entrypoint": "job_tasks:numbers", "parallelism": 2, "params": {"rows": 40}},
                {"id": "slow", "entrypoint": "job_tasks:sleepy", "inputs": ["numbers"], "params": {"seconds": 4}},
                {"id": "report", "entrypoint": "job_tasks:sleepy", "inputs": ["slow"], "params": {"seconds": 0}},
            ],
        }
    )
    base = live_cluster.leader_url()
    async with chromium_page(tmp_path / "profile") as browser_page:
        await browser_page.goto(f"{base}/ui/jobs/{job_id}")
        assert await browser_page.text_content("#job-id") == job_id
        await browser_page.wait_for_function(
            "() => document.querySelector('#job-graph g.vertex[data-vertex=\"slow\"] .v-state')"
            ".textContent === 'RUNNING'",
            timeout=120_000,
        )
        await screenshot(browser_page, "live-job-running.png")
        await browser_page.wait_for_function(
            "() => document.querySelector('#job-status').textContent === 'FINISHED'", timeout=120_000
        )
        assert await vertex_states(browser_page) == dict.fromkeys(["numbers", "slow", "report"], "FINISHED")
        assert await browser_page.locator("#job-graph path.edge").count() == 2
        await screenshot(browser_page, "live-job-finished.png")

        await browser_page.goto(f"{base}/ui/")
        text = await browser_page.inner_text("body")
        assert job_id in text and "te-" in text
