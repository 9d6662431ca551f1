"""P10 a realistic pipeline: Parquet sources, a star join, a window, a result read twice; against three floors.

    .venv/bin/python bench/p10_pipeline.py [--runs 3] [--warm-up 1] [--rows 3000000] [--slots 2]
                                           [--spark-submit-runs 1] [--shared-result auto|chained|durable|kept]
                                           [--work-dir DIR] [--quick]

The pipeline is bench/tasks/p10_tasks.py (7 vertices, 10 subtasks; the module's docstring draws it):
three Parquet sources made once before anything is timed (`--rows` orders, 100k customers, 2k
products, the same rows every time), a star join whose result two vertices read, a per-region
aggregate, a per-category top-5 with a window, a report. `spark.sql.shuffle.partitions=4`. Ways to
run it, in one run of this script:

- cluster: `sparkdispatch standalone --slots 2` (one TaskExecutor, Spark `local[*]`), the module
  shipped as the job's artifact, timed from POST /jobs to the JobResult; with `--shared-result`
  the twice-read result (`sales`) asks for that result kind (default `auto`: the master keeps it on
  the TaskExecutor's disk, its readers placed there, as `kept` asks; `chained` runs the whole
  pipeline in the report's task as one plan; `durable` writes it to the results directory);
- materialised floor: the same task functions in ONE warm classic SparkSession (`local[*]`) of this
  process, every subtask's result written as a Parquet partition and read back by its consumers
  (`p10_tasks.run_materialised`, as a slot process writes and reads them);
- lazy floor: the same functions with the upstream DataFrames passed on (a vertex's subtasks
  unioned), one plan, only the report written;
- cached floor: the lazy floor with the twice-read result (`sales`) persisted once, as an expert
  writes it (unpersisted after the timed part);
- spark-submit per vertex: each vertex its own `spark-submit --master local[*]` application, one after
  the other, reading and writing Parquet as the materialised floor (a SparkSubmitOperator per
  Airflow task); `--spark-submit-runs` times (default 1: it takes ~100 s).

Every way gets `--warm-up` runs first; then each timed cluster job is paired with a run of each
floor just before it. The report of every run (warm-ups included) is read back and must equal the
first one, or the bench fails. Prints every time, the medians and the ratios, and writes
bench/results/p10_pipeline.json with every sample and the load average.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from functools import reduce
from pathlib import Path
from typing import Any

from harness.classic_floor import classic_session
from harness.clusters import CLUSTER_START_TIMEOUT_S
from harness.paths import TASKS_DIR, VENV_BIN
from harness.processes import stop_process
from harness.reporting import load_average, load_change, median, print_table, save_results
from harness.running import add_run_options, bench_env, bench_main, scratch_dir
from harness.standalone import Standalone

from sparkdispatch.model.states import JobStatus

sys.path.insert(0, str(TASKS_DIR))
import p10_tasks  # the task module the cluster runs, imported from bench/tasks

P10_TASKS = TASKS_DIR / "p10_tasks.py"
SHUFFLE_PARTITIONS = "4"
GOAL_RATIO = 1.25  # issue 27: within 1.25x the best of the three floors
JOB_TIMEOUT_S = 600.0
FLOORS = ("materialised", "lazy", "cached")


def p10_graph(artifact: str, sources: dict[str, str], *, shared_result: str = "auto") -> dict[str, Any]:
    """The JobGraph: one vertex per `p10_tasks.VERTICES` entry, the sources' paths as every vertex's
    params, `shared_result` the result kind `p10_tasks.SHARED` asks for."""
    return {
        "name": "p10-pipeline",
        "vertices": [
            {
                "id": v["id"],
                "entrypoint": f"p10_tasks:{v['id']}",
                "parallelism": v["parallelism"],
                "inputs": list(v["inputs"]),
                "params": dict(sources),
                **({"result": shared_result} if v["id"] == p10_tasks.SHARED and shared_result != "auto" else {}),
            }
            for v in p10_tasks.VERTICES
        ],
        "artifacts": [artifact],
        "config": {"spark.sql.shuffle.partitions": SHUFFLE_PARTITIONS},
        "restart_strategy": {"type": "fixed-delay", "attempts": 0, "delay_s": 0.0},
    }


class ClassicFloors:
    """The pipeline's functions in one warm classic SparkSession (`local[*]`) of this process."""

    def __init__(self, work_dir: Path, sources: dict[str, str]) -> None:
        self.work_dir = work_dir
        self.sources = sources
        self.spark: Any = None
        self.persisted: Any = None  # the cached floor's persisted result, released after the timed part
        self.runs = 0

    def start(self) -> None:
        self.spark = classic_session(
            "local[*]", "p10-classic-floor", {"spark.sql.shuffle.partitions": SHUFFLE_PARTITIONS}
        )

    def run(self, kind: str) -> tuple[float, list[tuple[Any, ...]]]:
        """One run of floor `kind` (one of FLOORS): its seconds and its report's rows."""
        self.runs += 1
        out = str(self.work_dir / f"{kind}-{self.runs}")
        begin = time.perf_counter()
        if kind == "materialised":
            report = self._materialised(out)
        else:
            report = self._lazy(out, persist=kind == "cached")
        elapsed = time.perf_counter() - begin
        if self.persisted is not None:
            self.persisted.unpersist(blocking=True)
            self.persisted = None
        rows = p10_tasks.report_rows(self.spark, report)
        shutil.rmtree(out, ignore_errors=True)
        return elapsed, rows

    def _materialised(self, out: str) -> list[str]:
        written: list[str] = []
        for vertex in p10_tasks.VERTICES:
            written = p10_tasks.run_materialised(self.spark, vertex, self.sources, out)
        return written  # the last vertex's: the report's

    def _lazy(self, out: str, *, persist: bool) -> list[str]:
        from sparkdispatch.storage.results import write_partition

        frames: dict[str, Any] = {}
        for vertex in p10_tasks.VERTICES:
            inputs = {name: frames[name] for name in vertex["inputs"]}
            function = getattr(p10_tasks, vertex["id"])
            parts = [
                function(p10_tasks.context(self.spark, vertex, index, self.sources, inputs))
                for index in range(vertex["parallelism"])
            ]
            frames[vertex["id"]] = reduce(lambda a, b: a.union(b), parts)
            if persist and vertex["id"] == p10_tasks.SHARED:
                self.persisted = frames[vertex["id"]] = frames[vertex["id"]].persist()
        path = f"{out}/{p10_tasks.SINK}"
        write_partition(frames[p10_tasks.SINK], path)
        return [path]

    def stop(self) -> None:
        if self.spark is not None:
            self.spark.stop()
            self.spark = None


