"""The HA stores in both modes, against a real ZooKeeper: contracts, fencing, ACLs and clean-up."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    NoAuthError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)

from sparkdispatch.dispatcher.archive import ArchivedJob, JobArchive
from sparkdispatch.config import Configuration
from sparkdispatch.errors import (
    CorruptedBlob,
    InvalidJobGraph,
    JobResultEntryExists,
    LeadershipLost,
    NoSuchJobResult,
    StoreError,
    StoreUnavailable,
)
from sparkdispatch.ha import FileSystemJobResultStore, HighAvailabilityServices, SubtaskProgress, create_ha_services
from sparkdispatch.ha.files import is_temp
from sparkdispatch.ha.job_result_store import JobResultEntry
from sparkdispatch.ha.jobgraph_store import ZooKeeperJobGraphStore, read_znode
from sparkdispatch.ha.progress_store import ZooKeeperProgressStore
from sparkdispatch.model.repair import Repair
from sparkdispatch.ha.services import ZooKeeperHaServices
from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.model.job_graph import JobGraph, JobVertex
from sparkdispatch.model.job_result import JobResult, VertexResult
from sparkdispatch.dispatcher.settings import ArchiveSettings
from sparkdispatch.model.snapshot import JobSnapshot
from sparkdispatch.testing.contender import RecordingContender, leading
from sparkdispatch.testing.services import ZooKeeperServer
from sparkdispatch.testing.waiting import eventually

WAIT = 30.0


def new_job_id() -> str:
    return uuid.uuid4().hex


def graph(job_id: str, *, vertices: int = 2) -> JobGraph:
    return JobGraph(
        name="etl",
        job_id=job_id,
        vertices=tuple(
            JobVertex(
                id=f"v{i}", entrypoint="pipelines.sales:extract", parallelism=2, inputs=(f"v{i - 1}",) if i else ()
            )
            for i in range(vertices)
        ),
    )


def result(job_id: str, status: JobStatus = JobStatus.FINISHED) -> JobResult:
    return JobResult(
        job_id=job_id,
        name="etl",
        status=status,
        start_time=1000,
        end_time=2500,
        vertices={"v0": VertexResult(state=ExecutionState.FINISHED, attempts=1, rows=3, result_path="/tmp/r/v0")},
    )


def archived(job_id: str, status: JobStatus) -> ArchivedJob:
    job = result(job_id, status)
    return ArchivedJob(job, JobSnapshot.from_result(job), fingerprint="fp")


@pytest.fixture(params=["none", "zookeeper"])
def config(request: pytest.FixtureRequest, tmp_path: Path) -> Configuration:
    config: Configuration = request.getfixturevalue("standalone_config" if request.param == "none" else "zk_config")
    return config


@asynccontextmanager
async def started(config: Configuration) -> AsyncIterator[HighAvailabilityServices]:
    """The HA services of `config`, started; closed on exit."""
    services = create_ha_services(config)
    await services.start()
    try:
        yield services
    finally:
        await services.close()


@asynccontextmanager
async def started_on_zookeeper(config: Configuration) -> AsyncIterator[ZooKeeperHaServices]:
    async with started(config) as services:
        assert isinstance(services, ZooKeeperHaServices)
        yield services


@pytest.fixture
async def services(config: Configuration) -> AsyncIterator[HighAvailabilityServices]:
    async with started(config) as services:
        yield services


async def dirty_ids(store: FileSystemJobResultStore) -> set[str]:
    return set(await store.dirty_job_ids())


def files_of(root: Path, job_id: str) -> list[Path]:
    return [p for p in root.rglob("*") if job_id in p.name] if root.exists() else []


def znodes_of(client: KazooClient, path: str, job_id: str) -> list[str]:
    found = []

    def walk(node: str) -> None:
        try:
            children = client.get_children(node)
        except NoNodeError:
            return
        for child in children:
            full = f"{node}/{child}"
            if job_id in child:
                found.append(full)
            walk(full)

    walk(path)
    return found


def audit_job(services: HighAvailabilityServices, job_id: str) -> tuple[list[Path], list[str]]:
    """Every file and znode of `job_id` this cluster still has."""
    files = files_of(services.config.storage_dir, job_id)
    znodes = (
        znodes_of(services.client, services.paths.cluster, job_id) if isinstance(services, ZooKeeperHaServices) else []
    )
    return files, znodes


# ---------------------------------------------------------------------------- JobGraph store


async def test_jobgraph_store_round_trip_and_removal_leaves_nothing(services: HighAvailabilityServices) -> None:
    session = await leading(services.election)
    store = services.jobgraph_store
    job_a, job_b = new_job_id(), new_job_id()
    assert await store.get(job_a) is None
    await store.put(session, graph(job_a))
    await store.put(session, graph(job_b, vertices=3))
    assert await store.job_ids() == {job_a, job_b}
    assert await store.get(job_a) == graph(job_a)
    await store.put(session, graph(job_a, vertices=1))  # a second put replaces
    assert await store.get(job_a) == graph(job_a, vertices=1)
    await store.remove(session, job_a)
    await store.remove(session, job_a)  # idempotent
    assert await store.job_ids() == {job_b}
    assert await store.get(job_a) is None
    assert audit_job(services, job_a) == ([], [])


async def test_jobgraph_without_id_or_with_bad_id_is_refused(services: HighAvailabilityServices) -> None:
    session = await leading(services.election)
    with pytest.raises(InvalidJobGraph):
        await services.jobgraph_store.put(session, graph(new_job_id()).with_job_id(None))  # type: ignore[arg-type]
    with pytest.raises(StoreError):
        await services.jobgraph_store.get("../../etc")
    assert await services.jobgraph_store.job_ids() == set()


async def test_large_jobgraph_lives_in_a_file_behind_a_pointer(zk_config: Configuration) -> None:
    config = zk_config.with_overrides({"high-availability.zookeeper.inline-limit": "1kb"})
    async with started_on_zookeeper(config) as services:
        session = await leading(services.election)
        store = services.jobgraph_store
        big, small = new_job_id(), new_job_id()
        await store.put(session, graph(big, vertices=40))
        await store.put(session, graph(small, vertices=1))
        files = files_of(config.storage_dir, big)
        assert len(files) == 1 and files[0].parent == services.store_dir("jobgraphs")
        data, _ = services.client.get(f"{services.paths.jobgraphs}/{big}")
        assert len(data) < 200 and files[0].name.encode() in data
        assert files_of(config.storage_dir, small) == []
        assert await store.get(big) == graph(big, vertices=40)
        # a replaced large graph leaves only its newest file
        await store.put(session, graph(big, vertices=41))
        assert len(files_of(config.storage_dir, big)) == 1
        files_of(config.storage_dir, big)[0].write_text("{}")
        with pytest.raises(StoreError, match="corrupted"):
            await store.get(big)
        await store.remove(session, big)
        assert audit_job(services, big) == ([], [])


async def test_deposed_leader_cannot_write_and_the_new_leader_removes_its_jobs(
    zk_masters: list[ZooKeeperHaServices], zk_admin: KazooClient
) -> None:
    first, second = zk_masters
    old_session = await leading(first.election)
    job = new_job_id()
    await first.jobgraph_store.put(old_session, graph(job))
    await first.progress_store.record_subtask(old_session, job, "v0", 0, SubtaskProgress("/r/v0/0", 5))
    second_contender = RecordingContender()
    second.election.start(second_contender)
    # A glitch deposes the first leader: its latch node is gone (as after a session expiry). The
    # second contender's node may be there already: the leader's is the lowest sequence number.
    latch = min(zk_admin.get_children(first.paths.latch), key=lambda name: name[-10:])
    zk_admin.delete(f"{first.paths.latch}/{latch}")
    await asyncio.wait_for(second_contender.granted.wait(), WAIT)
    new_session = second_contender.session_id
    assert new_session is not None and new_session != old_session
    for write in (
        first.jobgraph_store.put(old_session, graph(job, vertices=1)),
        first.jobgraph_store.remove(old_session, job),
        first.progress_store.record_subtask(old_session, job, "v0", 1, SubtaskProgress(None, None)),
        first.progress_store.remove(old_session, job),
    ):
        with pytest.raises(LeadershipLost):
            await write
    # Nothing of the deposed leader blocks the new one (FLINK-10011): it removes the job for good.
    assert await second.jobgraph_store.get(job) == graph(job)
    assert (await second.progress_store.get(job)).finished == {"v0": {0: SubtaskProgress("/r/v0/0", 5)}}
    await second.jobgraph_store.remove(new_session, job)
    await second.progress_store.remove(new_session, job)
    with pytest.raises(LeadershipLost):
        await first.jobgraph_store.put(old_session, graph(job))
    assert await second.jobgraph_store.job_ids() == set()
    assert audit_job(second, job) == ([], [])


async def test_write_is_refused_by_zookeeper_when_the_latch_node_is_gone(zk_config: Configuration) -> None:
    """The ZooKeeper transaction itself fences, whatever the process believes."""
    async with started_on_zookeeper(zk_config) as services:
        gone = f"{services.paths.latch}/never-created"

        class BelievesItLeads:
            def fence(self, session_id: str, component: str) -> str:
                return gone

        store = ZooKeeperJobGraphStore(
            services.client,
            services.paths.jobgraphs,
            BelievesItLeads(),  # type: ignore[arg-type]
            files=services.store_dir("jobgraphs"),
            inline_limit=0,
            write_timeout=4.0,
        )
        job = new_job_id()
        with pytest.raises(LeadershipLost):
            await store.put("any-session", graph(job))
        assert await store.job_ids() == set()
        assert audit_job(services, job) == ([], [])  # the file written first was taken back
        progress = ZooKeeperProgressStore(
            services.client,
            services.paths.progress,
            BelievesItLeads(),  # type: ignore[arg-type]
            write_timeout=4.0,
        )
        with pytest.raises(LeadershipLost):
            await progress.record_subtask("any-session", job, "v", 0, SubtaskProgress("/r/0", 1))
        assert (await progress.get(job)).finished == {}


# ---------------------------------------------------------------------------- progress store


async def test_progress_store_records_and_removes(services: HighAvailabilityServices) -> None:
    session = await leading(services.election)
    store = services.progress_store
    job = new_job_id()
    assert (await store.get(job)).finished == {}
    await store.record_subtask(session, job, "extract", 0, SubtaskProgress("/r/extract/0-e1", 10))
    await store.record_subtask(session, job, "extract", 1, SubtaskProgress(None, None))
    await store.record_subtask(session, job, "load.v2", 0, SubtaskProgress("/r/load/0", 0))
    await store.record_subtask(session, job, "extract", 0, SubtaskProgress("/r/extract/0-e2", 11))  # re-run overwrites
    progress = await store.get(job)
    assert progress.finished == {
        "extract": {0: SubtaskProgress("/r/extract/0-e2", 11), 1: SubtaskProgress(None, None)},
        "load.v2": {0: SubtaskProgress("/r/load/0", 0)},
    }
    assert 1 in progress.finished["extract"] and 1 not in progress.finished["load.v2"]
    with pytest.raises(StoreError):
        await store.record_subtask(session, job, "../x", 0, SubtaskProgress(None, None))
    with pytest.raises(StoreError):
        await store.record_subtask(session, job, "extract", -1, SubtaskProgress(None, None))
    with pytest.raises(LeadershipLost):
        await store.record_subtask("not-the-session", job, "extract", 2, SubtaskProgress(None, None))
    await store.remove(session, job)
    assert (await store.get(job)).finished == {}


async def test_progress_store_keeps_a_results_schema_and_reads_progress_of_before_schemas(
    services: HighAvailabilityServices,
) -> None:
    session = await leading(services.election)
    store = services.progress_store
    job = new_job_id()
    schema = '{"fields":[{"metadata":{},"name":"id","nullable":true,"type":"long"}],"type":"struct"}'
    await store.record_subtask(session, job, "extract", 0, SubtaskProgress("/r/extract/0", 10, result_schema=schema))
    await store.record_subtask(
        session, job, "extract", 1, SubtaskProgress("/r/extract/1", 10)
    )  # as a TaskExecutor of before
    assert (await store.get(job)).finished == {
        "extract": {0: SubtaskProgress("/r/extract/0", 10, schema), 1: SubtaskProgress("/r/extract/1", 10)}
    }
    # the stored form of before (no result_schema key) is what a master of before reads and writes
    assert SubtaskProgress("/r/extract/1", 10).to_dict() == {"result_path": "/r/extract/1", "rows": 10}
    assert SubtaskProgress.from_dict({"result_path": "/r/x", "rows": 1}) == SubtaskProgress("/r/x", 1)
    await store.remove(session, job)
    assert audit_job(services, job) == ([], [])


async def test_an_accepted_cancel_is_recorded_with_the_job_and_removed_with_it(
    services: HighAvailabilityServices,
) -> None:
    session = await leading(services.election)
    store = services.progress_store
    job, cancelled_only = new_job_id(), new_job_id()
    await store.record_subtask(session, job, "extract", 0, SubtaskProgress("/r/0", 1))
    assert not (await store.get(job)).cancel_requested
    await store.record_cancel(session, job)
    await store.record_cancel(session, job)  # idempotent
    await store.record_cancel(session, cancelled_only)
    progress = await store.get(job)
    assert progress.cancel_requested and progress.finished == {"extract": {0: SubtaskProgress("/r/0", 1)}}
    assert (await store.get(cancelled_only)).cancel_requested
    with pytest.raises(LeadershipLost):
        await store.record_cancel("not-the-session", new_job_id())
    for removed in (job, cancelled_only):
        await store.remove(session, removed)
        assert not (await store.get(removed)).cancel_requested
        assert audit_job(services, removed) == ([], [])


async def test_reads_zookeeper_does_not_answer_are_unavailable_for_now(zk_config: Configuration) -> None:
    async with started_on_zookeeper(zk_config) as services:
        for error in (ConnectionLoss(), OperationTimeoutError(), SessionExpiredError()):
            pending = services.client.handler.async_result()
            pending.set_exception(error)
            with pytest.raises(StoreUnavailable, match=type(error).__name__):
                await read_znode(pending, "/some/znode")
        closed = services.client.handler.async_result()
        closed.set_exception(ConnectionClosedError())
        with pytest.raises(ConnectionClosedError):  # this process closed its client: not for a retry
            await read_znode(closed, "/some/znode")


async def test_a_job_whose_record_or_file_is_broken_is_still_removed(zk_config: Configuration) -> None:
    config = zk_config.with_overrides({"high-availability.zookeeper.inline-limit": "1kb"})
    async with started_on_zookeeper(config) as services:
        session = await leading(services.election)
        store = services.jobgraph_store
        unlinked, garbled = new_job_id(), new_job_id()
        await store.put(session, graph(unlinked, vertices=40))
        await store.put(session, graph(garbled, vertices=40))
        files_of(config.storage_dir, unlinked)[0].unlink()  # a commit that landed, its file gone
        services.client.set(f"{services.paths.jobgraphs}/{garbled}", b"{not a record")
        with pytest.raises(StoreError, match="missing"):
            await store.get(unlinked)
        with pytest.raises(StoreError, match="no JobGraph record"):
            await store.get(garbled)
        for job in (unlinked, garbled):
            await store.remove(session, job)
            assert audit_job(services, job) == ([], [])


async def test_progress_of_many_subtasks(zk_config: Configuration) -> None:
    async with started(zk_config) as services:
        session = await leading(services.election)
        job = new_job_id()
        await asyncio.gather(
            *(
                services.progress_store.record_subtask(session, job, "v", i, SubtaskProgress(f"/r/{i}", i))
                for i in range(600)
            )
        )
        progress = await services.progress_store.get(job)
        assert len(progress.finished["v"]) == 600 and progress.finished["v"][599] == SubtaskProgress("/r/599", 599)
        await services.progress_store.remove(session, job)
        assert audit_job(services, job) == ([], [])


async def test_stopped_standalone_leader_cannot_write(standalone_config: Configuration) -> None:
    services = create_ha_services(standalone_config)
    await services.start()
    session = await leading(services.election)
    assert uuid.UUID(session).version == 4  # random per start, as in mode zookeeper
    await services.close()
    with pytest.raises(LeadershipLost):
        await services.jobgraph_store.put(session, graph(new_job_id()))
    with pytest.raises(LeadershipLost):
        await services.progress_store.record_subtask(session, new_job_id(), "v", 0, SubtaskProgress(None, None))


async def test_a_repair_replaces_the_progress_by_what_it_keeps_and_its_record(
    services: HighAvailabilityServices,
) -> None:
    session = await leading(services.election)
    store = services.progress_store
    job = new_job_id()
    await store.record_subtask(session, job, "extract", 0, SubtaskProgress("/r/e0", 1))
    await store.record_subtask(session, job, "load", 0, SubtaskProgress("/r/l0", 2))
    await store.record_cancel(session, job)
    repair = Repair(1, ("load",), ("load",), 1_700_000_000_000)
    await store.start_repair(session, job, {"extract": {0: SubtaskProgress("/r/e0", 1)}}, repair)
    progress = await store.get(job)
    assert progress.finished == {"extract": {0: SubtaskProgress("/r/e0", 1)}}
    assert progress.repair == repair and not progress.cancel_requested
    await store.record_subtask(session, job, "load", 0, SubtaskProgress("/r/l0-again", 2))
    assert (await store.get(job)).finished["load"] == {0: SubtaskProgress("/r/l0-again", 2)}
    with pytest.raises(LeadershipLost):
        await store.start_repair("not-the-session", job, {}, repair)
    await store.remove(session, job)
    assert (await store.get(job)).repair is None
    assert audit_job(services, job) == ([], [])


async def test_a_removed_job_result_lets_a_repair_write_a_new_one(config: Configuration) -> None:
    async with started(config) as services:
        session = await leading(services.election)
        store = services.job_result_store
        job = new_job_id()
        await store.remove(session, job)  # nothing to remove: no error
        await store.create_dirty(session, JobResultEntry(result(job, JobStatus.FAILED), "fp"))
        await store.mark_clean(session, job)
        with pytest.raises(LeadershipLost):
            await store.remove("not-the-session", job)
        assert await store.has_entry(job)
        await store.remove(session, job)
        assert not await store.has_entry(job) and files_of(config.storage_dir, job) == []
        await store.create_dirty(session, JobResultEntry(result(job), "fp"))
        assert await store.get(job) == JobResultEntry(result(job), "fp")


# ---------------------------------------------------------------------------- JobResult store contract


@pytest.mark.parametrize("delete_on_commit", [True, False])
async def test_job_result_store_contract(config: Configuration, delete_on_commit: bool) -> None:
    config = config.with_overrides({"job-result-store.delete-on-commit": str(delete_on_commit).lower()})
    async with started(config) as services:
        session = await leading(services.election)
        store = services.job_result_store
        job, other = new_job_id(), new_job_id()
        assert not await store.has_entry(job)
        assert await store.get(job) is None
        with pytest.raises(NoSuchJobResult):
            await store.mark_clean(session, job)
        await store.create_dirty(session, JobResultEntry(result(job), "fp-1"))
        assert await store.has_entry(job) and job in await dirty_ids(store)
        assert [p.name for p in files_of(config.storage_dir, job)] == [f"{job}_DIRTY.json"]  # not clean
        assert await store.get(job) == JobResultEntry(result(job), "fp-1")
        with pytest.raises(JobResultEntryExists):
            await store.create_dirty(session, JobResultEntry(result(job, JobStatus.FAILED)))
        assert await store.get(job) == JobResultEntry(result(job), "fp-1")  # the refused write changed nothing
        await store.create_dirty(session, JobResultEntry(result(other, JobStatus.CANCELED)))
        assert sorted(await store.dirty_job_ids()) == sorted([job, other])
        await store.mark_clean(session, job)
        await store.mark_clean(session, job)  # idempotent
        assert job not in await dirty_ids(store)
        assert await store.has_entry(job)  # clean
        assert await store.dirty_job_ids() == [other]
        with pytest.raises(JobResultEntryExists):
            await store.create_dirty(session, JobResultEntry(result(job)))
        directory = services.store_dir("job-result-store")
        if delete_on_commit:
            assert files_of(config.storage_dir, job) == []
        else:
            assert [p.name for p in files_of(config.storage_dir, job)] == [f"{job}.json"]
            assert await store.get(job) == JobResultEntry(result(job), "fp-1")
        assert (directory / f"{other}_DIRTY.json").is_file()
        assert [p.name for p in directory.iterdir() if p.name.startswith(other)] == [f"{other}_DIRTY.json"]


async def test_job_result_store_survives_a_crash_between_dirty_and_clean(config: Configuration) -> None:
    job = new_job_id()
    before = create_ha_services(config)
    await before.start()
    session = await leading(before.election)
    await before.job_result_store.create_dirty(session, JobResultEntry(result(job, JobStatus.FAILED)))
    directory = before.store_dir("job-result-store")
    # The process dies here: no close, and a write torn mid-way leaves a temp file behind.
    (directory / f"{new_job_id()}_DIRTY.json.tmp-{uuid.uuid4().hex}").write_text('{"resu')
    await before.close()
    async with started(config) as after:
        session = await leading(after.election)
        store = after.job_result_store
        assert await store.dirty_job_ids() == [job]
        assert await store.get(job) == JobResultEntry(result(job, JobStatus.FAILED))
        await store.mark_clean(session, job)
        assert await store.dirty_job_ids() == []
        assert files_of(config.storage_dir, job) == []


async def test_dirty_entry_is_written_atomically_and_readable(standalone_config: Configuration) -> None:
    services = create_ha_services(standalone_config)
    session = await leading(services.election)
    job = new_job_id()
    await services.job_result_store.create_dirty(session, JobResultEntry(result(job), "fp"))
    path = services.store_dir("job-result-store") / f"{job}_DIRTY.json"
    assert json.loads(path.read_text()) == {"result": result(job).to_dict(), "version": 1, "fingerprint": "fp"}
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left
    path.write_text("not json")
    with pytest.raises(StoreError, match=str(path)):
        await services.job_result_store.get(job)
    assert await services.job_result_store.dirty_job_ids() == [job]  # listed all the same
    await services.close()


async def test_a_deposed_leader_cannot_write_a_job_result_or_change_an_archived_job(
    zk_config: Configuration,
    zk_masters: list[ZooKeeperHaServices],
    zk_admin: KazooClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A leader paused past its session still believes it leads: ZooKeeper itself refuses it."""
    first, second = zk_masters
    old_session = await leading(first.election)
    archive = JobArchive(ArchiveSettings.from_config(zk_config), check=first.check_leadership)
    finished, running = new_job_id(), new_job_id()
    await archive.put(old_session, archived(finished, JobStatus.FINISHED))
    await first.job_result_store.create_dirty(old_session, JobResultEntry(result(finished)))
    latch = first.election.fence(old_session, "test")
    # the session ends (its latch is gone) while the process is paused: it never hears of it
    monkeypatch.setattr(first.election, "fence", lambda session_id, component: latch)
    second_contender = RecordingContender()
    second.election.start(second_contender)
    zk_admin.delete(latch)
    await asyncio.wait_for(second_contender.granted.wait(), WAIT)

    for write in (
        archive.put(old_session, archived(finished, JobStatus.CANCELED)),
        first.job_result_store.mark_clean(old_session, finished),
        first.job_result_store.create_dirty(old_session, JobResultEntry(result(running))),
    ):
        with pytest.raises(LeadershipLost):
            await write
    fresh = JobArchive(ArchiveSettings.from_config(zk_config), check=second.check_leadership)
    await fresh.load()
    entry = await fresh.get(finished)
    assert entry is not None and entry.result.status is JobStatus.FINISHED
    assert await second.job_result_store.dirty_job_ids() == [finished]
    assert not await second.job_result_store.has_entry(running)
    leftovers = [p for p in zk_config.storage_dir.rglob("*") if is_temp(p)]
    assert leftovers == []


