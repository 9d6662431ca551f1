"""Running one TaskDeploymentDescriptor in a slot: DEPLOYING → INITIALIZING → RUNNING → end.

The attempt itself runs in the slot's own Python process (`SlotProcessPool`, slot_pool.py);
this process keeps the slots' occupation and all talking to the master. The runner reports the
transitions to the JobMaster through a `StateReporter`, except DEPLOYING, which the JobMaster
sets itself when it deploys. INITIALIZING and RUNNING go out from one background thread per
runner (`BackgroundReports`, in order), so the task does not wait for them; the terminal report
is synchronous and leaves only after the execution's earlier reports. A terminal report the
master did not take is held in the `SlotTable` and delivered again with the heartbeats. A report
refused as stale (`FencingTokenMismatch`, or `UnknownJob`) makes the runner cancel the task and
free the slot. A cancelled task ends CANCELED, whatever its function did. The partition of an
attempt that did not end FINISHED, or whose end was refused, is removed: no JobMaster reads it,
and a task that ran on after its job was cleaned up must not leave that job's directory behind.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from sparkdispatch.errors import (
    EnvironmentBuildFailed,
    FencingTokenMismatch,
    IllegalStateTransition,
    SparkDispatchError,
    UnknownJob,
)
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.job_result import Failure
from sparkdispatch.log_context import log_context
from sparkdispatch.model.protocol import ExecutionStateUpdate, SlotReport, SlotStatus, TaskDeploymentDescriptor
from sparkdispatch.storage.attempt_logs import attempt_log_path
from sparkdispatch.storage.results import remove_attempt_partition
from sparkdispatch.taskexecutor.artifact_cache import ArtifactCache
from sparkdispatch.taskexecutor.python_environments import PythonEnvironments
from sparkdispatch.taskexecutor.slot_protocol import AttemptLaunch, AttemptState

log = logging.getLogger(__name__)

#: How long a deployment waits for its slot's superseded attempt to stop, beyond the cancellation
#: timeout after which that attempt's process is killed.
SLOT_RELEASE_MARGIN_S = 5.0
#: How long a terminal report waits for the execution's earlier background reports. They are
#: bounded by the reporter's own retries; this only keeps a wedged one from holding the task.
EARLIER_REPORTS_TIMEOUT_S = 30.0


class StateReporter(Protocol):
    """Delivers an execution's state to its JobMaster, under the deploying leader's session."""

    def report(self, session_id: str, update: ExecutionStateUpdate) -> None:
        """Raises `FencingTokenMismatch` or `UnknownJob` when the JobMaster refuses the report."""


class AttemptRunner(Protocol):
    """Runs attempts in the slots' processes (`SlotProcessPool`)."""

    def run(self, launch: AttemptLaunch, on_state: Callable[[AttemptState], None]) -> AttemptState:
        """Run one attempt to its end; `on_state` gets its non-terminal states, the terminal one is
        returned."""

    def cancel(self, execution_id: str) -> bool:
        """Stop an attempt (it ends CANCELED); False when it does not run."""


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


@dataclass
class ReceivedDeployment:
    """A deployment the worker took from the broker that has not reached its slot yet."""

    job_id: str
    execution_id: str
    session_id: str
    cancelled: bool = False


@dataclass(frozen=True)
class HeldReport:
    """A terminal report the JobMaster has not taken yet (it was unreachable); delivered again later."""

    session_id: str
    update: ExecutionStateUpdate


