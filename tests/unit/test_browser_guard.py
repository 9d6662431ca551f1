"""What a browser page may do with a master: the `Host`, `Origin` and `Content-Type` checks and the
security headers, on a real master in the test process over loopback HTTP (no token, as the
README's standalone cluster runs), and the rules themselves on their own."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from sparkdispatch.config import Configuration
from sparkdispatch.errors import (
    ConfigurationError,
    HostRefused,
    OriginRefused,
    SparkDispatchError,
    UnsupportedMediaType,
    error_from_body,
)
from sparkdispatch.rest.browser_guard import SECURITY_HEADERS, BrowserGuard, machine_names
from sparkdispatch.rest.taskexecutor_routes import SESSION_HEADER
from sparkdispatch.rest.settings import RestSettings
from sparkdispatch.testing.master import InProcessMaster
from sparkdispatch.web_origin import WebOrigin

EVIL = "http://evil.example"
GRAPH = {"name": "g", "vertices": [{"id": "a", "entrypoint": "m:f"}]}
EVIL_CODE = b"import os\nos.system('touch /tmp/owned')\n"


@pytest.fixture
async def master() -> AsyncIterator[InProcessMaster]:
    async with InProcessMaster() as running:
        yield running


async def call(method: str, url: str, **kwargs: Any) -> tuple[int, str, dict[str, str]]:
    async with aiohttp.ClientSession() as http, http.request(method, url, allow_redirects=False, **kwargs) as answer:
        return answer.status, await answer.text(), dict(answer.headers)


def refusal(status: int, text: str, headers: dict[str, str]) -> SparkDispatchError:
    return error_from_body(status, text, header=headers.get("X-SparkDispatch-Error"))


async def stored_jobs(master: InProcessMaster) -> list[Any]:
    status, text, _ = await call("GET", master.url + "/jobs")
    assert status == 200, text
    return list(json.loads(text)["jobs"])


def evil_form() -> aiohttp.FormData:
    form = aiohttp.FormData()
    form.add_field("file", EVIL_CODE, filename="evil.py", content_type="text/x-python")
    return form


# -- Origin -------------------------------------------------------------------------------------


async def test_a_page_of_another_origin_can_neither_submit_nor_upload_and_nothing_is_stored(
    master: InProcessMaster,
) -> None:
    # a browser's simple requests: no preflight, so the server's answer is the only check
    status, text, headers = await call(
        "POST", master.url + "/jobs", data=json.dumps(GRAPH), headers={"Content-Type": "text/plain", "Origin": EVIL}
    )
    error = refusal(status, text, headers)
    assert status == 403 and isinstance(error, OriginRefused), text
    assert "'http://evil.example'" in error.message and "rest.allowed-origins" in error.message
    status, text, headers = await call("POST", master.url + "/artifacts", data=evil_form(), headers={"Origin": EVIL})
    assert status == 403 and isinstance(refusal(status, text, headers), OriginRefused), text
    # the same under Flink's /v1/ prefix, and for the other state-changing methods
    status, text, headers = await call("POST", master.url + "/v1/jobs", json=GRAPH, headers={"Origin": EVIL})
    assert status == 403 and isinstance(refusal(status, text, headers), OriginRefused), text
    for method in ("PUT", "PATCH", "DELETE"):
        status, text, _ = await call(method, f"{master.url}/jobs/{'ab' * 16}?mode=cancel", headers={"Origin": EVIL})
        assert status == 403 and "OriginRefused" in text, (method, text)

    assert await stored_jobs(master) == []
    key = hashlib.sha256(EVIL_CODE).hexdigest()
    assert (await call("GET", f"{master.url}/artifacts/{key}"))[0] == 404
    assert stored_blobs(master) == []
    # the same upload without the page's Origin (the CLI's) is stored: the check above can see one
    assert (await call("POST", master.url + "/artifacts", data=evil_form()))[0] == 201
    assert len(stored_blobs(master)) == 1


def stored_blobs(master: InProcessMaster) -> list[str]:
    return [path.name for path in (master.config.storage_dir / "blobs").rglob("*") if path.is_file()]


async def test_without_an_origin_fetch_metadata_of_another_site_is_refused(master: InProcessMaster) -> None:
    for site in ("cross-site", "same-site"):
        status, text, _ = await call("POST", master.url + "/jobs", json=GRAPH, headers={"Sec-Fetch-Site": site})
        assert status == 403 and "OriginRefused" in text and f"({site})" in text, text
    assert await stored_jobs(master) == []
    for site in ("same-origin", "none"):  # the master's own page; a URL typed by the user
        status, text, _ = await call("POST", master.url + "/jobs", json=GRAPH, headers={"Sec-Fetch-Site": site})
        assert status == 202, text


async def test_the_masters_own_pages_and_clients_without_an_origin_may_change_state(master: InProcessMaster) -> None:
    port = master.port
    status, text, _ = await call("POST", master.url + "/jobs", json=GRAPH)  # the CLI, the hook, curl
    assert status == 202, text
    for host, origin in (
        (f"127.0.0.1:{port}", f"http://127.0.0.1:{port}"),
        (f"localhost:{port}", f"http://LOCALHOST:{port}/"),
    ):
        status, text, _ = await call("POST", master.url + "/jobs", json=GRAPH, headers={"Host": host, "Origin": origin})
        assert status == 202, (host, text)
    # same host, another port or scheme: another origin
    for origin in (f"http://127.0.0.1:{port + 1}", f"https://127.0.0.1:{port}", "null"):
        status, text, _ = await call("POST", master.url + "/jobs", json=GRAPH, headers={"Origin": origin})
        assert status == 403 and "OriginRefused" in text, (origin, text)
    # reading needs no origin check: a page of another origin cannot read the answer (no CORS headers)
    status, _, headers = await call("GET", master.url + "/jobs", headers={"Origin": EVIL})
    assert status == 200 and "Access-Control-Allow-Origin" not in headers
    assert len(await stored_jobs(master)) == 3


async def test_allowed_origins_may_change_state_and_no_other() -> None:
    overrides = {"rest.allowed-origins": "https://airflow.example:8443, http://proxy.example"}
    async with InProcessMaster(overrides=overrides) as master:
        for origin in ("https://airflow.example:8443", "http://proxy.example:80"):
            status, text, _ = await call("POST", master.url + "/jobs", json=GRAPH, headers={"Origin": origin})
            assert status == 202, (origin, text)
        for origin in ("https://airflow.example", "http://proxy.example:8080", EVIL):
            status, text, _ = await call("POST", master.url + "/jobs", json=GRAPH, headers={"Origin": origin})
            assert status == 403, (origin, text)


# -- Host ---------------------------------------------------------------------------------------


async def test_a_host_that_is_none_of_the_masters_names_is_refused_for_every_call(master: InProcessMaster) -> None:
    host = f"evil.example:{master.port}"  # what a page at http://evil.example:PORT sends once DNS rebinds
    for method, path in (
        ("GET", "/jobs"),
        ("GET", "/overview"),
        ("GET", "/ui/"),
        ("GET", "/ui/static/ui.css"),
        ("GET", "/v1/jobs/overview"),
        ("POST", "/jobs"),
        ("GET", "/metrics"),
    ):
        status, text, headers = await call(
            method, master.url + path, json=GRAPH if method == "POST" else None, headers={"Host": host}
        )
        error = refusal(status, text, headers)
        assert status == 403 and isinstance(error, HostRefused), (path, text)
        assert "'evil.example:" in error.message and "rest.allowed-hosts" in error.message
    assert await stored_jobs(master) == []


async def test_the_masters_own_names_and_ip_addresses_are_accepted(master: InProcessMaster) -> None:
    names = ["localhost", "LOCALHOST.", "ui.localhost", "127.0.0.1", "10.1.2.3", "[::1]", *sorted(machine_names())]
    for name in names:
        status, text, _ = await call("GET", master.url + "/overview", headers={"Host": f"{name}:{master.port}"})
        assert status == 200, (name, text)
    assert (await call("GET", master.url + "/overview", headers={"Host": "localhost"}))[0] == 200  # no port


@pytest.mark.parametrize(
    ("allowed", "host", "status"),
    [
        ("master.internal, proxy.example", "proxy.example:443", 200),
        ("master.internal", "MASTER.internal", 200),
        ("master.internal", "evil.example", 403),
        ("*", "evil.example:8081", 200),
    ],
)
async def test_allowed_hosts_extend_the_names(allowed: str, host: str, status: int) -> None:
    async with InProcessMaster(overrides={"rest.allowed-hosts": allowed}) as master:
        assert (await call("GET", master.url + "/jobs", headers={"Host": host}))[0] == status


async def test_an_advertised_name_is_one_of_the_masters_names() -> None:
    # docker-compose's masters advertise their service name and are called by it
    async with InProcessMaster(
        overrides={"rest.address": "sparkdispatch-master-1", "rest.bind-address": "127.0.0.1"}
    ) as master:
        status, text, _ = await call(
            "POST", master.url + "/jobs", json=GRAPH, headers={"Host": f"sparkdispatch-master-1:{master.port}"}
        )
        assert status == 202, text
        assert (await call("GET", master.url + "/jobs", headers={"Host": "sparkdispatch-master-2"}))[0] == 403


# -- Content-Type -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonp"],
)
async def test_a_json_body_needs_its_content_type(master: InProcessMaster, content_type: str | None) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    body = json.dumps(GRAPH).encode()
    status, text, answer = await call("POST", master.url + "/jobs", data=body, headers=headers)
    error = refusal(status, text, answer)
    assert status == 415 and isinstance(error, UnsupportedMediaType), text
    assert "application/json" in error.message
    status, text, _ = await call(
        "POST", master.url + "/taskexecutors", data=b"{}", headers={**headers, SESSION_HEADER: master.session_id}
    )
    assert status == 415 and "UnsupportedMediaType" in text, text
    assert await stored_jobs(master) == []
    # a charset parameter is fine
    status, text, _ = await call(
        "POST", master.url + "/jobs", data=body, headers={"Content-Type": "application/json; charset=utf-8"}
    )
    assert status == 202, text


# -- security headers ---------------------------------------------------------------------------


async def test_every_answer_carries_the_security_headers(master: InProcessMaster) -> None:
    for method, path, expected in (
        ("GET", "/ui/", 200),
        ("GET", "/ui/static/common.js", 200),
        ("GET", "/jobs", 200),
        ("GET", "/nowhere", 404),
        ("GET", "/ui", 302),
        ("POST", "/jobs", 415),
    ):
        status, _, headers = await call(method, master.url + path)
        assert status == expected, path
        for name, value in SECURITY_HEADERS.items():
            assert headers.get(name) == value, (path, name)
    csp = SECURITY_HEADERS["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp and "unsafe-inline" not in csp


async def test_the_pages_need_nothing_the_policy_forbids(master: InProcessMaster) -> None:
    # no inline script or style: every script and stylesheet comes from /ui/static/
    status, page, _ = await call("GET", master.url + "/ui/")
    assert status == 200
    assert "<script>" not in page and "<style" not in page and " style=" not in page and " on" + "click" not in page
    assert page.count("<script src=") == 2


# -- the rules on their own ---------------------------------------------------------------------


def guard(**keys: str) -> BrowserGuard:
    return BrowserGuard.for_master(RestSettings.from_config(Configuration.from_mapping(keys)), {"box", "box.corp"})


def test_host_names_are_compared_without_port_case_or_final_dot() -> None:
    rules = guard(**{"rest.address": "Master-1.corp.", "rest.allowed-hosts": "proxy.example"})
    for host in (
        "master-1.corp",
        "MASTER-1.CORP.:8081",
        "box:1",
        "box.corp",
        "proxy.example:443",
        "localhost",
        "a.b.localhost:3000",
        "192.168.0.7:8081",
        "[fe80::1]:8081",
    ):
        assert rules.allows_host(host), host
    for host in (
        "evil.example",
        "master-1.corp.evil.example",
        "localhost.evil.example",
        "box.evil",
        "",
        "a b",
        "x/y",
        "user@box",
        "box:notaport",
    ):
        assert not rules.allows_host(host), host
    assert guard(**{"rest.allowed-hosts": "*"}).allows_host("anything.at.all:1")


def test_origins_parse_to_scheme_host_and_port() -> None:
    assert WebOrigin.parse("http://LocalHost") == WebOrigin("http", "localhost", 80)
    assert WebOrigin.parse("https://a.example:8443/") == WebOrigin("https", "a.example", 8443)
    assert str(WebOrigin.parse("http://[::1]:8081")) == "http://[::1]:8081"
    for text in (
        "null",
        "",
        "file:///etc",
        "http://a.example/path",
        "ftp://a.example",
        "http://u:p@a.example",
        "http://a.example:99999",
        "http://a.example:x",
        "http://",
    ):
        assert WebOrigin.parse(text) is None, text
    assert WebOrigin.of_request("http", "a.example") == WebOrigin("http", "a.example", 80)
    assert WebOrigin.of_request("https", "a.example:443") == WebOrigin("https", "a.example", 443)


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("rest.allowed-origins", "evil.example", "'evil.example'"),
        ("rest.allowed-origins", "http://a.example/app", "'http://a.example/app'"),
        ("rest.allowed-hosts", "a.example:8081", "'a.example:8081'"),
        ("rest.allowed-hosts", "http://a.example", "'http://a.example'"),
    ],
)
def test_a_malformed_allowed_entry_stops_the_master_naming_it(key: str, value: str, named: str) -> None:
    with pytest.raises(ConfigurationError, match=f"{key}: {named}"):
        RestSettings.from_config(Configuration.from_mapping({key: value}))
