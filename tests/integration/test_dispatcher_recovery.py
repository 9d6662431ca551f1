"""The Dispatcher's recovery on ZooKeeper HA, across a real leadership change: a stored job that
cannot be read fails alone, and a cancel answered by a leader that then lost leadership is
finished by the next one. JobMasters are small fakes; the stores and the election are real."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient

from sparkdispatch.archive import JobArchive
from sparkdispatch.config import Configuration
from sparkdispatch.dispatcher import Dispatcher
from sparkdispatch.errors import LeadershipLost
from sparkdispatch.ha import JobProgress, SubtaskProgress
from sparkdispatch.ha.services import ZooKeeperHaServices
from sparkdispatch.jobgraph import ExecutionState, JobGraph, JobResult, JobStatus, JobVertex, VertexResult
from sparkdispatch.settings import ArchiveSettings, CleanupSettings
from sparkdispatch.snapshot import JobOverview, JobSnapshot
from sparkdispatch.testing.contender import RecordingContender, leading

WAIT = 30.0


class QuietJobMaster:
    """Runs nothing; cancelling it ends it CANCELED unless it was suspended meanwhile."""

    created: list[QuietJobMaster] = []
    cancel_gate: asyncio.Event | None = None

    def __init__(self, graph: JobGraph, recovered_progress: JobProgress | None) -> None:
        self.graph = graph
        self.result_future: asyncio.Future[JobResult] = asyncio.get_running_loop().create_future()
        self.status = JobStatus.INITIALIZING
        self.started = self.cancelled = False
        QuietJobMaster.created.append(self)

    def start(self) -> None:
        self.started = True
        self.status = JobStatus.RUNNING

    async def cancel(self) -> None:
        self.cancelled = True
        if QuietJobMaster.cancel_gate is not None:
            await QuietJobMaster.cancel_gate.wait()
        if self.status is not JobStatus.SUSPENDED:
            self.status = JobStatus.CANCELED
            assert self.graph.job_id is not None
            self.result_future.set_result(JobResult(
                job_id=self.graph.job_id, name=self.graph.name, status=JobStatus.CANCELED, start_time=1, end_time=2,
                vertices={v.id: VertexResult(ExecutionState.CANCELED, 0) for v in self.graph.vertices}))

    def suspend(self) -> None:
        self.status = JobStatus.SUSPENDED

    def overview(self) -> JobOverview:
        assert self.graph.job_id is not None
        return JobOverview(job_id=self.graph.job_id, name=self.graph.name, status=self.status, start_time=1,
                           end_time=None, duration_ms=0, last_modification=1)

    def snapshot(self) -> JobSnapshot:
        return JobSnapshot(self.overview())

    async def snapshot_off_loop(self) -> JobSnapshot:
        return self.snapshot()

    def finished(self) -> dict[str, dict[int, SubtaskProgress]]:
        return {}


def graph(job_id: str, *, vertices: int = 1) -> JobGraph:
    return JobGraph(name="etl", job_id=job_id, vertices=tuple(
        JobVertex(id=f"v{i}", entrypoint="pipelines.sales:extract", inputs=(f"v{i - 1}",) if i else ())
        for i in range(vertices)))


def dispatcher_of(services: ZooKeeperHaServices, session_id: str) -> Dispatcher:
    config = services.config

    async def new_job_master(graph: JobGraph, recovered: JobProgress | None) -> QuietJobMaster:
        return QuietJobMaster(graph, recovered)

    return Dispatcher(session_id=session_id, address="http://m:8081", jobgraph_store=services.jobgraph_store,
                      job_result_store=services.job_result_store, progress_store=services.progress_store,
                      archive=JobArchive(ArchiveSettings.from_config(config), check=services.check_leadership),
                      blob_store=services.blob_store, new_job_master=new_job_master,
                      cleanup=CleanupSettings.from_config(config))


async def until(predicate: Callable[[], bool], timeout: float = WAIT) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


@pytest.fixture
def zk_config(zk_config: Configuration) -> Configuration:
    """The masters of this module (`zk_masters`): large graphs live in files, cleanups retry at once."""
    return zk_config.with_overrides({"high-availability.zookeeper.inline-limit": "1kb",
                                     "cleanup-strategy.initial-backoff": "20ms",
                                     "cleanup-strategy.max-backoff": "100ms"})


@pytest.fixture(autouse=True)
def no_job_masters_yet() -> None:
    QuietJobMaster.created, QuietJobMaster.cancel_gate = [], None


async def test_a_job_whose_graph_file_is_gone_fails_alone(zk_masters: list[ZooKeeperHaServices]) -> None:
    services = zk_masters[0]
    session = await leading(services.election)
    good, lost = "b" * 32, "c" * 32
    await services.jobgraph_store.put(session, graph(good))
    await services.jobgraph_store.put(session, graph(lost, vertices=30))  # large: its znode points to a file
    [graph_file] = [p for p in services.store_dir("jobgraphs").iterdir() if p.name.startswith(lost)]
    graph_file.unlink()  # the commit landed, the file did not survive

    dispatcher = dispatcher_of(services, session)
    await dispatcher.start()

    assert [m.graph.job_id for m in QuietJobMaster.created] == [good]
    await until(lambda: set(dispatcher._jobs) == {good} and not dispatcher._cleanups)
    result = await dispatcher.job_result(lost)
    assert result is not None and result.status is JobStatus.FAILED and result.failure is not None
    assert "missing" in result.failure.message and lost in result.failure.message
    assert await services.jobgraph_store.job_ids() == {good}  # its znode is cleaned up too
    assert await services.job_result_store.dirty_job_ids() == []
    await dispatcher.stop()


async def test_a_cancel_answered_before_leadership_was_lost_is_finished_by_the_next_leader(
        zk_masters: list[ZooKeeperHaServices], zk_admin: KazooClient) -> None:
    first, second = zk_masters
    job_id = "d" * 32
    old_session = await leading(first.election)
    old = dispatcher_of(first, old_session)
    await old.start()
    await old.submit(graph(job_id))
    QuietJobMaster.cancel_gate = asyncio.Event()
    cancel = asyncio.create_task(old.cancel(job_id))
    await until(lambda: QuietJobMaster.created[0].cancelled)

    second_contender = RecordingContender()
    second.election.start(second_contender)
    zk_admin.delete(first.election.fence(old_session, "test"))  # the first leader's session is gone
    await asyncio.wait_for(second_contender.granted.wait(), WAIT)
    await old.stop()  # as its master does on the revocation
    QuietJobMaster.cancel_gate.set()
    await cancel  # it had been answered 202
    with pytest.raises(LeadershipLost):
        await first.progress_store.record_cancel(old_session, job_id)

    assert second_contender.session_id is not None
    new = dispatcher_of(second, second_contender.session_id)
    await new.start()
    recovered: Any = QuietJobMaster.created[1]
    await until(lambda: not new._jobs and not new._cleanups)
    assert recovered.cancelled and not recovered.started
    result = await new.job_result(job_id)
    assert result is not None and result.status is JobStatus.CANCELED
    assert await second.jobgraph_store.job_ids() == set()
    assert not (await second.progress_store.get(job_id)).cancel_requested
    await new.stop()
