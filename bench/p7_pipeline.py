"""P7 a real pipeline: the sales pipeline of dags/pipelines on a warm standalone cluster, against two floors.

    .venv/bin/python bench/p7_pipeline.py [--runs 5] [--warm-up 3] [--rows 100000] [--slots 2]
                                          [--durable] [-D KEY=VALUE ...] [--work-dir DIR] [--quick] [--jfr]

The job is dags/pipelines/sales_graph.yaml (the JobGraph of dags/example_pipeline.py): 5 vertices,
7 subtasks, `--rows` orders, `spark.sql.shuffle.partitions=4`, the code shipped as
`pipelines.zip` as the Airflow operator ships it. Ways to run it, in one run of this script:

- cluster: `sparkdispatch standalone --slots 2` (one TaskExecutor, its embedded defaults: Spark
  `local[*]`), timed from POST /jobs to the JobResult; the master chains the vertices the chaining
  rules allow (all four producers run in the report's task, one plan), or, with `--durable`, writes every
  vertex's result (`"results": "durable"`, the pipeline as it ran before chaining);
- materialised floor: the same task functions, called with the same `ctx` (`TaskContext`,
  `LazyInputs`) one subtask after the other in ONE warm classic SparkSession of this process (the
  TaskExecutor's Spark master, the job's configuration), each subtask's DataFrame written as a
  Parquet partition (`write_partition`, as a slot process writes it) and read back by its
  consumers (`read_partitions`): what the master makes the cluster do, without the cluster;
- chained floor: the same functions in that session with the upstream DataFrames passed on
  (each vertex's subtasks unioned), one chained plan, only the report written: what a user runs
  instead;
- both again in ONE warm Spark Connect session of this process, to tell what Spark Connect costs
  from what the cluster costs;
- and, to tell the cost of a job's own sessions from the rest, the Connect materialised floor in
  a NEW Connect session per run (made, configured and used in the timed part, stopped after it),
  as every job gets new sessions in its slot processes. Not a goal, a diagnosis.

The Connect floors' server is started with the settings the standalone's TaskExecutor gives its
own (`ConnectServer`, same configuration) and warmed the same way. Each side gets `--warm-up`
runs first; then every timed cluster job is paired with a run of each floor just before it.
Prints the medians and the ratios cluster / floor (goal: <= 1.3x the classic chained floor;
with `--durable`, <= 1.3x the classic materialised floor), the
CPU seconds each side burns per run (cluster: master, the TaskExecutor's process tree and, of
that, its Connect server's JVM; floors: this process and its Spark's JVM), and writes
bench/results/p7_pipeline.json with every sample and the load average. `-D KEY=VALUE` sets a
configuration key of the standalone (and of the floors' server settings), e.g.
`-D taskexecutor.slot-process.spares=2`.

`--jfr`: a Java Flight Recording (`profile` settings) of the cluster's Connect server JVM during each timed
cluster job and of the floors' JVM during each timed chained-floor run (`<work-dir>/jfr/cluster-N.jfr`,
`chained-N.jfr`: the same number of runs, each side's own windows, as the CPU meters measure them), and
the CPU seconds of each JVM's threads by name from /proc over the same windows; printed and saved with
the results: samples by thread, top frames by package, and the samples in calls of interest.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Callable
from functools import reduce
from pathlib import Path
from typing import Any, TypeVar

from harness.clusters import CLUSTER_START_TIMEOUT_S
from harness.classic_floor import classic_functions, classic_session, classic_session_cpu_seconds
from harness.connect_floor import ConnectClient
from harness.flight_recording import FlightRecording, summary
from harness.graphs import pipelines_artifact, sales_graph
from harness.paths import DAGS_DIR
from harness.processes import cpu_seconds, descendants, process_cmdline, tree_cpu_seconds
from harness.reporting import load_average, load_change, median, print_table, save_results
from harness.running import add_pipeline_options, add_run_options, bench_main, scratch_dir
from harness.standalone import Standalone

from sparkdispatch.config import Configuration
from sparkdispatch.config.options import SPARK_MASTER
from sparkdispatch.entrypoint.cli import add_overrides_option
from sparkdispatch.entrypoint.standalone import standalone_config

GOAL_RATIO = 1.3
JOB_TIMEOUT_S = 300.0
#: the floors' samples and how the table names them
FLOOR_ROWS = {
    "classic_materialised": "materialised floor: one classic session, Parquet per subtask",
    "classic_chained": "chained floor: one classic session, one plan, final write only",
    "materialised": "(Connect) materialised floor: one Connect session, Parquet per subtask",
    "chained": "(Connect) chained floor: one Connect session, one plan, final write only",
    "materialised_new_session": "(Connect, diagnosis) materialised floor in a new session per run",
}


class PipelineFloors:
    """The sales pipeline's functions in one warm session of this process (a subclass says which)."""

    def __init__(self, graph: dict[str, Any], work_dir: Path) -> None:
        self.graph = graph
        self.work_dir = work_dir
        self.spark: Any = None  # the session the runs use: the warm one, or one made for a run
        self.functions: dict[str, Callable[[Any], Any]] = {}
        self.runs = 0

    def _load_functions(self) -> None:
        sys.path.insert(0, str(DAGS_DIR))  # the task code is importable, as in a slot process
        from sparkdispatch.taskexecutor.attempt_code import load_entrypoint

        self.functions = {v["id"]: load_entrypoint(v["entrypoint"]) for v in self.graph["vertices"]}

    def new_session(self) -> Any:
        """A session made for one run (the caller stops it)."""
        raise NotImplementedError(f"{type(self).__name__} has one session")

    def cpu_seconds(self) -> float:
        """CPU seconds of this process (the client) and of the Spark it talks to."""
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def _context(self, vertex: dict[str, Any], index: int, inputs: Any) -> Any:
        from sparkdispatch.taskexecutor.task_context import TaskContext

        return TaskContext(
            spark=self.spark,
            params=dict(vertex.get("params", {})),
            subtask_index=index,
            parallelism=int(vertex.get("parallelism", 1)),
            job_id=f"floor-{self.runs}",
            vertex_id=vertex["id"],
            attempt=0,
            inputs=inputs,
        )

    def materialised(self, *, new_session: bool = False) -> float:
        """Every subtask's result written as a Parquet partition and read back by its consumers; seconds.

        `new_session`: in a session made for this run (its making timed too, its release not)."""
        from sparkdispatch.storage.results import write_partition
        from sparkdispatch.taskexecutor.task_context import LazyInputs

        self.runs += 1
        out = self.work_dir / f"results-{self.runs}"
        warm_session = self.spark
        begin = time.perf_counter()
        if new_session:
            self.spark = self.new_session()
        partitions: dict[str, tuple[str, ...]] = {}
        for vertex in self.graph["vertices"]:  # the file lists them in topological order
            paths = []
            for index in range(int(vertex.get("parallelism", 1))):
                inputs = LazyInputs(self.spark, {name: partitions[name] for name in vertex.get("inputs", [])})
                frame = self.functions[vertex["id"]](self._context(vertex, index, inputs))
                path = f"{out}/{vertex['id']}/{index}-x"
                write_partition(frame, path)
                paths.append(path)
            partitions[vertex["id"]] = tuple(paths)
        elapsed = time.perf_counter() - begin
        if new_session:
            self.spark.stop()
            self.spark = warm_session
        shutil.rmtree(out, ignore_errors=True)
        return elapsed

    def chained(self) -> float:
        """The upstream DataFrames passed on, one plan, only the last vertex's result written; seconds."""
        from sparkdispatch.storage.results import write_partition

        self.runs += 1
        out = self.work_dir / f"results-{self.runs}"
        begin = time.perf_counter()
        frames: dict[str, Any] = {}
        for vertex in self.graph["vertices"]:
            inputs = {name: frames[name] for name in vertex.get("inputs", [])}
            parts = [
                self.functions[vertex["id"]](self._context(vertex, index, inputs))
                for index in range(int(vertex.get("parallelism", 1)))
            ]
            frames[vertex["id"]] = reduce(lambda a, b: a.union(b), parts)
        write_partition(frames[self.graph["vertices"][-1]["id"]], f"{out}/report")
        elapsed = time.perf_counter() - begin
        shutil.rmtree(out, ignore_errors=True)
        return elapsed


