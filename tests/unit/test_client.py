"""SparkDispatchClient against small fake masters on real loopback aiohttp servers."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from sparkdispatch.client import (
    RetryPolicy,
    SparkDispatchClient,
    SyncSparkDispatchClient,
    ZooKeeperTarget,
    normalize_address,
    parse_addresses,
    read_artifact,
)
from sparkdispatch.errors import (
    BlobError,
    DuplicateJobSubmission,
    InvalidJobGraph,
    JobAlreadyTerminated,
    NoLeader,
    ServiceUnavailable,
    SparkDispatchError,
    Unauthorized,
    UnknownJob,
)
from sparkdispatch.testing.services import free_port

FAST = RetryPolicy(attempts=4, initial_backoff=0.01, max_backoff=0.05, failover_timeout=5.0)
JOB = "0123456789abcdef0123456789abcdef"
GRAPH = {"name": "g", "vertices": [{"id": "a", "entrypoint": "m:f"}]}


class FakeMaster:
    """A master with canned answers; `routes` maps (method, path) to a handler."""

    def __init__(self, *, is_leader: bool = True, leader: str | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.is_leader = is_leader
        self.leader = leader
        self.calls: list[tuple[str, str]] = []
        self.headers: list[dict[str, str]] = []
        self.routes: dict[tuple[str, str], Callable[[web.Request], Any]] = {}
        self._runner: web.AppRunner | None = None

    def overview(self) -> dict[str, Any]:
        return {"is_leader": self.is_leader, "leader": self.url if self.is_leader else self.leader,
                "taskmanagers": 2, "slots_total": 4, "slots_available": 3, "jobs_running": 0,
                "jobs_finished": 0, "jobs_failed": 0, "jobs_cancelled": 0}

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.calls.append((request.method, request.path))
        self.headers.append(dict(request.headers))
        handler = self.routes.get((request.method, request.path))
        if handler is not None:
            answer = handler(request)
            return await answer if asyncio.iscoroutine(answer) else answer
        if request.path == "/overview":
            return web.json_response(self.overview())
        return web.json_response({"errors": [f"no route {request.method} {request.path}"]}, status=404)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def count(self, method: str, path: str) -> int:
        return self.calls.count((method, path))


@pytest.fixture
async def master() -> AsyncIterator[FakeMaster]:
    server = FakeMaster()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def errors(status: int, *messages: str, **extra: Any) -> web.Response:
    return web.json_response({"errors": list(messages), **extra}, status=status)


def test_addresses_are_normalized() -> None:
    assert parse_addresses("a, http://b:9/ ,a") == ["http://a:8081", "http://b:9"]
    assert normalize_address("https://m.example:443/") == "https://m.example:443"
    with pytest.raises(SparkDispatchError, match="not a master REST address"):
        normalize_address("ftp://x")


async def test_submit_reports_created_and_sends_a_job_id(master: FakeMaster) -> None:
    seen: list[dict[str, Any]] = []

    async def submit(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        return web.json_response({"job_id": body["job_id"]}, status=202 if len(seen) == 1 else 200)

    master.routes[("POST", "/jobs")] = submit
    async with SparkDispatchClient(addresses=[master.url], retry=FAST) as client:
        job_id, created = await client.submit(GRAPH)
        again, created_again = await client.submit({**GRAPH, "job_id": job_id})
    assert (created, created_again) == (True, False)
    assert job_id == again == seen[0]["job_id"] and len(job_id) == 32
    assert "job_id" not in GRAPH  # the caller's dict is not changed


@pytest.mark.parametrize(("method", "path", "status", "body", "expected", "text"), [
    ("GET", f"/jobs/{JOB}", 404, ["no job with id " + JOB], UnknownJob, JOB),
    ("POST", "/jobs", 409, [f"job {JOB} cannot be submitted: it runs with another graph"],
     DuplicateJobSubmission, "another graph"),
    ("PATCH", f"/jobs/{JOB}", 409, [f"job {JOB} already reached FINISHED and cannot be cancelled"],
     JobAlreadyTerminated, "FINISHED"),
    ("POST", "/jobs", 400, ["vertices.0.parallelism: must be at least 1", "name: missing"],
     InvalidJobGraph, "parallelism"),
    ("GET", "/overview", 401, ["a token is required"], Unauthorized, "token"),
])
async def test_error_answers_become_error_classes(master: FakeMaster, method: str, path: str, status: int,
                                                  body: list[str], expected: type[Exception], text: str) -> None:
    master.routes[(method, path)] = lambda request: errors(status, *body)
    if path == "/overview":  # discovery must get through first
        master.routes.pop((method, path))
        master.routes[("GET", "/taskmanagers")] = lambda request: errors(status, *body)
        method, path = "GET", "/taskmanagers"
    async with SparkDispatchClient(addresses=[master.url], retry=FAST) as client:
        with pytest.raises(expected, match=text) as caught:
            if (method, path) == ("POST", "/jobs"):
                await client.submit({**GRAPH, "job_id": JOB})
            elif method == "PATCH":
                await client.cancel(JOB)
            elif path == "/taskmanagers":
                await client.taskmanagers()
            else:
                await client.job(JOB)
    if expected is InvalidJobGraph:
        assert caught.value.field_errors == {"vertices.0.parallelism": ["must be at least 1"], "name": ["missing"]}
    if expected is JobAlreadyTerminated:
        assert caught.value.status == "FINISHED"
    if expected is DuplicateJobSubmission:
        assert caught.value.job_id == JOB
    assert master.count(method, path) == 1  # a 4xx is not retried


async def test_5xx_and_429_are_retried_then_succeed(master: FakeMaster) -> None:
    answers = iter([errors(500, "boom"), errors(429, "slow down", ), web.json_response({"jobs": []})])
    master.routes[("GET", "/jobs")] = lambda request: next(answers)
    async with SparkDispatchClient(addresses=[master.url], retry=FAST) as client:
        assert await client.jobs() == []
    assert master.count("GET", "/jobs") == 3


async def test_retries_are_bounded(master: FakeMaster) -> None:
    master.routes[("GET", "/jobs")] = lambda request: errors(500, "the store is broken")
    async with SparkDispatchClient(addresses=[master.url], retry=FAST) as client:
        with pytest.raises(SparkDispatchError, match="the store is broken") as caught:
            await client.jobs()
    assert caught.value.http_status == 500
    assert master.count("GET", "/jobs") == FAST.attempts


async def test_a_standby_answering_503_sends_the_client_to_the_leader(master: FakeMaster) -> None:
    standby = FakeMaster(is_leader=False, leader=master.url)
    standby.routes[("GET", "/jobs")] = lambda request: errors(503, "this master is a standby", leader=master.url)
    await standby.start()
    master.routes[("GET", "/jobs")] = lambda request: web.json_response({"jobs": [{"id": JOB}]})
    try:
        async with SparkDispatchClient(addresses=[standby.url], retry=FAST) as client:
            client._leader = standby.url  # as if the standby had led a moment ago
            assert await client.jobs() == [{"id": JOB}]
            assert client.leader_address == master.url
    finally:
        await standby.stop()
    assert standby.count("GET", "/jobs") == 1 and master.count("GET", "/jobs") == 1


async def test_discovery_asks_a_standby_for_the_leader_and_skips_dead_addresses(master: FakeMaster) -> None:
    standby = FakeMaster(is_leader=False, leader=master.url)
    await standby.start()
    dead = f"http://127.0.0.1:{free_port()}"
    try:
        async with SparkDispatchClient(addresses=[dead, standby.url], retry=FAST) as client:
            assert await client.leader() == master.url
            assert (await client.overview())["is_leader"] is True
    finally:
        await standby.stop()


async def test_a_redirect_is_followed_to_the_leader(master: FakeMaster) -> None:
    standby = FakeMaster(is_leader=False, leader=master.url)
    standby.routes[("GET", f"/jobs/{JOB}")] = lambda request: web.Response(
        status=307, headers={"Location": f"{master.url}/jobs/{JOB}"})
    master.routes[("GET", f"/jobs/{JOB}")] = lambda request: web.json_response({"id": JOB, "status": "RUNNING"})
    await standby.start()
    try:
        async with SparkDispatchClient(addresses=[standby.url], retry=FAST) as client:
            client._leader = standby.url
            assert (await client.job(JOB))["status"] == "RUNNING"
    finally:
        await standby.stop()


async def test_no_leader_anywhere_is_a_clear_error() -> None:
    standby = FakeMaster(is_leader=False, leader=None)
    await standby.start()
    try:
        async with SparkDispatchClient(addresses=[standby.url], retry=FAST) as client:
            with pytest.raises(NoLeader, match="standby"):
                await client.jobs()
    finally:
        await standby.stop()


async def test_a_dead_cluster_fails_after_bounded_retries_naming_the_addresses() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async with SparkDispatchClient(addresses=[dead], retry=FAST) as client:
        with pytest.raises(ServiceUnavailable, match=f"127.0.0.1:{dead.rsplit(':', 1)[1]}"):
            await client.overview()


async def test_wait_for_result_keeps_waiting_through_a_failover(master: FakeMaster) -> None:
    successor = FakeMaster(is_leader=False, leader=master.url)
    result = {"job_id": JOB, "status": "FINISHED", "vertices": {}}
    polls = 0

    async def in_progress(request: web.Request) -> web.Response:
        nonlocal polls
        polls += 1
        return web.json_response({"status": {"id": "IN_PROGRESS"}})

    master.routes[("GET", f"/jobs/{JOB}/execution-result")] = in_progress
    successor.routes[("GET", f"/jobs/{JOB}/execution-result")] = lambda request: web.json_response(
        {"status": {"id": "COMPLETED"}, "job_execution_result": result})
    await successor.start()
    try:
        async with SparkDispatchClient(addresses=[master.url, successor.url], retry=FAST) as client:
            waiting = asyncio.create_task(client.wait_for_result(JOB, poll_interval=0.02))
            while polls < 2:
                await asyncio.sleep(0.01)
            await master.stop()  # the leader dies; for a while nobody leads
            successor.leader = None
            await asyncio.sleep(0.3)
            successor.is_leader = True  # the standby takes over
            assert await asyncio.wait_for(waiting, 10) == result
            assert client.leader_address == successor.url
    finally:
        await successor.stop()


async def test_the_token_is_sent_as_a_bearer_header(master: FakeMaster) -> None:
    async with SparkDispatchClient(addresses=[master.url], token="s3cret", retry=FAST) as client:
        await client.overview()
    assert all(h.get("Authorization") == "Bearer s3cret" for h in master.headers)


async def test_artifacts_upload_as_files_and_package_directories(master: FakeMaster, tmp_path: Path) -> None:
    async def store(request: web.Request) -> web.Response:
        form = await request.post()
        field = form["file"]
        data = field.file.read()
        return web.json_response({"key": hashlib.sha256(data).hexdigest(), "filename": field.filename}, status=201)

    master.routes[("POST", "/artifacts")] = store
    package = tmp_path / "pipelines"
    (package / "__pycache__").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sales.py").write_text("def f(ctx):\n    return None\n")
    (package / "__pycache__" / "sales.cpython-311.pyc").write_bytes(b"junk")
    (tmp_path / "notes.txt").write_text("x")
    async with SparkDispatchClient(addresses=[master.url], retry=FAST) as client:
        first = await client.upload_artifact(package)
        (package / "sales.py").touch()  # a new mtime must not change the key
        assert await client.upload_artifact(package) == first
        with pytest.raises(BlobError, match="neither a .py nor a .zip"):
            await client.upload_artifact(tmp_path / "notes.txt")
    name, data = read_artifact(package)
    assert name == "pipelines.zip" and hashlib.sha256(data).hexdigest() == first
    import io
    import zipfile
    assert sorted(zipfile.ZipFile(io.BytesIO(data)).namelist()) == ["pipelines/__init__.py", "pipelines/sales.py"]


def test_the_sync_wrapper_serves_calls_from_several_threads() -> None:
    """A blocking wait in one thread does not stop a cancel from another (operator on_kill)."""
    server = FakeMaster()
    cancelled = threading.Event()

    async def result(request: web.Request) -> web.Response:
        if cancelled.is_set():
            return web.json_response({"status": {"id": "COMPLETED"},
                                      "job_execution_result": {"job_id": JOB, "status": "CANCELED"}})
        return web.json_response({"status": {"id": "IN_PROGRESS"}})

    def cancel(request: web.Request) -> web.Response:
        cancelled.set()
        return web.json_response({}, status=202)

    server.routes[("GET", f"/jobs/{JOB}/execution-result")] = result
    server.routes[("PATCH", f"/jobs/{JOB}")] = cancel
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(server.start(), loop).result()
    try:
        with SyncSparkDispatchClient(SparkDispatchClient(addresses=[server.url], retry=FAST)) as client:
            outcome: list[dict[str, Any]] = []
            waiter = threading.Thread(target=lambda: outcome.append(client.wait_for_result(JOB, poll_interval=0.02)))
            waiter.start()
            client.cancel(JOB)
            waiter.join(10)
            assert outcome == [{"job_id": JOB, "status": "CANCELED"}]
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


async def test_zookeeper_retrieval_finds_and_follows_the_leader(zookeeper_server: Any, zk_root: str) -> None:
    """Against a real ZooKeeper: the leader node names the master; a new leader is followed."""
    from kazoo.client import KazooClient

    from sparkdispatch.config import Configuration
    from sparkdispatch.ha import LeaderInfo
    from sparkdispatch.ha.zookeeper import ZooKeeperPaths

    first, second = FakeMaster(), FakeMaster()
    for server in (first, second):
        server.routes[("GET", "/jobs")] = lambda request, s=server: web.json_response({"jobs": [{"id": s.url}]})
        await server.start()
    paths = ZooKeeperPaths.from_config(Configuration.from_mapping({
        "high-availability.zookeeper.path.root": zk_root, "high-availability.cluster-id": "c1"}))
    zk = KazooClient(hosts=zookeeper_server.hosts)
    await asyncio.to_thread(zk.start, 10)
    try:
        await asyncio.to_thread(zk.create, paths.connection_info, LeaderInfo(first.url, "s1").to_bytes(),
                                makepath=True)
        target = ZooKeeperTarget(quorum=zookeeper_server.hosts, cluster_id="c1", root=zk_root)
        patient = RetryPolicy(attempts=20, initial_backoff=0.05, max_backoff=0.2)
        async with SparkDispatchClient(zookeeper=target, retry=patient) as client:
            assert await client.jobs() == [{"id": first.url}]
            await first.stop()  # the leader dies, a standby takes over and publishes itself
            await asyncio.to_thread(zk.set, paths.connection_info, LeaderInfo(second.url, "s2").to_bytes())
            assert await client.jobs() == [{"id": second.url}]
            assert client.leader_address == second.url
    finally:
        await asyncio.to_thread(zk.delete, zk_root, recursive=True)
        await asyncio.to_thread(zk.stop)
        await asyncio.to_thread(zk.close)
        await second.stop()
        await first.stop()