async def test_a_stopped_standalone_leader_cannot_write_job_results(standalone_config: Configuration) -> None:
    services = create_ha_services(standalone_config)
    await services.start()
    session = await leading(services.election)
    await services.close()
    with pytest.raises(LeadershipLost):
        await services.job_result_store.create_dirty(session, JobResultEntry(result(new_job_id())))
    assert await services.job_result_store.dirty_job_ids() == []


# ---------------------------------------------------------------------------- blobs


async def test_corrupted_blob_is_refused(services: HighAvailabilityServices) -> None:
    blobs = services.blob_store
    key = await blobs.put(b"def extract(ctx):\n    return None\n", "pipelines.py")
    path = blobs.path_blocking(key)
    assert path.name == "pipelines.py" and path.read_bytes().startswith(b"def extract")
    assert path.is_relative_to(services.config.storage_dir / "blobs" / services.cluster_id)
    path.write_bytes(b"import os; os.system('rm -rf /')\n")
    with pytest.raises(CorruptedBlob):
        blobs.path_blocking(key)
    assert await blobs.put(b"def extract(ctx):\n    return None\n", "pipelines.py") == key  # repaired
    assert blobs.path_blocking(key).read_bytes().startswith(b"def extract")


# ---------------------------------------------------------------------------- ACLs


