"""TaskRunner on the session's local Spark: states, ctx, results, inputs, artifacts, cancellation."""

from __future__ import annotations

import hashlib
import textwrap
import threading
import time
import uuid
import zipfile
from pathlib import Path
from typing import Any

import pytest

from sparkdispatch.errors import FencingTokenMismatch
from sparkdispatch.jobgraph import ExecutionState
from sparkdispatch.protocol import ExecutionStateUpdate, TaskDeploymentDescriptor
from sparkdispatch.results import ResultLayout
from sparkdispatch.taskexecutor.runner import ArtifactCache, SlotTable, TaskRunner

SESSION = "00000000-0000-0000-0000-000000000000"
JOB_ID = "ab" * 16


class RecordingReporter:
    """Records reports; refuses the ones whose state is in `refuse` as stale; takes `delay_s` per state."""

    def __init__(self, refuse: frozenset[ExecutionState] = frozenset(),
                 delay_s: dict[ExecutionState, float] | None = None) -> None:
        self.updates: list[ExecutionStateUpdate] = []
        self.refuse = refuse
        self.delay_s = delay_s or {}
        self.lock = threading.Lock()

    def report(self, session_id: str, update: ExecutionStateUpdate) -> None:
        assert session_id == SESSION
        time.sleep(self.delay_s.get(update.state, 0.0))
        with self.lock:
            self.updates.append(update)
        if update.state in self.refuse:
            raise FencingTokenMismatch("JobMaster", "other", update.job_master_id)

    def states(self, execution_id: str) -> list[ExecutionState]:
        with self.lock:
            return [u.state for u in self.updates if u.execution_id == execution_id]

    def last(self, execution_id: str) -> ExecutionStateUpdate:
        with self.lock:
            return [u for u in self.updates if u.execution_id == execution_id][-1]


