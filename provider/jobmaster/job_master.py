"""The JobMaster: runs one job's ExecutionGraph to its JobResult.

Batch scheduling (a vertex's subtasks are scheduled once all of its inputs are finished),
slot requirements declared to the ResourceManager, deployment through the
TaskExecutorGateway, execution state from fenced TaskExecutor reports, restarts by region
under the job's restart strategy, cancellation and suspension. All state lives on the master's
loop; calls to TaskExecutors run in threads (sparkdispatch.jobmaster.task_executor_calls). A
deployment the broker does not take (`ServiceUnavailable`: Redis restarting) is sent again with
backoff while its attempt is current, costing no restart. The TaskExecutors' heartbeats are
reconciled with what this JobMaster deployed, both ways
(sparkdispatch.jobmaster.task_executor_reconciliation). Tasks that make or read results kept on a
TaskExecutor run where those results are (sparkdispatch.jobmaster.kept_partitions): their slots
are asked of that TaskExecutor, and its loss runs their producers again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from sparkdispatch.errors import IllegalStateTransition, JobAlreadyTerminated, StaleExecution
from sparkdispatch.ha.progress_store import Finished, JobProgress, ProgressStore, SubtaskProgress
from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.model.job_graph import JobGraph
from sparkdispatch.model.job_result import Failure, JobResult, VertexResult
from sparkdispatch.jobmaster.deployment import deployment_descriptor
from sparkdispatch.jobmaster.execution import Execution, ExecutionVertex, SubtaskId
from sparkdispatch.jobmaster.execution_graph import ExecutionGraph
from sparkdispatch.jobmaster.failover import tasks_to_restart, unreadable_inputs
from sparkdispatch.jobmaster.gateways import TaskExecutorGateway
from sparkdispatch.jobmaster.kept_partitions import KeptPartitions
from sparkdispatch.jobmaster.slot_requests import SlotRequests
from sparkdispatch.jobmaster.result_publication import publish_result
from sparkdispatch.jobmaster.long_lived import LONG_LIVED_GRAPHS
from sparkdispatch.jobmaster.recovered_graph import (
    build_execution_graph,
    finished,
    log_restored,
    mark_recorded,
    record_task,
)
from sparkdispatch.jobmaster.reconciler import ExecutionDeploymentReconciler
from sparkdispatch.jobmaster.task_executor_calls import TaskExecutorCalls
from sparkdispatch.jobmaster.task_executor_reconciliation import Failed, TaskExecutorReconciliation, check_report
from sparkdispatch.jobmaster.restart_backoffs import RestartBackoffs
from sparkdispatch.jobmaster.restart import RestartBackoffTimeStrategy, create_restart_strategy, restart_refused
from sparkdispatch.log_context import log_context
from sparkdispatch.metrics.events import EventCounts, TaskEvents
from sparkdispatch.model.protocol import ExecutionReport, ExecutionStateUpdate, TaskDeploymentDescriptor
from sparkdispatch.resourcemanager import AllocatedSlot, ResourceManagerGateway
from sparkdispatch.storage.results import ResultLayout
from sparkdispatch.jobmaster.settings import JobMasterSettings
from sparkdispatch.model.snapshot import JobOverview, JobSnapshot

log = logging.getLogger(__name__)

#: Subtasks scheduled in one turn of the loop (about 2 ms on a 2-core machine); a job's first vertices
#: may have tens of thousands, scheduled a slice at a time.
SCHEDULE_SLICE = 1_000


class JobMaster:
    """One job's master: its ExecutionGraph, slots, deployments, restarts and result.

    Used on the master's loop. `job_master_id` (the leader session id) fences the TaskExecutors'
    reports. `recovered_progress` names subtasks a former leader saw finish: they start FINISHED
    and are never run again. `execution_graph`, when given, is `build_execution_graph(graph,
    recovered_progress)` made beforehand (in a thread); else it is built here. Implements
    `JobMasterGateway` and the ResourceManager's `SlotListener`, all plain methods but `cancel`.
    """

    def __init__(
        self,
        graph: JobGraph,
        *,
        session_id: str,
        resource_manager: ResourceManagerGateway,
        task_executor_gateway: TaskExecutorGateway,
        progress_store: ProgressStore,
        settings: JobMasterSettings,
        recovered_progress: JobProgress | None = None,
        clock: Callable[[], float] | None = None,
        events: TaskEvents | None = None,
        execution_graph: ExecutionGraph | None = None,
    ) -> None:
        self._clock = clock or time.time
        self._events = events if events is not None else EventCounts()
        self.execution_graph = (
            execution_graph
            if execution_graph is not None
            else build_execution_graph(graph, recovered_progress, clock=self._clock)
        )
        self.job_master_id = session_id
        self._calls = TaskExecutorCalls(
            job_id=self.execution_graph.job_id,
            session_id=session_id,
            gateway=task_executor_gateway,
            resource_manager=resource_manager,
        )
        self._progress_store = progress_store
        self._results = ResultLayout(settings.results_dir)
        spec = graph.restart_strategy or settings.restart_strategy
        self.restart_strategy: RestartBackoffTimeStrategy = create_restart_strategy(spec, clock=self._clock)
        self._backoffs = RestartBackoffs()
        self._kept = KeptPartitions(self.execution_graph)
        self._slots = SlotRequests(
            self.execution_graph,
            pool=graph.pool,
            resource_manager=resource_manager,
            calls=self._calls,
            listener=self,
            kept=self._kept,
        )
        self._deployments = ExecutionDeploymentReconciler(
            missing_threshold=settings.missing_execution_threshold, grace_s=settings.deployment_grace
        )
        self._reconciliation = TaskExecutorReconciliation(
            self.execution_graph, session_id=session_id, deployments=self._deployments, calls=self._calls
        )
        self._more_to_schedule: asyncio.Handle | None = None  # the next slice of `_schedule`, if one is due
        self.result_future: asyncio.Future[JobResult] = asyncio.get_running_loop().create_future()
        self._publishing: asyncio.Task[None] | None = None  # `result_future`'s, once the job is terminal

    # ------------------------------------------------------------------ public API

    @property
    def job_id(self) -> str:
        return self.execution_graph.job_id

    @property
    def status(self) -> JobStatus:
        return self.execution_graph.status

    def start(self) -> None:
        """INITIALIZING → CREATED → RUNNING, and schedule what can run; returns at once."""
        graph = self.execution_graph
        if graph.status is not JobStatus.INITIALIZING:
            raise IllegalStateTransition(f"job {self.job_id} was started already ({graph.status.value})")
        log_restored(graph, self.job_master_id)
        graph.transition(JobStatus.CREATED)
        graph.transition(JobStatus.RUNNING)
        log.info(
            "job %s (session %s) %r running: %d subtask(s) in %d vertices",
            self.job_id,
            self.job_master_id,
            graph.name,
            graph.subtask_count,
            len(graph.vertex_ids),
        )
        self._schedule()

    def update_execution_state(self, update: ExecutionStateUpdate) -> None:
        """A TaskExecutor's report on one attempt.

        Raises `FencingTokenMismatch` for another JobMaster id, `UnknownJob` for another job and
        `StaleExecution` for an attempt this JobMaster no longer runs (the TaskExecutor then
        cancels that task). Returns once the state is applied: a FINISHED subtask is then
        recorded in the ProgressStore in the background, and only after that are its consumers
        scheduled (`join()` waits for it).
        """
        ev = check_report(self.execution_graph, update, session_id=self.job_master_id, results=self._results)
        self._deployments.acknowledged(update.execution_id)
        execution = ev.current
        if update.state is execution.state:
            return
        if execution.state.is_terminal:
            raise StaleExecution(self.job_id, update.execution_id, f"that attempt is {execution.state.value}")
        if self.status is not JobStatus.RUNNING:
            raise StaleExecution(self.job_id, update.execution_id, f"the job is {self.status.value}")
        try:
            changed = execution.advance(update.state)
        except IllegalStateTransition as exc:
            raise StaleExecution(self.job_id, update.execution_id, exc.message) from None
        if not changed:
            return
        self.execution_graph.touch()
        if update.state.is_terminal:
            self._events.task_ended(update.state.value, execution.ran_for(self._clock()))
        if update.state is ExecutionState.FINISHED:
            self._on_finished(ev, execution, update)
        elif update.state is ExecutionState.FAILED:
            failure = update.failure or Failure("UnknownFailure", "the TaskExecutor reported FAILED without a cause")
            self._on_failed(ev, execution, failure)
        elif update.state is ExecutionState.CANCELED:
            self._on_failed(
                ev,
                execution,
                Failure(
                    "TaskCanceled",
                    f"attempt {execution.attempt} of {ev.id} was cancelled on its TaskExecutor "
                    "without the JobMaster asking",
                ),
            )

    async def cancel(self) -> None:
        """Stop the job: running tasks are cancelled on their TaskExecutors, slots released, CANCELED;
        returns once its JobResult is published (`result_future`).

        Idempotent for a cancelled job; `JobAlreadyTerminated` for a finished, failed or suspended one.
        """
        graph = self.execution_graph
        if graph.status in (JobStatus.CANCELED, JobStatus.CANCELLING):
            return
        if graph.status.is_terminal:
            raise JobAlreadyTerminated(self.job_id, graph.status.value)
        log.info("job %s (session %s): cancelling", self.job_id, self.job_master_id)
        if graph.status is JobStatus.INITIALIZING:
            graph.transition(JobStatus.CANCELED)
            await asyncio.shield(self._terminate())
            return
        graph.transition(JobStatus.CANCELLING)
        self._backoffs.stop()
        cancel_calls = self._stop_all()
        self._slots.declare()
        if cancel_calls:
            await asyncio.gather(*cancel_calls, return_exceptions=True)
        if self.status is JobStatus.CANCELLING:  # not suspended while we waited
            graph.transition(JobStatus.CANCELED)
            await asyncio.shield(self._terminate())

    def suspend(self) -> None:
        """Leadership lost: stop here without touching HA data; the next leader resumes the job.

        The status becomes SUSPENDED and `result_future` is cancelled: this leadership
        produces no JobResult for the job.
        """
        graph = self.execution_graph
        if graph.status.is_terminal:
            return
        graph.transition(JobStatus.SUSPENDED)
        log.info(
            "job %s (session %s): suspended; its HA data stays for the next leader", self.job_id, self.job_master_id
        )
        self._backoffs.stop()
        self._stop_all()
        self._slots.declare()
        self.result_future.cancel()
        LONG_LIVED_GRAPHS.release(graph)

    def overview(self) -> JobOverview:
        """The job's status, times and subtasks per state, as of now."""
        return self.execution_graph.overview()

    def snapshot(self) -> JobSnapshot:
        """The job with its vertices and subtasks, as of now."""
        return self.execution_graph.snapshot()

    def vertex_result(self, vertex_id: str) -> VertexResult | None:
        """One vertex's outcome so far; None if the job has no such vertex."""
        if vertex_id not in self.execution_graph.vertex_ids:
            return None
        return self.execution_graph.vertex_result(vertex_id, results=self._results)

    def finished(self) -> Finished:
        return finished(self.execution_graph)

    def snapshot_off_loop(self) -> Awaitable[JobSnapshot]:
        """`snapshot()` as of the call: captured now in immutable values, built in a thread (where a
        large job's takes tens of ms instead of stalling the loop); a globally terminal job's graph
        no longer changes, so its capture is taken in the thread too."""
        if self.status.is_globally_terminal:
            return asyncio.to_thread(self.execution_graph.snapshot)
        return asyncio.to_thread(self.execution_graph.capture().build)

    async def join(self) -> None:
        """Wait for the background calls this JobMaster started (deployments, cancellations, the
        JobResult's publication)."""
        await self._calls.join()
        if self._publishing is not None:
            await asyncio.shield(self._publishing)

    # ------------------------------------------------------------------ SlotListener

    def slots_allocated(self, slots: Sequence[AllocatedSlot]) -> None:
        """Deploy waiting subtasks to these slots; slots nobody waits for go straight back."""
        for slot in slots:
            self._reconciliation.slot_allocated(slot)
            ev = self._slots.take(slot) if self.status is JobStatus.RUNNING else None
            if ev is None:
                log.info(
                    "job %s (session %s): slot %s of %s not needed; released",
                    self.job_id,
                    self.job_master_id,
                    slot.allocation_id,
                    slot.task_executor_id,
                )
                self._slots.declare()
                self._slots.give_back(slot.allocation_id)
                continue
            self._deploy(ev, slot)
        self._slots.declare()

    def slot_request_failed(self, error: BaseException) -> None:
        """No slot in time: the waiting subtasks fail with `error`, under the restart strategy."""
        if self.status is not JobStatus.RUNNING or not self._slots.waiting:
            return
        failure = Failure.from_exception(error)
        waiting = list(self._slots.waiting.values())
        self._slots.waiting.clear()
        self._slots.forget_declared()
        log.warning(
            "job %s (session %s): slot request failed for %d subtask(s): %s",
            self.job_id,
            self.job_master_id,
            len(waiting),
            error,
        )
        self._fail_over([(ev, failure) for ev in waiting])

    def task_executor_lost(self, task_executor_id: str, allocation_ids: Sequence[str], reason: str) -> None:
        """A TaskExecutor is gone: the attempts it ran fail and restart elsewhere, and so do the
        producers of the results it kept that a reader still needs (one restart for all).

        Durable result partitions it wrote live on shared storage and stay in use; one that turns
        out unreadable is re-created when its consumer's read fails.
        """
        lost_allocations = set(allocation_ids)
        self._slots.lost_with(task_executor_id, lost_allocations)
        if self.status is not JobStatus.RUNNING:
            return
        producers = self._kept.lost(task_executor_id)
        if producers:
            log.warning(
                "job %s (session %s): TaskExecutor %s (%s) kept the results of %s; running them again",
                self.job_id,
                self.job_master_id,
                task_executor_id,
                reason,
                ", ".join(str(ev.id) for ev in producers),
            )
        lost = Failure(
            "PartitionLost",
            f"TaskExecutor {task_executor_id} was lost ({reason}) with the results it kept; their producers run again",
        )
        failed = self._reconciliation.lost(task_executor_id, lost_allocations, reason)
        self._fail_over(failed, results_lost=producers, cause=lost)
        self._slots.declare()  # it is watched no more

    def task_executor_heartbeat(self, task_executor_id: str, executions: Sequence[ExecutionReport]) -> None:
        """A TaskExecutor's heartbeat lists this job's executions there: reconcile them both ways.

        One this JobMaster no longer runs (an attempt replaced by a restart whose cancel was
        lost, or of a former JobMaster) is cancelled, or it would hold its slot until it ends.
        One this JobMaster deployed there that its heartbeats keep omitting fails over.
        """
        running = self.status is JobStatus.RUNNING
        self._fail_over(self._reconciliation.heartbeat(task_executor_id, executions, running=running))

    def _fail_over(
        self, failed: Failed, *, results_lost: Sequence[ExecutionVertex] = (), cause: Failure | None = None
    ) -> None:
        """Fail these attempts and run again the producers of `results_lost`, as one failure (one
        restart): the first attempt's, else `cause`."""
        for ev, failure in failed:
            self._mark_failed(ev, ev.current, failure)
        first = failed[0][1] if failed else cause
        if first is not None and (failed or results_lost):
            self._handle_failure([ev.id for ev, _ in failed] + [ev.id for ev in results_lost], first)

    # ------------------------------------------------------------------ scheduling

    def _schedule(self) -> None:
        """Schedule every subtask whose inputs are all readable; finish the job when all are done.

        The ExecutionGraph keeps track of which subtasks became schedulable, so this costs time
        in proportion to them, not to the size of the graph; more than `SCHEDULE_SLICE` of them
        are scheduled a slice per turn of the loop, which answers other calls in between.
        """
        if self._more_to_schedule is not None:
            self._more_to_schedule.cancel()  # this call takes the next slice
            self._more_to_schedule = None
        graph = self.execution_graph
        if graph.status is not JobStatus.RUNNING:
            return
        if graph.all_finished():
            graph.transition(JobStatus.FINISHED)
            log.info("job %s (session %s) finished", self.job_id, self.job_master_id)
            self._terminate()
            return
        taken = graph.take_schedulable(held_back=self._backoffs.held_back, limit=SCHEDULE_SLICE)
        for ev in taken:
            ev.current.transition(ExecutionState.SCHEDULED)
            self._slots.waiting[ev.id] = ev
        graph.touch()
        self._slots.declare()
        if len(taken) == SCHEDULE_SLICE:
            self._more_to_schedule = asyncio.get_running_loop().call_soon(self._schedule)

    def _deploy(self, ev: ExecutionVertex, slot: AllocatedSlot) -> None:
        execution = ev.current
        with log_context(job_id=self.job_id, vertex=ev.vertex.id, subtask=ev.subtask_index, attempt=execution.attempt):
            execution.slot = slot
            self._kept.placed(ev, slot.task_executor_id)
            execution.transition(ExecutionState.DEPLOYING)
            execution.deployed_at = self._clock()
            self._events.task_deployed()
            self.execution_graph.deployed(ev)
            self._slots.held[slot.allocation_id] = execution
            self._deployments.deploying(execution.execution_id, slot.task_executor_id)
            tdd = deployment_descriptor(
                self.execution_graph, ev, slot, job_master_id=self.job_master_id, results=self._results
            )
            log.info(
                "job %s (session %s): deploying %s attempt %d (%s) to %s slot %d",
                self.job_id,
                self.job_master_id,
                ev.id,
                execution.attempt,
                execution.execution_id,
                slot.task_executor_id,
                slot.slot_index,
            )
            self._calls.spawn(self._send_deployment(ev, execution, tdd))

    async def _send_deployment(self, ev: ExecutionVertex, execution: Execution, tdd: TaskDeploymentDescriptor) -> None:
        slot = execution.slot
        assert slot is not None
        try:
            sent = await self._calls.deploy(slot, tdd, wanted=lambda: self._deploying(ev, execution))
        except Exception as exc:  # noqa: BLE001 - not the broker's trouble: this attempt fails
            if self._deploying(ev, execution):
                log.warning(
                    "job %s (session %s): deploying %s to %s failed: %s",
                    self.job_id,
                    self.job_master_id,
                    ev.id,
                    slot.task_executor_id,
                    exc,
                )
                self._on_failed(ev, execution, Failure.from_exception(exc))
            return
        if sent:
            self._deployments.sent(execution.execution_id)

    def _deploying(self, ev: ExecutionVertex, execution: Execution) -> bool:
        return (
            ev.current is execution and execution.state is ExecutionState.DEPLOYING and self.status is JobStatus.RUNNING
        )

    # ------------------------------------------------------------------ finished and failed attempts

    def _on_finished(self, ev: ExecutionVertex, execution: Execution, update: ExecutionStateUpdate) -> None:
        schema = update.result_schema if update.result_path is not None else None
        kept = update.result_path is not None and self.execution_graph.kept.is_kept(ev.vertex.id)
        execution.keep(
            SubtaskProgress(
                update.result_path,
                update.rows,
                result_schema=schema,
                input_files=update.input_files,
                kept_on=execution.task_executor_id if kept else None,
            )
        )
        self._kept.kept(ev)
        self.execution_graph.keep_chained_rows(ev, update.chained_rows)
        self._release_slot(execution)
        self._slots.declare()
        # The TaskExecutor's report is answered now; the record and the scheduling follow it.
        self._calls.spawn(self._record_finished(ev, execution))

    async def _record_finished(self, ev: ExecutionVertex, execution: Execution) -> None:
        """Write the FINISHED subtask to the ProgressStore, then schedule what it unblocks."""
        if self.status is not JobStatus.RUNNING:
            return  # cancelled, failed or suspended meanwhile: the record would serve nobody
        graph = self.execution_graph
        if not await record_task(self._progress_store, self.job_master_id, self.job_id, graph, ev):
            return
        if ev.current is not execution or execution.state is not ExecutionState.FINISHED:
            return  # restarted while the record was written
        mark_recorded(graph, ev)
        log.info(
            "job %s (session %s): %s attempt %d finished (%s rows)",
            self.job_id,
            self.job_master_id,
            ev.id,
            execution.attempt,
            execution.rows,
        )
        for task_executor_id, vertex_id in self._kept.finished(ev):
            self._calls.release_results(task_executor_id, vertex_id)
        self._schedule()

    def _on_failed(self, ev: ExecutionVertex, execution: Execution, failure: Failure) -> None:
        """`execution` (already FAILED or CANCELED, or about to be) failed with `failure`."""
        self._mark_failed(ev, execution, failure)
        log.warning(
            "job %s (session %s): %s attempt %d failed: %s: %s",
            self.job_id,
            self.job_master_id,
            ev.id,
            execution.attempt,
            failure.cls,
            failure.message,
        )
        graph = self.execution_graph
        for producer_id in unreadable_inputs(graph, ev, failure):
            graph.subtask(producer_id).partition_lost = True
            log.warning(
                "job %s (session %s): %s could not read the result of %s; running it again",
                self.job_id,
                self.job_master_id,
                ev.id,
                producer_id,
            )
        self._handle_failure([ev.id], failure)

    def _mark_failed(self, ev: ExecutionVertex, execution: Execution, failure: Failure) -> None:
        if not execution.state.is_terminal:
            execution.transition(ExecutionState.FAILED)
            self._events.task_ended(ExecutionState.FAILED.value, execution.ran_for(self._clock()))
        execution.failure = failure
        self._slots.waiting.pop(ev.id, None)
        self._release_slot(execution)

    def _handle_failure(self, failed: Iterable[SubtaskId], failure: Failure) -> None:
        """Restart the failed subtasks' regions after the backoff, or fail the job."""
        graph = self.execution_graph
        if graph.status is not JobStatus.RUNNING:
            return
        self.restart_strategy.notify_failure()
        refused = restart_refused(self.restart_strategy, failure)
        if refused is not None:
            log.error("job %s (session %s): %s", self.job_id, self.job_master_id, refused)
            self._fail(failure)
            return
        restart = tasks_to_restart(graph, failed, released=self._kept.released)
        backoff_s = self.restart_strategy.backoff_s()
        restarted: list[SubtaskId] = []
        for subtask_id in restart:
            ev = graph.subtask(subtask_id)
            if ev.state is ExecutionState.CREATED:
                continue  # not started: it simply waits for its inputs again
            self._stop(ev)
            graph.new_attempt(ev)
            self._kept.restarted(ev)
            restarted.append(subtask_id)
        log.info(
            "job %s (session %s): restarting %s in %.3fs after %s",
            self.job_id,
            self.job_master_id,
            ", ".join(map(str, restarted)),
            backoff_s,
            failure.cls,
        )
        self._backoffs.hold(restarted, backoff_s, then=self._schedule)
        self._slots.declare()

    def _fail(self, failure: Failure) -> None:
        graph = self.execution_graph
        graph.failure = failure
        graph.transition(JobStatus.FAILING)
        self._backoffs.stop()
        self._stop_all()
        graph.transition(JobStatus.FAILED)
        self._terminate()

    def _terminate(self) -> asyncio.Task[None]:
        """The job reached a globally terminal status: release everything, publish the JobResult
        (built in a thread: `result_future` resolves once the returned task is done)."""
        self._backoffs.clear()
        self._slots.declare()
        sites = self._kept.sites()
        if self._kept.active and self.execution_graph.restored is not None:
            # a former leader may have run kept producers it never recorded, on any TaskExecutor
            sites |= set(self._calls.registered_task_executors())
        for task_executor_id in sorted(sites):
            self._calls.release_results(task_executor_id, None)
        self._publishing = asyncio.get_running_loop().create_task(
            publish_result(self.execution_graph, self._results, self.result_future, session_id=self.job_master_id)
        )
        self._publishing.add_done_callback(lambda _: LONG_LIVED_GRAPHS.release(self.execution_graph))
        return self._publishing

    # ------------------------------------------------------------------ stopping attempts

    def _stop_all(self) -> list[asyncio.Task[Any]]:
        """Cancel every attempt that is not terminal; returns the cancel calls sent to TaskExecutors."""
        return [call for ev in self.execution_graph.subtasks() if (call := self._stop(ev)) is not None]

    def _stop(self, ev: ExecutionVertex) -> asyncio.Task[Any] | None:
        """Cancel `ev`'s attempt if it is not terminal (on its TaskExecutor if it was deployed)."""
        self._slots.waiting.pop(ev.id, None)
        return self._calls.stop(ev.current, release=self._release_slot)

    def _release_slot(self, execution: Execution) -> None:
        self._deployments.forget(execution.execution_id)
        self._slots.release(execution)
