"""One TaskExecutor process: a warm SparkSession, a Celery worker with one thread per slot."""

from __future__ import annotations

import asyncio
import logging
import socket
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkdispatch.broker.celery_app import queue_name
from sparkdispatch.config import Configuration
from sparkdispatch.ha import create_ha_services
from sparkdispatch.taskexecutor.app import create_celery_app
from sparkdispatch.taskexecutor.master_client import MasterClient
from sparkdispatch.taskexecutor.runner import ArtifactCache, SlotTable, TaskRunner
from sparkdispatch.taskexecutor.spark import create_spark_session
from sparkdispatch.taskexecutor.worker import MasterConnection, MasterConnectionStep, TaskExecutorIdentity

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


@dataclass
class TaskExecutor:
    """The parts of a running TaskExecutor the Celery task, control command and worker step use."""

    config: Configuration
    identity: TaskExecutorIdentity
    spark: SparkSession
    slots: SlotTable
    runner: TaskRunner
    connection: MasterConnection


def default_task_executor_id(config: Configuration) -> str:
    """`taskexecutor.id`, else `<hostname>-<random>`."""
    return config["taskexecutor.id"] or f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"


def run_task_executor(config: Configuration, *, task_executor_id: str | None = None,
                      loglevel: str = "INFO") -> None:
    """Start a TaskExecutor and block until its worker stops (SIGTERM / SIGINT: warm shutdown)."""
    te_id = task_executor_id or default_task_executor_id(config)
    identity = TaskExecutorIdentity(task_executor_id=te_id, hostname=f"{te_id}@{socket.gethostname()}",
                                    queue=queue_name(te_id), spark_master=config["spark.master"])
    slot_count = config["taskexecutor.slots"]
    log.info("TaskExecutor %s starting: %d slots, queue %s, Spark %s", te_id, slot_count, identity.queue,
             identity.spark_master)
    # Warm before registering: the ResourceManager sees slots only once they can run tasks at once.
    spark = create_spark_session(config, app_name=f"sparkdispatch-{te_id}")
    services = create_ha_services(config)
    asyncio.run(services.start())
    retrieval = services.create_retrieval()
    retrieval.start()
    client = MasterClient(config)
    try:
        slots = SlotTable(slot_count)
        connection = MasterConnection(config, identity=identity, slots=slots, client=client,
                                      current_leader=retrieval.current)
        runner = TaskRunner(spark=spark, slots=slots, reporter=connection, task_executor_id=te_id,
                            artifacts=ArtifactCache(services.blob_store.path_blocking,
                                                   config.storage_dir / "te-cache" / te_id,
                                                   distribute=spark.sparkContext.addPyFile))
        runtime = TaskExecutor(config=config, identity=identity, spark=spark, slots=slots, runner=runner,
                               connection=connection)
        app = create_celery_app(config, task_executor=runtime)
        app.steps["worker"].add(MasterConnectionStep)
        worker = app.Worker(hostname=identity.hostname, pool="threads", concurrency=slot_count,
                            queues=[identity.queue], loglevel=loglevel, without_mingle=True,
                            without_gossip=True, without_heartbeat=True, quiet=True)
        worker.start()
        exit_code = worker.exitcode
        log.info("TaskExecutor %s stopped (exit code %s)", te_id, exit_code)
    finally:
        retrieval.stop()
        asyncio.run(services.close())
        client.close()
        spark.stop()

