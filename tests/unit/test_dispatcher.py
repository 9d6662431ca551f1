"""The Dispatcher over the real standalone HA stores, with small fake JobMasters (`FakeJobMaster`)."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import threading
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from sparkdispatch.dispatcher.archive import JobArchive
from sparkdispatch.config import Configuration
from sparkdispatch.dispatcher.dispatcher import Dispatcher
from sparkdispatch.dispatcher.gateway import PoolAccess, Submission
from sparkdispatch.errors import (
    DuplicateJobSubmission,
    Forbidden,
    InvalidJobGraph,
    InvalidRequest,
    JobAlreadyTerminated,
    JobTooLarge,
    LeadershipLost,
    RecoveryInProgress,
    RepairNotPossible,
    StoreUnavailable,
    UnknownJob,
)
from sparkdispatch.ha import files
from sparkdispatch.ha import HighAvailabilityServices, JobProgress, SubtaskProgress, create_ha_services
from sparkdispatch.ha.job_result_store import JobResultEntry
from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.model.job_graph import JobGraph
from sparkdispatch.model.job_result import JobResult, VertexResult
from sparkdispatch.model.repair import RepairAnswer
from sparkdispatch.rest.views import flink_job_details, job_details, job_summary
from sparkdispatch.dispatcher.settings import ArchiveSettings, CleanupSettings, JobLimits
from sparkdispatch.testing.contender import leading
from sparkdispatch.testing.fake_job_master import FakeJobMaster
from sparkdispatch.testing.waiting import eventually

SESSION = ""  # the leader session of the test's HA services, set by `ha` (mode none draws one per start)


def graph(name: str = "job", job_id: str | None = "a" * 32) -> JobGraph:
    return JobGraph.from_dict({"job_id": job_id, "name": name, "vertices": [{"id": "only", "entrypoint": "m:f"}]})


@pytest.fixture
def config(tmp_path: Path) -> Configuration:
    # FakeJobMaster's jobs end in 1970: not expired from the archive here
    return Configuration.from_mapping(
        {
            "storage.dir": str(tmp_path / "storage"),
            "cleanup-strategy.initial-backoff": "10ms",
            "cleanup-strategy.max-backoff": "20ms",
            "jobstore.expiration-time": "36500d",
        }
    )


@pytest.fixture
async def ha(config: Configuration) -> Any:
    """Standalone HA services whose election this test's Dispatcher leads (under `SESSION`)."""
    global SESSION
    services = create_ha_services(config)
    await services.start()
    SESSION = await leading(services.election)
    yield services
    services.election.stop()
    await services.close()


def make_dispatcher(
    config: Configuration,
    ha: HighAvailabilityServices,
    *,
    new_job_master: Any = None,
    build: Any = None,
    limits: JobLimits = JobLimits(),
) -> Dispatcher:
    """A Dispatcher whose JobMasters `new_job_master(graph, progress)` makes at once (FakeJobMaster by
    default), or the coroutine function `build(graph, progress)`."""
    FakeJobMaster.reset()
    make = new_job_master or FakeJobMaster

    async def at_once(graph: JobGraph, recovered: JobProgress | None) -> Any:
        return make(graph, recovered)

    return Dispatcher(
        session_id=SESSION,
        address="http://master:8081",
        jobgraph_store=ha.jobgraph_store,
        job_result_store=ha.job_result_store,
        progress_store=ha.progress_store,
        archive=JobArchive(ArchiveSettings.from_config(config), check=ha.check_leadership),
        blob_store=ha.blob_store,
        new_job_master=build or at_once,
        cleanup=CleanupSettings.from_config(config),
        limits=limits,
    )


def settled(dispatcher: Dispatcher) -> bool:
    """Whether the Dispatcher has no job left to run or clean up."""
    return not dispatcher._jobs and not dispatcher._cleanups


async def dirty_ids(ha: HighAvailabilityServices) -> set[str]:
    return set(await ha.job_result_store.dirty_job_ids())


async def test_submission_is_persisted_and_idempotent(config: Configuration, ha: Any) -> None:
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    assert await dispatcher.submit(graph()) == Submission("a" * 32, True, JobStatus.RUNNING)
    assert await ha.jobgraph_store.job_ids() == {"a" * 32}
    assert await dispatcher.submit(graph()) == Submission("a" * 32, False, JobStatus.RUNNING)
    with pytest.raises(DuplicateJobSubmission, match="another graph"):
        await dispatcher.submit(graph(name="other"))
    assert len(FakeJobMaster.created) == 1
    await dispatcher.stop()


async def test_a_job_id_is_assigned_when_missing(config: Configuration, ha: Any) -> None:
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    submission = await dispatcher.submit(graph(job_id=None))
    assert submission.created and len(submission.job_id) == 32
    await dispatcher.stop()


async def test_concurrent_submissions_of_one_id_run_once(config: Configuration, ha: Any) -> None:
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    answers = await asyncio.gather(*(dispatcher.submit(graph()) for _ in range(20)))
    assert sorted(answer.created for answer in answers) == [False] * 19 + [True]
    assert len(FakeJobMaster.created) == 1
    await dispatcher.stop()


