"""Running one TaskDeploymentDescriptor in a slot: DEPLOYING → INITIALIZING → RUNNING → end.

The attempt itself runs in the slot's own Python process (`SlotProcessPool`, slot_pool.py);
this process keeps the slots' occupation (`SlotTable`, slot_table.py), prepares the attempt's
code and Python environment (attempt_preparation.py) and does all talking to the master. The
runner reports the transitions to the JobMaster (`StateReports`, state_reports.py), except
DEPLOYING, which the JobMaster sets itself when it deploys. A report refused as stale
(`FencingTokenMismatch`, or `UnknownJob`) makes the runner cancel the task and free the slot. A
cancelled task ends CANCELED, whatever its function did.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from contextlib import ExitStack
from typing import Protocol

from sparkdispatch.errors import IllegalStateTransition, SparkDispatchError
from sparkdispatch.log_context import log_context
from sparkdispatch.model.job_result import Failure
from sparkdispatch.model.protocol import TaskDeploymentDescriptor
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.taskexecutor.artifact_cache import ArtifactCache
from sparkdispatch.taskexecutor.attempt_preparation import AttemptPreparation
from sparkdispatch.taskexecutor.python_environments import PythonEnvironments
from sparkdispatch.taskexecutor.slot_protocol import AttemptLaunch, AttemptState
from sparkdispatch.taskexecutor.slot_table import RunningExecution, SlotTable
from sparkdispatch.taskexecutor.state_reports import StateReporter, StateReports, discard_result

log = logging.getLogger(__name__)

#: How long a deployment waits for its slot's superseded attempt to stop, beyond the cancellation
#: timeout after which that attempt's process is killed.
SLOT_RELEASE_MARGIN_S = 5.0


class AttemptRunner(Protocol):
    """Runs attempts in the slots' processes (`SlotProcessPool`)."""

    def run(self, launch: AttemptLaunch, on_state: Callable[[AttemptState], None]) -> AttemptState:
        """Run one attempt to its end; `on_state` gets its non-terminal states, the terminal one is
        returned."""

    def cancel(self, execution_id: str) -> bool:
        """Stop an attempt (it ends CANCELED); False when it does not run."""


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
        start_deadline: Callable[[str], float | None] = lambda _: None,
    ) -> None:
        self.slots = slots
        self._pool = pool
        self._preparation = AttemptPreparation(
            task_executor_id=task_executor_id, artifacts=artifacts, environments=environments
        )
        self._slot_release_timeout_s = slot_release_timeout_s
        self._start_deadline = start_deadline  # MasterConnection.start_deadline, of a registration id
        self._reports = StateReports(
            reporter=reporter, slots=slots, task_executor_id=task_executor_id, on_refused=self._refused_in_background
        )

    def ended_counts(self) -> dict[str, int]:
        """Attempts that ended here, by state (the TaskExecutor's metrics)."""
        return self._reports.ended_counts()

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
                self._reports.report_quietly(
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
            return self._reports.transition(running, AttemptState(ExecutionState.CANCELED))
        with ExitStack() as in_use:  # the caches keep the artifacts and the environment while the attempt runs
            try:
                artifact_paths = self._preparation.artifact_paths(tdd, in_use)
                python = self._preparation.environment_python(tdd, in_use)
            except Exception as exc:  # noqa: BLE001 - a missing or bad artifact, or a failed build, fails the attempt
                return self._fail(running, Failure.from_exception(exc))
            if running.cancelled.is_set():
                return self._reports.transition(running, AttemptState(ExecutionState.CANCELED))
            end = self._pool.run(
                AttemptLaunch(
                    tdd, artifact_paths, functools.partial(self._start_deadline, tdd.registration_id), python
                ),
                lambda state: self._on_state(running, state),
            )
        if running.cancelled.is_set() or end.state is ExecutionState.CANCELED:
            return self._reports.transition(running, AttemptState(ExecutionState.CANCELED))
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
        return self._reports.transition(running, end)  # FINISHED, with its rows, result and inputs

    def _on_state(self, running: RunningExecution, state: AttemptState) -> None:
        if running.cancelled.is_set():
            # cancelled before its process had the attempt: tell the pool again, it has it now
            self._pool.cancel(running.tdd.execution_id)
        self._reports.transition(running, AttemptState(state.state))

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
        return self._reports.transition(running, AttemptState(ExecutionState.FAILED, failure=failure))
