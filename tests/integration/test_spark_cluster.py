"""TaskExecutors whose Spark driver runs on a Spark standalone cluster (`spark://`): a master and
two workers started from the pyspark distribution, a real master (in the test process), a real
TaskExecutor and Redis. A job's Python environment reaches the executors as an archive Spark
unpacks there; the sales pipeline of dags/pipelines finishes with its rows; a worker killed while
the pipeline runs is recovered by Spark itself (no attempt of ours is restarted).

The Spark cluster and Redis serve the whole module (the worker-killing test comes last); a
finalizer stops them, and the tests' TaskExecutors, also when pytest-timeout interrupts a test.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

import pytest
import yaml

from sparkdispatch.client import SparkDispatchClient
from sparkdispatch.config import Configuration
from sparkdispatch.entrypoint.master import Master
from sparkdispatch.model.job_result import JobResult
from sparkdispatch.testing.local_cluster import TaskExecutorProcess, task_executors_registered
from sparkdispatch.testing.services import RedisServer, free_port
from sparkdispatch.testing.spark_cluster import SparkStandaloneCluster
from sparkdispatch.testing.waiting import eventually
from sparkdispatch.testing.wheels import make_wheel

pytestmark = pytest.mark.slow

PIPELINES = Path(__file__).resolve().parents[2] / "dags" / "pipelines"
WAIT_S = 240.0
ROWS = 900_000
#: A job's task: where its own process and a UDF on the executors find the environment's package.
PROBE_TASKS = """
from pyspark.sql import functions as F


def where(ctx):
    import sd_probe

    @F.udf("string")
    def on_executor(_):
        import sys

        import sd_probe

        return "|".join([sd_probe.VERSION, sys.executable, sd_probe.__file__])

    rows = ctx.spark.range(2).repartition(2)
    return rows.select(F.lit(sd_probe.__file__).alias("task"), on_executor("id").alias("udf"))
"""


@dataclass
class SparkServices:
    """The module's Spark cluster and Redis, and the TaskExecutors its tests start (killed at the end)."""

    spark: SparkStandaloneCluster
    redis: RedisServer
    task_executors: list[TaskExecutorProcess] = field(default_factory=list)


@pytest.fixture(scope="module")
def services(service_missing: Callable[[str], None]) -> Iterator[SparkServices]:
    if shutil.which("java") is None:
        service_missing("Spark needs java on PATH")
    redis = RedisServer()
    spark = SparkStandaloneCluster(workers=2, cores=1, memory="1g")
    started = SparkServices(spark, redis)
    try:  # a sync fixture's teardown runs even when pytest-timeout cut the async test short
        redis.start()
        spark.start()
        yield started
    finally:
        for te in started.task_executors:
            te.kill()
        spark.stop()
        redis.stop()


def cluster_config(services: SparkServices, tmp_path: Path, **keys: str) -> Configuration:
    return Configuration.from_mapping(
        {
            "rest.port": str(free_port()),
            "storage.dir": str(tmp_path / "storage"),
            "broker.url": services.redis.url,
            "rest.execution-result.long-poll": "200ms",
            "taskexecutor.slots": "2",
            "taskexecutor.registration.max-backoff": "500ms",
            "taskexecutor.connect.start-timeout": "5min",  # a loaded 2-core machine takes over the default 2 min
            "spark.master": services.spark.url,
            "spark.cores.max": "2",
            "spark.executor.cores": "1",
            "spark.executor.memory": "512m",
            **keys,
        }
    )


@asynccontextmanager
async def master_and_task_executor(
    services: SparkServices, config: Configuration, tmp_path: Path
) -> AsyncIterator[tuple[SparkDispatchClient, TaskExecutorProcess]]:
    master = Master(config)
    await master.start()
    try:
        te = TaskExecutorProcess(config, tmp_path)
        services.task_executors.append(te)
        try:
            async with SparkDispatchClient(addresses=[master.address]) as client:
                await task_executors_registered(client, 1, processes=[te], timeout=WAIT_S)
                yield client, te
        finally:
            te.kill()
    finally:
        await master.stop()


def sales_graph(key: str, *, rows: int, results: str = "auto") -> dict[str, Any]:
    """dags/pipelines/sales_graph.yaml with `rows` orders and no restarts of ours."""
    graph = yaml.safe_load((PIPELINES / "sales_graph.yaml").read_text().replace("{{ params.rows }}", str(rows)))
    graph.update(artifacts=[key], restart_strategy={"type": "none"}, results=results)
    return dict(graph)


def busy_executor(ui_port: int) -> str | None:
    """An executor running Spark tasks right now, from the driver's monitoring API."""
    base = f"http://127.0.0.1:{ui_port}/api/v1/applications"
    try:
        with urllib.request.urlopen(base, timeout=2) as answer:
            [application] = json.load(answer)
        with urllib.request.urlopen(f"{base}/{application['id']}/executors", timeout=2) as answer:
            executors = json.load(answer)
    except (OSError, ValueError):
        return None
    busy = [e["id"] for e in executors if e["id"] != "driver" and e.get("activeTasks", 0) > 0]
    return busy[0] if busy else None


