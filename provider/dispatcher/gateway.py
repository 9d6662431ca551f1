"""What the REST endpoint calls on the Dispatcher (`DispatcherGateway`), who may act on which
jobs (`PoolAccess`), and a submission's answer."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sparkdispatch.errors import Forbidden
from sparkdispatch.jobmaster.gateways import JobMasterGateway
from sparkdispatch.model.job_graph import JobGraph
from sparkdispatch.model.job_result import JobResult, VertexResult
from sparkdispatch.model.repair import RepairAnswer
from sparkdispatch.model.snapshot import JobOverview, JobSnapshot
from sparkdispatch.model.states import JobStatus


@dataclass(frozen=True)
class Submission:
    """The answer to a submission: the job's id, whether this call created it, and its status."""

    job_id: str
    created: bool
    status: JobStatus


@dataclass(frozen=True)
class PoolAccess:
    """A caller who submits, cancels or repairs jobs: its name, and the TaskExecutor pools whose
    jobs it may act on (None: every pool)."""

    name: str
    pools: frozenset[str] | None = None

    def may_act_in(self, pool: str) -> bool:
        """Whether this caller may submit, cancel or repair a job of TaskExecutor pool `pool`."""
        return self.pools is None or pool in self.pools

    def check(self, pool: str, action: str) -> None:
        """`Forbidden` when this caller may not `action` a job of pool `pool`."""
        if not self.may_act_in(pool):
            allowed = ", ".join(sorted(self.pools or ()))
            raise Forbidden(
                f"{self.name} may {action} jobs of the pools {allowed} only; this job runs in pool {pool!r}"
            )


EVERY_POOL = PoolAccess("anyone")
"""A caller limited to no pool (a master without tokens, or a caller inside the master)."""


class DispatcherGateway(Protocol):
    """What the REST endpoint calls on the Dispatcher, on the master's loop.

    Until the Dispatcher has recovered its jobs, every call but `job_counts` raises
    `RecoveryInProgress` (`job_master` only for a job it does not run yet).
    """

    @abstractmethod
    async def submit(self, graph: JobGraph, *, access: PoolAccess = EVERY_POOL) -> Submission:
        """Accept a job, or answer for the same job (same id and graph) submitted before;
        `Forbidden` when `access` does not reach the graph's pool."""

    @abstractmethod
    async def cancel(self, job_id: str, *, access: PoolAccess = EVERY_POOL) -> None:
        """Cancel a running job; idempotent for a cancelled one; `Forbidden` when `access` does not
        reach the job's pool."""

    @abstractmethod
    async def repair(self, job_id: str, vertices: Sequence[str], *, access: PoolAccess = EVERY_POOL) -> RepairAnswer:
        """Run `vertices` of an ended job again, with their consumers, reusing the other results;
        `Forbidden` when `access` does not reach the job's pool."""

    @abstractmethod
    def job_overviews(self) -> list[JobOverview]:
        """Every job, running and finished, the most recently started first."""

    @abstractmethod
    async def job_snapshot(self, job_id: str) -> JobSnapshot:
        """One job with its vertices and subtasks; `UnknownJob` if there is no such job."""

    @abstractmethod
    async def job_result(self, job_id: str, *, wait_s: float = 0.0) -> JobResult | None:
        """The JobResult, waiting up to `wait_s` for a running job; None while it runs."""

    @abstractmethod
    async def vertex_result(self, job_id: str, vertex_id: str) -> tuple[JobStatus, VertexResult]:
        """The job's status and one vertex's outcome so far; `UnknownJob`, or `RouteNotFound` for
        a vertex the job does not have."""

    @abstractmethod
    async def vertex_results(self, job_id: str) -> tuple[JobStatus, dict[str, VertexResult]]:
        """The job's status and every vertex's outcome so far, in the graph's order; `UnknownJob`."""

    @abstractmethod
    def job_counts(self) -> dict[str, int]:
        """Jobs by status (during recovery: those known so far)."""

    @abstractmethod
    def job_master(self, job_id: str) -> JobMasterGateway:
        """The running JobMaster of `job_id`; `UnknownJob` if it does not run here."""