class Artifacts:
    """User code as blobs: files in a folder, resolved by their sha256 key."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, Path] = {}

    def put(self, filename: str, data: bytes) -> str:
        key = hashlib.sha256(data).hexdigest()
        path = self.root / "blobs" / key / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.files[key] = path
        return key

    def module(self, source: str) -> tuple[str, str]:
        """A uniquely named .py module; returns (module name, blob key)."""
        name = f"user_tasks_{uuid.uuid4().hex[:10]}"
        return name, self.put(f"{name}.py", textwrap.dedent(source).encode())

    def cache(self, spark: Any) -> ArtifactCache:
        return ArtifactCache(lambda key: self.files[key], self.root / "cache", distribute=spark.sparkContext.addPyFile)


def tdd_for(entrypoint: str, tmp_path: Path, *, artifacts: tuple[str, ...] = (), slot_index: int = 0,
            **fields: Any) -> TaskDeploymentDescriptor:
    execution_id = uuid.uuid4().hex
    values: dict[str, Any] = dict(
        job_id=JOB_ID, job_master_id="jm-1", execution_id=execution_id, vertex_id="v", entrypoint=entrypoint,
        subtask_index=0, parallelism=1, attempt=0, allocation_id=f"alloc-{slot_index}", slot_index=slot_index,
        result_path=ResultLayout(str(tmp_path / "results")).attempt_path(JOB_ID, "v", 0, execution_id),
        artifacts=artifacts)
    values.update(fields)
    return TaskDeploymentDescriptor(**values)


@pytest.fixture
def artifacts(tmp_path: Path) -> Artifacts:
    return Artifacts(tmp_path)


def make_runner(spark: Any, artifacts: Artifacts, reporter: RecordingReporter, slots: int = 2,
                slot_release_timeout_s: float = 0.2) -> TaskRunner:
    return TaskRunner(spark=spark, slots=SlotTable(slots), reporter=reporter, task_executor_id="te-1",
                      artifacts=artifacts.cache(spark), slot_release_timeout_s=slot_release_timeout_s)


def test_ctx_carries_the_subtask_and_runs_in_the_slot_pool(spark: Any, artifacts: Artifacts, tmp_path: Path) -> None:
    module, key = artifacts.module("""
        SEEN = {}
        def task(ctx):
            SEEN.update(params=dict(ctx.params), subtask_index=ctx.subtask_index, parallelism=ctx.parallelism,
                        job_id=ctx.job_id, vertex_id=ctx.vertex_id, attempt=ctx.attempt, inputs=dict(ctx.inputs),
                        pool=ctx.spark.sparkContext.getLocalProperty("spark.scheduler.pool"),
                        group=ctx.spark.sparkContext.getLocalProperty("spark.jobGroup.id"),
                        shuffle=ctx.spark.conf.get("spark.sql.shuffle.partitions"))
    """)
    reporter = RecordingReporter()
    runner = make_runner(spark, artifacts, reporter)
    tdd = tdd_for(f"{module}:task", tmp_path, artifacts=(key,), slot_index=1, subtask_index=2, parallelism=3,
                  attempt=4, params={"day": "2026-01-01"}, spark_conf={"spark.sql.shuffle.partitions": "3"})

    assert runner.run(tdd, SESSION) is ExecutionState.FINISHED

    import importlib

    seen = importlib.import_module(module).SEEN
    assert seen == {"params": {"day": "2026-01-01"}, "subtask_index": 2, "parallelism": 3, "job_id": JOB_ID,
                    "vertex_id": "v", "attempt": 4, "inputs": {}, "pool": "slot-1", "group": tdd.execution_id,
                    "shuffle": "3"}
    # DEPLOYING is the JobMaster's own
    assert reporter.states(tdd.execution_id) == [ExecutionState.INITIALIZING, ExecutionState.RUNNING,
                                                 ExecutionState.FINISHED]
    finished = reporter.last(tdd.execution_id)
    assert (finished.rows, finished.result_path, finished.task_executor_id) == (None, None, "te-1")
    # the job's SQL conf stayed in its own session
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert runner.slots.slot_report().slots[1].allocation_id is None


def test_a_thread_serving_several_slots_runs_each_task_in_its_own_pool(spark: Any, artifacts: Artifacts,
                                                                       tmp_path: Path) -> None:
    module, key = artifacts.module("""
        SEEN = []
        def task(ctx):
            sc = ctx.spark.sparkContext
            SEEN.append((sc.getLocalProperty("spark.scheduler.pool"), sc.getLocalProperty("spark.jobGroup.id")))
    """)
    runner = make_runner(spark, artifacts, RecordingReporter())
    tdds = [tdd_for(f"{module}:task", tmp_path, artifacts=(key,), slot_index=i) for i in (1, 0, 0, 1)]

    def run_all() -> None:
        for tdd in tdds:
            assert runner.run(tdd, SESSION) is ExecutionState.FINISHED

    thread = threading.Thread(target=run_all)  # a fresh thread, as a Celery pool thread
    thread.start()
    thread.join(60)

    import importlib

    assert importlib.import_module(module).SEEN == [(f"slot-{t.slot_index}", t.execution_id) for t in tdds]


def test_the_terminal_report_follows_the_slow_earlier_ones(spark: Any, artifacts: Artifacts, tmp_path: Path) -> None:
    module, key = artifacts.module("""
        def task(ctx):
            return None
    """)
    reporter = RecordingReporter(delay_s={ExecutionState.INITIALIZING: 0.3, ExecutionState.RUNNING: 0.3})
    runner = make_runner(spark, artifacts, reporter)
    tdds = [tdd_for(f"{module}:task", tmp_path, artifacts=(key,)) for _ in range(2)]

    for tdd in tdds:
        assert runner.run(tdd, SESSION) is ExecutionState.FINISHED
        assert reporter.states(tdd.execution_id) == [ExecutionState.INITIALIZING, ExecutionState.RUNNING,
                                                     ExecutionState.FINISHED]


def test_a_returned_dataframe_is_written_and_counted(spark: Any, artifacts: Artifacts, tmp_path: Path) -> None:
    module, key = artifacts.module("""
        def task(ctx):
            return ctx.spark.range(0, 25).selectExpr("id", "id * 2 AS double")
    """)
    reporter = RecordingReporter()
    tdd = tdd_for(f"{module}:task", tmp_path, artifacts=(key,))

    assert make_runner(spark, artifacts, reporter).run(tdd, SESSION) is ExecutionState.FINISHED

    finished = reporter.last(tdd.execution_id)
    assert finished.state is ExecutionState.FINISHED
    assert (finished.rows, finished.result_path) == (25, tdd.result_path)
    back = spark.read.parquet(tdd.result_path)
    assert sorted(r.double for r in back.collect()) == [2 * i for i in range(25)]


def test_inputs_read_all_partitions_together_and_lazily(spark: Any, artifacts: Artifacts, tmp_path: Path) -> None:
    first, second = str(tmp_path / "up" / "0-a"), str(tmp_path / "up" / "1-b")
    spark.range(0, 10).write.parquet(first)
    spark.range(10, 15).write.parquet(second)
    module, key = artifacts.module("""
        def task(ctx):
            assert ctx.inputs["empty"] is None
            assert sorted(ctx.inputs) == ["empty", "never_read", "up"]
            return ctx.inputs["up"].where("id % 2 = 0")
    """)
    reporter = RecordingReporter()
    # `never_read` names a path that does not exist: only reading it would fail
    tdd = tdd_for(f"{module}:task", tmp_path, artifacts=(key,),
                  inputs={"up": (first, second), "empty": (), "never_read": (str(tmp_path / "missing"),)})

    assert make_runner(spark, artifacts, reporter).run(tdd, SESSION) is ExecutionState.FINISHED, \
        reporter.last(tdd.execution_id).failure
    assert reporter.last(tdd.execution_id).rows == 8  # 0,2,...,14


def test_an_exception_fails_the_attempt_with_class_message_and_traceback(
        spark: Any, artifacts: Artifacts, tmp_path: Path) -> None:
    module, key = artifacts.module("""
        def task(ctx):
            raise ValueError("no sales on " + ctx.params["day"])
    """)
    reporter = RecordingReporter()
    tdd = tdd_for(f"{module}:task", tmp_path, artifacts=(key,), params={"day": "monday"})

    assert make_runner(spark, artifacts, reporter).run(tdd, SESSION) is ExecutionState.FAILED

    failed = reporter.last(tdd.execution_id)
    assert failed.state is ExecutionState.FAILED and failed.failure is not None
    assert (failed.failure.cls, failed.failure.message) == ("ValueError", "no sales on monday")
    assert "raise ValueError" in failed.failure.traceback and module in failed.failure.traceback
    assert reporter.states(tdd.execution_id)[-2] is ExecutionState.RUNNING


@pytest.mark.parametrize("entrypoint, cls", [("nowhere_module_x:task", "ModuleNotFoundError"),
                                             ("{module}:absent", "AttributeError"),
                                             ("{module}:not_a_frame", "TypeError")])
def test_bad_entrypoints_and_results_fail_the_attempt(spark: Any, artifacts: Artifacts, tmp_path: Path,
                                                      entrypoint: str, cls: str) -> None:
    module, key = artifacts.module("""
        def not_a_frame(ctx):
            return 42
    """)
    reporter = RecordingReporter()
    tdd = tdd_for(entrypoint.format(module=module), tmp_path, artifacts=(key,))

    assert make_runner(spark, artifacts, reporter).run(tdd, SESSION) is ExecutionState.FAILED
    assert reporter.last(tdd.execution_id).failure.cls == cls  # type: ignore[union-attr]


def test_py_and_zip_artifacts_are_importable(spark: Any, artifacts: Artifacts, tmp_path: Path) -> None:
    package = f"pkg_{uuid.uuid4().hex[:10]}"
    helper, helper_key = artifacts.module("""
        FACTOR = 7
    """)
    archive = tmp_path / "code.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(f"{package}/__init__.py", "")
        zf.writestr(f"{package}/jobs.py", textwrap.dedent(f"""
            import {helper}
            def task(ctx):
                return ctx.spark.range({helper}.FACTOR)
        """))
    zip_key = artifacts.put("code.zip", archive.read_bytes())
    reporter = RecordingReporter()
    runner = make_runner(spark, artifacts, reporter)
    tdd = tdd_for(f"{package}.jobs:task", tmp_path, artifacts=(zip_key, helper_key))

    assert runner.run(tdd, SESSION) is ExecutionState.FINISHED, reporter.last(tdd.execution_id).failure
    assert reporter.last(tdd.execution_id).rows == 7
    # cached per TaskExecutor: the copies are what is imported
    assert (tmp_path / "cache" / zip_key / "code.zip").is_file()
    assert (tmp_path / "cache" / helper_key / f"{helper}.py").is_file()


def test_a_stale_report_stops_the_task_and_frees_the_slot(spark: Any, artifacts: Artifacts, tmp_path: Path) -> None:
    """RUNNING goes out in the background while the function runs; its refusal cancels the Spark job."""
    module, key = artifacts.module("""
        import time

        COMPLETED = []

        def slow(_):
            for _ in range(600):  # 60 s unless cancelled
                time.sleep(0.1)
            return 1

        def task(ctx):
            ctx.spark.sparkContext.parallelize([0], 1).map(slow).count()
            COMPLETED.append(1)
    """)
    reporter = RecordingReporter(refuse=frozenset({ExecutionState.RUNNING}))
    runner = make_runner(spark, artifacts, reporter)
    tdd = tdd_for(f"{module}:task", tmp_path, artifacts=(key,))

    assert runner.run(tdd, SESSION) is ExecutionState.CANCELED

    import importlib

    assert importlib.import_module(module).COMPLETED == []
    # the JobMaster refused the execution: no terminal report for it
    assert reporter.states(tdd.execution_id) == [ExecutionState.INITIALIZING, ExecutionState.RUNNING]
    assert runner.slots.running() == []


def test_a_busy_slot_refuses_a_second_task(spark: Any, artifacts: Artifacts, tmp_path: Path) -> None:
    module, key = artifacts.module("""
        def task(ctx):
            return None
    """)
    reporter = RecordingReporter()
    runner = make_runner(spark, artifacts, reporter)
    first = tdd_for(f"{module}:task", tmp_path, artifacts=(key,), slot_index=0)
    held = runner.slots.occupy(first, SESSION)
    second = tdd_for(f"{module}:task", tmp_path, artifacts=(key,), slot_index=0)

    assert runner.run(second, SESSION) is ExecutionState.FAILED

    message = reporter.last(second.execution_id).failure.message  # type: ignore[union-attr]
    assert "slot 0 is busy" in message and "did not stop within" in message
    report = runner.slots.slot_report()
    assert (report.slots[0].allocation_id, report.slots[0].job_id) == (first.allocation_id, JOB_ID)
    assert runner.slots.executions() == [{"job_id": JOB_ID, "execution_id": first.execution_id,
                                          "state": "DEPLOYING"}]
    runner.slots.release(held)
    assert runner.slots.slot_report().slots[0].allocation_id is None


def test_a_new_deployment_supersedes_the_attempt_still_in_its_slot(spark: Any, artifacts: Artifacts,
                                                                    tmp_path: Path) -> None:
    """The master released the slot (its job was cancelled) before the old task stopped here."""
    module, key = artifacts.module("""
        import time

        def slow(_):
            for _ in range(600):  # 60 s unless cancelled
                time.sleep(0.1)
            return 1

        def long_task(ctx):
            ctx.spark.sparkContext.parallelize([0], 1).map(slow).count()
            return ctx.spark.range(3)

        def quick_task(ctx):
            return ctx.spark.range(2)
    """)
    reporter = RecordingReporter()
    runner = make_runner(spark, artifacts, reporter, slot_release_timeout_s=60.0)
    old = tdd_for(f"{module}:long_task", tmp_path, artifacts=(key,), slot_index=0)
    new = tdd_for(f"{module}:quick_task", tmp_path, artifacts=(key,), slot_index=0)
    outcome: dict[str, ExecutionState] = {}
    thread = threading.Thread(target=lambda: outcome.__setitem__("old", runner.run(old, SESSION)))
    thread.start()
    deadline = time.monotonic() + 120
    while not spark.sparkContext.statusTracker().getJobIdsForGroup(old.execution_id):
        assert time.monotonic() < deadline, "the old task's Spark job never started"
        time.sleep(0.05)

    assert runner.run(new, SESSION) is ExecutionState.FINISHED
    thread.join(60)
    assert outcome == {"old": ExecutionState.CANCELED}
    assert reporter.last(new.execution_id).rows == 2  # type: ignore[union-attr]


def test_cancelling_one_slot_stops_only_its_spark_job(spark: Any, artifacts: Artifacts, tmp_path: Path) -> None:
    module, key = artifacts.module("""
        import time

        def slow(_):
            for _ in range(600):  # 60 s unless cancelled
                time.sleep(0.1)
            return 1

        def short(x):
            time.sleep(0.5)
            return x

        def long_task(ctx):
            ctx.spark.sparkContext.parallelize([0], 1).map(slow).count()
            return ctx.spark.range(3)

        def short_task(ctx):
            n = ctx.spark.sparkContext.parallelize(range(4), 1).map(short).count()
            return ctx.spark.range(n)
    """)
    reporter = RecordingReporter()
    runner = make_runner(spark, artifacts, reporter)
    long_tdd = tdd_for(f"{module}:long_task", tmp_path, artifacts=(key,), slot_index=0)
    short_tdd = tdd_for(f"{module}:short_task", tmp_path, artifacts=(key,), slot_index=1)
    outcome: dict[str, ExecutionState] = {}
    threads = [threading.Thread(target=lambda t=t: outcome.__setitem__(t.execution_id, runner.run(t, SESSION)))
               for t in (long_tdd, short_tdd)]
    for thread in threads:
        thread.start()
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 120
    while not tracker.getJobIdsForGroup(long_tdd.execution_id):
        assert time.monotonic() < deadline, "the long task's Spark job never started"
        time.sleep(0.05)

    assert runner.cancel(long_tdd.execution_id)
    for thread in threads:
        thread.join(timeout=120)

    assert outcome == {long_tdd.execution_id: ExecutionState.CANCELED, short_tdd.execution_id: ExecutionState.FINISHED}
    assert reporter.states(long_tdd.execution_id)[-1] is ExecutionState.CANCELED
    assert reporter.last(short_tdd.execution_id).rows == 4
    [long_job] = tracker.getJobIdsForGroup(long_tdd.execution_id)
    assert tracker.getJobInfo(long_job).status == "FAILED"  # Spark's word for a cancelled job
    assert all(tracker.getJobInfo(j).status == "SUCCEEDED" for j in tracker.getJobIdsForGroup(short_tdd.execution_id))
    assert not runner.cancel(long_tdd.execution_id)  # gone from its slot
