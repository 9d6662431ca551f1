"""The web UI's login, session cookie and CSRF checks on a real master (in process, real HTTP)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest

from sparkdispatch.rest.ui_auth import CSRF_HEADER, SESSION_COOKIE, UiSessions
from sparkdispatch.testing.master import InProcessMaster

TOKEN = "ui-test-token"


async def call(method: str, url: str, *, cookie: str | None = None, **kwargs: Any) -> tuple[int, str, Any]:
    headers = {**kwargs.pop("headers", {}), **({"Cookie": f"{SESSION_COOKIE}={cookie}"} if cookie else {})}
    async with aiohttp.ClientSession() as http, http.request(method, url, headers=headers, allow_redirects=False,
                                                             **kwargs) as answer:
        return answer.status, await answer.text(), answer


async def test_a_browser_logs_in_sees_pages_and_needs_the_csrf_token_to_change_state() -> None:
    async with InProcessMaster(overrides={"rest.auth.token": TOKEN}) as master:
        await master.wait_for_leadership()
        await master.add_task_executor(script=lambda tdd: None)  # tasks run until the job is cancelled
        url = master.url
        status, _, answer = await call("GET", f"{url}/ui/jobs/abc?x=1")
        location = urlsplit(answer.headers["Location"])
        assert status == 303 and location.path == "/ui/login"
        assert parse_qs(location.query) == {"next": ["/ui/jobs/abc?x=1"]}
        assert (await call("GET", f"{url}/jobs"))[0] == 401  # the API answers 401, never a redirect
        status, page, _ = await call("GET", f"{url}/ui/login?next=/ui/taskmanagers")
        assert status == 200 and 'name="token"' in page and 'value="/ui/taskmanagers"' in page
        assert (await call("GET", f"{url}/ui/static/ui.css"))[0] == 200  # the login page's stylesheet

        status, page, _ = await call("POST", f"{url}/ui/login", data={"token": "wrong", "next": "/ui/"})
        assert status == 401 and "That is not the master&#x27;s token." in page
        status, _, answer = await call("POST", f"{url}/ui/login", data={"token": TOKEN, "next": "https://evil/"})
        assert status == 303 and answer.headers["Location"] == "/ui/"  # never another site
        morsel = answer.cookies[SESSION_COOKIE]
        assert morsel["httponly"] and morsel["samesite"] == "Strict" and morsel["path"] == "/"
        cookie = morsel.value

        status, page, _ = await call("GET", f"{url}/ui/", cookie=cookie)
        assert status == 200 and '<meta name="csrf-token" content="' in page and "Log out" in page
        csrf = page.split('<meta name="csrf-token" content="', 1)[1].split('"', 1)[0]
        assert (await call("GET", f"{url}/overview", cookie=cookie))[0] == 200  # the pages' own REST calls

        graph = {"name": "g", "vertices": [{"id": "a", "entrypoint": "m:f"}]}
        status, text, _ = await call("POST", f"{url}/jobs", cookie=cookie, json=graph)  # a cross-site form's POST
        assert status == 403 and "X-CSRF-Token" in text and "CsrfRefused" in text
        status, text, _ = await call("POST", f"{url}/jobs", cookie=cookie, json=graph, headers={CSRF_HEADER: "x"})
        assert status == 403
        status, text, answer = await call("POST", f"{url}/jobs", cookie=cookie, json=graph,
                                          headers={CSRF_HEADER: csrf})
        assert status == 202, text
        job_id = json.loads(text)["job_id"]
        status, page, _ = await call("GET", f"{url}/ui/jobs/{job_id}", cookie=cookie)
        assert status == 200 and 'id="cancel-job"' in page
        status, _, _ = await call("PATCH", f"{url}/jobs/{job_id}", cookie=cookie, headers={CSRF_HEADER: csrf})
        assert status == 202

        status, _, answer = await call("GET", f"{url}/ui/logout", cookie=cookie)
        assert status == 303 and answer.headers["Location"] == "/ui/login"
        assert answer.cookies[SESSION_COOKIE].value == ""
        # a tampered cookie is no session
        assert (await call("GET", f"{url}/ui/", cookie=cookie[:-1] + ("0" if cookie[-1] != "0" else "1")))[0] == 303


def test_sessions_expire_and_belong_to_their_token() -> None:
    now = [1_000_000.0]
    sessions = UiSessions(TOKEN, lifetime_s=60, clock=lambda: now[0])
    cookie = sessions.issue()
    csrf = sessions.csrf_of(cookie)
    assert csrf is not None and csrf == UiSessions(TOKEN, clock=lambda: now[0]).csrf_of(cookie)  # any master
    assert UiSessions("another-token", clock=lambda: now[0]).csrf_of(cookie) is None
    assert sessions.csrf_of(sessions.issue()) != csrf  # a CSRF token per session
    now[0] += 61
    assert sessions.csrf_of(cookie) is None
    for garbage in ("", "x", "1.2.3", "..", f"{cookie}x"):
        assert sessions.csrf_of(garbage) is None


@pytest.mark.parametrize("token", ["", TOKEN])
async def test_without_a_token_the_login_page_leads_to_the_ui(token: str) -> None:
    overrides = {"rest.auth.token": token} if token else {}
    async with InProcessMaster(overrides=overrides) as master:
        status, page, answer = await call("GET", f"{master.url}/ui/login")
        if token:
            assert status == 200 and "Log in" in page
        else:
            assert status == 303 and answer.headers["Location"] == "/ui/"
            status, page, _ = await call("GET", f"{master.url}/ui/")
            assert status == 200 and "csrf-token" not in page and "Log out" not in page
