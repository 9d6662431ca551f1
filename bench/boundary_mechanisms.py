"""How a result can cross a vertex boundary on one TaskExecutor: each mechanism timed on its Spark Connect server.

    .venv/bin/python bench/boundary_mechanisms.py [--rows 3000000] [--runs 3] [--warm-up 1] [--work-dir DIR]

The P10 pipeline's star join (`p10_tasks.sales`: 3M orders from Parquet joined with customers and
products) is the producer; its two consumers (`region_totals` and `top_products`, one subtask each)
each run one action on it. One Connect server started and warmed as a TaskExecutor's, sessions of
this process on it with `spark.sql.shuffle.partitions=4`. Each mechanism is timed from the
producer's plan to both consumers' answers, what it leaves released (files removed, cache dropped):

- parquet, Spark's defaults: `write.parquet` (`_SUCCESS`, `.crc`), read back with `read.parquet`
  (the schema inferred: a job);
- parquet as a boundary writes it now: `write_partition` (no `_SUCCESS`, no `.crc`) and
  `read_partitions` with the schema the write reported (no inference);
- `localCheckpoint(eager=True)`: the result kept in the server's block manager, lineage cut;
- `persist(MEMORY_AND_DISK)` + `count()`: the result cached in the server, in the producer's session;
- a global temp view cached with `CACHE TABLE` in one session and read by the consumers in ANOTHER
  session of the same server (`global_temp.<view>`): what sharing a cached result between a
  producer's and a consumer's slot processes would take; the plan of the consumer's read is
  checked to scan the cache (an `InMemoryRelation`);
- the lazy plan: nothing kept, each consumer computes the join again.

Every mechanism's two consumer answers must equal the lazy plan's. Prints the medians and the
ratios to the lazy plan, and writes bench/results/boundary_mechanisms.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.paths import TASKS_DIR
from harness.reporting import load_average, load_change, median, print_table, save_results
from harness.running import add_run_options, bench_main, scratch_dir

from sparkdispatch.config import Configuration
from sparkdispatch.entrypoint.standalone import standalone_config

sys.path.insert(0, str(TASKS_DIR))
import p10_tasks  # the P10 task module, from bench/tasks

SESSION_CONF = {"spark.sql.shuffle.partitions": "4"}
PRODUCER = next(v for v in p10_tasks.VERTICES if v["id"] == "sales")
CONSUMERS = ("region_totals", "top_products")
VIEW = "p10_sales"


class Mechanisms:
    """The producer and its two consumers on one Connect server; one method per mechanism."""

    def __init__(self, spark: Any, other_session: Callable[[], Any], work_dir: Path, sources: dict[str, str]) -> None:
        self.spark = spark
        self.other_session = other_session
        self.work_dir = work_dir
        self.sources = sources
        self.runs = 0

    def _ctx(self, spark: Any, vertex_id: str, inputs: dict[str, Any]) -> Any:
        vertex = {"id": vertex_id, "parallelism": 1, "inputs": list(inputs)}
        return p10_tasks.context(spark, vertex, 0, self.sources, inputs)

    def _produce(self) -> Any:
        """The star join's plan (its inputs read lazily from the sources)."""
        inputs = {name: getattr(p10_tasks, name)(self._ctx(self.spark, name, {})) for name in PRODUCER["inputs"]}
        return p10_tasks.sales(self._ctx(self.spark, "sales", inputs))

    def _consume(self, spark: Any, sales: Any) -> list[Any]:
        """Each consumer's action on `sales`: its rows, sorted."""
        return [
            sorted(tuple(row) for row in getattr(p10_tasks, name)(self._ctx(spark, name, {"sales": sales})).collect())
            for name in CONSUMERS
        ]

    def _path(self) -> str:
        self.runs += 1
        return str(self.work_dir / f"sales-{self.runs}")

    def lazy(self) -> list[Any]:
        return self._consume(self.spark, self._produce())

    def parquet_defaults(self) -> list[Any]:
        path = self._path()
        self._produce().write.mode("overwrite").parquet(path)
        try:
            return self._consume(self.spark, self.spark.read.parquet(path))
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def parquet_boundary(self) -> list[Any]:
        from sparkdispatch.storage.results import read_partitions, write_partition

        path = self._path()
        written = write_partition(self._produce(), path)
        try:
            return self._consume(self.spark, read_partitions(self.spark, [path], written.schema))
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def local_checkpoint(self) -> list[Any]:
        kept = self._produce().localCheckpoint(eager=True)
        try:
            return self._consume(self.spark, kept)
        finally:
            kept.unpersist(blocking=True)

    def persist(self) -> list[Any]:
        from pyspark.storagelevel import StorageLevel

        kept = self._produce().persist(StorageLevel.MEMORY_AND_DISK)
        kept.count()
        try:
            return self._consume(self.spark, kept)
        finally:
            kept.unpersist(blocking=True)

    def global_view_cached(self) -> list[Any]:
        self._produce().createOrReplaceGlobalTempView(VIEW)
        self.spark.sql(f"CACHE TABLE global_temp.{VIEW}")  # eager: one job fills the cache
        consumer = self.other_session()
        try:
            shared = consumer.table(f"global_temp.{VIEW}")
            plan = shared._explain_string(extended=False) if hasattr(shared, "_explain_string") else ""
            if plan and "InMemoryRelation" not in plan:
                raise RuntimeError(f"the other session's read does not scan the cache:\n{plan}")
            return self._consume(consumer, shared)
        finally:
            consumer.stop()
            self.spark.sql(f"UNCACHE TABLE IF EXISTS global_temp.{VIEW}")
            self.spark.catalog.dropGlobalTempView(VIEW)


