"""One job as the Dispatcher holds it, from its submission (or recovery) until its cleanup starts."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass

from sparkdispatch.jobmaster.gateways import JobMasterGateway
from sparkdispatch.model.job_graph import JobGraph
from sparkdispatch.model.job_result import JobResult
from sparkdispatch.model.repair import Repair
from sparkdispatch.model.snapshot import JobOverview, JobSnapshot
from sparkdispatch.model.states import JobStatus


@dataclass
class DispatchedJob:
    """A job this Dispatcher answers for until its cleanup starts: reserved at submission (or
    recovered), run by its JobMaster once persisted, concluded once `result` is set."""

    graph: JobGraph | None  # None: its stored graph could not be read, or may not run (over a limit)
    fingerprint: str | None
    # Resolves once the job is persisted and its JobMaster built, or its build failed and the job
    # concluded (None), or to the status of the same job found terminated before; concurrent
    # submissions and calls naming the id wait for it.
    accepted: asyncio.Future[JobStatus | None]
    job_master: JobMasterGateway | None = None
    watcher: asyncio.Task[None] | None = None
    result: JobResult | None = None  # once globally terminal
    #: set once its dirty JobResult is stored: only then is `result` answered, as no later leader
    #: runs the job again (until then a leader change could, and answer another result)
    result_stored: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    cancel_recorded: bool = False  # its cancel is persisted: a recovered job is cancelled, not run
    repairs: tuple[Repair, ...] = ()  # the last one runs, if the job runs a repair

    @property
    def running_repair(self) -> Repair | None:
        return self.repairs[-1] if self.repairs and self.repairs[-1].status is None else None

    @property
    def status(self) -> JobStatus:
        if self.result is not None:
            return self.result.status
        return self.job_master.status if self.job_master is not None else JobStatus.INITIALIZING

    def overview(self) -> JobOverview | None:
        """None while it is only reserved (not persisted yet)."""
        if self.job_master is not None:
            return self.job_master.overview()
        return JobSnapshot.from_result(self.result).overview if self.result is not None else None

    async def snapshot(self) -> JobSnapshot:
        """Of a job run by its JobMaster (built off the loop) or concluded without one."""
        if self.job_master is not None:
            snapshot = await self.job_master.snapshot_off_loop()
        else:
            assert self.result is not None
            snapshot = JobSnapshot.from_result(self.result)
        return dataclasses.replace(snapshot, repairs=self.repairs) if self.repairs else snapshot

    def conclude(self, result: JobResult) -> JobResult:
        """The job is globally terminal with `result` (and so is the repair it ran, if any)."""
        self.result = result
        if self.running_repair is not None:
            self.repairs = (*self.repairs[:-1], self.repairs[-1].ended(result.status))
        return result
