"""The options of the configuration docs' section "Spark" (see the package's docstring)."""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from sparkdispatch.config.option import KeyPrefix, Section
from sparkdispatch.config.units import GiB, MiB

SECTION: Final = Section("Spark")

SPARK_MASTER: Final = SECTION.string(
    "spark.master",
    "local[*]",
    "Spark master URL of every TaskExecutor's Spark Connect server (the Spark driver of its slots): `local[*]`, "
    "`spark://host:7077`, `yarn`, `k8s://...`.",
)
TASKEXECUTOR_CONNECT_PORT: Final = SECTION.integer(
    "taskexecutor.connect.port",
    0,
    "Port of a TaskExecutor's Spark Connect server, bound on 127.0.0.1 only. 0 picks a free port, so several "
    "TaskExecutors can share a host.",
    minimum=0,
)
TASKEXECUTOR_CONNECT_START_TIMEOUT: Final = SECTION.duration(
    "taskexecutor.connect.start-timeout",
    timedelta(minutes=2),
    "How long a TaskExecutor waits for its Spark Connect server to start and warm up before it gives up.",
    minimum=timedelta(seconds=1),
)
TASKEXECUTOR_CONNECT_DRIVER_MEMORY: Final = SECTION.size(
    "taskexecutor.connect.driver-memory",
    GiB,
    "Heap of a TaskExecutor's Spark Connect server (the Spark driver of all its slots); a `spark.driver.memory` "
    "property overrides it.",
    minimum=128 * MiB,
)
TASKEXECUTOR_CONNECT_RECYCLE_SESSIONS: Final = SECTION.integer(
    "taskexecutor.connect.recycle.sessions",
    200,
    "A TaskExecutor replaces its Spark Connect server by a new one once its slot processes made this many job "
    "sessions on it (each job makes one per slot process it uses): Spark keeps part of every session that ran a "
    "Python UDF until its server stops. The successor starts before the old server stops, which ends once its "
    "running tasks ended; no task fails for it. 0: never for this reason.",
    minimum=0,
)
TASKEXECUTOR_CONNECT_RECYCLE_THREAD_GROWTH: Final = SECTION.integer(
    "taskexecutor.connect.recycle.thread-growth",
    1000,
    "The Spark Connect server is also replaced once its JVM has this many threads more than right after its "
    "start. 0: never for this reason.",
    minimum=0,
)
TASKEXECUTOR_CONNECT_RECYCLE_OPEN_FILE_GROWTH: Final = SECTION.integer(
    "taskexecutor.connect.recycle.open-file-growth",
    2000,
    "The Spark Connect server is also replaced once its JVM has this many open files (descriptors) more than right "
    "after its start. 0: never for this reason.",
    minimum=0,
)

SPARK_PROPERTIES: Final[KeyPrefix] = SECTION.prefix(
    "spark.",
    "Any other `spark.` key is a Spark property of the TaskExecutors' Spark Connect servers, e.g. "
    "`spark.executor.memory: 2g`, `spark.sql.shuffle.partitions: 8`. A job sets its own runtime settings in its "
    "JobGraph's `config`.",
)
