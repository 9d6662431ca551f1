"""The Dispatcher's recovery on ZooKeeper HA, across a real leadership change: a stored job that
cannot be read fails alone, and a cancel answered by a leader that then lost leadership is
finished by the next one. JobMasters are small fakes (`FakeJobMaster`); the stores and the election are real."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kazoo.client import KazooClient

from sparkdispatch.dispatcher.archive import JobArchive
from sparkdispatch.config import Configuration
from sparkdispatch.dispatcher.dispatcher import Dispatcher
from sparkdispatch.errors import LeadershipLost
from sparkdispatch.ha import JobProgress
from sparkdispatch.ha.services import ZooKeeperHaServices
from sparkdispatch.model.states import JobStatus
from sparkdispatch.model.job_graph import JobGraph, JobVertex
from sparkdispatch.dispatcher.settings import ArchiveSettings, CleanupSettings
from sparkdispatch.testing.contender import RecordingContender, leading
from sparkdispatch.testing.fake_job_master import FakeJobMaster
from sparkdispatch.testing.waiting import eventually

WAIT = 30.0


def graph(job_id: str, *, vertices: int = 1) -> JobGraph:
    return JobGraph(
        name="etl",
        job_id=job_id,
        vertices=tuple(
            JobVertex(id=f"v{i}", entrypoint="pipelines.sales:extract", inputs=(f"v{i - 1}",) if i else ())
            for i in range(vertices)
        ),
    )


def dispatcher_of(services: ZooKeeperHaServices, session_id: str) -> Dispatcher:
    config = services.config

    async def new_job_master(graph: JobGraph, recovered: JobProgress | None) -> FakeJobMaster:
        return FakeJobMaster(graph, recovered)

    return Dispatcher(
        session_id=session_id,
        address="http://m:8081",
        jobgraph_store=services.jobgraph_store,
        job_result_store=services.job_result_store,
        progress_store=services.progress_store,
        archive=JobArchive(ArchiveSettings.from_config(config), check=services.check_leadership),
        blob_store=services.blob_store,
        new_job_master=new_job_master,
        cleanup=CleanupSettings.from_config(config),
    )


@pytest.fixture
def zk_config(zk_config: Configuration) -> Configuration:
    """The masters of this module (`zk_masters`): large graphs live in files, cleanups retry at once,
    and FakeJobMaster's jobs, which end in 1970, are not expired from the archive."""
    return zk_config.with_overrides(
        {
            "high-availability.zookeeper.inline-limit": "1kb",
            "cleanup-strategy.initial-backoff": "20ms",
            "cleanup-strategy.max-backoff": "100ms",
            "jobstore.expiration-time": "36500d",
        }
    )


@pytest.fixture(autouse=True)
def no_job_masters_yet() -> None:
    FakeJobMaster.reset()


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

    assert [m.graph.job_id for m in FakeJobMaster.created] == [good]
    await eventually(lambda: set(dispatcher._jobs) == {good} and not dispatcher._cleanups, "only the good job left")
    result = await dispatcher.job_result(lost)
    assert result is not None and result.status is JobStatus.FAILED and result.failure is not None
    assert "missing" in result.failure.message and lost in result.failure.message
    assert await services.jobgraph_store.job_ids() == {good}  # its znode is cleaned up too
    assert await services.job_result_store.dirty_job_ids() == []
    await dispatcher.stop()


async def test_a_cancel_answered_before_leadership_was_lost_is_finished_by_the_next_leader(
    zk_masters: list[ZooKeeperHaServices], zk_admin: KazooClient
) -> None:
    first, second = zk_masters
    job_id = "d" * 32
    old_session = await leading(first.election)
    old = dispatcher_of(first, old_session)
    await old.start()
    await old.submit(graph(job_id))
    FakeJobMaster.cancel_gate = asyncio.Event()
    cancel = asyncio.create_task(old.cancel(job_id))
    await eventually(lambda: FakeJobMaster.created[0].cancelled, "the cancel to reach the JobMaster")

    second_contender = RecordingContender()
    second.election.start(second_contender)
    zk_admin.delete(first.election.fence(old_session, "test"))  # the first leader's session is gone
    await asyncio.wait_for(second_contender.granted.wait(), WAIT)
    await old.stop()  # as its master does on the revocation
    FakeJobMaster.cancel_gate.set()
    await cancel  # it had been answered 202
    with pytest.raises(LeadershipLost):
        await first.progress_store.record_cancel(old_session, job_id)

    assert second_contender.session_id is not None
    new = dispatcher_of(second, second_contender.session_id)
    await new.start()
    recovered: Any = FakeJobMaster.created[1]
    await eventually(lambda: not new._jobs and not new._cleanups, "the new leader's Dispatcher settled")
    assert recovered.cancelled and not recovered.started
    result = await new.job_result(job_id)
    assert result is not None and result.status is JobStatus.CANCELED
    assert await second.jobgraph_store.job_ids() == set()
    assert not (await second.progress_store.get(job_id)).cancel_requested
    await new.stop()
