"""The Dispatcher over the real standalone HA stores, with a small fake JobMaster."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from sparkdispatch.archive import JobArchive
from sparkdispatch.config import Configuration
from sparkdispatch.dispatcher import Dispatcher
from sparkdispatch.errors import DuplicateJobSubmission, JobAlreadyTerminated, LeadershipLost, UnknownJob
from sparkdispatch.ha import HighAvailabilityServices, JobProgress, create_ha_services
from sparkdispatch.jobgraph import ExecutionState, JobGraph, JobResult, JobStatus, VertexResult
from sparkdispatch.rest.views import flink_job_details, job_details, job_summary
from sparkdispatch.settings import ArchiveSettings, CleanupSettings
from sparkdispatch.snapshot import JobOverview, JobSnapshot

SESSION = "00000000-0000-0000-0000-000000000000"


class FakeJobMaster:
    """Runs nothing: the test ends the job by resolving `result_future`."""

    created: list[FakeJobMaster] = []

    def __init__(self, graph: JobGraph, recovered_progress: JobProgress | None) -> None:
        self.graph = graph
        self.recovered_progress = recovered_progress
        self.result_future: asyncio.Future[JobResult] = asyncio.get_running_loop().create_future()
        self.status = JobStatus.INITIALIZING
        self.cancelled = False
        self.suspended = False
        FakeJobMaster.created.append(self)

    def start(self) -> None:
        self.status = JobStatus.RUNNING

    def finish(self, status: JobStatus = JobStatus.FINISHED) -> None:
        self.status = status
        assert self.graph.job_id is not None
        self.result_future.set_result(JobResult(
            job_id=self.graph.job_id, name=self.graph.name, status=status, start_time=1, end_time=5,
            vertices={v.id: VertexResult(state=ExecutionState.FINISHED, attempts=1) for v in self.graph.vertices}))

    async def cancel(self) -> None:
        self.cancelled = True
        self.finish(JobStatus.CANCELED)

    def suspend(self) -> None:
        self.suspended = True
        self.status = JobStatus.SUSPENDED

    def overview(self) -> JobOverview:
        assert self.graph.job_id is not None
        return JobOverview(job_id=self.graph.job_id, name=self.graph.name, status=self.status, start_time=1,
                           end_time=None, duration_ms=0, last_modification=1)

    def snapshot(self) -> JobSnapshot:
        return JobSnapshot(self.overview())


def graph(name: str = "job", job_id: str | None = "a" * 32) -> JobGraph:
    return JobGraph.from_dict({"job_id": job_id, "name": name,
                               "vertices": [{"id": "only", "entrypoint": "m:f"}]})


@pytest.fixture
def config(tmp_path: Path) -> Configuration:
    return Configuration.from_mapping({"storage.dir": str(tmp_path / "storage"),
                                       "cleanup-strategy.initial-backoff": "10ms",
                                       "cleanup-strategy.max-backoff": "20ms"})


class Contender:
    def __init__(self) -> None:
        self.granted = asyncio.Event()

    def grant_leadership(self, session_id: str) -> None:
        assert session_id == SESSION
        self.granted.set()

    def revoke_leadership(self) -> None:
        self.granted.clear()


@pytest.fixture
async def ha(config: Configuration) -> Any:
    """Standalone HA services whose election this test's Dispatcher leads."""
    services = create_ha_services(config)
    await services.start()
    contender = Contender()
    services.election.start(contender)
    await contender.granted.wait()
    yield services
    services.election.stop()
    await services.close()


def make_dispatcher(config: Configuration, ha: HighAvailabilityServices) -> Dispatcher:
    FakeJobMaster.created = []
    return Dispatcher(session_id=SESSION, jobgraph_store=ha.jobgraph_store, job_result_store=ha.job_result_store,
                      progress_store=ha.progress_store, archive=JobArchive(ArchiveSettings.from_config(config)),
                      new_job_master=FakeJobMaster, cleanup=CleanupSettings.from_config(config))


