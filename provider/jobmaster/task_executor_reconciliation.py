"""What a JobMaster makes of what its TaskExecutors tell it about the attempts it deployed.

`TaskExecutorReconciliation` reconciles their heartbeats with the deployments both ways: an
execution a TaskExecutor runs that the JobMaster does not is cancelled there; one the JobMaster
deployed that the heartbeats omit (`ExecutionDeploymentReconciler`) is handed back to fail over,
as are the attempts a lost TaskExecutor took with it. `check_report` refuses a state report the
JobMaster must not apply. Plain synchronous code on the JobMaster's loop.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence

from sparkdispatch.errors import FencingTokenMismatch, InvalidRequest, StaleExecution, UnknownJob
from sparkdispatch.jobmaster.execution import LIVE, ExecutionVertex
from sparkdispatch.jobmaster.execution_graph import ExecutionGraph
from sparkdispatch.jobmaster.reconciler import ExecutionDeploymentReconciler, MissingExecution
from sparkdispatch.jobmaster.task_executor_calls import TaskExecutorCalls
from sparkdispatch.model.job_result import Failure
from sparkdispatch.model.protocol import ExecutionReport, ExecutionStateUpdate
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.resourcemanager import AllocatedSlot
from sparkdispatch.storage.results import ResultLayout

log = logging.getLogger(__name__)

Failed = list[tuple[ExecutionVertex, Failure]]
"""Attempts to fail over, each with its failure."""


def listed_executions(graph: ExecutionGraph, executions: Sequence[ExecutionReport]) -> tuple[set[str], list[str]]:
    """The ids of the executions of `graph`'s job a heartbeat lists, and those of them still running
    there that this JobMaster no longer runs (an attempt replaced by a restart whose cancel was lost,
    or of a former JobMaster)."""
    listed: set[str] = set()
    stale: list[str] = []
    for report in executions:
        if report.job_id != graph.job_id:
            continue
        listed.add(report.execution_id)
        if report.state.is_terminal:
            continue  # ended there, its report on the way
        ev = graph.by_execution_id(report.execution_id)
        if ev is None or ev.state.is_terminal:
            stale.append(report.execution_id)
    return listed, stale


def missing_failures(
    graph: ExecutionGraph, missing: Sequence[MissingExecution]
) -> tuple[list[tuple[ExecutionVertex, Failure]], list[str]]:
    """The live attempts among `missing`, each with the failure that says how it vanished, and the
    ids of the others (ended meanwhile: the reconciler forgets them)."""
    failed: list[tuple[ExecutionVertex, Failure]] = []
    ended: list[str] = []
    for lost in missing:
        ev = graph.by_execution_id(lost.execution_id)
        if ev is None or ev.current.state not in LIVE:
            ended.append(lost.execution_id)
            continue
        attempt = f"attempt {ev.current.attempt} of {ev.id}"
        failed.append(
            (
                ev,
                Failure(
                    "ExecutionLost",
                    f"TaskExecutor {lost.task_executor_id} no longer lists {attempt} ({lost.heartbeats} "
                    "heartbeats in a row), and its final state never arrived: the report was lost",
                )
                if lost.acknowledged
                else Failure(
                    "DeploymentLost",
                    f"{attempt} was sent to TaskExecutor {lost.task_executor_id} "
                    f"{lost.since_sent_s:.1f}s ago, but its last {lost.heartbeats} heartbeats did not "
                    "list it: the deployment was lost on the way (in a broker restart?)",
                ),
            )
        )
    return failed, ended


def attempts_on(graph: ExecutionGraph, task_executor_id: str, allocation_ids: Collection[str]) -> list[ExecutionVertex]:
    """The subtasks whose current attempt runs, not terminal, on the TaskExecutor or in the slots."""
    return [
        ev
        for ev in graph.subtasks()
        if ev.current.slot is not None
        and not ev.state.is_terminal
        and (ev.current.allocation_id in allocation_ids or ev.current.task_executor_id == task_executor_id)
    ]


class TaskExecutorReconciliation:
    """The attempts one JobMaster (`session_id`) deployed, reconciled with its TaskExecutors'
    heartbeats; `deployments` is told of each deployment, and of each attempt that ends."""

    def __init__(
        self,
        graph: ExecutionGraph,
        *,
        session_id: str,
        deployments: ExecutionDeploymentReconciler,
        calls: TaskExecutorCalls,
    ) -> None:
        self._graph = graph
        self._session_id = session_id
        self.deployments = deployments
        self._calls = calls
        self._hostnames: dict[str, str] = {}  # TaskExecutor id -> Celery hostname, from its slots

    def slot_allocated(self, slot: AllocatedSlot) -> None:
        """Learn the Celery hostname of the slot's TaskExecutor (where stale executions are cancelled)."""
        self._hostnames[slot.task_executor_id] = slot.hostname

    def heartbeat(self, task_executor_id: str, executions: Sequence[ExecutionReport], *, running: bool) -> Failed:
        """Cancel the listed executions the JobMaster no longer runs; while the job runs, the
        deployed attempts the heartbeats keep omitting, each with the failure that says how."""
        listed, stale = listed_executions(self._graph, executions)
        for execution_id in stale:
            self._cancel_stale(task_executor_id, execution_id)
        if not running:
            return []
        failed, ended = missing_failures(self._graph, self.deployments.reconcile(task_executor_id, listed))
        for execution_id in ended:
            self.deployments.forget(execution_id)
        for _, failure in failed:
            log.warning(
                "job %s (session %s): %s: %s", self._graph.job_id, self._session_id, failure.cls, failure.message
            )
        return failed

    def lost(self, task_executor_id: str, allocation_ids: Collection[str], reason: str) -> Failed:
        """The attempts a lost TaskExecutor ran, to fail over."""
        affected = attempts_on(self._graph, task_executor_id, allocation_ids)
        if not affected:
            return []
        failure = Failure(
            "TaskExecutorLost", f"TaskExecutor {task_executor_id} was lost ({reason}); its tasks run again elsewhere"
        )
        log.warning(
            "job %s (session %s): TaskExecutor %s lost (%s) with %s",
            self._graph.job_id,
            self._session_id,
            task_executor_id,
            reason,
            ", ".join(str(ev.id) for ev in affected),
        )
        return [(ev, failure) for ev in affected]

    def _cancel_stale(self, task_executor_id: str, execution_id: str) -> None:
        hostname = self._hostnames.get(task_executor_id) or self._calls.task_executor_hostname(task_executor_id)
        if hostname is None:
            return
        log.info(
            "job %s (session %s): %s still runs stale execution %s; cancelling it",
            self._graph.job_id,
            self._session_id,
            task_executor_id,
            execution_id,
        )
        self._calls.cancel(task_executor_id, hostname, execution_id)


