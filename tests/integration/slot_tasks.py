"""Task functions the slot process tests run; shipped to the slot processes as an artifact.

Functions that must be watched from the test leave `<params["marker_dir"]>/<name>` files, whose
content is the slot process's pid.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from sparkdispatch.testing.waiting import eventually_blocking


def _mark(ctx: Any, name: str) -> None:
    marker_dir = Path(ctx.params["marker_dir"])
    marker_dir.mkdir(parents=True, exist_ok=True)
    (marker_dir / name).write_text(str(os.getpid()))


def _wait_for(path: Path, timeout_s: float = 60.0) -> None:
    eventually_blocking(path.exists, f"{path} to appear", timeout=timeout_s, interval=0.05)


def context(ctx: Any) -> Any:
    """One row: what `ctx` holds, and which process ran the task."""
    seen = {
        "params": dict(ctx.params),
        "subtask_index": ctx.subtask_index,
        "parallelism": ctx.parallelism,
        "job_id": ctx.job_id,
        "vertex_id": ctx.vertex_id,
        "attempt": ctx.attempt,
        "inputs": sorted(ctx.inputs),
    }
    return ctx.spark.createDataFrame([(json.dumps(seen, sort_keys=True), os.getpid())], "ctx string, pid long")


def chatty(ctx: Any) -> None:
    """Prints, logs and writes to stderr, as task functions do."""
    import logging
    import sys

    print(f"printed by subtask {ctx.subtask_index}")
    logging.getLogger("chatty").warning("logged by the task")
    sys.stderr.write("written to stderr\n")


def very_chatty(ctx: Any) -> None:
    """Prints `ctx.params["lines"]` numbered lines, some from a Spark action's result, then fails
    saying its last words on stderr, as a task with a runaway print loop would."""
    import sys

    rows = ctx.spark.range(3).count()
    for n in range(int(ctx.params["lines"])):
        print(f"line {n:07d} of a chatty task ({rows} rows)")
    sys.stderr.write("the task's last words\n")
    raise RuntimeError("chatty to the end")


def driver_messages(ctx: Any) -> None:
    """A window over all rows, which the driver warns about, then an operation long enough for the
    server to report its progress (every 100 ms here)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType

    ctx.spark.conf.set("spark.connect.progress.reportInterval", "100ms")
    ctx.spark.range(10).withColumn("n", F.row_number().over(Window.orderBy("id"))).collect()

    def slowly(value: int) -> int:
        time.sleep(0.4)
        return value

    ctx.spark.range(0, 4, 1, 2).select(F.udf(slowly, IntegerType())("id")).collect()


def session_facts(ctx: Any) -> Any:
    """One row: the job's session id and shuffle partitions, the temporary views it sees (after making
    `params["view"]`, if given), whether `getActiveSession()` is `ctx.spark`, and the process."""
    from pyspark.sql import SparkSession

    if "view" in ctx.params:
        ctx.spark.range(3).createOrReplaceTempView(ctx.params["view"])
    views = ",".join(sorted(t.name for t in ctx.spark.catalog.listTables() if t.isTemporary))
    active = SparkSession.getActiveSession()
    return ctx.spark.createDataFrame(
        [
            (
                ctx.spark.session_id,
                ctx.spark.conf.get("spark.sql.shuffle.partitions"),
                views,
                getattr(active, "session_id", None) == ctx.spark.session_id,
                os.getpid(),
            )
        ],
        "session_id string, partitions string, views string, active boolean, pid long",
    )


def versions(ctx: Any) -> Any:
    """One row: the version of `params["module"]` here and on Spark's Python workers, the shuffle
    partitions this job's session uses, and this process and its parent. Waits until every job in
    `params["peers"]` has started."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    module_name = ctx.params["module"]
    _mark(ctx, f"{ctx.job_id}.started")
    for peer in ctx.params.get("peers", ()):
        _wait_for(Path(ctx.params["marker_dir"]) / f"{peer}.started")
    here = importlib.import_module(module_name).VERSION

    def on_workers(_: Any) -> str:
        return str(importlib.import_module(module_name).VERSION)

    on_executors = ctx.spark.range(1).select(F.udf(on_workers, StringType())("id")).collect()[0][0]
    partitions = ctx.spark.range(200).repartition("id").select(F.spark_partition_id().alias("p")).distinct().count()
    return ctx.spark.createDataFrame(
        [
            (
                str(here),
                on_executors,
                ctx.spark.conf.get("spark.sql.shuffle.partitions"),
                partitions,
                os.getpid(),
                os.getppid(),
            )
        ],
        "here string, on_executors string, conf string, partitions long, pid long, ppid long",
    )


def swallow_cancellation(ctx: Any) -> None:
    """Runs for ever: every interruption, exception or not, is swallowed. Its marker `session-id`
    holds the id of the job's Connect session."""
    (Path(ctx.params["marker_dir"]) / "session-id").parent.mkdir(parents=True, exist_ok=True)
    (Path(ctx.params["marker_dir"]) / "session-id").write_text(ctx.spark.session_id)
    _mark(ctx, "swallowing")
    while True:
        try:
            time.sleep(1)
        except BaseException:  # noqa: BLE001 - the point of this task
            pass


