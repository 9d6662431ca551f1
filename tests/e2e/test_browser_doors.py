"""Another site's page in a real headless Chromium against a default master (no token, loopback, as
the README's standalone cluster runs): its requests reach the master and are refused, nothing is
stored, and DNS rebinding does not let it read the master's answers.

Chromium's `--host-resolver-rules` makes `evil.example` resolve to 127.0.0.1: the attacking page
is served from `http://evil.example:<its port>` by a server of the test's own, and a page at
`http://evil.example:<the master's port>` is what DNS rebinding gives an attacker, a page of the
master's origin as far as the browser can tell. A second master that lists the page's origin in
`rest.allowed-origins` gets the same requests from the same page, so the test sees that they are
sent and what the checks, not the browser, refuse (the statuses are read from DevTools, as the
page itself may not read a `no-cors` answer).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import AsyncIterator
from typing import Any, NoReturn

import pytest
from aiohttp import web

from sparkdispatch.testing.chromium import CHROMIUM, browser_missing, chromium_args
from sparkdispatch.testing.http import request_json
from sparkdispatch.testing.master import InProcessMaster
from sparkdispatch.testing.services import free_port
from sparkdispatch.testing.waiting import eventually

pytestmark = pytest.mark.slow

UNDER_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
EVIL = "evil.example"
CHROMIUM_ARGS = chromium_args(f"--host-resolver-rules=MAP {EVIL} 127.0.0.1")
WAIT_MS = 20_000
EVIL_CODE = b"import os\nos.system('touch /tmp/owned')\n"
GRAPH = {"name": "owned", "vertices": [{"id": "a", "entrypoint": "evil:run"}]}


ATTACK_PAGE = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>cute cats</title></head>
<body>
<form id="upload" method="post" enctype="multipart/form-data">
  <input id="file" type="file" name="file">
</form>
<script>
  // a no-cors fetch of text/plain and a multipart form: browsers send both without a preflight
  async function submitJob(master) {{
    await fetch(master + "/jobs", {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}},
                                     body: {json.dumps(json.dumps(GRAPH))}}}).catch(() => null);
  }}
  function upload(master) {{
    const form = document.getElementById("upload");
    form.action = master + "/artifacts";
    form.submit();
  }}
</script>
</body></html>
"""


@pytest.fixture
def evil_origin() -> str:
    return f"http://{EVIL}:{free_port()}"


@pytest.fixture
async def master() -> AsyncIterator[InProcessMaster]:
    async with InProcessMaster() as running:  # the defaults: no token, loopback
        yield running


@pytest.fixture
async def control(evil_origin: str) -> AsyncIterator[InProcessMaster]:
    """A master that lets the attacking page's origin change state: what would happen without the check."""
    async with InProcessMaster(overrides={"rest.allowed-origins": evil_origin}) as running:
        yield running


@pytest.fixture
async def evil_site(evil_origin: str) -> AsyncIterator[str]:
    """`http://evil.example:<port>/` serving the attack page; yields its URL."""

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=ATTACK_PAGE, content_type="text/html")

    app = web.Application()
    app.router.add_get("/", page)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", int(evil_origin.rsplit(":", 1)[1])).start()
    try:
        yield f"{evil_origin}/"
    finally:
        await runner.cleanup()


@pytest.fixture
async def browser_page(master: InProcessMaster, control: InProcessMaster, evil_site: str) -> AsyncIterator[Any]:
    """A page of a fresh headless Chromium; depends on the servers so it closes before they stop."""
    if (reason := browser_missing()) is not None:
        missing(reason)
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield await browser.new_page()
        finally:
            await browser.close()


async def stored(master: InProcessMaster) -> tuple[list[Any], list[str]]:
    """The master's jobs, and the names of the files in its blob store."""
    status, body = await request_json("GET", f"{master.url}/jobs")
    assert status == 200, body
    return body["jobs"], [path.name for path in (master.config.storage_dir / "blobs").rglob("*") if path.is_file()]


def missing(reason: str) -> NoReturn:
    if UNDER_CI:
        pytest.fail(f"required for the browser tests under CI: {reason}")
    pytest.skip(reason)  # only outside CI: under CI the line above failed the test


