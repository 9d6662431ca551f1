"""SparkDispatchClient against real in-process masters on loopback.

The masters are `sparkdispatch.testing.InProcessMaster`s: the real REST server and components,
with TaskExecutors played by `ScriptedTaskExecutor`. A RecordingProxy in front of each master
counts the calls; where a test needs an answer no master gives (a gateway's 500 or 429, a load
balancer's redirect), the proxy gives it, as such a box in front of a master would. Standbys
and leader changes are real: two masters elected through the session's ZooKeeper, or one
master taking over the stored jobs of a stopped one.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import threading
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sparkdispatch.model.artifacts import read_artifact
from sparkdispatch.client import RetryPolicy, SparkDispatchClient, SubmittedJob, SyncSparkDispatchClient
from sparkdispatch.client.leader import ZooKeeperTarget, normalize_address, parse_addresses
from sparkdispatch.config import Configuration
from sparkdispatch.config.options import HA_CLUSTER_ID, HA_ZOOKEEPER_PATH_ROOT, HA_ZOOKEEPER_QUORUM
from sparkdispatch.errors import (
    BlobError,
    DuplicateJobSubmission,
    InvalidJobGraph,
    JobAlreadyTerminated,
    NoLeader,
    ServiceUnavailable,
    SparkDispatchError,
    StoreError,
    Unauthorized,
    UnknownJob,
)
from sparkdispatch.model.job_result import JobResult
from sparkdispatch.model.states import JobStatus
from sparkdispatch.model.job_graph import JobGraph
from sparkdispatch.testing.master import InProcessMaster, finish_every_task
from sparkdispatch.testing.proxy import RecordingProxy
from sparkdispatch.testing.services import free_port
from sparkdispatch.testing.waiting import eventually

FAST = RetryPolicy(attempts=4, initial_backoff=0.01, max_backoff=0.05, failover_timeout=5.0)
JOB = "0123456789abcdef0123456789abcdef"
GRAPH = {"name": "g", "vertices": [{"id": "a", "entrypoint": "m:f"}]}


@pytest.fixture
async def master() -> AsyncIterator[InProcessMaster]:
    async with InProcessMaster(record_requests=True) as running:
        yield running


def proxy_of(master: InProcessMaster) -> RecordingProxy:
    assert master.proxy is not None
    return master.proxy


@pytest.fixture
async def ha_pair(zk_config: Configuration) -> AsyncIterator[tuple[InProcessMaster, InProcessMaster]]:
    """A leader and a standby elected through ZooKeeper, sharing their storage."""
    leader = InProcessMaster(overrides=zk_config.to_flat(), record_requests=True)
    standby = InProcessMaster(overrides=zk_config.to_flat(), record_requests=True)
    try:
        await leader.start()
        await leader.wait_for_leadership()
        await standby.start()
        await eventually(lambda: standby.master.leader_address() == leader.url, "the standby to know the leader")
        yield leader, standby
    finally:
        await standby.stop()
        await leader.stop()


def test_addresses_are_normalized() -> None:
    assert parse_addresses("a, http://b:9/ ,a") == ["http://a:8081", "http://b:9"]
    assert normalize_address("https://m.example:443/") == "https://m.example:443"
    with pytest.raises(SparkDispatchError, match="not a master REST address"):
        normalize_address("ftp://x")


async def test_submit_reports_created_and_sends_a_job_id(master: InProcessMaster) -> None:
    async with SparkDispatchClient(addresses=[master.url], retry=FAST) as client:
        first = await client.submit(GRAPH)
        again = await client.submit({**GRAPH, "job_id": first.job_id})
    seen = [json.loads(r.body) for r in proxy_of(master).requests if (r.method, r.path) == ("POST", "/jobs")]
    assert (first.created, again.created) == (True, False)
    assert first.job_id == again.job_id == seen[0]["job_id"] and len(first.job_id) == 32
    assert "job_id" not in GRAPH  # the caller's dict is not changed


async def test_submit_returns_the_status_the_master_answers_with(master: InProcessMaster) -> None:
    """202 for a new job and 200 for the same graph again both carry the job's status, also a terminal one."""
    task_executor = await master.add_task_executor()  # runs the job's task until told to end it
    async with SparkDispatchClient(addresses=[master.url], retry=FAST) as client:
        submitted = await client.submit({**GRAPH, "job_id": JOB})
        running = await client.submit({**GRAPH, "job_id": JOB})
        await task_executor.end_job(JOB)
        assert (await client.wait_for_result(JOB, poll_interval=0.02)).status == "FINISHED"
        finished = await client.submit({**GRAPH, "job_id": JOB})
    assert submitted == SubmittedJob(JOB, True, JobStatus.RUNNING)
    assert running == SubmittedJob(JOB, False, JobStatus.RUNNING)
    assert finished == SubmittedJob(JOB, False, JobStatus.FINISHED)
    assert proxy_of(master).count("GET", f"/jobs/{JOB}") == 0  # the statuses came with the answers