def run_cluster(standalone: Standalone, graph: dict[str, Any], floors: ClassicFloors) -> tuple[float, list[Any]]:
    """One job on the cluster: seconds from POST to its JobResult, and its report's rows."""
    begin = time.perf_counter()
    result = standalone.rest.wait_for_result(standalone.rest.submit(graph), timeout=JOB_TIMEOUT_S)
    elapsed = time.perf_counter() - begin
    if result.status is not JobStatus.FINISHED:
        raise RuntimeError(f"the P10 job ended {result.status.value}: {result.failure}")
    return elapsed, p10_tasks.report_rows(floors.spark, list(result.vertices[p10_tasks.SINK].partitions))


def run_spark_submit(work_dir: Path, sources: dict[str, str], floors: ClassicFloors) -> tuple[float, list[Any]]:
    """Each vertex as its own `spark-submit` application, one after the other: seconds, and the report's rows."""
    out = work_dir / "spark-submit"
    times: dict[str, float] = {}
    for vertex in p10_tasks.VERTICES:
        argv = [
            str(VENV_BIN / "spark-submit"),
            "--master",
            "local[*]",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            f"spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS}",
            str(TASKS_DIR / "p10_submit.py"),
            vertex["id"],
            str(out),
            json.dumps(sources),
        ]
        begin = time.perf_counter()
        process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=bench_env(), start_new_session=True
        )
        try:
            _, err = process.communicate(timeout=600)
        finally:
            stop_process(process, grace=5)
        times[vertex["id"]] = time.perf_counter() - begin
        if process.returncode != 0:
            tail = err.decode(errors="replace")[-2000:]
            raise RuntimeError(f"spark-submit of {vertex['id']} exited with {process.returncode}:\n{tail}")
    print("    per vertex: " + ", ".join(f"{name} {s:.1f}s" for name, s in times.items()), flush=True)
    report = [str(out / p10_tasks.SINK / str(i)) for i in range(p10_tasks.VERTICES[-1]["parallelism"])]
    rows = p10_tasks.report_rows(floors.spark, report)
    shutil.rmtree(out, ignore_errors=True)
    return sum(times.values()), rows


