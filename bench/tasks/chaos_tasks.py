"""Task functions of the chaos jobs (`sparkdispatch.testing.chaos`), shipped as an artifact.

A chaos job is `produce` (parallelism 2) → `transform` (2) → `summarize` (1). Every execution
leaves one marker file, `<params["markers"]>/<job id>/<vertex>.<subtask>.<attempt>.<execution>.json`,
written when it starts and rewritten when its function ends: the job id, vertex, subtask, attempt,
a random execution id, the process id, the start and end times (epoch seconds) and, for
`summarize`, what it read. The end-of-run audit counts executions from these files.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any


class Marker:
    """The marker file of one execution."""

    def __init__(self, ctx: Any) -> None:
        directory = os.path.join(ctx.params["markers"], ctx.job_id)
        os.makedirs(directory, exist_ok=True)
        execution = uuid.uuid4().hex[:12]
        self.path = os.path.join(directory, f"{ctx.vertex_id}.{ctx.subtask_index}.{ctx.attempt}.{execution}.json")
        self.record: dict[str, Any] = {
            "job_id": ctx.job_id,
            "vertex": ctx.vertex_id,
            "subtask": ctx.subtask_index,
            "attempt": ctx.attempt,
            "execution": execution,
            "pid": os.getpid(),
            "start": time.time(),
            "end": None,
            "output": None,
        }
        self._write()

    def end(self, output: Any = None) -> None:
        self.record.update(end=time.time(), output=output)
        self._write()

    def _write(self) -> None:
        # whole files only: the audit may read while a task runs, and a task may be killed mid-write
        temp = f"{self.path}.tmp"
        with open(temp, "w") as handle:
            json.dump(self.record, handle)
        os.replace(temp, self.path)


def _pause(ctx: Any) -> None:
    time.sleep(float(ctx.params.get("sleep_s", 0.0)))


def produce(ctx: Any) -> Any:
    """This subtask's share of 0..rows-1 in a column `n`."""
    marker = Marker(ctx)
    _pause(ctx)
    rows = int(ctx.params["rows"])
    share = rows // ctx.parallelism
    start = ctx.subtask_index * share
    end = rows if ctx.subtask_index == ctx.parallelism - 1 else start + share
    df = ctx.spark.range(start, end).withColumnRenamed("id", "n")
    marker.end()
    return df


def transform(ctx: Any) -> Any:
    """Doubles this subtask's share (`n % parallelism == subtask`) of `produce`'s rows."""
    marker = Marker(ctx)
    _pause(ctx)
    df = ctx.inputs["produce"]
    mine = df.where(df.n % ctx.parallelism == ctx.subtask_index).selectExpr("n * 2 AS n")
    marker.end()
    return mine


def summarize(ctx: Any) -> Any:
    """One row: how many rows `transform` produced and their sum (also in the marker, for the audit)."""
    marker = Marker(ctx)
    _pause(ctx)
    row = ctx.inputs["transform"].selectExpr("count(n) AS rows", "coalesce(sum(n), 0) AS total").collect()[0]
    output = {"rows": int(row["rows"]), "total": int(row["total"])}
    marker.end(output)
    return ctx.spark.createDataFrame([(output["rows"], output["total"])], "rows long, total long")