async def test_a_finished_job_is_archived_cleaned_and_never_run_again(config: Configuration, ha: Any) -> None:
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    await dispatcher.submit(graph())
    FakeJobMaster.created[0].finish()
    await eventually(lambda: "a" * 32 not in dispatcher._cleanups and not dispatcher._jobs, "the job cleaned up")
    assert await ha.jobgraph_store.job_ids() == set()
    assert "a" * 32 not in await dirty_ids(ha)
    # the same graph again is the same job: answered with its status, never run again
    assert await dispatcher.submit(graph()) == Submission("a" * 32, False, JobStatus.FINISHED)
    with pytest.raises(DuplicateJobSubmission, match="globally terminal"):
        await dispatcher.submit(graph(name="other"))
    assert len(FakeJobMaster.created) == 1 and await ha.jobgraph_store.job_ids() == set()
    result = await dispatcher.job_result("a" * 32)
    assert result is not None and result.status is JobStatus.FINISHED
    assert [job_summary(j).to_dict()["status"] for j in dispatcher.job_overviews()] == ["FINISHED"]
    assert dispatcher.job_counts() == {"FINISHED": 1}
    with pytest.raises(JobAlreadyTerminated):
        await dispatcher.cancel("a" * 32)
    await dispatcher.stop()


async def test_jobs_count_as_ended_for_kept_results_once_they_run_no_more_and_only_when_recovered(
    config: Configuration, ha: Any
) -> None:
    """What a TaskExecutor's heartbeat hears of the jobs whose results it keeps (`ended_jobs`)."""
    dispatcher = make_dispatcher(config, ha)
    running, unknown = "a" * 32, "c" * 32
    assert dispatcher.ended_jobs([unknown]) == []  # recovering: a job not recovered yet is unknown
    await dispatcher.start()
    await dispatcher.submit(graph())
    assert dispatcher.ended_jobs([running, unknown]) == [unknown]
    FakeJobMaster.created[0].finish()
    await eventually(lambda: dispatcher.ended_jobs([running]) == [running], "the finished job to count as ended")
    await eventually(lambda: not dispatcher._jobs, "the job cleaned up")
    assert dispatcher.ended_jobs([running, unknown]) == [running, unknown]
    await dispatcher.stop()
    assert dispatcher.ended_jobs([running]) == []  # no longer answering