class SlotTable:
    """The slots of one TaskExecutor and every execution its heartbeats list. Thread-safe.

    A slot runs one task at a time. Besides the tasks in slots, the heartbeats list deployments
    the worker took from the broker that wait for a thread or their slot (DEPLOYING), and ended
    executions whose terminal report waits to be delivered again (`hold_report`): an execution is
    listed from the moment the worker has it until its JobMaster has its end, so the JobMaster
    never mistakes a live one for lost. An execution id runs once: a second delivery of a
    deployment that runs, or ran lately, is dropped.
    """

    RECENT_EXECUTIONS = 1024  # execution ids remembered against a second delivery
    MAX_HELD_REPORTS = 1024  # the oldest held report is dropped beyond this

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError("a TaskExecutor needs at least one slot")
        self.count = count
        self._lock = threading.Lock()
        self._by_slot: dict[int, RunningExecution] = {}
        self._received: dict[str, ReceivedDeployment] = {}
        self._held: OrderedDict[str, HeldReport] = OrderedDict()
        self._recent: OrderedDict[str, None] = OrderedDict()

    def receive(self, job_id: str, execution_id: str, session_id: str) -> None:
        """The worker took this deployment from the broker; it is listed until it occupies its slot."""
        with self._lock:
            if execution_id not in self._recent and self._in_slot(execution_id) is None:
                self._received.setdefault(execution_id, ReceivedDeployment(job_id, execution_id, session_id))

    def forget_received(self, execution_id: str) -> None:
        """The deployment will not occupy a slot (refused, dropped, or its task ended)."""
        with self._lock:
            self._received.pop(execution_id, None)

    def cancel_received(self, execution_id: str) -> bool:
        """Cancel a deployment taken from the broker before it runs: it ends CANCELED, running nothing."""
        with self._lock:
            received = self._received.get(execution_id)
            if received is not None:
                received.cancelled = True
            return received is not None

    def occupy(
        self,
        tdd: TaskDeploymentDescriptor,
        session_id: str,
        *,
        supersede: Callable[[RunningExecution], object] | None = None,
        wait_s: float = 0.0,
    ) -> RunningExecution | None:
        """Take the slot `tdd` names; None if this execution runs or ran here already (a second
        delivery of its deployment), which must not run again.

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
                        f"slot {tdd.slot_index} does not exist on this TaskExecutor (it has {self.count} slots)"
                    )
                if tdd.execution_id in self._recent or self._in_slot(tdd.execution_id) is not None:
                    return None
                busy = self._by_slot.get(tdd.slot_index)
                if busy is None:
                    running = RunningExecution(tdd=tdd, session_id=session_id)
                    received = self._received.pop(tdd.execution_id, None)
                    if received is not None and received.cancelled:
                        running.cancelled.set()
                    self._by_slot[tdd.slot_index] = running
                    return running
            if supersede is not None and not busy.cancelled.is_set():
                supersede(busy)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not busy.done.wait(remaining):
                raise IllegalStateTransition(
                    f"slot {tdd.slot_index} is busy with execution {busy.tdd.execution_id} of job {busy.tdd.job_id}"
                    + (f", which did not stop within {wait_s:g}s" if wait_s else "")
                )

    def release(self, running: RunningExecution) -> None:
        with self._lock:
            if self._by_slot.get(running.tdd.slot_index) is running:
                del self._by_slot[running.tdd.slot_index]
            self._recent[running.tdd.execution_id] = None
            if len(self._recent) > self.RECENT_EXECUTIONS:
                self._recent.popitem(last=False)
        running.done.set()

    def find(self, execution_id: str) -> RunningExecution | None:
        with self._lock:
            return self._in_slot(execution_id)

    def _in_slot(self, execution_id: str) -> RunningExecution | None:
        return next((r for r in self._by_slot.values() if r.tdd.execution_id == execution_id), None)

    def running(self) -> list[RunningExecution]:
        with self._lock:
            return list(self._by_slot.values())

    def received(self) -> list[ReceivedDeployment]:
        with self._lock:
            return list(self._received.values())

    def hold_report(self, session_id: str, update: ExecutionStateUpdate) -> None:
        """Keep a terminal report the JobMaster did not take: listed in the heartbeats, delivered again."""
        with self._lock:
            self._held[update.execution_id] = HeldReport(session_id, update)
            if len(self._held) > self.MAX_HELD_REPORTS:
                _, dropped = self._held.popitem(last=False)
                log.warning(
                    "job %s: dropping the undelivered %s report of execution %s (%d reports held)",
                    dropped.update.job_id,
                    dropped.update.state.value,
                    dropped.update.execution_id,
                    self.MAX_HELD_REPORTS,
                )

    def held_reports(self) -> list[HeldReport]:
        with self._lock:
            return list(self._held.values())

    def report_taken(self, execution_id: str) -> None:
        """The held report of this execution was delivered (or refused): forget it."""
        with self._lock:
            self._held.pop(execution_id, None)

    def slot_report(self, session_id: str | None = None) -> SlotReport:
        """Every slot, free or allocated; with `session_id`, a task another leader session deployed
        (a former leader's, being cancelled) leaves its slot free for this one."""
        with self._lock:
            return SlotReport(
                tuple(
                    SlotStatus(index=i, allocation_id=r.tdd.allocation_id, job_id=r.tdd.job_id)
                    if (r := self._by_slot.get(i)) is not None and session_id in (None, r.session_id)
                    else SlotStatus(index=i)
                    for i in range(self.count)
                )
            )

    def executions(self, session_id: str | None = None) -> list[dict[str, str]]:
        """The heartbeat payload: every execution this TaskExecutor has (of `session_id`, if given):
        in slots, taken from the broker (DEPLOYING), and ended with their reports held."""
        with self._lock:
            listed: dict[str, tuple[str, ExecutionState, str]] = {}
            for r in self._by_slot.values():
                listed[r.tdd.execution_id] = (r.tdd.job_id, r.state, r.session_id)
            for d in self._received.values():
                if not d.cancelled:
                    listed.setdefault(d.execution_id, (d.job_id, ExecutionState.DEPLOYING, d.session_id))
            for h in self._held.values():
                listed.setdefault(h.update.execution_id, (h.update.job_id, h.update.state, h.session_id))
        return [
            {"job_id": job_id, "execution_id": execution_id, "state": state.value}
            for execution_id, (job_id, state, session) in listed.items()
            if session_id in (None, session)
        ]


# --------------------------------------------------------------------------------------------
# Results


def discard_result(update: ExecutionStateUpdate) -> None:
    """A terminal report its JobMaster will never take: the partition it names is nobody's."""
    if update.result_path is not None:
        remove_attempt_partition(update.result_path)


# --------------------------------------------------------------------------------------------
# Reports the task does not wait for


class BackgroundReports:
    """Delivers non-terminal state reports from one thread, in the order they were queued.

    `on_refused(running, exc)` is called on that thread when the JobMaster refuses a report
    (`FencingTokenMismatch`, `UnknownJob`); an undelivered report is only logged: the JobMaster
    learns the state from the terminal report or the heartbeats.
    """

    def __init__(
        self, reporter: StateReporter, on_refused: Callable[[RunningExecution, SparkDispatchError], None]
    ) -> None:
        self._reporter = reporter
        self._on_refused = on_refused
        self._queue: queue.SimpleQueue[tuple[RunningExecution, ExecutionStateUpdate, threading.Event]] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, running: RunningExecution, update: ExecutionStateUpdate) -> None:
        delivered = threading.Event()
        running.reported = delivered
        self._queue.put((running, update, delivered))
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._deliver_forever, daemon=True, name="sparkdispatch-state-reports"
                )
                self._thread.start()

    def _deliver_forever(self) -> None:
        while True:
            running, update, delivered = self._queue.get()
            try:
                self._reporter.report(running.session_id, update)
            except (FencingTokenMismatch, UnknownJob) as exc:
                self._on_refused(running, exc)
            except SparkDispatchError as exc:
                log.warning(
                    "job %s: the %s report of execution %s was not delivered: %s",
                    update.job_id,
                    update.state.value,
                    update.execution_id,
                    exc,
                )
            except Exception:  # the reporting thread must survive any one report
                log.exception(
                    "job %s: the %s report of execution %s failed",
                    update.job_id,
                    update.state.value,
                    update.execution_id,
                )
            finally:
                delivered.set()