class StatusesSeen:
    """(method, URL) → the HTTP statuses the browser got, including answers it then hid from the
    page (a `no-cors` fetch's, blocked by `Cross-Origin-Resource-Policy`), read from DevTools.

    The two events are joined by request id when read: DevTools may send a response's
    `responseReceivedExtraInfo` before the `requestWillBeSent` of its request."""

    def __init__(self) -> None:
        self.sent: dict[str, tuple[str, str]] = {}
        self.statuses: dict[str, list[int]] = {}

    async def watch(self, page: Any) -> None:
        devtools = await page.context.new_cdp_session(page)
        devtools.on(
            "Network.requestWillBeSent",
            lambda event: self.sent.__setitem__(
                event["requestId"], (event["request"]["method"], event["request"]["url"])
            ),
        )
        devtools.on(
            "Network.responseReceivedExtraInfo",
            lambda event: self.statuses.setdefault(event["requestId"], []).append(event["statusCode"]),
        )
        await devtools.send("Network.enable")

    def __getitem__(self, request: tuple[str, str]) -> list[int]:
        return [
            status
            for request_id, statuses in self.statuses.items()
            if self.sent.get(request_id) == request
            for status in statuses
        ]


async def test_a_page_of_another_site_cannot_submit_a_job_or_upload_code(
    master: InProcessMaster, control: InProcessMaster, evil_site: str, browser_page: Any
) -> None:
    page = browser_page
    statuses = StatusesSeen()
    await statuses.watch(page)
    uploads = {}
    for target in (master, control):
        await page.goto(evil_site)
        await page.evaluate("master => submitJob(master)", target.url)  # settles once the master answered
        await page.set_input_files(
            "#file", files=[{"name": "evil.py", "mimeType": "text/x-python", "buffer": EVIL_CODE}]
        )
        async with page.expect_navigation(timeout=WAIT_MS) as navigated:
            await page.evaluate("master => upload(master)", target.url)
        answer = await navigated.value
        sent = await answer.request.all_headers()
        assert sent["origin"] == evil_site.rstrip("/") and sent["content-type"].startswith("multipart/form-data")
        uploads[target.url] = (answer.status, await page.content())

    # the default master refused both for the page's origin, and stored nothing
    assert await eventually(lambda: statuses[("POST", f"{master.url}/jobs")], "its status of POST /jobs") == [403]
    status, page_text = uploads[master.url]
    assert status == 403 and "OriginRefused" in page_text and "rest.allowed-origins" in page_text
    assert await stored(master) == ([], [])
    status, _ = await request_json("GET", f"{master.url}/artifacts/{hashlib.sha256(EVIL_CODE).hexdigest()}")
    assert status == 404
    # a master that allows the page's origin gets the same requests: the upload is stored, and the job is
    # refused still, as text/plain is no JSON body (415): a page cannot send one without a preflight
    assert await eventually(lambda: statuses[("POST", f"{control.url}/jobs")], "its status of POST /jobs") == [415]
    assert uploads[control.url][0] == 201
    jobs, blobs = await stored(control)
    assert jobs == [] and len(blobs) == 1


async def test_dns_rebinding_does_not_let_a_page_read_the_masters_answers(
    master: InProcessMaster, browser_page: Any
) -> None:
    status, submitted = await request_json(
        "POST", f"{master.url}/jobs", {"name": "secret-pipeline", "vertices": [{"id": "a", "entrypoint": "m:f"}]}
    )
    assert status == 202, submitted
    status, listed = await request_json("GET", f"{master.url}/jobs")
    assert status == 200 and submitted["job_id"] in json.dumps(listed)  # what a rebinding page would be after

    page = browser_page
    # evil.example now resolves to the master: a page of http://evil.example:<master port> is, for the
    # browser, of the master's origin, so its script could read the master's answers
    rebound = f"http://{EVIL}:{master.port}"
    answer = await page.goto(f"{rebound}/ui/")
    assert answer.status == 403 and "HostRefused" in await page.content()
    for path in ("/jobs", "/v1/jobs/overview", f"/jobs/{submitted['job_id']}", "/overview"):
        status, text = await page.evaluate(
            "async path => { const r = await fetch(path); return [r.status, await r.text()]; }", path
        )
        assert status == 403 and "is none of this master's names" in text, (path, status, text)
        answered = text.replace(path, "")  # the refusal names the path it refused
        assert submitted["job_id"] not in answered and "secret-pipeline" not in answered
