"""Jobs with Python environments on a real cluster: a master in the test process, a real
TaskExecutor (Celery over real Redis, a Spark Connect server on `local[2]`), real `uv` installing
wheels made here from `python.find-links` with no package index. Two jobs at once import two
versions of one package, in their task functions and in UDFs run by Spark's Python workers; an
environment is built once and reused; an unresolvable requirement fails its job once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sparkdispatch.client import SparkDispatchClient
from sparkdispatch.config import Configuration
from sparkdispatch.entrypoint.master import Master
from sparkdispatch.model.job_result import JobResult
from sparkdispatch.testing.local_cluster import TaskExecutorProcess, task_executors_registered
from sparkdispatch.testing.services import RedisServer, free_port
from sparkdispatch.testing.wheels import make_wheel

pytestmark = pytest.mark.slow

WAIT_S = 300.0
BUILDING = "[sparkdispatch] building the job's Python environment"
TASKS = """
from pyspark.sql import functions as F


def versions(ctx):
    import sd_probe

    @F.udf("string")
    def in_udf(_):
        import sd_probe

        return sd_probe.VERSION

    return ctx.spark.range(2).select(F.lit(sd_probe.VERSION).alias("task"), in_udf("id").alias("udf"))
"""


@dataclass
class Cluster:
    client: SparkDispatchClient
    results: Path
    tasks_key: str

    async def run(self, name: str, dependencies: list[str], **graph: Any) -> JobResult:
        job_id = (await self.submit(name, dependencies, **graph)).job_id
        return await asyncio.wait_for(self.client.wait_for_result(job_id, poll_interval=0.2), WAIT_S)

    async def submit(self, name: str, dependencies: list[str], **graph: Any) -> Any:
        return await self.client.submit(
            {
                "name": name,
                "artifacts": [self.tasks_key],
                "environment": {"dependencies": dependencies},
                "vertices": [{"id": "probe", "entrypoint": "env_tasks:versions", "parallelism": 1}],
                **graph,
            }
        )

    def rows(self, result: JobResult) -> list[dict[str, Any]]:
        assert result.status == "FINISHED", result.failure
        rows: list[dict[str, Any]] = []
        for partition in result.vertices["probe"].partitions:
            rows += pq.read_table(partition).to_pylist()
        return rows

    def log_of(self, result: JobResult) -> str:
        return "".join(p.read_text() for p in sorted(self.results.glob(f"{result.job_id}/probe/_logs/*.log")))


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    wheelhouse = tmp_path / "wheelhouse"
    for version in ("1.0", "2.0"):
        make_wheel(wheelhouse, "sd_probe", version)
    redis = RedisServer()
    redis.start()
    config = Configuration.from_mapping(
        {
            "rest.port": str(free_port()),
            "storage.dir": str(tmp_path / "storage"),
            "storage.results-dir": str(tmp_path / "results"),
            "rest.execution-result.long-poll": "200ms",
            "broker.url": redis.url,
            "taskexecutor.slots": "2",
            "spark.master": "local[2]",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "taskexecutor.registration.max-backoff": "500ms",
            "taskexecutor.connect.start-timeout": "5min",  # a loaded 2-core machine takes over the default 2 min
            "python.find-links": str(wheelhouse),
            "python.no-index": "true",
        }
    )
    master = Master(config)
    await master.start()
    te = TaskExecutorProcess(config, tmp_path)
    try:
        async with SparkDispatchClient(addresses=[master.address]) as client:
            await task_executors_registered(client, 1, processes=[te], timeout=WAIT_S)
            tasks = tmp_path / "env_tasks.py"
            tasks.write_text(TASKS)
            yield Cluster(client, tmp_path / "results", await client.upload_artifact(tasks))
    finally:
        te.kill()
        await master.stop()
        redis.stop()


async def test_two_jobs_at_once_each_run_their_own_version_in_the_task_and_in_its_udfs(cluster: Cluster) -> None:
    one, two = await asyncio.gather(cluster.run("probe-1", ["sd_probe==1.0"]), cluster.run("probe-2", ["sd-probe>=2"]))
    assert cluster.rows(one) == [{"task": "1.0", "udf": "1.0"}] * 2
    assert cluster.rows(two) == [{"task": "2.0", "udf": "2.0"}] * 2
    log = cluster.log_of(one)
    assert BUILDING in log and "sd_probe==1.0" in log and "built in" in log
    # the same environment again: reused, no build, and the job's task still sees its version
    again = await cluster.run("probe-1-again", ["SD_Probe == 1.0"])
    assert cluster.rows(again) == [{"task": "1.0", "udf": "1.0"}] * 2
    assert BUILDING not in cluster.log_of(again)
    # a job without an environment runs in the TaskExecutor's, which has no sd_probe
    plain = await cluster.run("probe-none", ["sd_probe==1.0"], environment=None)
    assert plain.status == "FAILED" and plain.failure is not None and "sd_probe" in plain.failure.message


async def test_an_unresolvable_requirement_fails_the_job_once_naming_it(cluster: Cluster) -> None:
    result = await cluster.run(
        "unresolvable",
        ["sd_probe==1.0", "no-such-lib==9.9"],
        restart_strategy={"type": "fixed-delay", "attempts": 3, "delay_s": 0.1},
    )
    assert result.status == "FAILED" and result.failure is not None
    assert result.failure.cls == "EnvironmentBuildFailed"
    assert "no-such-lib==9.9" in result.failure.message and "uv said" in result.failure.message
    assert result.vertices["probe"].attempts == 1  # not once per restart
    log = cluster.log_of(result)
    assert BUILDING in log and "could not be built" in log