class ConnectPipelineFloors(PipelineFloors):
    """The floors in one warm Spark Connect session of this process, on a server started as a TaskExecutor's."""

    def __init__(self, graph: dict[str, Any], config: Configuration, work_dir: Path) -> None:
        super().__init__(graph, work_dir)
        # sessions with the job's configuration, as a slot process makes a job's session
        self.connect = ConnectClient(config, work_dir / "connect-server", session_conf=graph.get("config", {}))

    def start(self) -> float:
        """Start the Connect server and the session, set the job's config; the seconds it took."""
        # as in a slot process: pyspark's functions build Connect columns
        os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
        begin = time.monotonic()
        self.connect.start()
        self.spark = self.connect.spark
        self._load_functions()
        return time.monotonic() - begin

    def new_session(self) -> Any:
        return self.connect.new_session()

    def cpu_seconds(self) -> float:
        """CPU seconds of this process (the client) and of the floors' Connect server."""
        return self.connect.cpu_seconds()

    def stop(self) -> None:
        self.spark = None
        self.connect.stop()


class ClassicPipelineFloors(PipelineFloors):
    """The floors in one warm classic SparkSession of this process: what a user runs instead.

    Made before any Connect session (once one exists, pyspark's builder makes Connect ones), with
    the TaskExecutor's Spark master and the job's configuration. pyspark's functions build Connect
    columns while `SPARK_CONNECT_MODE_ENABLED` is set, so each run takes it away for its duration.
    """

    def __init__(self, graph: dict[str, Any], master: str, work_dir: Path) -> None:
        super().__init__(graph, work_dir)
        self.master = master

    def start(self) -> float:
        """Start the session with the job's config; the seconds it took."""
        begin = time.monotonic()
        self.spark = classic_session(self.master, "p7-classic-floor", self.graph.get("config", {}))
        self._load_functions()
        return time.monotonic() - begin

    def materialised(self, *, new_session: bool = False) -> float:
        assert not new_session, "the classic floor has one session"
        with classic_functions():
            return super().materialised()

    def chained(self) -> float:
        with classic_functions():
            return super().chained()

    def cpu_seconds(self) -> float:
        """CPU seconds of this process and of the Spark JVM pyspark launched."""
        return classic_session_cpu_seconds(self.spark)

    def stop(self) -> None:
        if self.spark is not None:
            self.spark.stop()
            self.spark = None