class ReportCheck:
    """Every run's report must equal the first one's."""

    def __init__(self) -> None:
        self.expected: list[Any] | None = None
        self.checked = 0

    def __call__(self, who: str, rows: list[Any]) -> None:
        if not rows:
            raise RuntimeError(f"{who} wrote an empty report")
        if self.expected is None:
            self.expected = rows
        elif rows != self.expected:
            raise RuntimeError(f"{who}'s report differs from the first run's ({len(rows)} / {len(self.expected)} rows)")
        self.checked += 1


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="timed runs of the cluster and of each floor")
    parser.add_argument("--warm-up", type=int, default=1, help="warm-up runs of the cluster and of each floor")
    parser.add_argument("--rows", type=int, default=3_000_000, help="orders in the source")
    parser.add_argument("--slots", type=int, default=2, help="slots of the standalone's TaskExecutor")
    parser.add_argument("--spark-submit-runs", type=int, default=1, help="runs of spark-submit per vertex (0: none)")
    parser.add_argument(
        "--shared-result",
        choices=("auto", "chained", "durable", "kept"),
        default="auto",
        help=f"the result kind {p10_tasks.SHARED!r} asks for (results in p10_pipeline.<kind>.json unless auto)",
    )
    add_run_options(parser, quick="300k rows, 1 timed run, no spark-submit")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.runs, args.spark_submit_runs = 300_000, 1, 0

    results: dict[str, Any] = {
        "load_average_at_start": load_average(),
        "rows": args.rows,
        "slots": args.slots,
        "runs": args.runs,
        "warm_up_runs": args.warm_up,
        "quick": args.quick,
        "shared_result": args.shared_result,
        "vertices": len(p10_tasks.VERTICES),
        "subtasks": sum(v["parallelism"] for v in p10_tasks.VERTICES),
    }
    samples: dict[str, list[float]] = {"cluster": [], **{kind: [] for kind in FLOORS}, "spark_submit": []}
    check = ReportCheck()
    loads: list[list[float]] = []
    with scratch_dir(args.work_dir, "sparkdispatch-p10-") as scratch:
        work = Path(scratch)
        floors: ClassicFloors | None = None
        standalone = Standalone(work / "standalone", slots=args.slots)
        try:
            print(f"standalone: 1 TaskExecutor x {args.slots} slots, Spark local[*]", flush=True)
            print(f"  up in {standalone.start(CLUSTER_START_TIMEOUT_S):.1f}s (logs {standalone.log_dir})", flush=True)
            floors = ClassicFloors(work / "floors", {})
            floors.start()
            begin = time.perf_counter()
            sources = p10_tasks.make_sources(floors.spark, str(work / "sources"), args.rows)
            floors.sources = sources
            print(f"sources ({args.rows} orders) written in {time.perf_counter() - begin:.1f}s", flush=True)
            graph = p10_graph(standalone.rest.upload_artifact(P10_TASKS), sources, shared_result=args.shared_result)

            def one_round(label: str, timed: bool) -> None:
                figures = {}
                for kind in FLOORS:
                    seconds, rows = floors.run(kind)
                    check(kind, rows)
                    figures[kind] = seconds
                seconds, rows = run_cluster(standalone, graph, floors)
                check("cluster", rows)
                figures["cluster"] = seconds
                if timed:
                    for kind, value in figures.items():
                        samples[kind].append(value)
                    loads.append(load_average())
                print(f"  {label}: " + ", ".join(f"{k} {v:.2f}s" for k, v in figures.items()), flush=True)

            for run_index in range(args.warm_up):
                one_round(f"warm-up {run_index + 1}", timed=False)
            for run_index in range(args.runs):
                one_round(f"run {run_index + 1}", timed=True)
            for run_index in range(args.spark_submit_runs):
                seconds, rows = run_spark_submit(work, sources, floors)
                check("spark-submit per vertex", rows)
                samples["spark_submit"].append(seconds)
                print(f"  spark-submit per vertex, run {run_index + 1}: {seconds:.1f}s", flush=True)
        finally:
            if floors is not None:
                floors.stop()
            standalone.stop()
    results["load_average_at_end"] = load_average()
    results["load_average_per_run"] = loads
    results["reports_checked_equal"] = check.checked

    medians = {name: round(median(values), 3) for name, values in samples.items() if values}
    cluster = medians["cluster"]
    best_floor = min(FLOORS, key=lambda kind: medians[kind])
    to_best = cluster / medians[best_floor]
    kind = "" if args.shared_result == "auto" else f", {p10_tasks.SHARED} {args.shared_result}"
    rows_out = [
        [f"cluster: standalone, 1 TaskExecutor x {args.slots} slots{kind} (POST -> result)", f"{cluster:.2f}", "1.00x"]
    ]
    labels = {
        "materialised": "materialised floor: one classic session, every result written and read back",
        "lazy": "lazy floor: one classic session, one plan, only the report written",
        "cached": f"cached floor: the lazy plan with {p10_tasks.SHARED!r} persisted once",
        "spark_submit": "spark-submit per vertex",
    }
    for kind, label in labels.items():
        if kind in medians:
            rows_out.append([label, f"{medians[kind]:.2f}", f"{cluster / medians[kind]:.2f}x"])
    print()
    print(
        f"P10 pipeline ({args.rows} orders, {results['vertices']} vertices, {results['subtasks']} subtasks), "
        f"medians of {args.runs} runs after {args.warm_up} warm-up(s); {check.checked} reports checked equal"
    )
    print_table(["what", "median s", "cluster / this"], rows_out)
    met = to_best <= GOAL_RATIO
    print(
        f"goal: cluster <= {GOAL_RATIO:g}x the best floor ({best_floor}): {'met' if met else 'MISSED'} "
        f"({to_best:.2f}x); {load_change(results)}"
    )
    if "spark_submit" in medians:
        print(f"spark-submit per vertex / cluster: {medians['spark_submit'] / cluster:.1f}x (goal >= 50x)")
    save_results(
        "p10_pipeline" if args.shared_result == "auto" else f"p10_pipeline.{args.shared_result}",
        quick=args.quick,
        report={
            **results,
            "goal_ratio_to_best_floor": GOAL_RATIO,
            "samples_s": {name: [round(v, 3) for v in values] for name, values in samples.items()},
            "medians_s": medians,
            "ratios_cluster_to": {kind: round(cluster / medians[kind], 3) for kind in medians if kind != "cluster"},
            "best_floor": best_floor,
            "goal_met": met,
        },
    )
    return 0


if __name__ == "__main__":
    bench_main(run)
