"""`FakeJobMaster`: what a Dispatcher sees of a JobMaster, running nothing, for tests of the Dispatcher.

Pass the class as the Dispatcher's `new_job_master`; each one made is appended to
`FakeJobMaster.created` (`FakeJobMaster.reset()` empties it and opens the cancel gate). The test
ends a job with `finish()`; a cancel waits for `cancel_gate` when one is set, and then ends the
job CANCELED unless it was suspended meanwhile (as the real JobMaster does).
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from sparkdispatch.ha import JobProgress, SubtaskProgress
from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.model.job_graph import JobGraph
from sparkdispatch.model.job_result import JobResult, VertexResult
from sparkdispatch.model.protocol import ExecutionStateUpdate
from sparkdispatch.model.snapshot import JobOverview, JobSnapshot


class FakeJobMaster:
    """Runs nothing: the test ends the job by `finish()` (or `cancel()`)."""

    created: ClassVar[list[FakeJobMaster]] = []
    cancel_gate: ClassVar[asyncio.Event | None] = None

    def __init__(self, graph: JobGraph, recovered_progress: JobProgress | None) -> None:
        self.graph = graph
        self.recovered_progress = recovered_progress
        self.result_future: asyncio.Future[JobResult] = asyncio.get_running_loop().create_future()
        self.status = JobStatus.INITIALIZING
        self.cancelled = False
        self.suspended = False
        self.started = False
        self.done: dict[str, dict[int, SubtaskProgress]] = {}  # what `finished()` reports
        FakeJobMaster.created.append(self)

    @classmethod
    def reset(cls) -> None:
        """Forget the JobMasters made so far; cancels go through at once again."""
        FakeJobMaster.created = []
        FakeJobMaster.cancel_gate = None

    def start(self) -> None:
        self.started = True
        self.status = JobStatus.RUNNING

    def finish(self, status: JobStatus = JobStatus.FINISHED) -> None:
        """End the job with `status`; a FINISHED job reports every subtask finished."""
        self.status = status
        if status is JobStatus.FINISHED:
            self.done = {
                v.id: {i: SubtaskProgress(f"/results/{v.id}/{i}", 1) for i in range(v.parallelism)}
                for v in self.graph.vertices
            }
        assert self.graph.job_id is not None
        self.result_future.set_result(
            JobResult(
                job_id=self.graph.job_id,
                name=self.graph.name,
                status=status,
                start_time=1,
                end_time=5,
                vertices={v.id: VertexResult(state=ExecutionState.FINISHED, attempts=1) for v in self.graph.vertices},
            )
        )

    async def cancel(self) -> None:
        self.cancelled = True
        if FakeJobMaster.cancel_gate is not None:
            await FakeJobMaster.cancel_gate.wait()
        if self.status is not JobStatus.SUSPENDED:
            self.finish(JobStatus.CANCELED)

    def suspend(self) -> None:
        self.suspended = True
        self.status = JobStatus.SUSPENDED

    def overview(self) -> JobOverview:
        assert self.graph.job_id is not None
        return JobOverview(
            job_id=self.graph.job_id,
            name=self.graph.name,
            status=self.status,
            start_time=1,
            end_time=None,
            duration_ms=0,
            last_modification=1,
        )

    def snapshot(self) -> JobSnapshot:
        return JobSnapshot(self.overview())

    async def snapshot_off_loop(self) -> JobSnapshot:
        return self.snapshot()

    def finished(self) -> dict[str, dict[int, SubtaskProgress]]:
        return self.done

    # what TaskExecutors' reports and a vertex's REST page reach: no Dispatcher test goes there

    def update_execution_state(self, update: ExecutionStateUpdate) -> None:
        raise AssertionError("a FakeJobMaster runs no task to report on")

    def vertex_result(self, vertex_id: str) -> VertexResult | None:
        raise AssertionError("a FakeJobMaster keeps no vertex results")