async def until(predicate: Any, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


async def test_submission_is_persisted_and_idempotent(config: Configuration, ha: Any) -> None:
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    assert await dispatcher.submit(graph()) == ("a" * 32, True)
    assert await ha.jobgraph_store.job_ids() == {"a" * 32}
    assert await dispatcher.submit(graph()) == ("a" * 32, False)
    with pytest.raises(DuplicateJobSubmission, match="another graph"):
        await dispatcher.submit(graph(name="other"))
    assert len(FakeJobMaster.created) == 1
    await dispatcher.stop()


async def test_a_job_id_is_assigned_when_missing(config: Configuration, ha: Any) -> None:
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    job_id, created = await dispatcher.submit(graph(job_id=None))
    assert created and len(job_id) == 32
    await dispatcher.stop()


async def test_concurrent_submissions_of_one_id_run_once(config: Configuration, ha: Any) -> None:
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    answers = await asyncio.gather(*(dispatcher.submit(graph()) for _ in range(20)))
    assert sorted(created for _, created in answers) == [False] * 19 + [True]
    assert len(FakeJobMaster.created) == 1
    await dispatcher.stop()


async def test_a_finished_job_is_archived_cleaned_and_never_accepted_again(config: Configuration, ha: Any) -> None:
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    await dispatcher.submit(graph())
    FakeJobMaster.created[0].finish()
    await until(lambda: "a" * 32 not in dispatcher._cleanups and not dispatcher._jobs)
    assert await ha.jobgraph_store.job_ids() == set()
    assert "a" * 32 not in {r.job_id for r in await ha.job_result_store.dirty_results()}
    with pytest.raises(DuplicateJobSubmission, match="globally terminal"):
        await dispatcher.submit(graph())
    result = await dispatcher.job_result("a" * 32)
    assert result is not None and result.status is JobStatus.FINISHED
    assert [job_summary(j)["status"] for j in dispatcher.job_overviews()] == ["FINISHED"]
    assert dispatcher.job_counts() == {"FINISHED": 1}
    with pytest.raises(JobAlreadyTerminated):
        await dispatcher.cancel("a" * 32)
    await dispatcher.stop()


async def test_cancel(config: Configuration, ha: Any) -> None:
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    await dispatcher.submit(graph())
    await dispatcher.cancel("a" * 32)
    assert FakeJobMaster.created[0].cancelled
    await until(lambda: not dispatcher._jobs)
    await dispatcher.cancel("a" * 32)  # idempotent for a cancelled job
    with pytest.raises(UnknownJob):
        await dispatcher.cancel("b" * 32)
    await dispatcher.stop()


async def test_a_failed_persist_leaves_no_trace(config: Configuration, ha: Any, monkeypatch: Any) -> None:
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()

    async def refuse(session_id: str, graph: JobGraph) -> None:
        raise LeadershipLost("JobGraph store")

    monkeypatch.setattr(ha.jobgraph_store, "put", refuse)
    with pytest.raises(LeadershipLost):
        await dispatcher.submit(graph())
    assert dispatcher.job_overviews() == [] and not FakeJobMaster.created
    monkeypatch.undo()
    assert await dispatcher.submit(graph()) == ("a" * 32, True)
    await dispatcher.stop()


async def test_recovery_cleans_dirty_jobs_and_resumes_the_rest(config: Configuration, ha: Any) -> None:
    finished, running = graph(job_id="a" * 32), graph(job_id="b" * 32)
    await ha.jobgraph_store.put(SESSION, finished)
    await ha.jobgraph_store.put(SESSION, running)
    await ha.progress_store.record_subtask(SESSION, "b" * 32, "only", 0, None, None)
    await ha.job_result_store.create_dirty(JobResult(job_id="a" * 32, name="job", status=JobStatus.FINISHED,
                                                     start_time=1, end_time=2))
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    assert [m.graph.job_id for m in FakeJobMaster.created] == ["b" * 32]  # the finished job is not re-run
    assert FakeJobMaster.created[0].recovered_progress is not None
    await until(lambda: "a" * 32 not in dispatcher._cleanups)
    assert await ha.jobgraph_store.job_ids() == {"b" * 32}
    assert "a" * 32 not in {r.job_id for r in await ha.job_result_store.dirty_results()}
    result = await dispatcher.job_result("a" * 32)
    assert result is not None and result.status is JobStatus.FINISHED
    await dispatcher.stop()
    assert FakeJobMaster.created[0].suspended
    assert await ha.jobgraph_store.job_ids() == {"b" * 32}  # suspension keeps HA data


async def test_a_failing_cleanup_is_retried_until_it_succeeds(config: Configuration, ha: Any,
                                                               monkeypatch: Any) -> None:
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    await dispatcher.submit(graph())
    real_remove = ha.jobgraph_store.remove
    failures = {"left": 3}

    async def flaky_remove(session_id: str, job_id: str) -> None:
        if failures["left"]:
            failures["left"] -= 1
            raise OSError("storage is down")
        await real_remove(session_id, job_id)

    monkeypatch.setattr(ha.jobgraph_store, "remove", flaky_remove)
    FakeJobMaster.created[0].finish()
    await until(lambda: failures["left"] == 0 and "a" * 32 not in dispatcher._cleanups)
    assert await ha.jobgraph_store.job_ids() == set()
    assert "a" * 32 not in {r.job_id for r in await ha.job_result_store.dirty_results()}
    await dispatcher.stop()


async def test_a_job_recovered_from_its_dirty_result_is_shown_from_the_result_alone(
        config: Configuration, ha: Any) -> None:
    job_id = "c" * 32
    await ha.job_result_store.create_dirty(JobResult(
        job_id=job_id, name="job", status=JobStatus.FAILED, start_time=1_000, end_time=5_200,
        vertices={"a": VertexResult(state=ExecutionState.FINISHED, attempts=1),
                  "b": VertexResult(state=ExecutionState.FAILED, attempts=3)}))
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    [overview] = dispatcher.job_overviews()
    assert job_summary(overview) == {"id": job_id, "name": "job", "status": "FAILED", "start_time": 1_000,
                                     "end_time": 5_200, "duration_ms": 4_200}
    assert flink_job_details(overview) == {
        "jid": job_id, "name": "job", "state": "FAILED", "start-time": 1_000, "end-time": 5_200, "duration": 4_200,
        "last-modification": 5_200, "pending-operators": 0,
        "tasks": {"created": 0, "scheduled": 0, "deploying": 0, "running": 0, "finished": 1, "canceling": 0,
                  "canceled": 0, "failed": 1, "reconciling": 0, "initializing": 0, "total": 2}}
    assert job_details(await dispatcher.job_snapshot(job_id)) == {
        "id": job_id, "name": "job", "status": "FAILED", "start_time": 1_000, "end_time": 5_200,
        "vertices": [{"id": "a", "state": "FINISHED", "parallelism": None, "inputs": [], "attempts": 1, "subtasks": []},
                     {"id": "b", "state": "FAILED", "parallelism": None, "inputs": [], "attempts": 3, "subtasks": []}]}
    assert dispatcher.job_counts() == {"FAILED": 1}
    with pytest.raises(UnknownJob):
        await dispatcher.job_snapshot("d" * 32)
    await dispatcher.stop()


async def test_running_and_archived_jobs_are_listed_newest_first(config: Configuration, ha: Any) -> None:
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    await dispatcher.submit(graph(job_id="a" * 32))
    FakeJobMaster.created[0].finish()  # archived, started at 1
    await until(lambda: not dispatcher._jobs)
    await dispatcher.submit(graph(job_id="b" * 32))  # running, started at 1 too: the id breaks the tie
    assert [(o.job_id, o.status) for o in dispatcher.job_overviews()] == [
        ("b" * 32, JobStatus.RUNNING), ("a" * 32, JobStatus.FINISHED)]
    assert (await dispatcher.job_snapshot("b" * 32)).overview == FakeJobMaster.created[1].overview()
    assert dispatcher.job_counts() == {"FINISHED": 1, "RUNNING": 1}
    await dispatcher.stop()
