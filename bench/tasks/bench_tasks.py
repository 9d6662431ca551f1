"""Task functions the benchmarks ship to TaskExecutors as an artifact (`bench_tasks:<name>`)."""

from __future__ import annotations

import time
from typing import Any


def count_rows(ctx: Any) -> None:
    """`spark.range(10).count()`: the trivial PySpark action of P1."""
    ctx.spark.range(10).count()


def noop(ctx: Any) -> None:
    """Does nothing: P2 measures accepting jobs, not running them."""


def pause(ctx: Any) -> None:
    """Sleeps `params["seconds"]` (default 1): P4's vertices, long enough to kill a master between them."""
    time.sleep(float(ctx.params.get("seconds", 1.0)))


def spark_busy(ctx: Any) -> None:
    """Small aggregations on the Connect server for `params["seconds"]` (default 20): the memory bench's
    running tasks, each holding a slot process, a Connect session and Spark jobs."""
    deadline = time.monotonic() + float(ctx.params.get("seconds", 20.0))
    while time.monotonic() < deadline:
        ctx.spark.range(200_000).selectExpr("id % 97 AS k").groupBy("k").count().collect()
