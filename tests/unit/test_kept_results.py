"""Results kept on the TaskExecutor that made them: which JobGraphs may ask for them, the co-location
groups they make, and the JobMaster's tracker of where they are."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

from sparkdispatch.errors import InvalidJobGraph, InvalidRequest, ServiceUnavailable
from sparkdispatch.ha.progress_store import JobProgress, SubtaskProgress
from sparkdispatch.jobmaster.execution import ExecutionVertex, SubtaskId
from sparkdispatch.jobmaster.execution_graph import ExecutionGraph
from sparkdispatch.jobmaster.failover import tasks_to_restart
from sparkdispatch.jobmaster.gateways import TaskExecutorGateway
from sparkdispatch.jobmaster.kept_partitions import KeptPartitions
from sparkdispatch.jobmaster.recovered_graph import build_execution_graph, mark_recorded
from sparkdispatch.jobmaster.task_executor_calls import TaskExecutorCalls
from sparkdispatch.model.job_graph import JobGraph
from sparkdispatch.model.kept_results import NO_KEPT, plan_kept_groups
from sparkdispatch.model.chaining import plan_results
from sparkdispatch.model.repair import rerun_closure
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.resourcemanager import ResourceManagerGateway
from sparkdispatch.testing.slot_attempts import deployment

JOB_ID = "ab" * 16


def vertex(vertex_id: str, *inputs: str, parallelism: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "id": vertex_id,
        "entrypoint": f"m:{vertex_id}",
        "inputs": list(inputs),
        "parallelism": parallelism,
        **extra,
    }


def kept(vertex_id: str, *inputs: str, parallelism: int = 1) -> dict[str, Any]:
    return vertex(vertex_id, *inputs, parallelism=parallelism, result="kept")


def graph(*vertices: dict[str, Any], **extra: Any) -> JobGraph:
    return JobGraph.from_dict({"name": "g", "vertices": list(vertices), "job_id": JOB_ID, **extra})


def groups_of(g: JobGraph) -> dict[str, int]:
    return dict(plan_kept_groups(g, *plan_results(g)).group_of)


# ---------------------------------------------------------------- the JobGraph


def test_a_kept_result_ties_its_producer_and_readers_into_one_group() -> None:
    # join (kept) is read by two aggregates in different tasks; a second, separate kept edge
    g = graph(
        vertex("orders"),
        kept("join", "orders", parallelism=2),
        vertex("by_region", "join", parallelism=2),
        vertex("top", "join"),
        kept("other"),
        vertex("reads_other", "other"),
    )
    groups = groups_of(g)
    assert groups["join"] == groups["by_region"] == groups["top"]
    assert groups["other"] == groups["reads_other"] != groups["join"]
    assert "orders" not in groups  # its result is durable: it runs anywhere


def test_groups_join_through_a_reader_of_two_kept_results_and_through_chains() -> None:
    # c reads two kept results: a, b and c share one TaskExecutor. e is chained into f (auto), and e
    # reads kept d: f's task is in d's group
    g = graph(kept("a"), kept("b"), vertex("c", "a", "b"), kept("d"), vertex("e", "d"), vertex("f", "e"))
    groups = groups_of(g)
    assert groups["a"] == groups["b"] == groups["c"]
    assert plan_results(g)[0].head_of == {"e": "f"}
    assert groups["d"] == groups["f"] and "e" not in groups


def test_a_graph_without_kept_results_has_no_groups_and_a_kept_vertex_is_never_chained() -> None:
    assert plan_kept_groups(graph(vertex("a"), vertex("b", "a")), *plan_results(graph(vertex("a")))) is NO_KEPT
    g = graph(kept("a"), vertex("b", "a"))
    assert plan_results(g)[0].head_of == {}  # a would chain into b if it did not ask to be kept


@pytest.mark.parametrize(
    ("vertices", "extra", "message"),
    [
        ([vertex("a"), kept("b", "a")], {}, "vertex 'b' cannot keep its result on its TaskExecutor: no vertex reads"),
        (
            [kept("a"), vertex("b", "a")],
            {"results": "durable"},
            "vertex 'a' cannot keep its result on its TaskExecutor: the job asks for durable results",
        ),
    ],
)
def test_a_kept_result_that_cannot_be_is_refused_naming_the_field(
    vertices: list[dict[str, Any]], extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidJobGraph) as caught:
        graph(*vertices, **extra)
    (field,) = caught.value.field_errors
    assert field.endswith(".result") and message in caught.value.field_errors[field][0]


def test_a_repair_runs_again_the_producers_of_the_kept_results_it_reads_and_their_other_readers() -> None:
    g = graph(vertex("src"), kept("join", "src"), vertex("a", "join"), vertex("b", "join"), vertex("c", "src"))
    assert rerun_closure(g, ["a"]) == {"a", "join", "b"}
    assert rerun_closure(g, ["c"]) == {"c"}
    # a result the master chose to keep (read by two vertices of r's task) counts the same, and
    # src, chained into join's task, runs again with it
    chosen = graph(
        vertex("src"), vertex("join", "src"), vertex("a", "join"), vertex("b", "join"), vertex("r", "a", "b")
    )
    assert rerun_closure(chosen, ["a"]) == {"a", "join", "b", "r", "src"}
    # the sales pipeline: report's task runs both aggregates, which read clean (kept), which reads generate (kept)
    sales = graph(
        vertex("generate"),
        vertex("clean", "generate", parallelism=2),
        vertex("by_region", "clean", parallelism=2),
        vertex("by_product", "clean"),
        vertex("report", "by_region", "by_product"),
    )
    assert rerun_closure(sales, ["report"]) == {"generate", "clean", "by_region", "by_product", "report"}
    # a durable result read by the chain is reused
    durable = graph(vertex("src", result="durable"), vertex("mid", "src"), vertex("end", "mid"))
    assert rerun_closure(durable, ["end"]) == {"mid", "end"}


# ---------------------------------------------------------------- the JobMaster's tracker


def finish(
    g: ExecutionGraph,
    ev: ExecutionVertex,
    *,
    on: str | None,
    path: str = "/p",
    tracker: KeptPartitions | None = None,
) -> None:
    """Run `ev`'s attempt to FINISHED, its result kept on TaskExecutor `on` (None: durable), as the
    JobMaster does: `tracker` hears of it before the record."""
    for state in (ExecutionState.SCHEDULED, ExecutionState.DEPLOYING, ExecutionState.INITIALIZING):
        ev.current.transition(state)
    ev.current.transition(ExecutionState.RUNNING)
    ev.current.transition(ExecutionState.FINISHED)
    ev.current.keep(SubtaskProgress(f"{path}/{ev.id}", 1, kept_on=on))
    if tracker is not None:
        tracker.kept(ev)
    mark_recorded(g, ev)


def pipeline() -> ExecutionGraph:
    return build_execution_graph(
        graph(vertex("src"), kept("join", "src", parallelism=2), vertex("a", "join"), vertex("b", "join"))
    )


def test_readers_go_where_the_first_subtask_of_their_group_went_and_the_result_is_released_once_read() -> None:
    g = pipeline()
    kept_partitions = KeptPartitions(g)
    (src,), (j0, j1), (a,), (b,) = [list(g.subtasks(v)) for v in ("src", "join", "a", "b")]
    assert kept_partitions.site_of(j0) is None and kept_partitions.site_of(src) is None
    kept_partitions.placed(j0, "te-1")
    kept_partitions.placed(j1, "te-2")  # too late: the group runs on te-1
    assert [kept_partitions.site_of(ev) for ev in (j1, a, b)] == ["te-1"] * 3
    finish(g, src, on=None, tracker=kept_partitions)
    finish(g, j0, on="te-1", tracker=kept_partitions)
    finish(g, j1, on="te-1", tracker=kept_partitions)
    assert kept_partitions.watched() == {"te-1"}
    finish(g, a, on=None, tracker=kept_partitions)
    assert kept_partitions.finished(a) == []  # b still reads it
    finish(g, b, on=None, tracker=kept_partitions)
    assert kept_partitions.finished(b) == [("te-1", "join")]
    assert kept_partitions.watched() == set()
    assert kept_partitions.released(j0) and kept_partitions.released(j1)
    assert kept_partitions.sites() == {"te-1", "te-2"}  # j1 was deployed to te-2: it may have left files there
    # a reader that runs again needs the released result made again
    assert tasks_to_restart(g, [a.id], released=kept_partitions.released) == [j0.id, j1.id, a.id, b.id]


def test_a_lost_task_executor_takes_the_results_a_reader_still_needs_and_frees_the_group() -> None:
    g = pipeline()
    kept_partitions = KeptPartitions(g)
    src, (j0, j1), (a,), (b,) = [list(g.subtasks(v)) for v in ("src", "join", "a", "b")]
    kept_partitions.placed(j0, "te-1")
    finish(g, src[0], on=None, tracker=kept_partitions)
    finish(g, j0, on="te-1", tracker=kept_partitions)
    finish(g, j1, on="te-1", tracker=kept_partitions)
    assert kept_partitions.lost("te-2") == []
    assert kept_partitions.lost("te-1") == [j0, j1]
    assert j0.partition_lost and j1.partition_lost
    assert kept_partitions.site_of(a) is None  # the producers run again anywhere, and the group with them
    assert tasks_to_restart(g, [j0.id, j1.id]) == [j0.id, j1.id, a.id, b.id]


def test_the_watched_task_executors_follow_finishes_restarts_releases_and_a_loss() -> None:
    g = build_execution_graph(
        graph(
            vertex("src"),
            kept("join", "src", parallelism=4),
            vertex("a", "join", parallelism=3, result="durable"),
            vertex("b", "join", result="durable"),
            kept("late", "a"),
            vertex("end", "late", "b"),
        )
    )
    tracker = KeptPartitions(g)

    def walked() -> set[str]:  # what `watched` answers, from every subtask of every kept vertex
        return {
            ev.current.kept_on
            for vertex_id in ("join", "late")
            if any(not r.is_consumable for c in g.consumers_of(vertex_id) for r in g.subtasks(g.head_of(c)))
            for ev in g.subtasks(vertex_id)
            if ev.state is ExecutionState.FINISHED and ev.current.kept_on is not None and not tracker.released(ev)
        }

    def check(expected: set[str]) -> None:
        assert tracker.watched() == walked() == expected

    (src,), joins, readers, (b,), (late,), (end,) = [
        list(g.subtasks(v)) for v in ("src", "join", "a", "b", "late", "end")
    ]
    finish(g, src, on=None, tracker=tracker)
    check(set())
    for ev, te in zip(joins, ["te-1", "te-2", "te-1", "te-2"], strict=True):
        finish(g, ev, on=te, tracker=tracker)
    check({"te-1", "te-2"})
    # a reader fails: its region restarts, join[1] with it (te-2 still keeps join[3])
    g.new_attempt(joins[1])
    tracker.restarted(joins[1])
    check({"te-1", "te-2"})
    g.new_attempt(joins[3])
    tracker.restarted(joins[3])
    check({"te-1"})
    finish(g, joins[1], on="te-3", tracker=tracker)
    finish(g, joins[3], on="te-3", tracker=tracker)
    check({"te-1", "te-3"})
    for reader in readers:
        finish(g, reader, on=None, tracker=tracker)
        assert tracker.finished(reader) == []  # b still reads join
        check({"te-1", "te-3"})
    finish(g, late, on="te-4", tracker=tracker)
    check({"te-1", "te-3", "te-4"})
    finish(g, b, on=None, tracker=tracker)
    assert sorted(tracker.finished(b)) == [("te-1", "join"), ("te-3", "join")]
    check({"te-4"})
    assert tracker.lost("te-4") == [late]
    check({"te-4"})  # until the lost producer runs again, as the JobMaster restarts it at once
    g.new_attempt(late)
    tracker.restarted(late)
    check(set())
    finish(g, late, on="te-5", tracker=tracker)
    check({"te-5"})
    finish(g, end, on=None, tracker=tracker)
    assert tracker.finished(end) == [("te-5", "late")]
    check(set())


def test_a_new_leader_learns_where_kept_results_are_from_the_stored_progress() -> None:
    g = graph(vertex("src"), kept("join", "src", parallelism=2), vertex("a", "join"), vertex("b", "join"))
    progress = JobProgress(
        JOB_ID,
        finished={
            "src": {0: SubtaskProgress("/r/src/0-x", 3)},
            "join": {i: SubtaskProgress(f"/k/join/{i}-y", 3, kept_on="te-7") for i in range(2)},
            "a": {0: SubtaskProgress("/r/a/0-z", 1)},
        },
    )
    recovered = build_execution_graph(g, progress)
    kept_partitions = KeptPartitions(recovered)
    (b,) = recovered.subtasks("b")
    assert kept_partitions.site_of(b) == "te-7"
    assert kept_partitions.watched() == {"te-7"}
    assert [ev.id for ev in kept_partitions.lost("te-7")] == [SubtaskId("join", 0), SubtaskId("join", 1)]


def test_kept_partitions_are_not_the_job_results_partitions() -> None:
    from sparkdispatch.storage.results import ResultLayout

    g = pipeline()
    src, (j0, j1) = next(iter(g.subtasks("src"))), list(g.subtasks("join"))
    finish(g, src, on=None, path="/results")
    finish(g, j0, on="te-1", path="/te/kept")
    finish(g, j1, on="te-1", path="/te/kept")
    join = g.vertex_result("join", results=ResultLayout("/results"))
    assert join.rows == 2 and join.partitions == () and join.result_path is None
    assert g.vertex_result("src", results=ResultLayout("/results")).partitions == ("/results/src[0]",)


# ---------------------------------------------------------------- what travels and what the TaskExecutor does


def test_where_a_result_is_kept_is_stored_with_the_progress_and_a_deployment_says_to_keep_it(
    tmp_path: Path,
) -> None:
    from sparkdispatch.model.protocol import TaskDeploymentDescriptor

    entry = SubtaskProgress("/te/kept/j/v/0-x", 5, result_schema="{}", kept_on="te-1")
    assert entry.to_dict()["kept_on"] == "te-1"
    assert SubtaskProgress.from_dict(entry.to_dict()) == entry
    assert "kept_on" not in SubtaskProgress("/r/j/v/0-x", 5).to_dict()  # as progress stored before
    with pytest.raises(TypeError, match="kept_on must be a string"):
        SubtaskProgress.from_dict({"result_path": "/p", "rows": 1, "kept_on": 7})
    tdd = deployment(tmp_path, "m:f", job_id=JOB_ID, keep_result=True)
    assert TaskDeploymentDescriptor.from_dict(tdd.to_dict()) == tdd
    assert "keep_result" not in deployment(tmp_path, "m:f", job_id=JOB_ID).to_dict()


def test_a_task_executor_writes_a_kept_result_to_its_own_directory_and_releases_only_what_is_named(
    tmp_path: Path,
) -> None:
    from sparkdispatch.taskexecutor import kept_results
    from sparkdispatch.taskexecutor.slot_protocol import RunRequest

    directory = kept_results.kept_results_dir(tmp_path, "te-1")
    base = deployment(tmp_path, "m:f", job_id=JOB_ID, subtask_index=1, parallelism=2)
    kept_tdd = replace(base, keep_result=True)
    request = RunRequest(kept_tdd, "sc://x", kept_results_dir=str(directory))
    assert RunRequest.from_message(request.to_message()) == request
    assert request.write_path() == f"{directory}/{JOB_ID}/v/1-{base.execution_id}"
    assert RunRequest(base, "sc://x", kept_results_dir=str(directory)).write_path() == base.result_path
    with pytest.raises(ValueError, match="no directory for kept results"):
        RunRequest(kept_tdd, "sc://x").write_path()

    other_job = "cd" * 16
    for job, vertex_id in ((JOB_ID, "join"), (JOB_ID, "other"), (other_job, "join")):
        (directory / job / vertex_id / "0-e").mkdir(parents=True)
    assert not kept_results.release(directory, "../..", None)  # not a job id: nothing deleted
    assert not kept_results.release(directory, JOB_ID, "../other")
    assert kept_results.release(directory, JOB_ID, "join")
    assert sorted(p.name for p in (directory / JOB_ID).iterdir()) == ["other"]
    assert kept_results.release(directory, JOB_ID, "other")
    assert not (directory / JOB_ID).exists() and (directory / other_job / "join").is_dir()
    assert kept_results.release(directory, other_job, None) and list(directory.iterdir()) == []
    (directory / other_job).mkdir()
    kept_results.clear(directory)  # a TaskExecutor's start
    assert directory.is_dir() and list(directory.iterdir()) == []


def test_a_heartbeat_names_the_kept_jobs_not_running_here_and_deletes_those_the_master_says_ended(
    tmp_path: Path,
) -> None:
    import time

    from sparkdispatch.model.protocol import HeartbeatPayload, SlotReport
    from sparkdispatch.model.rest_shapes import HeartbeatAnswer
    from sparkdispatch.taskexecutor import kept_results

    directory = kept_results.kept_results_dir(tmp_path, "te-1")
    assert kept_results.kept_jobs(directory) == []  # nothing kept yet: no directory
    running, ended, other = "ab" * 16, "cd" * 16, "ef" * 16
    for job in (running, ended, other):
        (directory / job / "v" / "0-e").mkdir(parents=True)
    (directory / "not-a-job").mkdir()
    (directory / ("12" * 16)).write_text("a file")
    assert kept_results.kept_jobs(directory, running={running}) == [ended, other]

    kept_results.release_ended(directory, [ended])
    deadline = time.monotonic() + 10
    while (directory / ended).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(p.name for p in directory.iterdir()) == sorted([running, other, "not-a-job", "12" * 16])

    payload = HeartbeatPayload(SlotReport.free(1), kept_jobs=(other,))
    assert HeartbeatPayload.from_dict(payload.to_dict()) == payload
    assert HeartbeatPayload.from_dict({"slot_report": SlotReport.free(1).to_dict()}).kept_jobs == ()
    with pytest.raises(InvalidRequest, match="kept_jobs"):
        HeartbeatPayload.from_dict({"slot_report": SlotReport.free(1).to_dict(), "kept_jobs": ["../.."]})
    assert HeartbeatAnswer.from_dict({}) == HeartbeatAnswer()  # a master of before: nothing to release
    assert HeartbeatAnswer.from_dict({"release_kept": [other]}).release_kept == (other,)


class Releases:
    """A TaskExecutorGateway's release side: the broker down for `refusals` calls, then the
    TaskExecutor silent for `silences` calls, then answering."""

    def __init__(self, refusals: int = 0, silences: int = 0) -> None:
        self.refusals, self.silences = refusals, silences
        self.calls: list[tuple[str, str, str | None]] = []

    def release_results(self, task_executor_hostname: str, job_id: str, vertex_id: str | None) -> bool:
        self.calls.append((task_executor_hostname, job_id, vertex_id))
        if self.refusals:
            self.refusals -= 1
            raise ServiceUnavailable("Error 111 connecting to 127.0.0.1:6379")
        if self.silences:
            self.silences -= 1
            return False
        return True


class Registered:
    """The ResourceManager side `TaskExecutorCalls` asks for host names."""

    def __init__(self) -> None:
        self.hostnames = {"te-1": "celery@te-1"}

    def task_executor_hostname(self, task_executor_id: str) -> str | None:
        return self.hostnames.get(task_executor_id)


def calls_with(gateway: Releases, registered: Registered) -> TaskExecutorCalls:
    return TaskExecutorCalls(
        job_id=JOB_ID,
        session_id="s",
        gateway=cast(TaskExecutorGateway, gateway),
        resource_manager=cast(ResourceManagerGateway, registered),
    )


async def test_a_release_is_asked_again_until_the_task_executor_answers_or_is_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("sparkdispatch.jobmaster.task_executor_calls.RETRY_INITIAL_S", 0.001)
    gateway, registered = Releases(refusals=2, silences=1), Registered()
    calls = calls_with(gateway, registered)
    calls.release_results("te-1", "join")
    await calls.join()
    assert gateway.calls == [("celery@te-1", JOB_ID, "join")] * 4  # a Redis restart, a worker reconnecting
    gone = Releases(silences=1_000)
    calls = calls_with(gone, registered)
    calls.release_results("te-1", None)
    await asyncio.sleep(0.05)
    del registered.hostnames["te-1"]  # lost: it took its kept results with it
    await asyncio.wait_for(calls.join(), 5)
    assert 1 <= len(gone.calls) < 1_000
    calls.release_results("te-2", None)  # never registered: nothing to ask
    await calls.join()
    assert len(gone.calls) < 1_000
