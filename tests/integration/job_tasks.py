"""PySpark task functions the integration tests ship to TaskExecutors as an artifact.

Each call leaves a marker file in `params["log_dir"]` (when given), so tests can count how often
a subtask really ran, across TaskExecutors and masters.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any


def _mark(ctx: Any, what: str = "run") -> None:
    log_dir = ctx.params.get("log_dir")
    if log_dir:
        os.makedirs(log_dir, exist_ok=True)
        name = f"{ctx.vertex_id}.{ctx.subtask_index}.{ctx.attempt}.{what}.{uuid.uuid4().hex[:8]}"
        with open(os.path.join(log_dir, name), "w") as handle:
            handle.write(ctx.job_id)


def numbers(ctx: Any) -> Any:
    """This subtask's share of 0..rows-1, in a column `n`."""
    _mark(ctx)
    rows = int(ctx.params.get("rows", 100))
    share = rows // ctx.parallelism
    start = ctx.subtask_index * share
    end = rows if ctx.subtask_index == ctx.parallelism - 1 else start + share
    time.sleep(float(ctx.params.get("sleep_s", 0)))
    return ctx.spark.range(start, end).withColumnRenamed("id", "n")


def double(ctx: Any) -> Any:
    _mark(ctx)
    df = ctx.inputs["numbers"]
    mine = df.where(df.n % ctx.parallelism == ctx.subtask_index)
    return mine.selectExpr("n * 2 AS n")


def square(ctx: Any) -> Any:
    _mark(ctx)
    df = ctx.inputs["numbers"]
    mine = df.where(df.n % ctx.parallelism == ctx.subtask_index)
    return mine.selectExpr("n * n AS n")


def total(ctx: Any) -> Any:
    """Fan-in: one row with the sums of both inputs."""
    _mark(ctx)
    doubled = ctx.inputs["double"].agg({"n": "sum"}).collect()[0][0]
    squared = ctx.inputs["square"].agg({"n": "sum"}).collect()[0][0]
    return ctx.spark.createDataFrame([(int(doubled), int(squared))], "doubled long, squared long")


def flaky(ctx: Any) -> Any:
    """Fails its first `fail_attempts` attempts, then passes its input on."""
    _mark(ctx)
    if ctx.attempt < int(ctx.params.get("fail_attempts", 2)):
        raise RuntimeError(f"flaky failure on attempt {ctx.attempt}")
    return ctx.inputs["numbers"]


def failing(ctx: Any) -> Any:
    _mark(ctx)
    raise ValueError("bad input row 42")


def nothing(ctx: Any) -> None:
    """Returns no result."""
    _mark(ctx)


def sleepy(ctx: Any) -> Any:
    """Sleeps `seconds`, then returns its input (or a few rows)."""
    _mark(ctx, "start")
    time.sleep(float(ctx.params.get("seconds", 1.0)))
    _mark(ctx, "end")
    upstream = next(iter(ctx.inputs.values()), None) if ctx.inputs else None
    return upstream if upstream is not None else ctx.spark.range(5)


def endless_spark(ctx: Any) -> Any:
    """A Spark job that runs for many minutes unless cancelled."""
    _mark(ctx, "start")
    # no products: Spark 4's ANSI mode fails a query whose arithmetic overflows a long
    ctx.spark.range(0, 10**12, numPartitions=2).selectExpr("sum(id % 7)").collect()
    _mark(ctx, "end")
    return None


def count_rows(ctx: Any) -> Any:
    """`spark.range(10).count()`: the benchmarks' trivial task."""
    ctx.spark.range(10).count()
    return None
