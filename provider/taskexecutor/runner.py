"""Running one TaskDeploymentDescriptor in a slot: DEPLOYING → INITIALIZING → RUNNING → end.

The runner reports the transitions to the JobMaster through a `StateReporter`, except
DEPLOYING, which the JobMaster sets itself when it deploys. INITIALIZING and RUNNING go out
from one background thread per runner (`BackgroundReports`, in order), so the task does not
wait for them; the terminal report is synchronous and leaves only after the execution's
earlier reports. A report refused as stale (`FencingTokenMismatch`, or `UnknownJob`) makes the
runner cancel the task's Spark jobs and free the slot. A cancelled task ends CANCELED,
whatever its function did.
"""

from __future__ import annotations

import importlib
import logging
import queue
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
    UnknownJob,
)
from sparkdispatch.jobgraph import ExecutionState, Failure
from sparkdispatch.protocol import ExecutionStateUpdate, SlotReport, SlotStatus, TaskDeploymentDescriptor
from sparkdispatch.results import read_partitions, write_partition
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
#: How long a terminal report waits for the execution's earlier background reports. They are
#: bounded by the reporter's own retries; this only keeps a wedged one from holding the task.
EARLIER_REPORTS_TIMEOUT_S = 30.0


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
            self._read[vertex_id] = read_partitions(self._spark, self._paths[vertex_id])
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


def _as_dataframe(result: object) -> DataFrame:
    """A task function's non-None result, which the contract says is a DataFrame."""
    from pyspark.sql import DataFrame

    if not isinstance(result, DataFrame):
        raise TypeError(f"a task function returns a pyspark.sql.DataFrame or None, not {type(result).__name__}")
    return result


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
    #: set once the last report queued in the background for this execution was handled
    reported: threading.Event | None = None
    #: the JobMaster refused a report of this execution: it runs it no more
    stale: bool = False


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
        function: object = getattr(module, function_name)
    except AttributeError:
        raise AttributeError(f"module {module_name!r} has no function {function_name!r} "
                             f"(entrypoint {entrypoint!r})") from None
    if not callable(function):
        raise TypeError(f"entrypoint {entrypoint!r} is not a function")
    return function


# --------------------------------------------------------------------------------------------
# Task sessions


class FreshSessions:
    """New SQL sessions of the warm SparkSession, each built before a task asks for one.

    A session's SQL state (analyzer, catalog, function registry) is built on its first use,
    ~2 ms of py4j and JVM work (bench/README.md, P1); `refill()` pays it after a task's end
    report instead of in the next task. Every task still gets a session no task used before.
    """

    def __init__(self, spark: SparkSession, *, spares: int = 1) -> None:
        self._spark = spark
        self._spares = spares
        self._lock = threading.Lock()
        self._ready: list[SparkSession] = []

    def take(self) -> SparkSession:
        with self._lock:
            if self._ready:
                return self._ready.pop()
        return self._spark.newSession()

    def refill(self) -> None:
        with self._lock:
            if len(self._ready) >= self._spares:
                return
        try:
            session = self._spark.newSession()
            session.range(1)  # builds the session's SQL state and runs the analyzer once
        except Exception:  # noqa: BLE001 - a task that finds no spare makes its own session
            log.warning("could not prepare a SQL session for the next task", exc_info=True)
            return
        with self._lock:
            self._ready.append(session)


# --------------------------------------------------------------------------------------------
# Reports the task does not wait for


class BackgroundReports:
    """Delivers non-terminal state reports from one thread, in the order they were queued.

    `on_refused(running, exc)` is called on that thread when the JobMaster refuses a report
    (`FencingTokenMismatch`, `UnknownJob`); an undelivered report is only logged: the JobMaster
    learns the state from the terminal report or the heartbeats.
    """

    def __init__(self, reporter: StateReporter,
                 on_refused: Callable[[RunningExecution, SparkDispatchError], None]) -> None:
        self._reporter = reporter
        self._on_refused = on_refused
        self._queue: queue.SimpleQueue[tuple[RunningExecution, ExecutionStateUpdate, threading.Event]] = \
            queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, running: RunningExecution, update: ExecutionStateUpdate) -> None:
        delivered = threading.Event()
        running.reported = delivered
        self._queue.put((running, update, delivered))
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._deliver_forever, daemon=True,
                                                name="sparkdispatch-state-reports")
                self._thread.start()

    def _deliver_forever(self) -> None:
        while True:
            running, update, delivered = self._queue.get()
            try:
                self._reporter.report(running.session_id, update)
            except (FencingTokenMismatch, UnknownJob) as exc:
                self._on_refused(running, exc)
            except SparkDispatchError as exc:
                log.warning("job %s: the %s report of execution %s was not delivered: %s", update.job_id,
                            update.state.value, update.execution_id, exc)
            except Exception:  # noqa: BLE001 - the reporting thread must survive any one report
                log.exception("job %s: the %s report of execution %s failed", update.job_id, update.state.value,
                              update.execution_id)
            finally:
                delivered.set()


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
        self._background = BackgroundReports(reporter, self._refused_in_background)
        self._sessions = FreshSessions(spark, spares=slots.count)
        self._sessions.refill()

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
        finally:
            self.slots.release(running)
            # after the terminal report: the next task of a slot finds its session ready
            self._sessions.refill()

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

    def _refused_in_background(self, running: RunningExecution, exc: SparkDispatchError) -> None:
        running.stale = True
        if running.done.is_set() or running.cancelled.is_set():
            return
        log.info("job %s: execution %s is stale, stopping it: %s", running.tdd.job_id, running.tdd.execution_id, exc)
        self.cancel(running.tdd.execution_id)

    def _keep_cancelling(self, running: RunningExecution) -> None:
        while not running.done.is_set():
            cancel_execution(self.spark, running.tdd.execution_id)
            running.done.wait(CANCEL_REPEAT_S)

    def _run(self, running: RunningExecution) -> ExecutionState:
        tdd = running.tdd
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
                    rows = write_partition(session, _as_dataframe(result), tdd.result_path)
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
        session = self._sessions.take()
        for key, value in tdd.spark_conf.items():
            session.conf.set(key, value)
        return session

    def _fail(self, running: RunningExecution, exc: BaseException) -> ExecutionState:
        log.info("job %s: execution %s of %s[%d] failed: %s: %s", running.tdd.job_id, running.tdd.execution_id,
                 running.tdd.vertex_id, running.tdd.subtask_index, type(exc).__name__, exc)
        return self._transition(running, ExecutionState.FAILED, failure=Failure.from_exception(exc))

    def _transition(self, running: RunningExecution, state: ExecutionState, *, rows: int | None = None,
                    result_path: str | None = None, failure: Failure | None = None) -> ExecutionState:
        running.state = state
        update = self._update(running.tdd, state, rows=rows, result_path=result_path, failure=failure)
        if not state.is_terminal:
            self._background.submit(running, update)
            return state
        if running.reported is not None and not running.reported.wait(EARLIER_REPORTS_TIMEOUT_S):
            log.warning("job %s: the earlier reports of execution %s are still undelivered after %gs; "
                        "sending %s anyway", running.tdd.job_id, running.tdd.execution_id,
                        EARLIER_REPORTS_TIMEOUT_S, state.value)
        if running.stale:
            return state  # the JobMaster refused this execution already; it does not want the end either
        try:
            self._reporter.report(running.session_id, update)
        except (FencingTokenMismatch, UnknownJob) as exc:
            log.info("job %s: the JobMaster refused the %s report of execution %s: %s", running.tdd.job_id,
                     state.value, running.tdd.execution_id, exc)
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