async def test_digest_acl_keeps_other_zookeeper_users_out(
    zk_config: Configuration, zookeeper_server: ZooKeeperServer
) -> None:
    config = zk_config.with_overrides({"high-availability.zookeeper.auth": "sparkdispatch:s3cret"})
    services = create_ha_services(config)
    assert isinstance(services, ZooKeeperHaServices)
    await services.start()
    strangers = [
        KazooClient(hosts=zookeeper_server.hosts, timeout=4.0),
        KazooClient(hosts=zookeeper_server.hosts, timeout=4.0, auth_data=[("digest", "mallory:guess")]),
    ]
    try:
        session = await leading(services.election)
        job = new_job_id()
        await services.jobgraph_store.put(session, graph(job))
        await services.progress_store.record_subtask(session, job, "v0", 0, SubtaskProgress(None, 1))
        services.election.confirm_leadership(session, "http://leader:8081")
        retrieval = services.create_retrieval()
        retrieval.start()
        await eventually(lambda: retrieval.current() is not None, what="leader info")
        assert await services.jobgraph_store.get(job) == graph(job)
        jobgraph = f"{services.paths.jobgraphs}/{job}"
        for stranger in strangers:
            stranger.start()
            for read in (
                partial(stranger.get, jobgraph),
                partial(stranger.get, services.paths.connection_info),
                partial(stranger.get_children, services.paths.cluster),
                partial(stranger.get_children, services.paths.latch),
            ):
                with pytest.raises(NoAuthError):
                    read()
            for write in (
                partial(stranger.set, jobgraph, b"{}"),
                partial(stranger.delete, jobgraph),
                partial(stranger.create, f"{services.paths.jobgraphs}/{new_job_id()}", b"{}"),
                partial(stranger.delete, services.paths.connection_info),
                partial(stranger.create, f"{services.paths.latch}/x__lock__0000000000", b""),
            ):
                with pytest.raises(NoAuthError):
                    write()
        assert await services.jobgraph_store.get(job) == graph(job)
    finally:
        for stranger in strangers:
            stranger.stop()
            stranger.close()
        await services.close()


# ---------------------------------------------------------------------------- close


async def test_close_keeps_all_data(config: Configuration) -> None:
    config = config.with_overrides({"high-availability.zookeeper.inline-limit": "0"})
    services = create_ha_services(config)
    await services.start()
    session = await leading(services.election)
    job = new_job_id()
    await services.jobgraph_store.put(session, graph(job))
    await services.progress_store.record_subtask(session, job, "v0", 0, SubtaskProgress("/r", 1))
    await services.job_result_store.create_dirty(session, JobResultEntry(result(job)))
    key = await services.blob_store.put(b"print('hi')\n", "hi.py")
    await services.close()

    again = create_ha_services(config)
    await again.start()
    assert await again.jobgraph_store.get(job) == graph(job)
    assert 0 in (await again.progress_store.get(job)).finished["v0"]
    assert job in await dirty_ids(again.job_result_store)
    assert again.blob_store.path_blocking(key).name == "hi.py"
    await again.close()