def endless_spark(ctx: Any) -> None:
    """A Spark operation that runs for many minutes unless interrupted."""
    _mark(ctx, "spark-started")
    ctx.spark.range(0, 10**12, numPartitions=2).selectExpr("sum(id % 7)").collect()


def die(ctx: Any) -> None:
    """Ends the slot process: `os._exit(params["code"])`, or a signal named by `params["signal"]`."""
    _mark(ctx, "dying")
    if "signal" in ctx.params:
        os.kill(os.getpid(), signal.Signals[ctx.params["signal"]])
        time.sleep(10)
    os._exit(int(ctx.params.get("code", 1)))


def after_marker(ctx: Any) -> Any:
    """Waits for `params["wait_for"]` in the marker dir (up to `params["timeout_s"]`, default 60), then
    returns three rows."""
    _mark(ctx, "waiting")
    _wait_for(Path(ctx.params["marker_dir"]) / ctx.params["wait_for"], float(ctx.params.get("timeout_s", 60.0)))
    return ctx.spark.range(3)


def python_udf(ctx: Any) -> Any:
    """Three rows through a Python UDF: Spark's Python workers (and their daemon) run for this session."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    return ctx.spark.range(3).select(F.udf(lambda value: value * 2, LongType())("id").alias("doubled"))


def udf_worker_parents(ctx: Any) -> Any:
    """The parent pid of each Python worker that ran a UDF over two partitions: their daemon."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    return ctx.spark.range(0, 2, 1, 2).select(F.udf(lambda _: os.getppid(), LongType())("id").alias("daemon"))


def udf_after_marker(ctx: Any) -> Any:
    """Marks `waiting`, then three rows through a Python UDF that marks `in-udf` (with its worker's pid) and waits for
    `params["wait_for"]` in the marker dir (up to `params["timeout_s"]`, default 60)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    _mark(ctx, "waiting")
    marker_dir = Path(ctx.params["marker_dir"])
    wait_for, timeout_s = marker_dir / ctx.params["wait_for"], float(ctx.params.get("timeout_s", 60.0))

    def waits(value: int) -> int:
        marker_dir.mkdir(parents=True, exist_ok=True)
        (marker_dir / "in-udf").write_text(str(os.getpid()))
        _wait_for(wait_for, timeout_s)
        return value

    return ctx.spark.range(0, 3, 1, 1).select(F.udf(waits, LongType())("id").alias("id"))


def multiples_of_seven(ctx: Any) -> Any:
    return ctx.spark.range(0, int(ctx.params.get("below", 1000))).where("id % 7 = 0")


def marks_its_start(ctx: Any) -> Any:
    """Leaves the marker `<vertex>-<subtask>` as it starts: which functions of a chain started."""
    _mark(ctx, f"{ctx.vertex_id}-{ctx.subtask_index}")
    return ctx.spark.range(3)


def even_inputs(ctx: Any) -> Any:
    """The `up` input's even ids; asserts what the other inputs look like."""
    assert ctx.inputs["empty"] is None
    assert sorted(ctx.inputs) == ["empty", "never_read", "up"]
    return ctx.inputs["up"].where("id % 2 = 0")


def uses_rdd(ctx: Any) -> Any:
    return ctx.spark.createDataFrame(ctx.spark.sparkContext.parallelize([(1,)]), "n long")


def fails(ctx: Any) -> Any:
    raise ValueError("no sales on " + ctx.params["day"])


def not_a_frame(ctx: Any) -> Any:
    return 42


def writes_partitioned_source(ctx: Any) -> None:
    """A Parquet table at `params["source"]` partitioned by region, as a job's source would be."""
    frame = ctx.spark.range(6).selectExpr("id", "if(id % 2 = 0, 'eu', 'us') AS region")
    frame.write.mode("overwrite").partitionBy("region").parquet(ctx.params["source"])


def reads_source_and_input(ctx: Any) -> Any:
    """The Parquet table at `params["source"]` with the `up` input's ids."""
    source = ctx.spark.read.parquet(ctx.params["source"]).select("id")
    return source.unionByName(ctx.inputs["up"].select("id"))