async def test_an_ended_jobs_finished_subtasks_are_gathered_off_the_loop(
    config: Configuration, ha: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large ended job's finished subtasks (for its archive entry) take a walk over all of them: in a thread."""
    gathered_in: list[int] = []
    finished = FakeJobMaster.finished

    def recorded(job_master: FakeJobMaster) -> dict[str, dict[int, SubtaskProgress]]:
        gathered_in.append(threading.get_ident())
        return finished(job_master)

    monkeypatch.setattr(FakeJobMaster, "finished", recorded)
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    await dispatcher.submit(graph())
    FakeJobMaster.created[0].finish()
    await eventually(lambda: settled(dispatcher), "the job cleaned up")
    assert gathered_in and threading.get_ident() not in gathered_in
    archived = await dispatcher._archive.get("a" * 32)
    assert archived is not None and archived.finished == FakeJobMaster.created[0].done
    await dispatcher.stop()


async def test_a_caller_limited_to_other_pools_is_forbidden_and_changes_nothing(config: Configuration, ha: Any) -> None:
    """The pool check and the action read the same lookup: a refused call stores nothing and
    reaches no JobMaster; a job that does not exist is unknown before it is forbidden."""
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    team_b = PoolAccess("team-b", frozenset({"b"}))
    with pytest.raises(Forbidden, match="team-b may submit jobs of the pools b only; this job runs in pool 'default'"):
        await dispatcher.submit(graph(), access=team_b)
    assert await ha.jobgraph_store.job_ids() == set() and not FakeJobMaster.created
    await dispatcher.submit(graph(), access=PoolAccess("team-default", frozenset({"default"})))
    with pytest.raises(Forbidden, match="team-b may cancel jobs of the pools b only"):
        await dispatcher.cancel("a" * 32, access=team_b)
    assert not FakeJobMaster.created[0].cancelled
    assert not (await ha.progress_store.get("a" * 32)).cancel_requested
    with pytest.raises(UnknownJob):
        await dispatcher.cancel("b" * 32, access=team_b)
    FakeJobMaster.created[0].finish()
    await eventually(lambda: settled(dispatcher), "the job cleaned up")
    with pytest.raises(Forbidden, match="team-b may repair jobs of the pools b only"):
        await dispatcher.repair("a" * 32, ["only"], access=team_b)  # read from the archive
    assert len(FakeJobMaster.created) == 1
    with pytest.raises(UnknownJob):
        await dispatcher.repair("b" * 32, ["only"], access=team_b)
    await dispatcher.stop()


async def test_cancel(config: Configuration, ha: Any) -> None:
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    await dispatcher.submit(graph())
    await dispatcher.cancel("a" * 32)
    assert FakeJobMaster.created[0].cancelled
    await eventually(lambda: not dispatcher._jobs, "no job left")
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
    assert (await dispatcher.submit(graph())).created
    await dispatcher.stop()


async def test_recovery_cleans_dirty_jobs_and_resumes_the_rest(config: Configuration, ha: Any) -> None:
    finished, running = graph(job_id="a" * 32), graph(job_id="b" * 32)
    await ha.jobgraph_store.put(SESSION, finished)
    await ha.jobgraph_store.put(SESSION, running)
    await ha.progress_store.record_subtask(SESSION, "b" * 32, "only", 0, SubtaskProgress(None, None))
    await ha.job_result_store.create_dirty(
        SESSION,
        JobResultEntry(JobResult(job_id="a" * 32, name="job", status=JobStatus.FINISHED, start_time=1, end_time=2)),
    )
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    assert [m.graph.job_id for m in FakeJobMaster.created] == ["b" * 32]  # the finished job is not re-run
    assert FakeJobMaster.created[0].recovered_progress is not None
    await eventually(lambda: "a" * 32 not in dispatcher._cleanups, "the job's cleanup")
    assert await ha.jobgraph_store.job_ids() == {"b" * 32}
    assert "a" * 32 not in await dirty_ids(ha)
    result = await dispatcher.job_result("a" * 32)
    assert result is not None and result.status is JobStatus.FINISHED
    await dispatcher.stop()
    assert FakeJobMaster.created[0].suspended
    assert await ha.jobgraph_store.job_ids() == {"b" * 32}  # suspension keeps HA data


async def test_a_failing_cleanup_is_retried_until_it_succeeds(config: Configuration, ha: Any, monkeypatch: Any) -> None:
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
    await eventually(
        lambda: failures["left"] == 0 and "a" * 32 not in dispatcher._cleanups, "the cleanup after its failures"
    )
    assert await ha.jobgraph_store.job_ids() == set()
    assert "a" * 32 not in await dirty_ids(ha)
    await dispatcher.stop()


async def test_a_job_recovered_from_its_dirty_result_is_shown_from_the_result_alone(
    config: Configuration, ha: Any
) -> None:
    job_id = "c" * 32
    await ha.job_result_store.create_dirty(
        SESSION,
        JobResultEntry(
            JobResult(
                job_id=job_id,
                name="job",
                status=JobStatus.FAILED,
                start_time=1_000,
                end_time=5_200,
                vertices={
                    "a": VertexResult(state=ExecutionState.FINISHED, attempts=1),
                    "b": VertexResult(state=ExecutionState.FAILED, attempts=3),
                },
            )
        ),
    )
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    [overview] = dispatcher.job_overviews()
    assert job_summary(overview).to_dict() == {
        "id": job_id,
        "name": "job",
        "status": "FAILED",
        "start_time": 1_000,
        "end_time": 5_200,
        "duration_ms": 4_200,
    }
    assert flink_job_details(overview).to_dict() == {
        "jid": job_id,
        "name": "job",
        "state": "FAILED",
        "start-time": 1_000,
        "end-time": 5_200,
        "duration": 4_200,
        "last-modification": 5_200,
        "pending-operators": 0,
        "tasks": {
            "created": 0,
            "scheduled": 0,
            "deploying": 0,
            "running": 0,
            "finished": 1,
            "canceling": 0,
            "canceled": 0,
            "failed": 1,
            "reconciling": 0,
            "initializing": 0,
            "total": 2,
        },
    }
    assert job_details(await dispatcher.job_snapshot(job_id)).to_dict() == {
        "id": job_id,
        "name": "job",
        "status": "FAILED",
        "start_time": 1_000,
        "end_time": 5_200,
        "vertices": [
            {"id": "a", "state": "FINISHED", "parallelism": None, "inputs": [], "attempts": 1, "subtasks": []},
            {"id": "b", "state": "FAILED", "parallelism": None, "inputs": [], "attempts": 3, "subtasks": []},
        ],
        "repairs": [],
    }
    assert dispatcher.job_counts() == {"FAILED": 1}
    with pytest.raises(UnknownJob):
        await dispatcher.job_snapshot("d" * 32)
    await dispatcher.stop()


async def test_running_and_archived_jobs_are_listed_newest_first(config: Configuration, ha: Any) -> None:
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    await dispatcher.submit(graph(job_id="a" * 32))
    FakeJobMaster.created[0].finish()  # archived, started at 1
    await eventually(lambda: not dispatcher._jobs, "no job left")
    await dispatcher.submit(graph(job_id="b" * 32))  # running, started at 1 too: the id breaks the tie
    assert [(o.job_id, o.status) for o in dispatcher.job_overviews()] == [
        ("b" * 32, JobStatus.RUNNING),
        ("a" * 32, JobStatus.FINISHED),
    ]
    assert (await dispatcher.job_snapshot("b" * 32)).overview == FakeJobMaster.created[1].overview()
    assert dispatcher.job_counts() == {"FINISHED": 1, "RUNNING": 1}
    await dispatcher.stop()


# ---------------------------------------------------------------------------- recovery first (issue 13, item 1)


async def test_while_it_recovers_every_call_answers_retry_after_and_no_job_starts_twice(
    config: Configuration, ha: Any, monkeypatch: Any
) -> None:
    running, finished = graph(job_id="b" * 32), graph(job_id="a" * 32)
    first = make_dispatcher(config, ha)
    await first.start()
    await first.submit(finished)
    FakeJobMaster.created[0].finish()  # finished and cleaned up: only its archive entry is left
    await eventually(partial(settled, first), "the first Dispatcher settled")
    await first.stop()
    await ha.jobgraph_store.put(SESSION, running)
    entered, gate = asyncio.Event(), asyncio.Event()
    real_get = ha.progress_store.get

    async def slow_get(job_id: str) -> JobProgress:
        entered.set()
        await gate.wait()
        progress: JobProgress = await real_get(job_id)
        return progress

    monkeypatch.setattr(ha.progress_store, "get", slow_get)
    dispatcher = make_dispatcher(config, ha)
    recovery = asyncio.create_task(dispatcher.start())
    await entered.wait()
    for call in (
        dispatcher.submit(running),
        dispatcher.submit(finished),
        dispatcher.job_snapshot("b" * 32),
        dispatcher.job_result("a" * 32),
        dispatcher.cancel("b" * 32),
    ):
        with pytest.raises(RecoveryInProgress) as refused:
            await call
        assert refused.value.retry_after == 1 and refused.value.leader == "http://master:8081"
        assert refused.value.http_headers() == {"Retry-After": "1"} and refused.value.http_status == 503
    for sync_call in (lambda: dispatcher.job_master("b" * 32), dispatcher.job_overviews):
        with pytest.raises(RecoveryInProgress):
            sync_call()
    assert dispatcher.job_counts() == {"FINISHED": 1}  # /overview answers all along
    assert FakeJobMaster.created == []
    gate.set()
    await recovery
    assert [m.graph.job_id for m in FakeJobMaster.created] == ["b" * 32]
    assert await dispatcher.submit(running) == Submission("b" * 32, False, JobStatus.RUNNING)
    assert await dispatcher.submit(finished) == Submission("a" * 32, False, JobStatus.FINISHED)
    assert len(FakeJobMaster.created) == 1 and dispatcher.job_master("b" * 32) is FakeJobMaster.created[0]
    await dispatcher.stop()


# ---------------------------------------------------------------------------- cancel persisted (item 4)


async def test_a_cancel_in_flight_when_leadership_ends_is_finished_by_the_next_leader(
    config: Configuration, ha: Any
) -> None:
    first = make_dispatcher(config, ha)
    gate = FakeJobMaster.cancel_gate = asyncio.Event()  # its cancel takes until the gate opens
    await first.start()
    await first.submit(graph())
    cancel = asyncio.create_task(first.cancel("a" * 32))
    await eventually(lambda: FakeJobMaster.created[0].cancelled, "the cancel to reach the JobMaster")
    assert (await ha.progress_store.get("a" * 32)).cancel_requested  # persisted before the answer
    await first.stop()  # leadership lost while the cancel is in flight: the job is only suspended
    gate.set()
    await cancel  # answered: 202
    assert FakeJobMaster.created[0].status is JobStatus.SUSPENDED

    second = make_dispatcher(config, ha)
    await second.start()
    [recovered] = FakeJobMaster.created
    await eventually(partial(settled, second), "the second Dispatcher settled")
    assert recovered.cancelled and not recovered.started  # cancelled, never run again
    result = await second.job_result("a" * 32)
    assert result is not None and result.status is JobStatus.CANCELED
    assert await ha.jobgraph_store.job_ids() == set() and await dirty_ids(ha) == set()
    assert not (await ha.progress_store.get("a" * 32)).cancel_requested  # cleaned up with the job
    await second.cancel("a" * 32)  # idempotent
    await second.stop()


async def test_a_job_that_finished_before_its_cancel_took_effect_is_not_cancelled_by_the_next_leader(
    config: Configuration, ha: Any
) -> None:
    await ha.jobgraph_store.put(SESSION, graph())
    await ha.progress_store.record_subtask(SESSION, "a" * 32, "only", 0, SubtaskProgress("/r/only/0", 3))
    await ha.progress_store.record_cancel(SESSION, "a" * 32)  # accepted, but every subtask had finished
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    [recovered] = FakeJobMaster.created
    assert recovered.started and not recovered.cancelled
    await dispatcher.stop()


# ---------------------------------------------------------------------------- unreadable jobs (item 5)


async def test_a_stored_job_that_cannot_be_read_fails_alone_and_the_others_recover(
    config: Configuration, ha: Any
) -> None:
    good, broken, refused, unreadable_result = "b" * 32, "c" * 32, "d" * 32, "e" * 32
    await ha.jobgraph_store.put(SESSION, graph(job_id=good))
    await ha.jobgraph_store.put(SESSION, graph(job_id=unreadable_result))
    jobgraphs = ha.store_dir("jobgraphs")
    (jobgraphs / f"{broken}.json").write_text("{not json")
    body = graph(job_id=refused).to_dict()
    body["config"] = {"spark.executor.memory": "2g"}  # a key submission refuses now
    (jobgraphs / f"{refused}.json").write_text(json.dumps(body))
    results = ha.store_dir("job-result-store")
    results.mkdir(parents=True)
    (results / f"{unreadable_result}_DIRTY.json").write_text('{"resu')  # never re-run it, all the same

    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()

    assert [m.graph.job_id for m in FakeJobMaster.created] == [good]
    await eventually(lambda: not dispatcher._cleanups and set(dispatcher._jobs) == {good}, "only the good job left")
    for job_id, cause in (
        (broken, "not valid JSON"),
        (refused, "spark.executor.memory"),
        (unreadable_result, "cannot be read"),
    ):
        result = await dispatcher.job_result(job_id)
        assert result is not None and result.status is JobStatus.FAILED, job_id
        assert result.failure is not None and cause in result.failure.message and job_id in result.failure.message
    assert await ha.jobgraph_store.job_ids() == {good}
    assert await dirty_ids(ha) == set() and not (results / f"{unreadable_result}_DIRTY.json").exists()
    assert (await dispatcher.submit(graph(job_id=good))).status is JobStatus.RUNNING  # the master still leads
    await dispatcher.stop()


async def test_transient_read_errors_during_recovery_are_retried(
    config: Configuration, ha: Any, monkeypatch: Any
) -> None:
    await ha.jobgraph_store.put(SESSION, graph(job_id="b" * 32))
    failures = {"job_ids": 2, "get": 3, "dirty_job_ids": 1}

    def flaky(store: Any, name: str) -> None:
        real = getattr(store, name)

        async def call(*args: Any) -> Any:
            if failures[name]:
                failures[name] -= 1
                raise StoreUnavailable(f"{name}: ZooKeeper did not answer (ConnectionLoss)")
            return await real(*args)

        monkeypatch.setattr(store, name, call)

    flaky(ha.jobgraph_store, "job_ids")
    flaky(ha.jobgraph_store, "get")
    flaky(ha.job_result_store, "dirty_job_ids")
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    assert failures == {"job_ids": 0, "get": 0, "dirty_job_ids": 0}
    assert [m.graph.job_id for m in FakeJobMaster.created] == ["b" * 32]
    await dispatcher.stop()


class FailingStartJobMaster(FakeJobMaster):
    def start(self) -> None:
        raise ValueError("restart strategy 'weird' is not known")


async def test_a_job_master_that_cannot_start_ends_the_job_failed(config: Configuration, ha: Any) -> None:
    def cannot_build(graph: JobGraph, recovered: JobProgress | None) -> FakeJobMaster:
        raise RuntimeError("no JobMaster for this graph")

    for job_id, factory, cause in (
        ("a" * 32, cannot_build, "RuntimeError"),
        ("b" * 32, FailingStartJobMaster, "ValueError"),
    ):
        dispatcher = make_dispatcher(config, ha, new_job_master=factory)
        await dispatcher.start()
        submission = await dispatcher.submit(graph(job_id=job_id))
        assert submission == Submission(job_id, True, JobStatus.FAILED)  # not a 500
        await eventually(partial(settled, dispatcher), "no zombie job")  # no zombie job
        result = await dispatcher.job_result(job_id)
        assert result is not None and result.status is JobStatus.FAILED
        assert result.failure is not None and result.failure.cls == cause
        assert result.vertices["only"].state is ExecutionState.CREATED
        assert all(m.suspended for m in FakeJobMaster.created)  # what it took is given back
        assert await ha.jobgraph_store.job_ids() == set() and await dirty_ids(ha) == set()
        await dispatcher.stop()


def wide(job_id: str | None = "a" * 32, parallelism: int = 3) -> JobGraph:
    """Two vertices of `parallelism` subtasks each."""
    return JobGraph.from_dict(
        {
            "job_id": job_id,
            "name": "wide",
            "vertices": [
                {"id": "left", "entrypoint": "m:f", "parallelism": parallelism},
                {"id": "right", "entrypoint": "m:f", "parallelism": parallelism, "inputs": ["left"]},
            ],
        }
    )


async def test_a_graph_over_the_subtask_limit_is_refused_naming_it_and_leaves_no_trace(
    config: Configuration, ha: Any
) -> None:
    dispatcher = make_dispatcher(config, ha, limits=JobLimits(max_subtasks=5))
    await dispatcher.start()
    with pytest.raises(JobTooLarge) as refused:
        await dispatcher.submit(wide())
    error = refused.value
    assert isinstance(error, InvalidJobGraph) and error.http_status == 400
    assert (error.subtasks, error.limit, error.option) == (6, 5, "jobgraph.max-subtasks")
    assert "6 subtasks" in error.message and "jobgraph.max-subtasks allows at most 5" in error.message
    assert await ha.jobgraph_store.job_ids() == set() and not FakeJobMaster.created and not dispatcher._jobs
    assert (await ha.progress_store.get("a" * 32)).finished == {} and await dirty_ids(ha) == set()
    with pytest.raises(UnknownJob):
        await dispatcher.job_snapshot("a" * 32)
    assert (await dispatcher.submit(wide(parallelism=2))).created  # within the limit
    await dispatcher.stop()


async def test_a_stored_job_over_todays_limits_or_whose_job_master_fails_to_build_fails_alone(
    config: Configuration, ha: Any
) -> None:
    good, too_large, unbuildable, misfiled = "b" * 32, "c" * 32, "d" * 32, "e" * 32
    for stored in (graph(job_id=good), wide(too_large), graph(job_id=unbuildable)):
        await ha.jobgraph_store.put(SESSION, stored)  # accepted under a higher limit
    (ha.store_dir("jobgraphs") / f"{misfiled}.json").write_text(graph(job_id=good).to_json())

    def build(graph: JobGraph, recovered: JobProgress | None) -> FakeJobMaster:
        if graph.job_id == unbuildable:
            raise MemoryError("no memory left for its subtasks")
        return FakeJobMaster(graph, recovered)

    dispatcher = make_dispatcher(config, ha, new_job_master=build, limits=JobLimits(max_subtasks=5))
    await dispatcher.start()

    assert [m.graph.job_id for m in FakeJobMaster.created] == [good] and FakeJobMaster.created[0].started
    await eventually(lambda: not dispatcher._cleanups and set(dispatcher._jobs) == {good}, "only the good job left")
    for job_id, cls, cause in (
        (too_large, "JobTooLarge", "jobgraph.max-subtasks allows at most 5"),
        (unbuildable, "MemoryError", "no memory left"),
        (misfiled, "StoreError", f"names job {good}"),
    ):
        result = await dispatcher.job_result(job_id)
        assert result is not None and result.status is JobStatus.FAILED, job_id
        assert result.failure is not None and (result.failure.cls, cause in result.failure.message) == (cls, True)
    assert await ha.jobgraph_store.job_ids() == {good}  # removed as any terminal job's
    assert await dirty_ids(ha) == set()
    # final: the same graph again is answered as the same, failed job; it does not run
    assert await dispatcher.submit(graph(job_id=unbuildable)) == Submission(unbuildable, False, JobStatus.FAILED)
    await dispatcher.stop()
    later = make_dispatcher(config, ha)  # a later leader retries none of them
    await later.start()
    assert [m.graph.job_id for m in FakeJobMaster.created] == [good]
    await later.stop()


class GatedBuild:
    """A JobMaster factory whose builds wait for `release`, as a large job's ExecutionGraph takes a while."""

    def __init__(self) -> None:
        self.building = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, graph: JobGraph, recovered: JobProgress | None) -> FakeJobMaster:
        self.building.set()
        await self.release.wait()
        return FakeJobMaster(graph, recovered)