class CpuMeter:
    """CPU seconds used between `start()` and `stop()` by named groups of processes."""

    def __init__(self, readers: dict[str, Callable[[], float]]) -> None:
        self.readers = readers
        self.samples: dict[str, list[float]] = {name: [] for name in readers}
        self._before: dict[str, float] = {}

    def start(self) -> None:
        self._before = {name: read() for name, read in self.readers.items()}

    def stop(self) -> None:
        for name, read in self.readers.items():
            self.samples[name].append(read() - self._before[name])

    def medians(self) -> dict[str, float]:
        return {name: round(median(values), 2) for name, values in self.samples.items()}


T = TypeVar("T")


def measured(run: Callable[[], T], meter: CpuMeter, recording: FlightRecording | None) -> T:
    """`run()`, its CPU seconds taken by `meter` and, if given, its JVM recorded by `recording`."""
    meter.start()
    if recording is not None:
        recording.start()
    try:
        return run()
    finally:
        if recording is not None:
            recording.stop()
        meter.stop()


def floor_times(seconds: dict[str, float]) -> str:
    """One run of each floor, for the progress lines."""
    return ", ".join(f"{name} floor {value:.2f}s" for name, value in seconds.items())


#: calls whose share of a JVM's samples `--jfr` reports (label -> a frame's text)
JFR_MARKERS = {
    "Connect ExecutePlan": "SparkConnectExecutePlanHandler",
    "Connect AnalyzePlan": "SparkConnectAnalyzeHandler",
    "Connect Config": "SparkConnectConfigHandler",
    "Connect AddArtifacts": "SparkConnectAddArtifactsHandler",
    "Connect ReleaseSession": "SparkConnectReleaseSessionHandler",
    "Connect session made": "SparkConnectSessionManager.getOrCreateIsolatedSession",
    "plan conversion (SparkConnectPlanner)": "SparkConnectPlanner",
    "analysis": "catalyst.analysis.Analyzer",
    "optimisation": "catalyst.optimizer.Optimizer",
    "physical planning": "SparkPlanner",
    "code generation (janino)": "org.codehaus.janino",
    "observed metrics (CollectMetrics)": "CollectMetrics",
    "Parquet write": "FileFormatWriter",
    "file listing": "InMemoryFileIndex",
    "task run (Executor)": "org.apache.spark.executor.Executor$TaskRunner.run",
    "class loading": "java.lang.ClassLoader.loadClass",
    "Spark UI / listeners": "org.apache.spark.scheduler.AsyncEventQueue",
}


