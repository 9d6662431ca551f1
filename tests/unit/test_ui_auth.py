"""The web UI's login, session cookie and CSRF checks on a real master (in process, real HTTP)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest

from sparkdispatch.errors import TooManyLoginAttempts, error_from_body
from sparkdispatch.rest.access import LEGACY_TOKEN_NAME, Authenticator, Principal, Role
from sparkdispatch.rest.login_throttle import LoginThrottle
from sparkdispatch.rest.session_revocations import SessionRevocations
from sparkdispatch.rest.ui_auth import CSRF_HEADER, SESSION_COOKIE, UiSessions
from sparkdispatch.testing.master import InProcessMaster

TOKEN = "ui-test-token"
ADMIN = Principal(LEGACY_TOKEN_NAME, Role.ADMIN)


async def call(method: str, url: str, *, cookie: str | None = None, **kwargs: Any) -> tuple[int, str, Any]:
    headers = {**kwargs.pop("headers", {}), **({"Cookie": f"{SESSION_COOKIE}={cookie}"} if cookie else {})}
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, url, headers=headers, allow_redirects=False, **kwargs) as answer,
    ):
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
        assert status == 401 and "That is no token of this master&#x27;s users." in page
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
        status, text, answer = await call("POST", f"{url}/jobs", cookie=cookie, json=graph, headers={CSRF_HEADER: csrf})
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


def sessions_of(token: str, **kwargs: Any) -> UiSessions:
    return UiSessions(Authenticator(legacy_token=token), **kwargs)


def test_sessions_expire_and_belong_to_their_token() -> None:
    now = [1_000_000.0]
    sessions = sessions_of(TOKEN, lifetime_s=60, clock=lambda: now[0])
    cookie = sessions.issue(ADMIN)
    csrf = sessions.csrf_of(cookie)
    assert csrf is not None and csrf == sessions_of(TOKEN, clock=lambda: now[0]).csrf_of(cookie)  # any master
    assert sessions_of("another-token", clock=lambda: now[0]).csrf_of(cookie) is None
    assert sessions.csrf_of(sessions.issue(ADMIN)) != csrf  # a CSRF token per session
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


# -- the login's other doors: body size, guesses, logout ---------------------------------------


async def test_a_login_body_is_refused_after_a_few_kib_unread() -> None:
    # the body timeout is long: a master that waited for the whole body would answer 408, not 413
    async with InProcessMaster(overrides={"rest.auth.token": TOKEN, "rest.body-timeout": "1min"}) as master:
        host = f"127.0.0.1:{master.port}"
        for framing, start in (
            (f"Content-Length: {60 << 20}", b"token=" + b"x" * 100),  # declared 60 MiB
            ("Transfer-Encoding: chunked", b"10000\r\n" + b"x" * 0x10000 + b"\r\n"),
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", master.port)
            writer.write(
                f"POST /ui/login HTTP/1.1\r\nHost: {host}\r\n"
                f"Content-Type: application/x-www-form-urlencoded\r\n{framing}\r\n\r\n".encode()
                + start
            )
            await writer.drain()
            status_line = await asyncio.wait_for(reader.readline(), 60)
            writer.close()
            assert status_line.startswith(b"HTTP/1.1 413"), (framing, status_line)
        status, text, _ = await call(
            "POST",
            f"{master.url}/ui/login",
            data="token=" + "x" * 5000,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert status == 413 and "RequestTooLarge" in text and "4096" in text, text
        status, text, _ = await call("POST", f"{master.url}/ui/login", json={"token": TOKEN})
        assert status == 415 and "UnsupportedMediaType" in text, text


async def test_failed_logins_are_throttled_per_client_address() -> None:
    overrides = {"rest.auth.token": TOKEN, "rest.login.max-failures": 3, "rest.login.failure-window": "10min"}
    async with InProcessMaster(overrides=overrides) as master:
        login = f"{master.url}/ui/login"
        for _ in range(3):
            assert (await call("POST", login, data={"token": "guess"}))[0] == 401
        status, text, answer = await call("POST", login, data={"token": TOKEN})  # even the right one, unheard
        error = error_from_body(status, text)
        assert status == 429 and isinstance(error, TooManyLoginAttempts), text
        assert 0 < int(answer.headers["Retry-After"]) <= 600 and error.retry_after == int(answer.headers["Retry-After"])
        assert "rest.login.max-failures" in error.message and "127.0.0.1" in error.message
        assert (await call("GET", f"{master.url}/jobs", headers={"Authorization": f"Bearer {TOKEN}"}))[0] == 200


def test_the_throttle_forgets_failures_older_than_its_window_and_after_a_success() -> None:
    now = [100.0]
    throttle = LoginThrottle(max_failures=2, window=60, clock=lambda: now[0], max_clients=3)
    throttle.failed("a")
    now[0] += 30
    throttle.failed("a")
    assert throttle.retry_after_seconds("a") == 30 and throttle.retry_after_seconds("b") is None
    now[0] += 30.5  # the first failure is over 60 s old
    assert throttle.retry_after("a") is None
    throttle.failed("a")
    assert throttle.retry_after("a") is not None
    throttle.succeeded("a")
    assert throttle.retry_after("a") is None
    for client in ("c", "d", "e", "f"):  # a fourth address pushes out the oldest
        throttle.failed(client)
        throttle.failed(client)
    assert throttle.retry_after("c") is None and throttle.retry_after("f") is not None


async def test_a_logged_out_session_cookie_no_longer_works_when_replayed() -> None:
    async with InProcessMaster(overrides={"rest.auth.token": TOKEN}) as master:
        url = master.url
        _, _, answer = await call("POST", f"{url}/ui/login", data={"token": TOKEN, "next": "/ui/"})
        cookie = answer.cookies[SESSION_COOKIE].value
        other = (await call("POST", f"{url}/ui/login", data={"token": TOKEN}))[2].cookies[SESSION_COOKIE].value
        assert (await call("GET", f"{url}/jobs", cookie=cookie))[0] == 200
        assert (await call("GET", f"{url}/ui/logout", cookie=cookie))[0] == 303
        assert (await call("GET", f"{url}/jobs", cookie=cookie))[0] == 401
        status, _, answer = await call("GET", f"{url}/ui/", cookie=cookie)
        assert status == 303 and answer.headers["Location"].startswith("/ui/login")
        assert (await call("GET", f"{url}/jobs", cookie=other))[0] == 200  # another browser stays logged in


async def test_a_logout_ends_the_session_on_every_master_of_the_cluster_and_across_a_restart(tmp_path: Path) -> None:
    overrides = {"rest.auth.token": TOKEN}
    async with InProcessMaster(storage_dir=tmp_path, overrides=overrides) as first:
        _, _, answer = await call("POST", f"{first.url}/ui/login", data={"token": TOKEN})
        cookie = answer.cookies[SESSION_COOKIE].value
        other = (await call("POST", f"{first.url}/ui/login", data={"token": TOKEN}))[2].cookies[SESSION_COOKIE].value
        async with InProcessMaster(storage_dir=tmp_path, overrides=overrides) as second:  # another master
            assert (await call("GET", f"{second.url}/jobs", cookie=cookie))[0] == 200
            assert (await call("GET", f"{first.url}/ui/logout", cookie=cookie))[0] == 303
            assert (await call("GET", f"{second.url}/jobs", cookie=cookie))[0] == 401
            assert (await call("GET", f"{second.url}/jobs", cookie=other))[0] == 200
    async with InProcessMaster(storage_dir=tmp_path, overrides=overrides) as restarted:
        assert (await call("GET", f"{restarted.url}/jobs", cookie=cookie))[0] == 401
        assert (await call("GET", f"{restarted.url}/jobs", cookie=other))[0] == 200
    revoked = list((tmp_path / "ui-sessions" / "default").iterdir())
    assert len(revoked) == 1 and oct(revoked[0].stat().st_mode & 0o777) == "0o600"


def test_revocations_are_shared_through_their_directory_and_swept_once_expired(tmp_path: Path) -> None:
    now = [1_000.0]
    here, there = (SessionRevocations(tmp_path, clock=lambda: now[0]) for _ in range(2))
    here.revoke("n" * 22, expires=1_030)
    assert there.is_revoked("n" * 22) and not there.is_revoked("m" * 22)
    with pytest.raises(ValueError, match="not a session nonce"):
        here.revoke("../../etc/passwd", expires=2_000)
    assert not there.is_revoked("../x")  # never a file name
    now[0] = 2_000.0  # the first session expired: the next logout sweeps its file
    there.revoke("o" * 22, expires=3_000)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["o" * 22]


def test_only_a_live_session_is_revoked_and_only_its_own() -> None:
    now = [1_000_000.0]
    sessions = sessions_of(TOKEN, lifetime_s=60, clock=lambda: now[0])
    cookie, other = sessions.issue(ADMIN), sessions.issue(ADMIN)
    assert sessions.revoke(cookie) and sessions.csrf_of(cookie) is None and sessions.csrf_of(other) is not None
    assert not sessions.revoke("garbage") and not sessions.revoke(other[:-1] + ("0" if other[-1] != "0" else "1"))
    now[0] += 61
    assert not sessions.revoke(other)  # expired: nothing to remember