async def test_a_jobs_environment_is_shipped_to_the_executors_and_its_udfs_run_from_the_unpacked_archive(
    services: SparkServices, tmp_path: Path
) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    make_wheel(wheelhouse, "sd_probe", "1.0")
    config = cluster_config(services, tmp_path, **{"python.find-links": str(wheelhouse), "python.no-index": "true"})
    environments = tmp_path / "storage" / "python-environments"
    async with master_and_task_executor(services, config, tmp_path) as (client, te):
        tasks = tmp_path / "probe_tasks.py"
        tasks.write_text(PROBE_TASKS)
        key = await client.upload_artifact(tasks)
        job = await client.submit(
            {
                "name": "probe-on-executors",
                "artifacts": [key],
                "environment": {"dependencies": ["sd_probe==1.0"]},
                "vertices": [{"id": "probe", "entrypoint": "probe_tasks:where", "parallelism": 1}],
                "restart_strategy": {"type": "none"},
            }
        )
        result = await asyncio.wait_for(client.wait_for_result(job.job_id, poll_interval=0.3), WAIT_S)
        assert result.status == "FINISHED", (result.failure, te.log_tail())
    rows = [row for path in result.vertices["probe"].partitions for row in pq.read_table(path).to_pylist()]
    assert len(rows) == 2
    [archive] = environments.glob("*/.sparkdispatch-executors.tar.gz")  # packed once, beside the environment
    assert services.spark.workdir is not None
    for row in rows:
        # the task function runs on the TaskExecutor's host, in the environment built there
        assert Path(row["task"]).is_relative_to(archive.parent)
        version, executable, module = row["udf"].split("|")
        # the UDF runs on an executor, from the archive Spark unpacked in the executor's work dir
        assert version == "1.0"
        assert executable.endswith("/environment/bin/python"), executable
        assert Path(module).is_relative_to(services.spark.workdir), module
        assert "/environment/lib/" in module and not Path(module).is_relative_to(environments)


async def test_the_sales_pipeline_runs_on_a_spark_cluster_and_spark_recovers_a_lost_worker(
    services: SparkServices, tmp_path: Path
) -> None:
    spark = services.spark
    ui_port = free_port()
    # the driver's monitoring API tells which executor is busy; with a cluster master the Connect
    # server's UI is off unless enabled
    config = cluster_config(services, tmp_path, **{"spark.ui.enabled": "true", "spark.ui.port": str(ui_port)})
    async with master_and_task_executor(services, config, tmp_path) as (client, te):
        key = await client.upload_artifact(PIPELINES)

        async def run(graph: dict[str, Any], *, kill_a_busy_worker: bool = False) -> JobResult:
            job_id = (await client.submit(graph)).job_id
            if kill_a_busy_worker:  # the worker of an executor that runs tasks of this job right now

                async def busy_worker() -> int | None:
                    executor = await asyncio.to_thread(busy_executor, ui_port)
                    return spark.worker_of_executor(executor) if executor is not None else None

                spark.kill_worker(await eventually(busy_worker, "an executor running a task", timeout=WAIT_S))
            result = await asyncio.wait_for(client.wait_for_result(job_id, poll_interval=0.3), WAIT_S)
            assert result.status == "FINISHED", (result.failure, te.log_tail())
            return result

        first = await run(sales_graph(key, rows=ROWS))
        rows = {vertex: outcome.rows for vertex, outcome in first.vertices.items()}
        # 7 of every 9 orders have a quantity; 4 regions, 5 products (dags/pipelines/sales.py)
        assert rows["generate"] == ROWS and rows["clean"] == ROWS * 7 // 9
        assert rows["report"] == 4 and rows["revenue_by_product"] == 5
        # three times the orders, each result written: longer Spark jobs, which the kill is more
        # likely to interrupt (the master chains the first run into one short plan); written rows
        # are counted by the writes, which a task Spark runs again does not count twice
        second = await run(sales_graph(key, rows=3 * ROWS, results="durable"), kill_a_busy_worker=True)
        assert {vertex: outcome.rows for vertex, outcome in second.vertices.items()} == {
            **rows,
            "generate": 3 * ROWS,
            "clean": 3 * ROWS * 7 // 9,
        }
        assert {vertex: outcome.attempts for vertex, outcome in second.vertices.items()} == {
            vertex: 1 for vertex in rows
        }
        assert spark.alive_workers() == 1
    driver_log = "".join(p.read_text() for p in (tmp_path / "storage" / "te-work").glob("*/connect-server.log"))
    assert "Lost executor" in driver_log  # the driver saw the executor go while the job ran
    # whether a task of it was cut short depends on a race of milliseconds (the API's busy
    # executor may have just finished its task); Spark runs such a task again
    print(f"lost tasks run again: {driver_log.count('Lost task')}")
