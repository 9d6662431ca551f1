"""The chaos suite: a real HA cluster (2 masters on ZooKeeper, Redis, 2 TaskExecutors) runs a stream of
jobs while the leader and the TaskExecutors are killed, TaskExecutors and ZooKeeper are paused past
their timeouts and Redis restarts, at seeded random points; then nothing may be lost, done twice,
hung or left behind (`sparkdispatch.testing.chaos_audit`). `bench/chaos.py` is the larger run.

The seed is random and printed; `SPARKDISPATCH_CHAOS_SEED=<n>` replays a run's plan. The quick
tests below check the plan and the audit's judgement on made-up records.
"""

from __future__ import annotations

import copy
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from sparkdispatch.testing.chaos import ChaosRun, plan_faults
from sparkdispatch.testing.chaos_audit import CATEGORIES, Execution, judge_job
from sparkdispatch.testing.chaos_leftovers import StoredState, stored_leftovers
from sparkdispatch.testing.chaos_model import FAULT_KINDS, ChaosSettings, FaultRecord, JobRecord, JobSpec, PlannedFault
from sparkdispatch.testing.services import ServiceMissing

TASKS = Path(__file__).resolve().parents[2] / "bench" / "tasks" / "chaos_tasks.py"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_jobs_survive_killed_paused_and_restarted_processes(
    tmp_path: Path, service_missing: Callable[[str], None]
) -> None:
    seed = int(os.environ.get("SPARKDISPATCH_CHAOS_SEED") or random.randrange(1_000_000))
    settings = ChaosSettings(jobs=20, faults=5, seed=seed)  # every kind of fault once
    try:
        report = ChaosRun(settings, work_dir=tmp_path, tasks=TASKS).run()
    except ServiceMissing as exc:
        service_missing(str(exc))
        return
    summary = report.summary()
    print(summary)
    assert report.accepted == settings.jobs, summary
    assert report.faults_by_kind() == dict.fromkeys(FAULT_KINDS, 1), summary
    assert report.counts() == dict.fromkeys(CATEGORIES, 0), summary  # lost, duplicated, hung, leftover, ...
    assert report.finished == settings.jobs, summary


def test_the_plan_covers_every_fault_kind_spread_over_the_stream_and_replays_from_its_seed() -> None:
    settings = ChaosSettings(jobs=500, faults=20, seed=42)
    plan = plan_faults(settings)
    assert {f.kind for f in plan} == set(FAULT_KINDS)
    points = [f.after_job for f in plan]
    assert points == sorted(points) and 1 <= points[0] and points[-1] <= settings.jobs - settings.in_flight - 1
    assert points[9] < 260 < points[10]  # one point per stretch of the stream
    assert plan_faults(settings) == plan
    assert plan_faults(ChaosSettings(jobs=500, faults=20, seed=43)) != plan
    assert sorted(f.kind for f in plan_faults(ChaosSettings(jobs=20, faults=5, seed=7))) == sorted(FAULT_KINDS)


JOB = "a" * 32
ROWS = 100


@dataclass
class Case:
    """One finished chaos job as the audit sees it; each test breaks one thing."""

    record: JobRecord
    executions: list[Execution]
    stored: StoredState
    listing: dict[str, list[dict[str, Any]]]

    faults: list[FaultRecord] = field(default_factory=list)

    def judge(self) -> set[str]:
        return {
            category
            for category, _ in judge_job(
                self.record,
                self.stored,
                self.listing,
                self.executions,
                ChaosSettings(),
                faults=self.faults,
            )
        }


def finished_job() -> Case:
    def partitions(vertex: str, parallelism: int) -> list[str]:
        return [f"/results/{JOB}/{vertex}/{i}-{vertex}{i}" for i in range(parallelism)]

    result = {
        "job_id": JOB,
        "name": "chaos-0000",
        "status": "FINISHED",
        "start_time": 1_000_000,
        "end_time": 1_010_000,
        "vertices": {
            "produce": {"rows": ROWS, "partitions": partitions("produce", 2)},
            "transform": {"rows": ROWS, "partitions": []},  # chained into summarize: nothing written
            "summarize": {"rows": 1, "partitions": partitions("summarize", 1)},
        },
    }
    record = JobRecord(
        JobSpec(0, JOB, ROWS, {}),
        submitted_at=999.0,
        accepted_at=1000.0,
        answers=["202"],
        result=copy.deepcopy(result),
        result_at=1010.5,
    )
    executions = [
        Execution(
            vertex,
            subtask,
            0,
            f"{vertex}{subtask}",
            start=start,
            end=start + 0.5,
            output={"rows": ROWS, "total": ROWS * (ROWS - 1)} if vertex == "summarize" else None,
        )
        for vertex, subtask, start in [
            ("produce", 0, 1001.0),
            ("produce", 1, 1001.0),
            ("transform", 0, 1003.0),
            ("transform", 1, 1003.0),
            ("summarize", 0, 1005.0),
        ]
    ]
    stored = StoredState(job_results={JOB: {"clean": copy.deepcopy(result)}}, archive={JOB: copy.deepcopy(result)})
    return Case(record, executions, stored, {JOB: [{"id": JOB, "status": "FINISHED"}]})


def test_a_clean_finished_job_has_no_findings() -> None:
    assert finished_job().judge() == set()


@pytest.mark.parametrize("attempts", [(0, 1), (0, 0)], ids=["a-restart", "a-new-leaders-attempt-0"])
def test_a_chain_run_again_is_no_duplicate(attempts: tuple[int, int]) -> None:
    case = finished_job()
    # summarize's first run ended without a recorded result after transform's functions ran in it: a
    # restart ran the chain again, or a new leader did, whose attempt numbers start at 0 again
    case.executions[2:] = [
        replace(e, attempt=attempt, execution=f"{e.execution}-{run}", start=e.start + 2 * run)
        for run, attempt in enumerate(attempts)
        for e in case.executions[2:]
    ]
    assert case.judge() == set()


