"""The P10 pipeline's task functions, shared by the cluster (shipped as this file), the floors and spark-submit.

Three Parquet sources made once (`make_sources`: orders, customers, products; the same rows every
time), then seven vertices, ten subtasks:

    orders (x2) ──────┐
    customers ────────┼─> sales (star join) ─┬─> region_totals (x2) ─┬─> report
    products ─────────┘                      └─> top_products (x2) ──┘

`sales` is read by two consumers. Money is kept in whole cents (longs), so every plan sums it to
the same figures and the report can be compared exactly across runs.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

CUSTOMERS = 100_000
PRODUCTS = 2_000
CATEGORIES = 20
REGIONS = 8
SEGMENTS = ("consumer", "corporate", "home office")
TOP = 5

# The JobGraph's vertices in topological order: id (= its function in this module), parallelism, inputs.
VERTICES: tuple[dict[str, Any], ...] = (
    {"id": "orders", "parallelism": 2, "inputs": []},
    {"id": "customers", "parallelism": 1, "inputs": []},
    {"id": "products", "parallelism": 1, "inputs": []},
    {"id": "sales", "parallelism": 1, "inputs": ["orders", "customers", "products"]},
    {"id": "region_totals", "parallelism": 2, "inputs": ["sales"]},
    {"id": "top_products", "parallelism": 2, "inputs": ["sales"]},
    {"id": "report", "parallelism": 1, "inputs": ["region_totals", "top_products"]},
)
SHARED = "sales"  # the result read by two consumers (the "cached" floor persists it)
SINK = "report"


def make_sources(spark: Any, directory: str, rows: int) -> dict[str, str]:
    """Write the three sources as Parquet under `directory` (deterministic); source name -> path."""
    order = F.col("id")
    paths = {name: f"{directory}/{name}" for name in ("orders", "customers", "products")}
    spark.range(rows).select(
        order.alias("order_id"),
        ((order * 7919) % CUSTOMERS).alias("customer_id"),
        ((order * 104729 + order / 3) % PRODUCTS).cast("long").alias("product_id"),
        ((order * 13) % 9 - 1).cast("int").alias("quantity"),  # -1..7: some orders are bad
        (F.lit(19_000) + (order * 31) % 2_000).cast("int").alias("day"),
    ).write.mode("overwrite").parquet(paths["orders"])
    customer = F.col("id")
    spark.range(CUSTOMERS).select(
        customer.alias("customer_id"),
        F.concat(F.lit("region-"), (customer % REGIONS).cast("string")).alias("region"),
        F.element_at(F.array(*[F.lit(s) for s in SEGMENTS]), (customer % len(SEGMENTS) + 1).cast("int")).alias(
            "segment"
        ),
    ).write.mode("overwrite").parquet(paths["customers"])
    product = F.col("id")
    spark.range(PRODUCTS).select(
        product.alias("product_id"),
        F.concat(F.lit("product-"), product.cast("string")).alias("product_name"),
        (product % CATEGORIES).alias("category_id"),
        F.concat(F.lit("category-"), (product % CATEGORIES).cast("string")).alias("category"),
        (F.lit(250) + (product * 37) % 5_000).alias("price_cents"),
    ).write.mode("overwrite").parquet(paths["products"])
    return paths


def _my_share(df: DataFrame, ctx: Any, column: str = "order_id") -> DataFrame:
    return df.where(F.col(column) % ctx.parallelism == ctx.subtask_index)


def orders(ctx: Any) -> DataFrame:
    """This subtask's share of the orders with a positive quantity."""
    return _my_share(_source(ctx, "orders"), ctx).where(F.col("quantity") > 0)


def _source(ctx: Any, name: str) -> DataFrame:
    frame: DataFrame = ctx.spark.read.parquet(ctx.params[name])
    return frame


def _input(ctx: Any, name: str) -> DataFrame:
    frame: DataFrame = ctx.inputs[name]
    return frame


def customers(ctx: Any) -> DataFrame:
    return _source(ctx, "customers").select("customer_id", "region", "segment")


def products(ctx: Any) -> DataFrame:
    return _source(ctx, "products").select("product_id", "product_name", "category_id", "category", "price_cents")


