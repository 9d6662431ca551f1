"""Classic floors: one warm classic SparkSession of the benchmark's own process, what a user runs
instead of a cluster (its counterpart for Spark Connect is `connect_floor`)."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Mapping
from typing import Any

from harness.processes import cpu_seconds, tree_cpu_seconds


def classic_session(master: str, app_name: str, conf: Mapping[str, object] | None = None) -> Any:
    """A classic SparkSession of this process on `master`, `conf` set, its UI and progress bar off,
    Spark logging errors only.

    Made before any Connect session of the process: once one exists, pyspark's builder makes Connect ones."""
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def classic_session_cpu_seconds(spark: Any) -> float:
    """CPU seconds of this process and of the JVM pyspark launched for the classic session `spark`."""
    try:
        jvm = spark.sparkContext._gateway.proc.pid
    except AttributeError:
        return math.nan
    return cpu_seconds(os.getpid()) + tree_cpu_seconds(jvm)


@contextlib.contextmanager
def classic_functions() -> Iterator[None]:
    """pyspark's functions build classic columns within, in a process that also has Connect sessions
    (`is_remote()` reads `SPARK_CONNECT_MODE_ENABLED` at each call)."""
    saved = os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["SPARK_CONNECT_MODE_ENABLED"] = saved