def late(vertex: str, subtask: int, start: float) -> Execution:
    return Execution(vertex, subtask, 1, "late", start=start, end=start + 0.5, output=None)


def lose_everywhere(c: Case) -> None:
    """No JobResult anywhere: not answered, not stored, not listed."""
    c.record.result = None
    c.stored.job_results.clear()
    c.listing.clear()


@pytest.mark.parametrize(
    ("break_it", "category"),
    [
        (lambda c: c.executions.append(late("summarize", 0, 1010.2)), "duplicated"),  # after the JobResult's end
        (lambda c: c.executions.append(late("produce", 1, 1003.5)), "duplicated"),  # after transform started
        (lambda c: c.stored.job_results[JOB].update(dirty=c.record.result), "duplicated"),
        (lambda c: c.stored.job_results[JOB]["clean"].update(status="CANCELED"), "duplicated"),
        (lambda c: c.stored.archive[JOB].update(end_time=1_020_000), "duplicated"),
        (lambda c: c.listing[JOB].append({"id": JOB, "status": "FINISHED"}), "duplicated"),
        (lambda c: c.record.unknown_answers.append("12:00:00 from http://master"), "forgotten"),
        (lambda c: c.listing.clear(), "forgotten"),
        (lambda c: lose_everywhere(c), "lost"),
        (lambda c: c.stored.job_results.clear(), "lost"),
        (lambda c: setattr(c.record, "result", None), "hung"),
        (lambda c: setattr(c.record, "result_at", 1000.0 + ChaosSettings().hang_after_s + 1), "hung"),
        (lambda c: setattr(c.record, "accepted_at", None), "hung"),
        (lambda c: setattr(c.record, "refused", "POST /jobs answered 409"), "refused"),
        (
            lambda c: [
                r.update(status="FAILED")
                for r in (c.record.result, c.stored.job_results[JOB]["clean"], c.stored.archive[JOB], c.listing[JOB][0])
            ],
            "failed",
        ),
        (lambda c: c.record.result["vertices"]["transform"].update(rows=2 * ROWS), "wrong-result"),
        (lambda c: c.record.result["vertices"]["produce"]["partitions"].append("/r/produce/1-again"), "wrong-result"),
        (lambda c: c.record.result["vertices"]["transform"]["partitions"].append("/r/transform/0-t"), "wrong-result"),
        (lambda c: c.executions[-1].output.update(rows=ROWS + 1), "wrong-result"),
        (lambda c: c.executions.pop(1), "wrong-result"),  # produce[1] FINISHED without a completed execution
    ],
)
def test_the_audit_finds_what_was_broken(break_it: Callable[[Case], Any], category: str) -> None:
    case = finished_job()
    break_it(case)
    assert category in case.judge()


def test_leftovers_are_what_a_finished_job_left_behind() -> None:
    case = finished_job()
    case.stored.znodes = {"jobgraphs": [JOB], "progress": [JOB]}
    case.stored.result_dirs = [JOB]
    case.stored.jobgraph_files = [f"{JOB}-0123456789abcdef.json"]
    case.stored.job_results[JOB]["dirty"] = case.stored.job_results[JOB].pop("clean")
    assert len(stored_leftovers([case.record], case.stored)) == 5
    case.record.result = None  # a job still running keeps its state
    assert stored_leftovers([case.record], case.stored) == []


def kept_job() -> Case:
    """The finished job of `finished_job`, its `produce` result kept on its TaskExecutor: no partitions."""
    case = finished_job()
    case.record.spec = replace(case.record.spec, kept=True)
    for result in (case.record.result, case.stored.job_results[JOB]["clean"], case.stored.archive[JOB]):
        assert result is not None
        result["vertices"]["produce"]["partitions"] = []
    return case


def task_executor_fault(kind: str, started: float, healed: float) -> FaultRecord:
    return FaultRecord(PlannedFault(1, kind, after_job=0, delay_s=0.0, target=0, hold_s=1.0), started, healed=healed)


def test_a_kept_result_made_again_after_a_task_executor_fault_is_no_duplicate_and_without_one_is() -> None:
    assert kept_job().judge() == set()
    case = kept_job()
    case.executions.append(late("produce", 1, 1004.0))  # after summarize's task (transform) started at 1003
    assert case.judge() == {"duplicated"}
    case.faults = [task_executor_fault("leader-kill", 1003.2, 1003.8)]  # not a TaskExecutor's: no excuse
    assert case.judge() == {"duplicated"}
    case.faults = [task_executor_fault("taskexecutor-kill", 1003.2, 1003.8)]
    assert case.judge() == set()
    durable = finished_job()  # a durable result is never lost with a TaskExecutor
    durable.executions.append(late("produce", 1, 1004.0))
    durable.faults = case.faults
    assert durable.judge() == {"duplicated"}
    listed = kept_job()
    assert listed.record.result is not None
    listed.record.result["vertices"]["produce"]["partitions"] = [f"/results/{JOB}/produce/0-p0"]
    assert "wrong-result" in listed.judge()


def test_a_kept_result_left_on_a_task_executor_is_a_leftover() -> None:
    case = kept_job()
    case.stored.kept_dirs = [f"te-x-0/{JOB}"]
    (found,) = stored_leftovers([case.record], case.stored)
    assert "kept results of TaskExecutor te-x-0, job " in found.message