MECHANISMS: dict[str, str] = {
    "parquet_defaults": "Parquet, Spark's defaults (_SUCCESS, .crc), schema inferred on read",
    "parquet_boundary": "Parquet as a boundary writes it (no _SUCCESS/.crc, schema given)",
    "local_checkpoint": "localCheckpoint(eager=True)",
    "persist": "persist(MEMORY_AND_DISK) + count()",
    "global_view_cached": "global temp view + CACHE TABLE, read from another session",
    "lazy": "lazy plan: each consumer computes the join again",
}


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=3_000_000, help="orders in the source")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each mechanism")
    parser.add_argument("--warm-up", type=int, default=1, help="warm-up runs of each mechanism")
    add_run_options(parser, quick="300k rows, 1 timed run")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.runs = 300_000, 1
    from harness.connect_floor import ConnectClient

    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"  # pyspark's functions build Connect columns, as in a slot
    results: dict[str, Any] = {"load_average_at_start": load_average(), "rows": args.rows, "runs": args.runs}
    samples: dict[str, list[float]] = {name: [] for name in MECHANISMS}
    with scratch_dir(args.work_dir, "sparkdispatch-boundaries-") as scratch:
        work = Path(scratch)
        # a loaded machine's server may take longer than a TaskExecutor's default to start and warm up
        overrides = {"taskexecutor.connect.start-timeout": "10m"}
        config = standalone_config(Configuration.from_mapping(overrides), slots=2, storage=str(work / "storage"))
        connect = ConnectClient(config, work / "connect-server", session_conf=SESSION_CONF)
        try:
            connect.start()
            sources = p10_tasks.make_sources(connect.spark, str(work / "sources"), args.rows)
            bench = Mechanisms(connect.spark, connect.new_session, work / "results", sources)
            expected = bench.lazy()
            for round_index in range(args.warm_up + args.runs):
                timed = round_index >= args.warm_up
                figures = {}
                for name in MECHANISMS:
                    begin = time.perf_counter()
                    answers = getattr(bench, name)()
                    figures[name] = time.perf_counter() - begin
                    if answers != expected:
                        raise RuntimeError(f"{name}: the consumers' answers differ from the lazy plan's")
                    if timed:
                        samples[name].append(figures[name])
                label = f"run {round_index - args.warm_up + 1}" if timed else f"warm-up {round_index + 1}"
                print(f"  {label}: " + ", ".join(f"{k} {v:.2f}s" for k, v in figures.items()), flush=True)
        finally:
            connect.stop()
    results["load_average_at_end"] = load_average()
    medians = {name: round(median(values), 3) for name, values in samples.items()}
    lazy = medians["lazy"]
    print()
    print(f"one producer (the P10 star join, {args.rows} orders) and two consumers, medians of {args.runs} runs")
    print_table(
        ["mechanism", "median s", "/ lazy plan"],
        [[label, f"{medians[name]:.2f}", f"{medians[name] / lazy:.2f}x"] for name, label in MECHANISMS.items()],
    )
    print(load_change(results))
    save_results(
        "boundary_mechanisms",
        quick=args.quick,
        report={
            **results,
            "mechanisms": MECHANISMS,
            "samples_s": {name: [round(v, 3) for v in values] for name, values in samples.items()},
            "medians_s": medians,
            "ratio_to_lazy": {name: round(value / lazy, 3) for name, value in medians.items()},
        },
    )
    return 0


if __name__ == "__main__":
    bench_main(run)