async def test_calls_naming_a_job_whose_job_master_is_built_wait_for_it(config: Configuration, ha: Any) -> None:
    gate = GatedBuild()
    dispatcher = make_dispatcher(config, ha, build=gate)
    await dispatcher.start()
    submission = asyncio.create_task(dispatcher.submit(graph()))
    await gate.building.wait()
    assert await ha.jobgraph_store.job_ids() == {"a" * 32}  # persisted before the build
    resubmitted = asyncio.create_task(dispatcher.submit(graph()))
    looked_at = asyncio.create_task(dispatcher.job_snapshot("a" * 32))
    cancelled = asyncio.create_task(dispatcher.cancel("a" * 32))
    waiting = [resubmitted, looked_at, cancelled]
    await asyncio.sleep(0.05)  # room for an early answer, which must not come before the build
    assert not submission.done() and not any(task.done() for task in waiting)
    assert dispatcher.job_counts() == {}  # answered meanwhile
    gate.release.set()
    assert await submission == Submission("a" * 32, True, JobStatus.RUNNING)
    await asyncio.gather(*waiting)
    again, snapshot = resubmitted.result(), looked_at.result()
    assert again.created is False and snapshot.overview.job_id == "a" * 32
    assert FakeJobMaster.created[0].cancelled  # the cancel reached the built JobMaster
    await dispatcher.stop()


