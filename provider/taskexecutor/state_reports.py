"""Reporting an execution's states to its JobMaster, under the deploying leader's session.

INITIALIZING and RUNNING go out from one background thread per TaskExecutor (`BackgroundReports`,
in order), so the task does not wait for them; the terminal report is synchronous and leaves only
after the execution's earlier reports (`StateReports.transition`). A terminal report the master
did not take is held in the `SlotTable` and delivered again with the heartbeats. A report refused
as stale (`FencingTokenMismatch`, or `UnknownJob`) marks the execution stale. The partition of an
attempt that did not end FINISHED, or whose end was refused, is removed: no JobMaster reads it,
and a task that ran on after its job was cleaned up must not leave that job's directory behind.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import Counter
from collections.abc import Callable
from typing import Protocol

from sparkdispatch.errors import FencingTokenMismatch, SparkDispatchError, UnknownJob
from sparkdispatch.model.protocol import ExecutionStateUpdate, TaskDeploymentDescriptor
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.storage.results import remove_attempt_partition
from sparkdispatch.taskexecutor.slot_protocol import AttemptState
from sparkdispatch.taskexecutor.slot_table import RunningExecution, SlotTable

log = logging.getLogger(__name__)

#: How long a terminal report waits for the execution's earlier background reports. They are
#: bounded by the reporter's own retries; this only keeps a wedged one from holding the task.
EARLIER_REPORTS_TIMEOUT_S = 30.0


class StateReporter(Protocol):
    """Delivers an execution's state to its JobMaster, under the deploying leader's session."""

    def report(self, session_id: str, update: ExecutionStateUpdate) -> None:
        """Raises `FencingTokenMismatch` or `UnknownJob` when the JobMaster refuses the report."""


def discard_result(update: ExecutionStateUpdate) -> None:
    """A terminal report its JobMaster will never take: the partition it names is nobody's."""
    if update.result_path is not None:
        remove_attempt_partition(update.result_path)


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


class StateReports:
    """Reports the states of the executions of one TaskExecutor to their JobMasters and counts the ends.

    `on_refused(running, exc)` is called on the background thread when the JobMaster refuses a
    non-terminal report (`BackgroundReports`)."""

    def __init__(
        self,
        *,
        reporter: StateReporter,
        slots: SlotTable,
        task_executor_id: str,
        on_refused: Callable[[RunningExecution, SparkDispatchError], None],
    ) -> None:
        self.slots = slots
        self._reporter = reporter
        self._task_executor_id = task_executor_id
        self._background = BackgroundReports(reporter, on_refused)
        self._ended: Counter[str] = Counter()  # attempts that ended here, by state
        self._ended_lock = threading.Lock()

    def ended_counts(self) -> dict[str, int]:
        """Attempts that ended here, by state (the TaskExecutor's metrics)."""
        with self._ended_lock:
            return dict(self._ended)

    def transition(self, running: RunningExecution, outcome: AttemptState) -> ExecutionState:
        """Record `running`'s new state and report it: a non-terminal one in the background, the
        terminal one now, after the execution's earlier reports (held if the master is unreachable).
        The partition of an attempt that did not end FINISHED, or whose end was refused, is removed."""
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

    def report_quietly(self, tdd: TaskDeploymentDescriptor, session_id: str, outcome: AttemptState) -> None:
        """Report the end of a deployment that never occupied its slot (held if the master is unreachable)."""
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
            chained_rows=outcome.chained_rows,
        )
