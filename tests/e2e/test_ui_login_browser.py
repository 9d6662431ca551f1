"""The web UI of a real master with a token, in a real headless Chromium: log in, cancel a job, log out.

The master runs in the test process (`InProcessMaster`, real HTTP, real Dispatcher and
JobMaster), with a scripted TaskExecutor whose tasks run until they are cancelled.
Screenshots of the login page and of the job page with its Cancel button go to tests/output/.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from sparkdispatch.testing.chromium import CHROMIUM, browser_missing, chromium_args
from sparkdispatch.testing.http import http_json
from sparkdispatch.testing.master import InProcessMaster

pytestmark = pytest.mark.slow

UNDER_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
OUTPUT = Path(__file__).resolve().parents[1] / "output"
TOKEN = "browser-test-token"
WAIT_MS = 20_000
LOGIN_WITH_NEXT = re.compile(r"/ui/login\?next=")


def test_log_in_cancel_a_running_job_from_its_page_and_log_out() -> None:
    if (reason := browser_missing()) is not None:
        (pytest.fail if UNDER_CI else pytest.skip)(reason)
    from playwright.sync_api import sync_playwright

    OUTPUT.mkdir(parents=True, exist_ok=True)
    with InProcessMaster(overrides={"rest.auth.token": TOKEN}) as master:
        master.run(master.wait_for_leadership())
        master.run(master.add_task_executor(script=lambda tdd: None))  # tasks run until cancelled
        graph = {"name": "nightly-sales", "vertices": [{"id": "extract", "entrypoint": "m:f", "parallelism": 2}]}
        status, answer = http_json("POST", f"{master.url}/jobs", graph, token=TOKEN, timeout=10)
        assert status == 202, answer
        job_id = answer["job_id"]
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=chromium_args())
            try:
                page = browser.new_page(viewport={"width": 1200, "height": 800})
                errors: list[str] = []
                page.on("pageerror", lambda error: errors.append(str(error)))
                # the Airflow extra link's target, without a session: the login page, then back
                page.goto(f"{master.url}/ui/jobs/{job_id}")
                page.wait_for_url(LOGIN_WITH_NEXT, timeout=WAIT_MS)
                page.fill("#token", "not-the-token")
                page.click("button[type=submit]")
                page.get_by_role("alert").wait_for(timeout=WAIT_MS)
                page.screenshot(path=str(OUTPUT / "login.png"))
                page.fill("#token", TOKEN)
                page.click("button[type=submit]")
                page.wait_for_url(f"**/ui/jobs/{job_id}", timeout=WAIT_MS)
                page.locator("#job-status", has_text="RUNNING").wait_for(timeout=WAIT_MS)
                page.screenshot(path=str(OUTPUT / "job-cancel-button.png"), full_page=True)
                # Cancel: the page asks first, then the job's states follow
                page.once("dialog", lambda dialog: dialog.accept())
                page.click("#cancel-job")
                page.locator("#job-status", has_text="CANCELED").wait_for(timeout=WAIT_MS)
                assert page.locator("#cancel-job").count() == 0
                page.screenshot(path=str(OUTPUT / "job-cancelled.png"), full_page=True)
                page.click("text=Log out")
                page.wait_for_url("**/ui/login", timeout=WAIT_MS)
                page.goto(f"{master.url}/ui/")
                page.wait_for_url(LOGIN_WITH_NEXT, timeout=WAIT_MS)
                assert not errors, errors
            finally:
                browser.close()
        assert http_json("GET", f"{master.url}/jobs/{job_id}", token=TOKEN, timeout=10)[1]["status"] == "CANCELED"
        assert http_json("GET", f"{master.url}/jobs/{job_id}", timeout=10)[0] == 401
