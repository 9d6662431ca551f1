"""The TaskExecutor's warm SparkSession and the per-slot Spark scope of a running task.

One SparkSession serves every slot of a TaskExecutor process. Spark's FAIR scheduler gives
each slot its own pool (`slot-<index>`), and each execution runs in its own job group, so
cancelling one task (`cancel_execution`) stops only that task's Spark jobs.

Local properties (pool, job group) are per thread. PySpark's pinned-thread mode
(`PYSPARK_PIN_THREAD`, on by default since Spark 3.2) maps every Python thread to its own JVM
thread, so properties set from a Celery pool thread apply to the jobs of that thread only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from sparkdispatch.config import Configuration

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

SCHEDULER_POOL_PROPERTY = "spark.scheduler.pool"


def slot_pool_name(slot_index: int) -> str:
    """The FAIR scheduler pool of a slot."""
    return f"slot-{slot_index}"


def create_spark_session(config: Configuration, *, app_name: str = "sparkdispatch-taskexecutor") -> SparkSession:
    """The warm session of a TaskExecutor: `spark.master`, the `spark.*` properties, FAIR scheduling."""
    if os.environ.get("PYSPARK_PIN_THREAD", "true").lower() != "true":
        # Without pinned threads, local properties leak between slots and cancelling one task
        # could stop another slot's jobs.
        log.warning("PYSPARK_PIN_THREAD is off: per-slot pools and job groups are not isolated")
    from pyspark.sql import SparkSession

    # a progress bar redrawn in a worker's log only buries the lines that matter
    builder = SparkSession.builder.master(config["spark.master"]).appName(app_name) \
        .config("spark.ui.showConsoleProgress", "false")
    for key, value in config.spark_properties.items():
        builder = builder.config(key, value)
    builder = builder.config("spark.scheduler.mode", "FAIR")
    session = builder.getOrCreate()
    # One small job loads the scheduler, codegen and Parquet classes, so the first task does not pay for them.
    session.range(0, 10, numPartitions=1).selectExpr("sum(id)").collect()
    log.info("SparkSession ready on %s (Spark %s)", config["spark.master"], session.version)
    return session


class _ThreadPool(threading.local):
    """The pool last set on this thread (local properties are per thread, and so is this)."""

    pool: str | None = None


_thread_pool = _ThreadPool()


@contextlib.contextmanager
def slot_scope(spark: SparkSession, *, slot_index: int, execution_id: str,
               description: str = "") -> Iterator[None]:
    """Run the calling thread's Spark jobs in the slot's pool and the execution's job group.

    Every py4j call costs the task time, so the pool is set only when this thread last served
    another slot (a Celery pool thread may serve different slots over time), and the job group
    stays after the task: the next task of the thread replaces it, and cancelling the group of
    a finished execution finds no job. A task function that sets the pool property itself
    moves the later tasks of its thread into that pool too.
    """
    sc = spark.sparkContext
    pool = slot_pool_name(slot_index)
    if _thread_pool.pool != pool:
        sc.setLocalProperty(SCHEDULER_POOL_PROPERTY, pool)
        _thread_pool.pool = pool
    sc.setJobGroup(execution_id, description or execution_id, interruptOnCancel=True)
    yield


def cancel_execution(spark: SparkSession, execution_id: str) -> None:
    """Cancel the running and pending Spark jobs of one execution (its job group)."""
    spark.sparkContext.cancelJobGroup(execution_id)