async def test_a_submission_answer_without_a_status_is_a_clear_error(master: InProcessMaster) -> None:
    proxy_of(master).inject("POST", "/jobs", status=202, text=json.dumps({"job_id": JOB, "jobUrl": f"/jobs/{JOB}"}))
    async with SparkDispatchClient(addresses=[master.url], retry=FAST) as client:
        with pytest.raises(SparkDispatchError, match="POST /jobs answered 202 without a job status"):
            await client.submit({**GRAPH, "job_id": JOB})


# -- the master's error answers become its own classes -----------------------------------------


async def test_an_unknown_job_is_unknown_job(master: InProcessMaster) -> None:
    async with SparkDispatchClient(addresses=[master.url], retry=FAST) as client:
        with pytest.raises(UnknownJob, match=JOB) as caught:
            await client.job(JOB)
    assert caught.value.job_id == JOB and caught.value.http_status == 404
    assert proxy_of(master).count("GET", f"/jobs/{JOB}") == 1  # a 4xx is not retried


async def test_another_graph_under_a_taken_id_is_a_duplicate_submission(master: InProcessMaster) -> None:
    async with SparkDispatchClient(addresses=[master.url], retry=FAST) as client:
        await client.submit({**GRAPH, "job_id": JOB})
        with pytest.raises(DuplicateJobSubmission, match="another graph") as caught:
            await client.submit({**GRAPH, "name": "other", "job_id": JOB})
    assert caught.value.job_id == JOB and "another graph" in caught.value.reason
    assert proxy_of(master).count("POST", "/jobs") == 2  # the refused one was not retried


async def test_cancelling_a_finished_job_is_job_already_terminated(master: InProcessMaster) -> None:
    await master.add_task_executor(script=finish_every_task)
    async with SparkDispatchClient(addresses=[master.url], retry=FAST) as client:
        await client.submit({**GRAPH, "job_id": JOB})
        assert (await client.wait_for_result(JOB, poll_interval=0.02)).status == "FINISHED"
        with pytest.raises(JobAlreadyTerminated, match="FINISHED") as caught:
            await client.cancel(JOB)
    assert caught.value.status == "FINISHED" and caught.value.job_id == JOB
    assert proxy_of(master).count("PATCH", f"/jobs/{JOB}") == 1


async def test_an_invalid_graph_names_each_field(master: InProcessMaster) -> None:
    graph = {"vertices": [{"id": "a", "entrypoint": "m:f", "parallelism": 0}]}
    async with SparkDispatchClient(addresses=[master.url], retry=FAST) as client:
        with pytest.raises(InvalidJobGraph, match="parallelism") as caught:
            await client.submit(graph)
    with pytest.raises(InvalidJobGraph) as local:
        JobGraph.from_dict({**graph, "job_id": JOB})
    # the master's validation, field for field: the parallelism and the missing name
    assert caught.value.field_errors == local.value.field_errors
    assert {"vertices[0].parallelism", "name"} <= set(caught.value.field_errors)
    assert proxy_of(master).count("POST", "/jobs") == 1


