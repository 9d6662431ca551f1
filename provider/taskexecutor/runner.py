"""Running one TaskDeploymentDescriptor in a slot: DEPLOYING → INITIALIZING → RUNNING → end.

The runner reports every transition to the JobMaster through a `StateReporter`. A report
refused as stale (`FencingTokenMismatch`, or `UnknownJob`) makes it cancel the task's Spark
jobs and free the slot. A cancelled task ends CANCELED, whatever its function did.
"""

from __future__ import annotations

import importlib
import logging
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sparkdispatch.errors import (
    FencingTokenMismatch,
    IllegalStateTransition,
    SparkDispatchError,
    StaleExecution,
    UnknownJob,
)
from sparkdispatch.jobgraph import (
    ExecutionState,
    ExecutionStateUpdate,
    Failure,
    SlotReport,
    SlotStatus,
    TaskDeploymentDescriptor,
)
from sparkdispatch.taskexecutor.spark import cancel_execution, slot_scope

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: How often a cancelled task's job group is cancelled again while its function still runs,
#: to catch Spark jobs the function starts after the first cancellation.
CANCEL_REPEAT_S = 0.5
#: How long a deployment waits for its slot's superseded attempt to stop. Spark jobs stop at
#: once when cancelled; only Python code that ignores cancellation can hold a slot this long.
SLOT_RELEASE_TIMEOUT_S = 30.0


class StateReporter(Protocol):
    """Delivers an execution's state to its JobMaster, under the deploying leader's session."""

    def report(self, session_id: str, update: ExecutionStateUpdate) -> None:
        """Raises `FencingTokenMismatch` or `UnknownJob` when the JobMaster refuses the report."""


# --------------------------------------------------------------------------------------------
# What a task function sees


