"""TaskExecutors get a job's code from the leader over HTTP (Flink's BlobServer): a real master in
the test process, a real TaskExecutor whose storage directory is not the master's (only the
results directory is shared, as Spark needs), real Redis; the download is authenticated and
checked against the artifact's key.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from sparkdispatch.client import SparkDispatchClient
from sparkdispatch.config import Configuration
from sparkdispatch.errors import CorruptedBlob, Unauthorized
from sparkdispatch.entrypoint.master import Master
from sparkdispatch.model.protocol import ARTIFACT_NAME_HEADER
from sparkdispatch.taskexecutor.master_client import AsyncMasterClient
from sparkdispatch.testing.local_cluster import TaskExecutorProcess, task_executors_registered
from sparkdispatch.testing.services import RedisServer, free_port

TASKS = Path(__file__).with_name("job_tasks.py")
WAIT_S = 120.0
TOKEN = "blob-t0ken"


def master_config(tmp_path: Path, **extra: str) -> Configuration:
    return Configuration.from_mapping(
        {
            "rest.port": str(free_port()),
            "storage.dir": str(tmp_path / "master-storage"),
            "storage.results-dir": str(tmp_path / "results"),
            "rest.auth.token": TOKEN,
            "rest.execution-result.long-poll": "200ms",
            "broker.url": "memory://",  # no deployment: the first two tests fetch artifacts only
            **extra,
        }
    )


async def test_the_leader_serves_an_artifact_to_a_caller_with_the_token_only(tmp_path: Path) -> None:
    master = Master(master_config(tmp_path))
    await master.start()
    try:
        async with SparkDispatchClient(addresses=[master.address], token=TOKEN) as client:
            key = await client.upload_artifact(TASKS)
        fetcher = AsyncMasterClient(token=TOKEN)
        try:
            fetched = await fetcher.fetch_artifact(master.address, key, tmp_path / "cache" / key)
        finally:
            await fetcher.close()
        assert fetched == tmp_path / "cache" / key / "job_tasks.py"
        assert fetched.read_bytes() == TASKS.read_bytes()
        assert [p.name for p in fetched.parent.iterdir()] == ["job_tasks.py"]  # no partial file left
        anonymous = AsyncMasterClient()
        try:
            with pytest.raises(Unauthorized):
                await anonymous.fetch_artifact(master.address, key, tmp_path / "anonymous")
        finally:
            await anonymous.close()
        assert not list((tmp_path / "anonymous").iterdir())
    finally:
        await master.stop()


async def test_bytes_that_do_not_hash_to_the_key_are_refused_and_left_nowhere(tmp_path: Path) -> None:
    # a master whose store was damaged after its own check, or bytes changed on the way: a server
    # that answers other bytes than the key's
    key = "a" * 64

    async def damaged(request: aiohttp.web.Request) -> aiohttp.web.Response:
        return aiohttp.web.Response(body=b"print('not what was uploaded')\n", headers={ARTIFACT_NAME_HEADER: "job.py"})

    app = aiohttp.web.Application()
    app.router.add_get("/artifacts/{key}", damaged)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    address = f"http://127.0.0.1:{runner.addresses[0][1]}"
    fetcher = AsyncMasterClient()
    try:
        with pytest.raises(CorruptedBlob, match=f"artifact {key} fetched from {address} hashes to"):
            await fetcher.fetch_artifact(address, key, tmp_path / key)
        assert not list((tmp_path / key).iterdir())
    finally:
        await fetcher.close()
        await runner.cleanup()


@pytest.mark.slow
async def test_a_task_executor_without_the_masters_storage_runs_a_job_with_code_it_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a master with a token takes only a Redis with a password; master and TaskExecutor read it from
    # the environment (SPARKDISPATCH_BROKER_PASSWORD), as compose passes it, so it is in no argv
    redis = RedisServer(password="fetch-redis-password")
    redis.start()
    monkeypatch.setenv("SPARKDISPATCH_BROKER_PASSWORD", redis.password)
    config = master_config(tmp_path, **{"broker.url": f"redis://127.0.0.1:{redis.port}/0"})
    master = Master(config)
    await master.start()
    # the TaskExecutor's host: a storage directory of its own; the results directory is shared
    te_config = config.with_overrides(
        {
            "storage.dir": str(tmp_path / "te-host"),
            "taskexecutor.slots": "1",
            "spark.master": "local[1]",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "1",
            "taskexecutor.registration.max-backoff": "500ms",
        }
    )
    te = TaskExecutorProcess(te_config, tmp_path)
    try:
        async with SparkDispatchClient(addresses=[master.address], token=TOKEN) as client:
            await task_executors_registered(client, 1, processes=[te], timeout=WAIT_S)
            key = await client.upload_artifact(TASKS)
            job_id = (
                await client.submit(
                    {
                        "name": "fetched-code",
                        "artifacts": [key],
                        "restart_strategy": {"type": "none"},
                        "vertices": [
                            {
                                "id": "numbers",
                                "entrypoint": "job_tasks:numbers",
                                "parallelism": 1,
                                "params": {"rows": 10},
                            },
                            {"id": "double", "entrypoint": "job_tasks:double", "parallelism": 1, "inputs": ["numbers"]},
                        ],
                    }
                )
            ).job_id
            result = await asyncio.wait_for(client.wait_for_result(job_id, poll_interval=0.2), WAIT_S)
        assert result.status == "FINISHED", result.failure
        assert result.vertices["double"].rows == 10
        assert not (tmp_path / "te-host" / "blobs").exists()  # it never read the masters' store
        cached = list((tmp_path / "te-host" / "te-cache").glob(f"*/{key}/job_tasks.py"))
        assert len(cached) == 1 and cached[0].read_bytes() == TASKS.read_bytes()
    finally:
        te.kill()
        await master.stop()
        redis.stop()