async def test_a_wrong_token_is_unauthorized_and_the_right_one_is_sent_as_a_bearer_header() -> None:
    async with InProcessMaster(overrides={"rest.auth.token": "s3cret"}, record_requests=True) as master:
        async with SparkDispatchClient(addresses=[master.url], token="wrong", retry=FAST) as client:
            with pytest.raises(Unauthorized, match="token"):
                await client.taskmanagers()
        # discovery asks /overview first: the refusal is raised there, once, without retries
        assert proxy_of(master).count("GET", "/overview") == 1
        proxy_of(master).requests.clear()
        async with SparkDispatchClient(addresses=[master.url], token="s3cret", retry=FAST) as client:
            await client.overview()
        assert proxy_of(master).requests
        assert all(r.headers.get("Authorization") == "Bearer s3cret" for r in proxy_of(master).requests)


# -- retries ------------------------------------------------------------------------------------


async def test_5xx_and_429_are_retried_then_succeed(master: InProcessMaster) -> None:
    proxy = proxy_of(master)
    proxy.inject("GET", "/jobs", status=500, text=json.dumps({"errors": ["boom"], "type": "InternalError"}))
    proxy.inject("GET", "/jobs", status=429, text="slow down")  # a gateway's own answer, not JSON
    async with SparkDispatchClient(addresses=[master.url], retry=FAST) as client:
        assert await client.jobs() == []
    assert proxy.count("GET", "/jobs") == 3


async def test_retries_are_bounded(master: InProcessMaster) -> None:
    proxy = proxy_of(master)
    proxy.inject(
        "GET",
        "/jobs",
        status=500,
        text=json.dumps({"errors": ["the store is broken"], "type": "StoreError"}),
        times=None,
    )
    async with SparkDispatchClient(addresses=[master.url], retry=FAST) as client:
        with pytest.raises(StoreError, match="the store is broken") as caught:
            await client.jobs()
    assert caught.value.http_status == 500
    assert proxy.count("GET", "/jobs") == FAST.attempts


# -- finding and following the leader -----------------------------------------------------------


async def test_a_standby_answering_503_sends_the_client_to_the_leader(
    ha_pair: tuple[InProcessMaster, InProcessMaster],
) -> None:
    leader, standby = ha_pair
    async with SparkDispatchClient(addresses=[standby.url], retry=FAST) as client:
        client._leader = leader.url
        await client.submit({**GRAPH, "job_id": JOB})
        client._leader = standby.url  # as if the standby had led a moment ago
        assert [job.id for job in await client.jobs()] == [JOB]
        assert client.leader_address == leader.url
    assert proxy_of(standby).count("GET", "/jobs") == 1 and proxy_of(leader).count("GET", "/jobs") == 1


async def test_discovery_asks_a_standby_for_the_leader_and_skips_dead_addresses(
    ha_pair: tuple[InProcessMaster, InProcessMaster],
) -> None:
    leader, standby = ha_pair
    dead = f"http://127.0.0.1:{free_port()}"
    async with SparkDispatchClient(addresses=[dead, standby.url], retry=FAST) as client:
        assert await client.leader() == leader.url
        assert (await client.overview()).is_leader is True
    assert proxy_of(standby).count("GET", "/overview") == 1


async def test_a_redirect_is_followed_to_the_leader(master: InProcessMaster) -> None:
    balancer = RecordingProxy(master.url)  # a load balancer that sends callers to the leader
    await balancer.start()
    balancer.inject("GET", f"/jobs/{JOB}", status=307, headers={"Location": f"{master.url}/jobs/{JOB}"})
    try:
        async with SparkDispatchClient(addresses=[balancer.url], retry=FAST) as client:
            client._leader = balancer.url
            await client.submit({**GRAPH, "job_id": JOB})
            assert (await client.job(JOB)).status == "RUNNING"
            assert client.leader_address == master.url
    finally:
        await balancer.stop()
    assert balancer.count("GET", f"/jobs/{JOB}") == 1 and proxy_of(master).count("GET", f"/jobs/{JOB}") == 1


async def test_no_leader_anywhere_is_a_clear_error(zk_config: Configuration) -> None:
    async with InProcessMaster(overrides=zk_config.to_flat()) as lonely:
        await lonely.wait_for_leadership()
        await lonely.step_down()  # a standby now, and nobody else contends
        await eventually(lambda: lonely.master.leader_address() is None, "the leader node to go")
        async with SparkDispatchClient(addresses=[lonely.url], retry=FAST) as client:
            with pytest.raises(NoLeader, match="standby"):
                await client.jobs()