def check_report(
    graph: ExecutionGraph, update: ExecutionStateUpdate, *, session_id: str, results: ResultLayout
) -> ExecutionVertex:
    """The subtask a TaskExecutor's report is about. `FencingTokenMismatch` for another JobMaster
    id, `UnknownJob` for another job, `StaleExecution` for an attempt that is not current, and
    `InvalidRequest` for a FINISHED report whose result is not where this master asked the attempt
    to write (another job's data): the report then changes nothing."""
    job_id = graph.job_id
    if update.job_master_id != session_id:
        raise FencingTokenMismatch(f"JobMaster of job {job_id}", session_id, update.job_master_id)
    if update.job_id != job_id:
        raise UnknownJob(update.job_id)
    ev = graph.by_execution_id(update.execution_id)
    if ev is None:
        raise StaleExecution(job_id, update.execution_id, "it is not a current attempt of this job")
    if update.state is not ExecutionState.FINISHED or update.result_path is None:
        return ev
    assigned = results.attempt_path(job_id, ev.vertex.id, ev.subtask_index, update.execution_id)
    if graph.kept.is_kept(ev.vertex.id):
        # kept on its TaskExecutor's disk, whose directory this master does not know: under it, the same layout
        assigned = assigned.removeprefix(results.results_dir)
        if not update.result_path.endswith(assigned) or update.result_path == assigned:
            raise InvalidRequest(
                f"state of attempt {update.execution_id} of {ev.id}",
                {"result_path": [f"{update.result_path!r} is not a kept result of this attempt (…{assigned})"]},
            )
        return ev
    if update.result_path != assigned:
        raise InvalidRequest(
            f"state of attempt {update.execution_id} of {ev.id}",
            {
                "result_path": [
                    f"{update.result_path!r} is not where this master asked the attempt to write: {assigned!r}"
                ]
            },
        )
    return ev