# --------------------------------------------------------------------------------------------
# The runner


def _append(path: Path | None, text: str) -> None:
    """Add `text` to an attempt's log before its slot process writes there (nothing for a remote one)."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        log.warning("could not write to the attempt log %s: %s", path, exc)


class TaskRunner:
    """Runs deployed tasks in the slots of one TaskExecutor, each in its slot's process."""

    def __init__(
        self,
        *,
        pool: AttemptRunner,
        slots: SlotTable,
        reporter: StateReporter,
        task_executor_id: str,
        artifacts: ArtifactCache | None = None,
        environments: PythonEnvironments | None = None,
        slot_release_timeout_s: float,
        start_deadline: Callable[[], float | None] = lambda: None,
    ) -> None:
        self.slots = slots
        self._pool = pool
        self._reporter = reporter
        self._task_executor_id = task_executor_id
        self._artifacts = artifacts
        self._environments = environments
        self._slot_release_timeout_s = slot_release_timeout_s
        self._start_deadline = start_deadline  # MasterConnection.start_deadline
        self._background = BackgroundReports(reporter, self._refused_in_background)
        self._ended: Counter[str] = Counter()  # attempts that ended here, by state
        self._ended_lock = threading.Lock()

    def ended_counts(self) -> dict[str, int]:
        """Attempts that ended here, by state (the TaskExecutor's metrics)."""
        with self._ended_lock:
            return dict(self._ended)

    def run(self, tdd: TaskDeploymentDescriptor, session_id: str) -> ExecutionState:
        """Run one attempt to its end, reporting each state; returns the final state. A second
        delivery of an execution that runs or ran here is dropped (CANCELED, reporting nothing)."""
        with log_context(job_id=tdd.job_id, vertex=tdd.vertex_id, subtask=tdd.subtask_index, attempt=tdd.attempt):
            try:
                running = self.slots.occupy(
                    tdd, session_id, supersede=self._supersede, wait_s=self._slot_release_timeout_s
                )
            except IllegalStateTransition as exc:
                self.slots.forget_received(tdd.execution_id)
                log.warning("job %s: refusing execution %s: %s", tdd.job_id, tdd.execution_id, exc)
                self._report_quietly(
                    tdd, session_id, AttemptState(ExecutionState.FAILED, failure=Failure.from_exception(exc))
                )
                return ExecutionState.FAILED
            if running is None:
                log.info(
                    "job %s: execution %s was delivered here again; the second delivery is dropped",
                    tdd.job_id,
                    tdd.execution_id,
                )
                return ExecutionState.CANCELED
            try:
                return self._run(running)
            finally:
                self.slots.release(running)

    def _supersede(self, busy: RunningExecution) -> None:
        log.info(
            "job %s: execution %s in slot %d is superseded by a new deployment; stopping it",
            busy.tdd.job_id,
            busy.tdd.execution_id,
            busy.tdd.slot_index,
        )
        self.cancel(busy.tdd.execution_id)

    def cancel(self, execution_id: str) -> bool:
        """Stop an execution; it ends CANCELED (one still waiting for its slot never starts). False
        when it is not here."""
        running = self.slots.find(execution_id)
        if running is None:
            return self.slots.cancel_received(execution_id)
        log.info("job %s: cancelling execution %s in slot %d", running.tdd.job_id, execution_id, running.tdd.slot_index)
        running.cancelled.set()
        self._pool.cancel(execution_id)
        return True

    def cancel_other_sessions(self, session_id: str) -> None:
        """This TaskExecutor registered with a new leader (session `session_id`): the former
        leader's JobMasters are gone, so their executions are cancelled (interrupted, killed after
        the cancellation timeout) and their held reports dropped. Their slots count as free for
        the new leader at once (`SlotTable.slot_report(session_id)`)."""
        for running in self.slots.running():
            if running.session_id != session_id and not running.cancelled.is_set():
                log.info(
                    "job %s: execution %s was deployed under the former leader session %s; cancelling it",
                    running.tdd.job_id,
                    running.tdd.execution_id,
                    running.session_id,
                )
                self.cancel(running.tdd.execution_id)
        for received in self.slots.received():
            if received.session_id != session_id:
                self.slots.cancel_received(received.execution_id)
        for held in self.slots.held_reports():
            if held.session_id != session_id:
                self.slots.report_taken(held.update.execution_id)
                discard_result(held.update)

    def _refused_in_background(self, running: RunningExecution, exc: SparkDispatchError) -> None:
        running.stale = True
        if running.done.is_set() or running.cancelled.is_set():
            return
        log.info("job %s: execution %s is stale, stopping it: %s", running.tdd.job_id, running.tdd.execution_id, exc)
        self.cancel(running.tdd.execution_id)

    def _run(self, running: RunningExecution) -> ExecutionState:
        tdd = running.tdd
        if running.cancelled.is_set():
            return self._transition(running, AttemptState(ExecutionState.CANCELED))
        with ExitStack() as in_use:  # the caches keep the artifacts and the environment while the attempt runs
            try:
                artifact_paths = (
                    in_use.enter_context(self._artifacts.use(tdd.artifacts)) if self._artifacts is not None else []
                )
                python = self._environment_python(tdd, in_use)
            except Exception as exc:  # noqa: BLE001 - a missing or bad artifact, or a failed build, fails the attempt
                return self._fail(running, Failure.from_exception(exc))
            if running.cancelled.is_set():
                return self._transition(running, AttemptState(ExecutionState.CANCELED))
            end = self._pool.run(
                AttemptLaunch(tdd, tuple(artifact_paths), self._start_deadline, python),
                lambda state: self._on_state(running, state),
            )
        if running.cancelled.is_set() or end.state is ExecutionState.CANCELED:
            return self._transition(running, AttemptState(ExecutionState.CANCELED))
        if end.state is ExecutionState.FAILED:
            return self._fail(running, end.failure or Failure("SparkDispatchError", "the attempt failed"))
        log.info(
            "job %s: execution %s of %s[%d] finished (%s rows)",
            tdd.job_id,
            tdd.execution_id,
            tdd.vertex_id,
            tdd.subtask_index,
            end.rows,
        )
        return self._transition(running, end)  # FINISHED, with its rows, result and inputs

    def _environment_python(self, tdd: TaskDeploymentDescriptor, in_use: ExitStack) -> str | None:
        """The interpreter of the attempt's Python environment, built if need be (saying so in the
        attempt's log, then the build's output and time), kept in `in_use`; None without one."""
        environment = tdd.environment
        if environment is None:
            return None
        if self._environments is None or self._artifacts is None:
            raise EnvironmentBuildFailed("this TaskExecutor builds no Python environments for jobs")
        wheel_paths = in_use.enter_context(self._artifacts.use(environment.wheel_keys))
        log_file = attempt_log_path(tdd.result_path, tdd.attempt)

        def building(key: str) -> None:
            log.info("job %s: building Python environment %s for %s", tdd.job_id, key, tdd.vertex_id)
            _append(
                log_file,
                f"[sparkdispatch] building the job's Python environment {key} on "
                f"{self._task_executor_id}: {', '.join(environment.dependencies)}\n",
            )

        try:
            ready = in_use.enter_context(
                self._environments.use(
                    environment, dict(zip(environment.wheel_keys, wheel_paths, strict=True)), on_build=building
                )
            )
        except EnvironmentBuildFailed as exc:
            _append(log_file, f"[sparkdispatch] the job's Python environment could not be built: {exc}\n")
            raise
        if ready.built_now:
            _append(
                log_file,
                f"{ready.build_output.rstrip()}\n[sparkdispatch] Python environment {ready.key} built in "
                f"{ready.build_seconds:.2f}s\n",
            )
        return ready.python

    def _on_state(self, running: RunningExecution, state: AttemptState) -> None:
        if running.cancelled.is_set():
            # cancelled before its process had the attempt: tell the pool again, it has it now
            self._pool.cancel(running.tdd.execution_id)
        self._transition(running, AttemptState(state.state))

    def _fail(self, running: RunningExecution, failure: Failure) -> ExecutionState:
        log.info(
            "job %s: execution %s of %s[%d] failed: %s: %s",
            running.tdd.job_id,
            running.tdd.execution_id,
            running.tdd.vertex_id,
            running.tdd.subtask_index,
            failure.cls,
            failure.message,
        )
        return self._transition(running, AttemptState(ExecutionState.FAILED, failure=failure))

    def _transition(self, running: RunningExecution, outcome: AttemptState) -> ExecutionState:
        state = outcome.state
        running.state = state
        update = self._update(running.tdd, outcome)
        if not state.is_terminal:
            self._background.submit(running, update)
            return state
        if running.reported is not None and not running.reported.wait(EARLIER_REPORTS_TIMEOUT_S):
            log.warning(
                "job %s: the earlier reports of execution %s are still undelivered after %gs; sending %s anyway",
                running.tdd.job_id,
                running.tdd.execution_id,
                EARLIER_REPORTS_TIMEOUT_S,
                state.value,
            )
        with self._ended_lock:
            self._ended[state.value] += 1
        refused = running.stale  # the JobMaster refused this execution already; it does not want the end either
        if not refused:
            try:
                self._reporter.report(running.session_id, update)
            except (FencingTokenMismatch, UnknownJob) as exc:
                refused = True
                log.info(
                    "job %s: the JobMaster refused the %s report of execution %s: %s",
                    running.tdd.job_id,
                    state.value,
                    running.tdd.execution_id,
                    exc,
                )
            except SparkDispatchError as exc:
                self._hold(running.session_id, update, exc)  # before the slot is released: listed throughout
        if refused or state is not ExecutionState.FINISHED:
            remove_attempt_partition(running.tdd.result_path)  # what it wrote, if anything, nobody reads
        return state

    def _report_quietly(self, tdd: TaskDeploymentDescriptor, session_id: str, outcome: AttemptState) -> None:
        update = self._update(tdd, outcome)
        try:
            self._reporter.report(session_id, update)
        except (FencingTokenMismatch, UnknownJob) as exc:
            log.info(
                "job %s: the JobMaster refused the %s report of execution %s: %s",
                tdd.job_id,
                outcome.state.value,
                tdd.execution_id,
                exc,
            )
        except SparkDispatchError as exc:
            self._hold(session_id, update, exc)

    def _hold(self, session_id: str, update: ExecutionStateUpdate, exc: SparkDispatchError) -> None:
        # The master did not take it; the heartbeats list it and deliver it again (MasterConnection).
        log.warning(
            "job %s: the %s report of execution %s was not delivered, held for the next heartbeats: %s",
            update.job_id,
            update.state.value,
            update.execution_id,
            exc,
        )
        self.slots.hold_report(session_id, update)

    def _update(self, tdd: TaskDeploymentDescriptor, outcome: AttemptState) -> ExecutionStateUpdate:
        return ExecutionStateUpdate(
            job_id=tdd.job_id,
            job_master_id=tdd.job_master_id,
            execution_id=tdd.execution_id,
            state=outcome.state,
            task_executor_id=self._task_executor_id,
            rows=outcome.rows,
            result_path=outcome.result_path,
            result_schema=outcome.result_schema,
            input_files=outcome.input_files,
            failure=outcome.failure,
        )