class LazyInputs(Mapping[str, "DataFrame | None"]):
    """Upstream vertex id → its whole result as one DataFrame, read on first access.

    `None` for an upstream vertex whose subtasks returned nothing.
    """

    def __init__(self, spark: SparkSession, paths: Mapping[str, tuple[str, ...]]) -> None:
        self._spark = spark
        self._paths = dict(paths)
        self._read: dict[str, DataFrame | None] = {}

    def __getitem__(self, vertex_id: str) -> DataFrame | None:
        if vertex_id not in self._read:
            paths = self._paths[vertex_id]
            self._read[vertex_id] = self._spark.read.parquet(*paths) if paths else None
        return self._read[vertex_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def __repr__(self) -> str:
        return f"LazyInputs({sorted(self._paths)})"


class TaskContext:
    """The `ctx` argument of a task function (ARCHITECTURE.md, task function contract)."""

    def __init__(self, *, spark: SparkSession, params: Mapping[str, Any], subtask_index: int, parallelism: int,
                 job_id: str, vertex_id: str, attempt: int, inputs: Mapping[str, DataFrame | None]) -> None:
        self.spark = spark
        self.params = params
        self.subtask_index = subtask_index
        self.parallelism = parallelism
        self.job_id = job_id
        self.vertex_id = vertex_id
        self.attempt = attempt
        self.inputs = inputs

    def __repr__(self) -> str:
        return (f"TaskContext(job_id={self.job_id!r}, vertex_id={self.vertex_id!r}, "
                f"subtask={self.subtask_index}/{self.parallelism}, attempt={self.attempt})")


# --------------------------------------------------------------------------------------------
# Slots


@dataclass
class RunningExecution:
    """A task occupying a slot."""

    tdd: TaskDeploymentDescriptor
    session_id: str
    state: ExecutionState = ExecutionState.DEPLOYING
    cancelled: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


class SlotTable:
    """The slots of one TaskExecutor; a slot runs one task at a time. Thread-safe."""

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError("a TaskExecutor needs at least one slot")
        self.count = count
        self._lock = threading.Lock()
        self._by_slot: dict[int, RunningExecution] = {}

    def occupy(self, tdd: TaskDeploymentDescriptor, session_id: str, *,
               supersede: Callable[[RunningExecution], object] | None = None,
               wait_s: float = 0.0) -> RunningExecution:
        """Take the slot `tdd` names.

        The master hands out a slot only once it considers the slot's last attempt over, but
        that attempt may still be stopping here (its cancellation travels apart from this
        deployment). So a busy slot's attempt is superseded (`supersede` stops it) and awaited
        for up to `wait_s` before the deployment is refused.
        """
        deadline = time.monotonic() + wait_s
        while True:
            with self._lock:
                if not 0 <= tdd.slot_index < self.count:
                    raise IllegalStateTransition(
                        f"slot {tdd.slot_index} does not exist on this TaskExecutor (it has {self.count} slots)")
                busy = self._by_slot.get(tdd.slot_index)
                if busy is None:
                    running = RunningExecution(tdd=tdd, session_id=session_id)
                    self._by_slot[tdd.slot_index] = running
                    return running
            if supersede is not None and not busy.cancelled.is_set():
                supersede(busy)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not busy.done.wait(remaining):
                raise IllegalStateTransition(
                    f"slot {tdd.slot_index} is busy with execution {busy.tdd.execution_id} of job {busy.tdd.job_id}"
                    + (f", which did not stop within {wait_s:g}s" if wait_s else ""))

    def release(self, running: RunningExecution) -> None:
        with self._lock:
            if self._by_slot.get(running.tdd.slot_index) is running:
                del self._by_slot[running.tdd.slot_index]
        running.done.set()

    def find(self, execution_id: str) -> RunningExecution | None:
        with self._lock:
            for running in self._by_slot.values():
                if running.tdd.execution_id == execution_id:
                    return running
        return None

    def running(self) -> list[RunningExecution]:
        with self._lock:
            return list(self._by_slot.values())

    def slot_report(self) -> SlotReport:
        with self._lock:
            return SlotReport(tuple(
                SlotStatus(index=i, allocation_id=r.tdd.allocation_id, job_id=r.tdd.job_id)
                if (r := self._by_slot.get(i)) is not None else SlotStatus(index=i)
                for i in range(self.count)))

    def executions(self) -> list[dict[str, str]]:
        """The heartbeat payload: every execution this TaskExecutor runs."""
        return [{"job_id": r.tdd.job_id, "execution_id": r.tdd.execution_id, "state": r.state.value}
                for r in self.running()]


# --------------------------------------------------------------------------------------------
# Artifacts


class ArtifactCache:
    """User-code blobs copied once per TaskExecutor into `cache_dir` and put on `sys.path`.

    `resolve(key)` gives the blob's local file (the HA BlobStore's `path(key)`, which checks its
    hash). A `.py` blob's own directory goes on the path, a `.zip` blob itself (zipimport).
    `distribute(path)` ships each file to Spark's Python workers too (`SparkContext.addPyFile`),
    where functions of user modules that Spark runs are unpickled by reference.
    """

    def __init__(self, resolve: Callable[[str], Path], cache_dir: Path, *,
                 distribute: Callable[[str], None] | None = None) -> None:
        self._resolve = resolve
        self._cache_dir = cache_dir
        self._distribute = distribute
        self._lock = threading.Lock()
        self._entries: dict[str, str] = {}

    def activate(self, keys: tuple[str, ...]) -> list[str]:
        """Make the blobs importable; returns their `sys.path` entries."""
        entries = []
        with self._lock:
            for key in keys:
                entry = self._entries.get(key)
                if entry is None:
                    entry = self._entries[key] = self._install(key)
                if entry not in sys.path:
                    sys.path.insert(0, entry)
                entries.append(entry)
            importlib.invalidate_caches()
        return entries

    def _install(self, key: str) -> str:
        source = Path(self._resolve(key))
        target_dir = self._cache_dir / key
        target = target_dir / source.name
        if not target.exists():
            target_dir.mkdir(parents=True, exist_ok=True)
            partial = target_dir / (source.name + ".partial")
            shutil.copyfile(source, partial)
            partial.replace(target)
        if target.suffix not in (".py", ".zip"):
            raise SparkDispatchError(f"artifact {key} ({source.name}) is neither a .py nor a .zip file")
        if self._distribute is not None:
            self._distribute(str(target))
        return str(target) if target.suffix == ".zip" else str(target_dir)


def load_entrypoint(entrypoint: str) -> Callable[[TaskContext], Any]:
    """`package.module:function` → the function."""
    module_name, _, function_name = entrypoint.partition(":")
    module = importlib.import_module(module_name)
    try:
        function = getattr(module, function_name)
    except AttributeError:
        raise AttributeError(f"module {module_name!r} has no function {function_name!r} "
                             f"(entrypoint {entrypoint!r})") from None
    if not callable(function):
        raise TypeError(f"entrypoint {entrypoint!r} is not a function")
    return function


# --------------------------------------------------------------------------------------------
# The runner


class TaskRunner:
    """Runs deployed tasks in the slots of one TaskExecutor."""

    def __init__(self, *, spark: SparkSession, slots: SlotTable, reporter: StateReporter,
                 task_executor_id: str, artifacts: ArtifactCache | None = None,
                 slot_release_timeout_s: float = SLOT_RELEASE_TIMEOUT_S) -> None:
        self.spark = spark
        self.slots = slots
        self._reporter = reporter
        self._task_executor_id = task_executor_id
        self._artifacts = artifacts
        self._slot_release_timeout_s = slot_release_timeout_s

    def run(self, tdd: TaskDeploymentDescriptor, session_id: str) -> ExecutionState:
        """Run one attempt to its end, reporting each state; returns the final state."""
        try:
            running = self.slots.occupy(tdd, session_id, supersede=self._supersede,
                                        wait_s=self._slot_release_timeout_s)
        except IllegalStateTransition as exc:
            log.warning("job %s: refusing execution %s: %s", tdd.job_id, tdd.execution_id, exc)
            self._report_quietly(tdd, session_id, ExecutionState.FAILED, failure=Failure.from_exception(exc))
            return ExecutionState.FAILED
        try:
            return self._run(running)
        except StaleExecution as exc:
            log.info("job %s: execution %s is stale, stopping it: %s", tdd.job_id, tdd.execution_id, exc)
            running.cancelled.set()
            cancel_execution(self.spark, tdd.execution_id)
            return ExecutionState.CANCELED
        finally:
            self.slots.release(running)

    def _supersede(self, busy: RunningExecution) -> None:
        log.info("job %s: execution %s in slot %d is superseded by a new deployment; stopping it",
                 busy.tdd.job_id, busy.tdd.execution_id, busy.tdd.slot_index)
        self.cancel(busy.tdd.execution_id)

    def cancel(self, execution_id: str) -> bool:
        """Stop an execution's Spark jobs; it ends CANCELED. False when it does not run here."""
        running = self.slots.find(execution_id)
        if running is None:
            return False
        log.info("job %s: cancelling execution %s in slot %d", running.tdd.job_id, execution_id,
                 running.tdd.slot_index)
        running.cancelled.set()
        threading.Thread(target=self._keep_cancelling, args=(running,), daemon=True,
                         name=f"cancel-{execution_id}").start()
        return True

    def _keep_cancelling(self, running: RunningExecution) -> None:
        while not running.done.is_set():
            cancel_execution(self.spark, running.tdd.execution_id)
            running.done.wait(CANCEL_REPEAT_S)

    def _run(self, running: RunningExecution) -> ExecutionState:
        tdd = running.tdd
        self._transition(running, ExecutionState.DEPLOYING)
        if running.cancelled.is_set():
            return self._transition(running, ExecutionState.CANCELED)
        self._transition(running, ExecutionState.INITIALIZING)
        try:
            if self._artifacts is not None and tdd.artifacts:
                self._artifacts.activate(tdd.artifacts)
            function = load_entrypoint(tdd.entrypoint)
            session = self._task_session(tdd)
        except Exception as exc:  # noqa: BLE001 - any failure of user code setup fails the attempt
            return self._fail(running, exc)
        if running.cancelled.is_set():
            return self._transition(running, ExecutionState.CANCELED)
        self._transition(running, ExecutionState.RUNNING)
        rows: int | None = None
        result_path: str | None = None
        try:
            with slot_scope(session, slot_index=tdd.slot_index, execution_id=tdd.execution_id,
                            description=f"{tdd.job_name or tdd.job_id}/{tdd.vertex_id}[{tdd.subtask_index}]"):
                ctx = TaskContext(spark=session, params=dict(tdd.params), subtask_index=tdd.subtask_index,
                                  parallelism=tdd.parallelism, job_id=tdd.job_id, vertex_id=tdd.vertex_id,
                                  attempt=tdd.attempt, inputs=LazyInputs(session, tdd.inputs))
                result = function(ctx)
                if result is not None and not running.cancelled.is_set():
                    rows = self._write_result(session, result, tdd.result_path)
                    result_path = tdd.result_path
        except Exception as exc:  # noqa: BLE001 - the task function's failure is the attempt's failure
            if running.cancelled.is_set():
                return self._transition(running, ExecutionState.CANCELED)
            return self._fail(running, exc)
        if running.cancelled.is_set():
            return self._transition(running, ExecutionState.CANCELED)
        log.info("job %s: execution %s of %s[%d] finished (%s rows)", tdd.job_id, tdd.execution_id, tdd.vertex_id,
                 tdd.subtask_index, rows)
        return self._transition(running, ExecutionState.FINISHED, rows=rows, result_path=result_path)

    def _task_session(self, tdd: TaskDeploymentDescriptor) -> SparkSession:
        """The warm session seen through a fresh SQL session: the job's SQL conf and temp views stay its own."""
        session = self.spark.newSession()
        for key, value in tdd.spark_conf.items():
            session.conf.set(key, value)
        return session

    @staticmethod
    def _write_result(session: SparkSession, result: Any, path: str) -> int:
        from pyspark.sql import DataFrame

        if not isinstance(result, DataFrame):
            raise TypeError(f"a task function returns a pyspark.sql.DataFrame or None, not {type(result).__name__}")
        result.write.mode("overwrite").parquet(path)
        # Parquet footers hold the row counts: cheaper than counting the DataFrame again.
        return session.read.parquet(path).count()

    def _fail(self, running: RunningExecution, exc: BaseException) -> ExecutionState:
        log.info("job %s: execution %s of %s[%d] failed: %s: %s", running.tdd.job_id, running.tdd.execution_id,
                 running.tdd.vertex_id, running.tdd.subtask_index, type(exc).__name__, exc)
        return self._transition(running, ExecutionState.FAILED, failure=Failure.from_exception(exc))

    def _transition(self, running: RunningExecution, state: ExecutionState, *, rows: int | None = None,
                    result_path: str | None = None, failure: Failure | None = None) -> ExecutionState:
        running.state = state
        update = self._update(running.tdd, state, rows=rows, result_path=result_path, failure=failure)
        try:
            self._reporter.report(running.session_id, update)
        except (FencingTokenMismatch, UnknownJob) as exc:
            if state.is_terminal:
                log.info("job %s: the JobMaster refused the %s report of execution %s: %s", running.tdd.job_id,
                         state.value, running.tdd.execution_id, exc)
                return state
            raise StaleExecution(running.tdd.job_id, running.tdd.execution_id, str(exc)) from exc
        except SparkDispatchError as exc:
            # The master is unreachable; the JobMaster learns the state from heartbeats or
            # fails the execution over when this TaskExecutor times out.
            log.warning("job %s: the %s report of execution %s was not delivered: %s", running.tdd.job_id,
                        state.value, running.tdd.execution_id, exc)
        return state

    def _report_quietly(self, tdd: TaskDeploymentDescriptor, session_id: str, state: ExecutionState, *,
                        failure: Failure | None = None) -> None:
        try:
            self._reporter.report(session_id, self._update(tdd, state, failure=failure))
        except SparkDispatchError as exc:
            log.warning("job %s: the %s report of execution %s was not delivered: %s", tdd.job_id, state.value,
                        tdd.execution_id, exc)

    def _update(self, tdd: TaskDeploymentDescriptor, state: ExecutionState, *, rows: int | None = None,
                result_path: str | None = None, failure: Failure | None = None) -> ExecutionStateUpdate:
        return ExecutionStateUpdate(job_id=tdd.job_id, job_master_id=tdd.job_master_id,
                                    execution_id=tdd.execution_id, state=state,
                                    task_executor_id=self._task_executor_id, rows=rows, result_path=result_path,
                                    failure=failure)