async def test_a_dispatcher_stopped_during_a_build_answers_the_submission_and_keeps_the_job(
    config: Configuration, ha: Any
) -> None:
    gate = GatedBuild()
    dispatcher = make_dispatcher(config, ha, build=gate)
    await dispatcher.start()
    submission = asyncio.create_task(dispatcher.submit(graph()))
    await gate.building.wait()
    await dispatcher.stop()
    assert await submission == Submission("a" * 32, True, JobStatus.INITIALIZING)  # stored: the next leader runs it
    assert not FakeJobMaster.created and await ha.jobgraph_store.job_ids() == {"a" * 32}
    later = make_dispatcher(config, ha)
    await later.start()
    assert [m.graph.job_id for m in FakeJobMaster.created] == ["a" * 32] and FakeJobMaster.created[0].started
    await later.stop()


async def test_a_job_persisted_just_as_the_dispatcher_stops_gets_no_job_master_here(
    config: Configuration, ha: Any, monkeypatch: Any
) -> None:
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    persisting, release = asyncio.Event(), asyncio.Event()
    real_put = ha.jobgraph_store.put

    async def slow_put(session_id: str, graph: JobGraph) -> None:
        persisting.set()
        await release.wait()
        await real_put(session_id, graph)

    monkeypatch.setattr(ha.jobgraph_store, "put", slow_put)
    submission = asyncio.create_task(dispatcher.submit(graph()))
    await persisting.wait()
    await dispatcher.stop()
    release.set()
    assert await submission == Submission("a" * 32, True, JobStatus.INITIALIZING)  # stored: the next leader runs it
    assert not FakeJobMaster.created and await ha.jobgraph_store.job_ids() == {"a" * 32}


