"""Task functions of test_result_boundaries.py, shipped as an artifact."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def produce(ctx: Any) -> Any:
    """A result with a non-nullable column, an array and a map."""
    return ctx.spark.range(1000).selectExpr("id", "cast(id % 7 as int) as k", "array(id) as a", "map('k', id) as m")


def read_input(ctx: Any) -> None:
    """Resolve the input's schema (the analysis that would infer it) and leave it in a marker file;
    no action of its own, so every Spark job of this attempt is the read's."""
    schema = ctx.inputs["up"].schema.json()
    (Path(ctx.params["marker_dir"]) / ctx.params["name"]).write_text(schema)


def tagged_job(ctx: Any) -> None:
    """One Spark job tagged `params.tag`: once it is listed, every earlier job is."""
    ctx.spark.addTag(ctx.params["tag"])
    ctx.spark.range(1).collect()


def half(ctx: Any) -> Any:
    """Its share of the input's rows (by subtask), with a doubled column; says which share it is."""
    print(f"half {ctx.subtask_index} of {ctx.parallelism}")
    up = ctx.inputs["up"]
    return up.where(up.id % ctx.parallelism == ctx.subtask_index).selectExpr("id", "id * 2 as twice")


def total(ctx: Any) -> Any:
    """One row: how many rows its chained input has and their sum; its inputs' names in a marker."""
    print("total")
    (Path(ctx.params["marker_dir"]) / "total-inputs").write_text(",".join(ctx.inputs))
    return ctx.inputs["half"].selectExpr("count(*) as n", "sum(twice) as s")


def broken(ctx: Any) -> Any:
    raise ValueError("broken on purpose")


def parity(ctx: Any) -> Any:
    """The rows of its input `half` whose id has the parity `params.remainder`."""
    half = ctx.inputs["half"]
    return half.where(half.id % 2 == ctx.params["remainder"])


def both(ctx: Any) -> Any:
    """One row: how many rows its inputs `evens` and `odds` have together and the sum of their `twice`."""
    return ctx.inputs["evens"].unionByName(ctx.inputs["odds"]).selectExpr("count(*) as n", "sum(twice) as s")
