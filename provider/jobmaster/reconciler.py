"""Which deployed executions have vanished from their TaskExecutor (Flink's ExecutionDeploymentReconciler).

A JobMaster hands a deployment to the broker and hears nothing back until the TaskExecutor
reports a state, so a deployment lost on the way (a broker restart) or a final state report
lost after its retries would leave the execution DEPLOYING or RUNNING forever. Each heartbeat of
a TaskExecutor lists the executions it has: taken from the broker (not started yet), running,
and ended but not yet reported. `ExecutionDeploymentReconciler` compares that list with the
executions the JobMaster deployed there:

- an execution the TaskExecutor lists, or reports a state of, is *acknowledged*;
- an execution missing from `missing_threshold` heartbeats in a row is lost, but one never
  acknowledged only once `grace_s` have also passed since the broker took it (the TaskExecutor's
  worker may be reconnecting to the broker). One still being handed to the broker is never lost
  here: its sender retries it.

Executions a TaskExecutor lists that the JobMaster does not run are the other direction of the
reconciliation; the JobMaster cancels those itself. Plain synchronous code on the JobMaster's loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass


@dataclass
class _Deployment:
    task_executor_id: str
    sent_at: float | None = None  # when the broker took it; None while it is still being sent
    acknowledged: bool = False
    missing: int = 0  # heartbeats in a row of its TaskExecutor that omitted it


@dataclass(frozen=True)
class MissingExecution:
    """A deployed execution its TaskExecutor no longer (or never) listed."""

    execution_id: str
    task_executor_id: str
    acknowledged: bool  # False: the TaskExecutor never had it, the deployment was lost on the way
    heartbeats: int  # heartbeats in a row that omitted it
    since_sent_s: float


class ExecutionDeploymentReconciler:
    """The executions one JobMaster deployed, per TaskExecutor, and which of them went missing."""

    def __init__(self, *, missing_threshold: int, grace_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if missing_threshold < 1:
            raise ValueError(f"missing execution threshold must be >= 1, got {missing_threshold}")
        self._threshold = missing_threshold
        self._grace_s = grace_s
        self._clock = clock
        self._deployments: dict[str, _Deployment] = {}

    def deploying(self, execution_id: str, task_executor_id: str) -> None:
        """The execution is being sent to that TaskExecutor."""
        self._deployments[execution_id] = _Deployment(task_executor_id)

    def sent(self, execution_id: str) -> None:
        """The broker took the deployment: its grace starts."""
        deployment = self._deployments.get(execution_id)
        if deployment is not None:
            deployment.sent_at = self._clock()

    def acknowledged(self, execution_id: str) -> None:
        """The TaskExecutor reported a state of the execution: it has it."""
        deployment = self._deployments.get(execution_id)
        if deployment is not None:
            deployment.acknowledged = True
            deployment.missing = 0

    def forget(self, execution_id: str) -> None:
        """The execution ended (or failed over) here: nothing more to compare."""
        self._deployments.pop(execution_id, None)

    def reconcile(self, task_executor_id: str, listed: Collection[str]) -> list[MissingExecution]:
        """A heartbeat of `task_executor_id` listed these execution ids: the deployments there that
        are lost now (they stay tracked until `forget`)."""
        now = self._clock()
        lost = []
        for execution_id, deployment in self._deployments.items():
            if deployment.task_executor_id != task_executor_id:
                continue
            if execution_id in listed:
                deployment.acknowledged = True
                deployment.missing = 0
                continue
            if deployment.sent_at is None:
                continue
            deployment.missing += 1
            since_sent = now - deployment.sent_at
            if deployment.missing >= self._threshold and (deployment.acknowledged or since_sent >= self._grace_s):
                lost.append(
                    MissingExecution(
                        execution_id, task_executor_id, deployment.acknowledged, deployment.missing, since_sent
                    )
                )
        return lost
