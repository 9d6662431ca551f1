"""A chain's DataFrames and row counts on the session's local Spark: one observation counts many subtasks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparkdispatch.model.protocol import ChainedTask
from sparkdispatch.taskexecutor.chained_vertices import SUBTASKS_PER_OBSERVATION, ChainedFrames
from sparkdispatch.taskexecutor.task_context import TaskContext
from sparkdispatch.testing.slot_attempts import deployment, new_job_id

PARALLELISM = SUBTASKS_PER_OBSERVATION + 4  # two observations, the second for 3 subtasks


def numbers(ctx: TaskContext) -> Any:
    """Subtask i returns 10 * (i + 1) rows; subtask 1 returns nothing."""
    if ctx.subtask_index == 1:
        return None
    return ctx.spark.range(10 * (ctx.subtask_index + 1)).withColumnRenamed("id", "n")


def doubled(ctx: TaskContext) -> Any:
    """Reads the chained `numbers` and keeps its even rows."""
    frame = ctx.inputs["numbers"]
    assert frame is not None
    return frame.where(frame.n % 2 == 0).selectExpr("n * 2 AS d")


FUNCTIONS = {"t:numbers": numbers, "t:doubled": doubled}


def test_each_subtask_is_counted_apart_by_its_vertexs_observations_and_its_columns_stay(
    spark: Any, tmp_path: Path
) -> None:
    chained = (
        ChainedTask("numbers", "t:numbers", parallelism=PARALLELISM),
        ChainedTask("doubled", "t:doubled", inputs={"numbers": ()}),
    )
    tdd = deployment(tmp_path, "t:head", job_id=new_job_id(), chained=chained)
    frames = ChainedFrames(spark, tdd)
    frames.build(FUNCTIONS.__getitem__)
    head = frames.inputs({"doubled": ()}, {})["doubled"]
    assert head is not None and head.columns == ["d"]

    written = head.count()  # the head's action: the whole chain runs as its plan

    returned = [10 * (i + 1) for i in range(PARALLELISM) if i != 1]
    assert written == sum((rows + 1) // 2 for rows in returned)
    counted = frames.rows()
    assert counted["numbers"] == tuple(None if i == 1 else 10 * (i + 1) for i in range(PARALLELISM))
    assert counted["doubled"] == (written,)
    numbers_frame = frames.inputs({"numbers": ()}, {})["numbers"]
    assert numbers_frame is not None and numbers_frame.columns == ["n"]  # the subtask column is dropped
