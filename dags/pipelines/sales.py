"""A small sales pipeline: the task functions behind `example_pipeline.py`.

Each function gets `ctx` (see docs/task-contract.md): `ctx.spark`, `ctx.params`, `ctx.inputs` (the
upstream vertices' results as DataFrames), `ctx.subtask_index` and `ctx.parallelism`. A
returned DataFrame is this subtask's share of the vertex's result.

    generate ─> clean (×2) ─┬─> revenue_by_region (×2) ─┬─> report
                            └─> revenue_by_product ─────┘
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

REGIONS = ["north", "south", "east", "west"]
PRODUCTS = ["espresso", "filter", "grinder", "kettle", "mug"]


def _pick(values: list[str], index: F.Column) -> F.Column:
    return F.element_at(F.array(*[F.lit(v) for v in values]), (index % len(values) + 1).cast("int"))


def generate(ctx) -> DataFrame:
    """Synthesise `params.rows` orders, the same every run (nothing to download)."""
    rows = int(ctx.params.get("rows", 100_000))
    print(f"generating {rows} orders")  # in the vertex task's Airflow log
    order = F.col("id")
    return ctx.spark.range(rows).select(
        order.alias("order_id"),
        _pick(REGIONS, order).alias("region"),
        _pick(PRODUCTS, (order / 7).cast("long")).alias("product"),
        ((order * 13) % 9 - 1).cast("int").alias("quantity"),  # -1..7: some orders are bad
        F.round(F.lit(5.0) + (order * 31) % 100 / 4, 2).alias("unit_price"),
    )


def _my_share(df: DataFrame, ctx) -> DataFrame:
    return df.where(F.col("order_id") % ctx.parallelism == ctx.subtask_index)


def clean(ctx) -> DataFrame:
    """Keep this subtask's share of the orders, drop those without a quantity, price each one."""
    orders = _my_share(ctx.inputs["generate"], ctx)
    return orders.where(F.col("quantity") > 0).withColumn(
        "revenue", F.round(F.col("quantity") * F.col("unit_price"), 2)
    )


def revenue_by_region(ctx) -> DataFrame:
    """Revenue per region over this subtask's share of the clean orders (partial sums)."""
    return (
        _my_share(ctx.inputs["clean"], ctx)
        .groupBy("region")
        .agg(F.sum("revenue").alias("revenue"), F.count("*").alias("orders"))
    )


def revenue_by_product(ctx) -> DataFrame:
    """Revenue per product over all clean orders."""
    return ctx.inputs["clean"].groupBy("product").agg(F.sum("revenue").alias("revenue"), F.count("*").alias("orders"))


def report(ctx) -> DataFrame:
    """Combine the partial sums per region and check them against the per-product totals."""
    regions = (
        ctx.inputs["revenue_by_region"]
        .groupBy("region")
        .agg(F.sum("revenue").alias("revenue"), F.sum("orders").alias("orders"))
    )
    by_region = regions.agg(F.sum("revenue"), F.sum("orders")).first()
    by_product = ctx.inputs["revenue_by_product"].agg(F.sum("revenue"), F.sum("orders")).first()
    if by_region[1] != by_product[1] or abs(by_region[0] - by_product[0]) > 0.01 * max(1, by_region[1]):
        raise ValueError(
            f"totals disagree: {by_region[1]} orders / {by_region[0]:.2f} by region, "
            f"{by_product[1]} orders / {by_product[0]:.2f} by product"
        )
    return regions.withColumn("share", F.round(F.col("revenue") / F.lit(by_region[0]), 4)).orderBy(
        F.col("revenue").desc()
    )