def profile_of(recording: FlightRecording) -> dict[str, Any]:
    """The recording's summary and its JVM's CPU by thread name, printed and returned for the results."""
    profile = {
        "jvm_cpu_s": round(recording.process_cpu, 2),
        "thread_cpu_s": recording.top_threads(25),
        **summary(recording.samples(), JFR_MARKERS),
    }
    print(f"\n{recording.output.stem}: JVM CPU {profile['jvm_cpu_s']:.2f} s in its {len(recording.files)} runs")
    for key in ("thread_cpu_s", "by_thread", "self_by_package", "self_by_frame", "stacks_with"):
        print(f"  {key}:")
        rows = profile[key].items() if isinstance(profile[key], dict) else profile[key]
        for name, value in rows:
            print(f"    {value:>8} {name}")
    return profile


def cluster_jvm(standalone: Standalone) -> int:
    """The pid of the standalone TaskExecutor's Connect server JVM."""
    task_executor = standalone.task_executor_pids()[0]
    return next(pid for pid in descendants(task_executor) if "SparkConnectServer" in process_cmdline(pid))


def cluster_cpu_readers(standalone: Standalone) -> dict[str, Callable[[], float]]:
    """The master (the standalone process itself), the TaskExecutor's tree (retired slot processes count
    once reaped) and its Connect server's JVM."""
    assert standalone.process is not None
    master = standalone.process.pid
    task_executor = standalone.task_executor_pids()[0]
    jvm = cluster_jvm(standalone)
    return {
        "master": lambda: cpu_seconds(master),
        "taskexecutor tree": lambda: tree_cpu_seconds(task_executor),
        "its Connect server JVM (in the tree)": lambda: tree_cpu_seconds(jvm),
    }


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each (after the warm-up)")
    parser.add_argument("--warm-up", type=int, default=3, help="warm-up runs of the cluster and of each floor")
    add_pipeline_options(parser)
    parser.add_argument(
        "--durable",
        action="store_true",
        help='write every vertex\'s result ("results": "durable"), as before the master chained vertices',
    )
    add_overrides_option(parser, help="a configuration key of the standalone and of the floors' server; repeatable")
    parser.add_argument(
        "--jfr", action="store_true", help="record both Connect servers' JVMs with Java Flight Recorder (timed runs)"
    )
    add_run_options(parser, quick="1 warm-up and 2 timed runs")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.warm_up = 2, 1
    overrides = dict(item.split("=", 1) for item in args.overrides)

    results: dict[str, Any] = {
        "load_average_at_start": load_average(),
        "rows": args.rows,
        "slots": args.slots,
        "runs": args.runs,
        "warm_up_runs": args.warm_up,
        "quick": args.quick,
        "durable": args.durable,
        "overrides": overrides,
    }
    samples: dict[str, list[float]] = {
        "cluster": [],
        "cluster_master_duration": [],
        "materialised": [],
        "chained": [],
        "materialised_new_session": [],
        "classic_materialised": [],
        "classic_chained": [],
    }
    loads: list[list[float]] = []
    with scratch_dir(args.work_dir, "sparkdispatch-p7-") as scratch:
        work = Path(scratch)
        artifact_file = pipelines_artifact(work)
        # the standalone's own configuration, so the floors' Connect server has its TaskExecutor's settings
        config = standalone_config(Configuration.from_mapping(overrides), slots=args.slots, storage=str(work / "floor"))
        floors: ConnectPipelineFloors | None = None
        classic: ClassicPipelineFloors | None = None
        standalone = Standalone(work / "standalone", slots=args.slots, overrides=overrides)
        cluster_cpu: CpuMeter | None = None
        floor_cpu: dict[str, CpuMeter] = {}
        try:
            print(f"standalone: 1 TaskExecutor x {args.slots} slots, Spark {config.get(SPARK_MASTER)}", flush=True)
            up_s = standalone.start(CLUSTER_START_TIMEOUT_S)
            print(f"  up in {up_s:.1f}s (logs {standalone.log_dir})", flush=True)
            graph = sales_graph(standalone.rest.upload_artifact(artifact_file), rows=args.rows)
            if args.durable:
                graph = {**graph, "results": "durable"}
            # the classic session first: once a Connect session exists, pyspark's builder makes Connect ones
            classic = ClassicPipelineFloors(graph, config.get(SPARK_MASTER), work / "classic")
            print(f"classic floors: one classic SparkSession ({config.get(SPARK_MASTER)}) of this process", flush=True)
            classic_s = classic.start()
            print(f"  up in {classic_s:.1f}s", flush=True)
            floors = ConnectPipelineFloors(graph, config, work / "floor")
            print(
                "floors: one Spark Connect session of this process on a Connect server started as a TaskExecutor's",
                flush=True,
            )
            floor_s = floors.start()
            print(f"  up in {floor_s:.1f}s", flush=True)
            results["start_s"] = {
                "standalone": round(up_s, 2),
                "floor_server_and_session": round(floor_s, 2),
                "classic_session": round(classic_s, 2),
            }
            cluster_cpu = CpuMeter(cluster_cpu_readers(standalone))
            floor_runs: dict[str, Callable[[], float]] = {
                "classic_materialised": classic.materialised,
                "classic_chained": classic.chained,
                "materialised": floors.materialised,
                "chained": floors.chained,
                "materialised_new_session": lambda: floors.materialised(new_session=True),
            }
            floor_cpu = {
                name: CpuMeter({"this process + its Spark JVM": classic.cpu_seconds})
                if name.startswith("classic_")
                else CpuMeter({"this process + its Connect server JVM": floors.cpu_seconds})
                for name in floor_runs
            }
            for run in range(args.warm_up):
                cluster_s, _ = standalone.rest.run_job(graph, timeout=JOB_TIMEOUT_S)
                warm_up_s = {name: floor_run() for name, floor_run in floor_runs.items()}
                print(f"  warm-up {run + 1}: cluster {cluster_s:.2f}s, {floor_times(warm_up_s)}", flush=True)
            recordings: dict[str, FlightRecording] = {}
            if args.jfr:
                (work / "jfr").mkdir(exist_ok=True)
                recordings = {
                    "cluster": FlightRecording(cluster_jvm(standalone), work / "jfr" / "cluster.jfr"),
                    "chained": FlightRecording(floors.connect.server.pid, work / "jfr" / "chained.jfr"),
                }
            for run in range(args.runs):
                for name, floor_run in floor_runs.items():
                    samples[name].append(measured(floor_run, floor_cpu[name], recordings.get(name)))
                cluster_s, master_s = measured(
                    lambda: standalone.rest.run_job(graph, timeout=JOB_TIMEOUT_S),
                    cluster_cpu,
                    recordings.get("cluster"),
                )
                samples["cluster"].append(cluster_s)
                samples["cluster_master_duration"].append(master_s)
                loads.append(load_average())
                print(
                    f"  run {run + 1}: cluster {cluster_s:.2f}s ({master_s:.2f}s in the master), "
                    f"{floor_times({name: samples[name][-1] for name in floor_runs})}; load {loads[-1][0]}",
                    flush=True,
                )
            if recordings:
                results["jfr"] = {side: profile_of(recording) for side, recording in recordings.items()}
        finally:
            if floors is not None:
                floors.stop()
            if classic is not None:
                classic.stop()
            standalone.stop()
    results["load_average_at_end"] = load_average()
    results["load_average_per_run"] = loads
    cpu = {
        "cluster": cluster_cpu.medians() if cluster_cpu is not None else {},
        **{name: meter.medians() for name, meter in floor_cpu.items()},
    }

    medians = {name: round(median(values), 3) for name, values in samples.items()}
    ratios = {name: medians["cluster"] / medians[name] for name in FLOOR_ROWS}
    paired = [c / m for c, m in zip(samples["cluster"], samples["classic_materialised"], strict=True)]
    print()
    print(
        f"sales pipeline ({args.rows} rows, 5 vertices, 7 subtasks), medians of {args.runs} runs after "
        f"{args.warm_up} warm-up runs each"
    )
    print_table(
        ["what", "median s", "cluster / this"],
        [
            [
                f"cluster: standalone, 1 TaskExecutor x {args.slots} slots (POST -> result)",
                f"{medians['cluster']:.2f}",
                "1.00x",
            ],
            ["  the same jobs, duration in the master", f"{medians['cluster_master_duration']:.2f}", "-"],
            *[[label, f"{medians[name]:.2f}", f"{ratios[name]:.2f}x"] for name, label in FLOOR_ROWS.items()],
        ],
    )
    # chained as the master chains it, the pipeline answers to the chained plan; all durable, to its
    # materialisation; both in a classic session, what a user runs instead
    goal_floor = "classic_materialised" if args.durable else "classic_chained"
    met = ratios[goal_floor] <= GOAL_RATIO
    print(
        f"goal: cluster <= {GOAL_RATIO:g}x the {goal_floor} floor: {'met' if met else 'MISSED'} "
        f"({ratios[goal_floor]:.2f}x; median of the paired ratios to the classic materialised floor "
        f"{median(paired):.2f}x); {load_change(results)}"
    )
    print(
        "CPU seconds per run (medians): "
        + "; ".join(
            f"{side}: " + ", ".join(f"{name} {value:.2f}" for name, value in values.items())
            for side, values in cpu.items()
        )
    )
    # a smoke run, a recorded one or other settings do not replace the results of the default run
    variant = (
        ".durable" * args.durable
        + ".jfr" * args.jfr
        + "".join(f".{key}={value}" for key, value in sorted(overrides.items()))
    )
    save_results(
        "p7_pipeline" + variant,
        quick=args.quick,
        report={
            **results,
            "goal_floor": goal_floor,
            "goal_ratio": GOAL_RATIO,
            "samples_s": {name: [round(v, 3) for v in values] for name, values in samples.items()},
            "medians_s": medians,
            "cpu_s_per_run_median": cpu,
            **{f"ratio_to_{name}": round(ratio, 3) for name, ratio in ratios.items()},
            "paired_ratio_to_classic_materialised_median": round(median(paired), 3),
            "goal_met": met,
        },
    )
    return 0


if __name__ == "__main__":
    bench_main(run)