async def test_a_dead_cluster_fails_after_bounded_retries_naming_the_addresses() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async with SparkDispatchClient(addresses=[dead], retry=FAST) as client:
        with pytest.raises(ServiceUnavailable, match=f"127.0.0.1:{dead.rsplit(':', 1)[1]}"):
            await client.overview()


async def test_wait_for_result_keeps_waiting_through_a_failover(tmp_path: Path) -> None:
    quick_polls = {"rest.execution-result.long-poll": "50ms"}
    first = InProcessMaster(storage_dir=tmp_path, overrides=quick_polls, record_requests=True)
    # the successor starts once the first is gone
    successor = InProcessMaster(storage_dir=tmp_path, overrides=quick_polls, record_requests=True)
    try:
        await first.start()
        await first.add_task_executor()  # runs the job's task until the master goes
        async with SparkDispatchClient(addresses=[first.url, successor.url], retry=FAST) as client:
            await client.submit({**GRAPH, "job_id": JOB})
            waiting = asyncio.create_task(client.wait_for_result(JOB, poll_interval=0.02))
            await eventually(
                lambda: proxy_of(first).count("GET", f"/jobs/{JOB}/execution-result") >= 2,
                "the client to poll the leader",
            )
            await first.stop()  # the leader dies; for a while nobody leads
            await asyncio.sleep(0.3)  # that while: the client must wait through it
            assert not waiting.done()
            await successor.start()  # a new master takes the stored job over
            await successor.add_task_executor(script=finish_every_task)
            result = await asyncio.wait_for(waiting, 20)
            assert (result.job_id, result.status) == (JOB, "FINISHED")
            assert client.leader_address == successor.url
    finally:
        await successor.stop()
        await first.stop()


async def test_zookeeper_retrieval_finds_and_follows_the_leader(
    ha_pair: tuple[InProcessMaster, InProcessMaster], zk_config: Configuration
) -> None:
    """Against a real ZooKeeper: the leader node names the master; a new leader is followed."""
    first, second = ha_pair
    target = ZooKeeperTarget(
        quorum=zk_config.get(HA_ZOOKEEPER_QUORUM),
        cluster_id=zk_config.get(HA_CLUSTER_ID),
        root=zk_config.get(HA_ZOOKEEPER_PATH_ROOT),
    )
    patient = RetryPolicy(attempts=40, initial_backoff=0.05, max_backoff=0.2)
    async with SparkDispatchClient(zookeeper=target, retry=patient) as client:
        assert await client.jobs() == []
        assert client.leader_address == first.url and proxy_of(first).count("GET", "/jobs") == 1
        await first.stop()  # the leader goes, the standby takes over and publishes itself
        assert await client.jobs() == []
        assert client.leader_address == second.url and proxy_of(second).count("GET", "/jobs") == 1


# -- artifacts and the sync wrapper ---------------------------------------------------------------


async def test_artifacts_upload_as_files_and_package_directories(master: InProcessMaster, tmp_path: Path) -> None:
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
        with pytest.raises(BlobError, match="not a .py, .zip or .whl"):
            await client.upload_artifact(tmp_path / "notes.txt")
    name, data = read_artifact(package)
    assert name == "pipelines.zip" and hashlib.sha256(data).hexdigest() == first
    assert master.master.ha.blob_store.path_blocking(first).is_file()  # the master stored it under that key
    assert sorted(zipfile.ZipFile(io.BytesIO(data)).namelist()) == ["pipelines/__init__.py", "pipelines/sales.py"]


def test_the_sync_wrapper_serves_calls_from_several_threads() -> None:
    """A blocking wait in one thread does not stop a cancel from another (operator on_kill)."""
    with InProcessMaster() as master:
        master.run(master.add_task_executor())  # the job's task runs until cancelled
        with SyncSparkDispatchClient(SparkDispatchClient(addresses=[master.url], retry=FAST)) as client:
            client.submit({**GRAPH, "job_id": JOB})
            outcome: list[JobResult] = []
            waiter = threading.Thread(target=lambda: outcome.append(client.wait_for_result(JOB, poll_interval=0.02)))
            waiter.start()
            client.cancel(JOB)
            waiter.join(10)
            assert [(result.job_id, result.status) for result in outcome] == [(JOB, "CANCELED")]