def sales(ctx: Any) -> DataFrame:
    """The star join: the orders with their customer and product, priced in cents."""
    return (
        _input(ctx, "orders")
        .join(_input(ctx, "customers"), "customer_id")
        .join(_input(ctx, "products"), "product_id")
        .select(
            "order_id",
            "region",
            "segment",
            "category_id",
            "category",
            "product_id",
            "product_name",
            "quantity",
            (F.col("quantity") * F.col("price_cents")).alias("revenue_cents"),
        )
    )


def region_totals(ctx: Any) -> DataFrame:
    """Revenue and orders per region and category over this subtask's share of the sales (partial sums)."""
    return (
        _my_share(_input(ctx, "sales"), ctx)
        .groupBy("region", "category")
        .agg(F.sum("revenue_cents").alias("revenue_cents"), F.count("*").alias("orders"))
    )


def top_products(ctx: Any) -> DataFrame:
    """The `TOP` products by revenue (ties by product id) of this subtask's share of the categories, with a window."""
    per_product = (
        _my_share(_input(ctx, "sales"), ctx, "category_id")
        .groupBy("category", "product_id", "product_name")
        .agg(F.sum("revenue_cents").alias("revenue_cents"), F.sum("quantity").alias("units"))
    )
    rank = F.row_number().over(Window.partitionBy("category").orderBy(F.desc("revenue_cents"), "product_id"))
    return per_product.withColumn("rank", rank).where(F.col("rank") <= TOP)


def report(ctx: Any) -> DataFrame:
    """Per category: its totals, its best region, and its top products with their share of it."""
    partials = _input(ctx, "region_totals")
    by_region = partials.groupBy("category", "region").agg(F.sum("revenue_cents").alias("region_cents"))
    best = (
        by_region.withColumn(
            "n", F.row_number().over(Window.partitionBy("category").orderBy(F.desc("region_cents"), "region"))
        )
        .where(F.col("n") == 1)
        .select("category", F.col("region").alias("best_region"))
    )
    totals = partials.groupBy("category").agg(
        F.sum("revenue_cents").alias("category_cents"), F.sum("orders").alias("category_orders")
    )
    return (
        _input(ctx, "top_products")
        .join(totals, "category")
        .join(best, "category")
        .select(
            "category",
            "rank",
            "product_name",
            "revenue_cents",
            "units",
            "category_cents",
            "category_orders",
            "best_region",
            F.round(F.col("revenue_cents") / F.col("category_cents"), 6).alias("share"),
        )
    )


def report_rows(spark: Any, paths: list[str]) -> list[tuple[Any, ...]]:
    """The report written at `paths`, as sorted tuples (what every run must agree on)."""
    return sorted(tuple(row) for row in spark.read.parquet(*paths).collect())


def context(spark: Any, vertex: dict[str, Any], index: int, params: dict[str, Any], inputs: Any) -> Any:
    """The `ctx` a slot process gives subtask `index` of `vertex` (sparkdispatch's TaskContext)."""
    from sparkdispatch.taskexecutor.task_context import TaskContext

    return TaskContext(
        spark=spark,
        params=params,
        subtask_index=index,
        parallelism=int(vertex["parallelism"]),
        job_id="p10",
        vertex_id=vertex["id"],
        attempt=0,
        inputs=inputs,
    )


def run_materialised(spark: Any, vertex: dict[str, Any], params: dict[str, Any], out: str) -> list[str]:
    """Run every subtask of `vertex` as a slot process does: its inputs read from `<out>/<input>/<index>`,
    its result written as the Parquet partition `<out>/<vertex>/<index>`; the partitions written."""
    from sparkdispatch.storage.results import write_partition
    from sparkdispatch.taskexecutor.task_context import LazyInputs

    by_id = {v["id"]: v for v in VERTICES}
    upstream = {
        name: tuple(f"{out}/{name}/{i}" for i in range(int(by_id[name]["parallelism"]))) for name in vertex["inputs"]
    }
    written = []
    for index in range(int(vertex["parallelism"])):
        frame = globals()[vertex["id"]](context(spark, vertex, index, params, LazyInputs(spark, upstream)))
        path = f"{out}/{vertex['id']}/{index}"
        write_partition(frame, path)
        written.append(path)
    return written