async def test_a_graph_naming_a_missing_artifact_is_refused_naming_the_key(config: Configuration, ha: Any) -> None:
    key = await ha.blob_store.put(b"def f(ctx):\n    return None\n", "m.py")
    missing = "f" * 64
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    body = graph().to_dict()
    with pytest.raises(InvalidJobGraph) as refused:
        await dispatcher.submit(JobGraph.from_dict({**body, "artifacts": [key, missing]}))
    assert list(refused.value.field_errors) == ["artifacts[1]"] and missing in refused.value.message
    assert refused.value.http_status == 400
    assert await ha.jobgraph_store.job_ids() == set() and not FakeJobMaster.created and not dispatcher._jobs
    assert (await dispatcher.submit(JobGraph.from_dict({**body, "artifacts": [key]}))).created
    await dispatcher.stop()


async def test_an_environment_naming_a_missing_or_non_wheel_blob_is_refused_naming_the_field(
    config: Configuration, ha: Any
) -> None:
    wheel = await ha.blob_store.put(b"PK\x03\x04wheel", "my_lib-1.0-py3-none-any.whl")
    module = await ha.blob_store.put(b"def f(ctx):\n    return None\n", "m.py")
    missing = "f" * 64
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    body = graph().to_dict()
    body["vertices"][0]["environment"] = {"dependencies": ["tabulate>=0.9", missing]}
    with pytest.raises(InvalidJobGraph) as refused:
        await dispatcher.submit(JobGraph.from_dict({**body, "environment": {"dependencies": [module]}}))
    assert refused.value.field_errors == {
        "environment.dependencies[0]": [f"the artifact with key {module} is m.py, not a wheel (.whl)"],
        "vertices[0].environment.dependencies[1]": [
            f"no artifact with key {missing} is stored; upload it first (POST /artifacts)"
        ],
    }
    assert await ha.jobgraph_store.job_ids() == set() and not FakeJobMaster.created
    with pytest.raises(InvalidJobGraph, match="is a wheel: name it in environment.dependencies"):
        await dispatcher.submit(JobGraph.from_dict({**body, "artifacts": [wheel]}))
    body["vertices"][0]["environment"] = {"dependencies": [wheel]}
    assert (await dispatcher.submit(JobGraph.from_dict(body))).created
    await dispatcher.stop()


# ---------------------------------------------------------------------------- no write after stop


async def test_stop_waits_for_a_job_result_write_in_flight(config: Configuration, ha: Any, monkeypatch: Any) -> None:
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    await dispatcher.submit(graph())
    entered, release, done = threading.Event(), threading.Event(), threading.Event()
    real_link = ha.job_result_store._link_dirty

    def slow_link(job_id: str, temp: Path) -> None:
        entered.set()
        release.wait(10)
        real_link(job_id, temp)
        done.set()

    monkeypatch.setattr(ha.job_result_store, "_link_dirty", slow_link)
    FakeJobMaster.created[0].finish()
    assert await asyncio.to_thread(entered.wait, 10)
    stopping = asyncio.create_task(dispatcher.stop())
    await asyncio.sleep(0.2)  # room for a stop that does not wait, which must not come
    assert not stopping.done()  # the write in its thread is not left behind
    release.set()
    await stopping
    assert done.is_set()


async def test_a_job_result_is_answered_only_once_its_dirty_entry_is_stored(
    config: Configuration, ha: Any, monkeypatch: Any
) -> None:
    """Answered before, a result could be replaced by a later leader's run of the job, should the
    leadership end before the write (the chaos run of 2026-11-29, seed 590188)."""
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    await dispatcher.submit(graph())
    entered, release = threading.Event(), threading.Event()
    real_link = ha.job_result_store._link_dirty

    def slow_link(job_id: str, temp: Path) -> None:
        entered.set()
        release.wait(10)
        real_link(job_id, temp)

    monkeypatch.setattr(ha.job_result_store, "_link_dirty", slow_link)
    FakeJobMaster.created[0].finish()
    assert await asyncio.to_thread(entered.wait, 10)
    assert await dispatcher.job_result("a" * 32, wait_s=0.2) is None  # finished, not yet stored
    release.set()
    result = await dispatcher.job_result("a" * 32, wait_s=10)
    assert result is not None and result.status is JobStatus.FINISHED
    await dispatcher.stop()


# ---------------------------------------------------------------------------- same job again (item 9)


async def test_a_terminated_job_is_the_same_job_for_every_later_leader(config: Configuration, ha: Any) -> None:
    first = make_dispatcher(config, ha)
    await first.start()
    await first.submit(graph())
    FakeJobMaster.created[0].finish(JobStatus.FAILED)
    # answered for with its status as soon as its result is out, before the archive has it
    assert await first.submit(graph()) == Submission("a" * 32, False, JobStatus.FAILED)
    await eventually(partial(settled, first), "the first Dispatcher settled")
    await first.stop()

    second = make_dispatcher(config, ha)
    await second.start()
    assert await second.submit(graph()) == Submission("a" * 32, False, JobStatus.FAILED)
    with pytest.raises(DuplicateJobSubmission, match="another graph"):
        await second.submit(graph(name="other"))
    assert FakeJobMaster.created == [] and await ha.jobgraph_store.job_ids() == set()
    await second.stop()

    # an entry archived before the fingerprint was kept (format 2): whether it is the same graph
    # cannot be told, so the id stays taken
    entry = ArchiveSettings.from_config(config).directory / f"{'a' * 32}.json"
    data = json.loads(entry.read_text())
    del data["fingerprint"]
    entry.write_text(json.dumps({**data, "version": 2}))
    third = make_dispatcher(config, ha)
    await third.start()
    with pytest.raises(DuplicateJobSubmission, match="its graph is not known"):
        await third.submit(graph())
    assert FakeJobMaster.created == []
    await third.stop()


# ---------------------------------------------------------------------------- repair (issue 14, item 4)


def chain(job_id: str = "e" * 32) -> JobGraph:
    """a -> b -> c, and x on its own; durable results, so that a repair reuses the results of the
    vertices it does not run again (chained, a and b would run again in c's task)."""
    return JobGraph.from_dict(
        {
            "job_id": job_id,
            "name": "chain",
            "results": "durable",
            "vertices": [
                {"id": "a", "entrypoint": "m:f", "parallelism": 2},
                {"id": "b", "entrypoint": "m:f", "inputs": ["a"]},
                {"id": "c", "entrypoint": "m:f", "inputs": ["b"]},
                {"id": "x", "entrypoint": "m:f"},
            ],
        }
    )


async def failed_at_b(dispatcher: Dispatcher) -> FakeJobMaster:
    """Submit `chain()` and end it FAILED with a and x finished (b failed, c never ran)."""
    await dispatcher.submit(chain())
    job_master = FakeJobMaster.created[-1]
    job_master.done = {
        "a": {0: SubtaskProgress("/r/a/0", 3), 1: SubtaskProgress("/r/a/1", 4)},
        "x": {0: SubtaskProgress(None, None)},
    }
    job_master.finish(JobStatus.FAILED)
    await eventually(partial(settled, dispatcher), "the Dispatcher settled")
    return job_master


async def test_a_failed_job_is_repaired_under_its_id_reusing_the_other_results(config: Configuration, ha: Any) -> None:
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    job_id = "e" * 32
    await failed_at_b(dispatcher)
    answer = await dispatcher.repair(job_id, ["b"])
    assert answer.created and answer.repair.number == 1
    assert answer.repair.requested == ("b",) and answer.repair.vertices == ("b", "c")
    repairing = FakeJobMaster.created[-1]
    assert len(FakeJobMaster.created) == 2 and repairing.started and repairing.graph == chain()
    progress = repairing.recovered_progress
    assert progress is not None and progress.repair == answer.repair
    assert progress.finished == {
        "a": {0: SubtaskProgress("/r/a/0", 3), 1: SubtaskProgress("/r/a/1", 4)},
        "x": {0: SubtaskProgress(None, None)},
    }
    # persisted before the answer: the graph, the progress with the repair, no JobResult any more
    assert await ha.jobgraph_store.job_ids() == {job_id}
    assert (await ha.progress_store.get(job_id)).repair == answer.repair
    assert not await ha.job_result_store.has_entry(job_id)
    assert job_details(await dispatcher.job_snapshot(job_id)).to_dict()["repairs"] == [answer.repair.to_dict()]
    # asked again for vertices it runs: the same repair; for others while it runs: not yet
    assert await dispatcher.repair(job_id, ["c", "b"]) == RepairAnswer(job_id, created=False, repair=answer.repair)
    with pytest.raises(RepairNotPossible, match="has not ended yet") as refused:
        await dispatcher.repair(job_id, ["a"])
    assert refused.value.running and len(FakeJobMaster.created) == 2
    repairing.finish(JobStatus.FINISHED)
    await eventually(partial(settled, dispatcher), "the Dispatcher settled")
    result = await dispatcher.job_result(job_id)
    assert result is not None and result.status is JobStatus.FINISHED
    archived = await dispatcher._archive.get(job_id)
    assert archived is not None and [r.status for r in archived.snapshot.repairs] == [JobStatus.FINISHED]
    assert await ha.jobgraph_store.job_ids() == set() and await ha.job_result_store.has_entry(job_id)
    # a finished job may be repaired too: the next repair has the next number
    again = await dispatcher.repair(job_id, ["x"])
    assert again.repair.number == 2 and again.repair.vertices == ("x",)
    await dispatcher.stop()


async def test_a_repair_that_cannot_be_made_is_refused_and_changes_nothing(config: Configuration, ha: Any) -> None:
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    job_id = "e" * 32
    with pytest.raises(UnknownJob):
        await dispatcher.repair(job_id, ["b"])
    await failed_at_b(dispatcher)
    with pytest.raises(InvalidRequest, match="has no vertex 'nope'; its vertices are a, b, c, x"):
        await dispatcher.repair(job_id, ["b", "nope"])
    with pytest.raises(InvalidRequest, match="at least one vertex"):
        await dispatcher.repair(job_id, [])
    assert len(FakeJobMaster.created) == 1 and await ha.jobgraph_store.job_ids() == set()
    assert await ha.job_result_store.has_entry(job_id)
    await dispatcher.stop()


async def test_results_deleted_at_cleanup_or_a_job_known_from_its_result_alone_cannot_be_repaired(
    tmp_path: Path, ha: Any
) -> None:
    deleting = Configuration.from_mapping({"storage.dir": str(tmp_path / "storage"), "results.retention": "delete"})
    dispatcher = make_dispatcher(deleting, ha)
    await dispatcher.start()
    await failed_at_b(dispatcher)
    with pytest.raises(RepairNotPossible, match="results.retention is `delete`") as refused:
        await dispatcher.repair("e" * 32, ["b"])
    assert not refused.value.running
    await ha.job_result_store.create_dirty(
        SESSION,
        JobResultEntry(JobResult(job_id="f" * 32, name="job", status=JobStatus.FAILED, start_time=1, end_time=2)),
    )
    await dispatcher.stop()
    dispatcher = make_dispatcher(deleting, ha)
    await dispatcher.start()
    with pytest.raises(RepairNotPossible, match="graph and finished subtasks were not kept"):
        await dispatcher.repair("f" * 32, ["only"])
    await dispatcher.stop()


async def test_a_repair_survives_a_failover_and_one_half_written_is_dropped(
    config: Configuration, ha: Any, monkeypatch: Any
) -> None:
    job_id = "e" * 32
    first = make_dispatcher(config, ha)
    await first.start()
    await failed_at_b(first)
    answer = await first.repair(job_id, ["b"])
    await first.stop()
    assert FakeJobMaster.created[-1].suspended
    successor = make_dispatcher(config, ha)
    await successor.start()
    [resumed] = FakeJobMaster.created
    assert resumed.started and resumed.recovered_progress is not None
    assert resumed.recovered_progress.repair == answer.repair and set(resumed.recovered_progress.finished) == {"a", "x"}
    assert [r.number for r in (await successor.job_snapshot(job_id)).repairs] == [1]
    resumed.finish(JobStatus.FAILED)
    await eventually(partial(settled, successor), "the successor settled")

    async def lost(session_id: str, job_id: str) -> None:
        raise LeadershipLost("JobResult store")

    monkeypatch.setattr(ha.job_result_store, "remove", lost)  # dies before the last write
    with pytest.raises(LeadershipLost):
        await successor.repair(job_id, ["b"])
    await successor.stop()
    monkeypatch.undo()
    assert await ha.jobgraph_store.job_ids() == {job_id}  # half written: graph and progress
    third = make_dispatcher(config, ha)
    await third.start()
    await eventually(lambda: not third._cleanups, "the third Dispatcher's cleanups")
    assert FakeJobMaster.created == [] and await ha.jobgraph_store.job_ids() == set()
    assert (await ha.progress_store.get(job_id)).repair is None
    result = await third.job_result(job_id)
    assert result is not None and result.status is JobStatus.FAILED
    assert (await third.repair(job_id, ["b"])).repair.number == 2
    await third.stop()


async def test_a_job_result_write_failing_on_a_full_disk_is_retried_logged_once_and_counted(
    config: Configuration, ha: Any, monkeypatch: Any, caplog: Any
) -> None:
    dispatcher = make_dispatcher(config, ha)
    await dispatcher.start()
    await dispatcher.submit(graph())
    real_fsync = os.fsync
    failures = {"left": 4}

    def full_disk(fd: int) -> None:  # only the JobResult's temp file finds the disk full
        if "_DIRTY.json.tmp-" in os.readlink(f"/proc/self/fd/{fd}") and failures["left"]:
            failures["left"] -= 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_disk)
    with caplog.at_level(logging.INFO, logger="sparkdispatch.dispatcher.dispatcher"):
        FakeJobMaster.created[0].finish()
        await eventually(lambda: settled(dispatcher), "the job written and cleaned up after the disk had room")
    assert dispatcher._events.counts["job_result_write_failed"] == 4  # type: ignore[attr-defined]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, errors  # once for the burst, not once per retry
    assert f"{ha.job_result_store.directory / ('a' * 32)}_DIRTY.json" in errors[0]
    assert "No space left on device" in errors[0]
    assert any("written after 4 failed attempt(s)" in r.getMessage() for r in caplog.records)
    assert not [p for p in ha.job_result_store.directory.iterdir() if files.is_temp(p)]
    await dispatcher.stop()
