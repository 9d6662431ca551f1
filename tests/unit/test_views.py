"""The REST views: a job's overview and snapshot in the shapes of the REST contract (docs/rest-api.md)."""

from __future__ import annotations

import dataclasses

from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.model.job_result import Failure, JobResult, VertexResult
from sparkdispatch.model.repair import Repair
from sparkdispatch.rest.views import flink_job_details, job_details, job_summary
from sparkdispatch.model.snapshot import JobOverview, JobSnapshot, SubtaskSnapshot, VertexSnapshot

JOB_ID = "ab" * 16
FLINK_TASK_KEYS = {
    "created",
    "scheduled",
    "deploying",
    "running",
    "finished",
    "canceling",
    "canceled",
    "failed",
    "reconciling",
    "initializing",
    "total",
}


def running() -> JobSnapshot:
    overview = JobOverview(
        job_id=JOB_ID,
        name="sales",
        status=JobStatus.RUNNING,
        start_time=1_000,
        end_time=None,
        duration_ms=2_500,
        last_modification=3_000,
        tasks={ExecutionState.FINISHED: 1, ExecutionState.RUNNING: 1, ExecutionState.CREATED: 2},
    )
    return JobSnapshot(
        overview,
        (
            VertexSnapshot(
                "extract",
                ExecutionState.RUNNING,
                2,
                subtasks=(
                    SubtaskSnapshot(0, ExecutionState.FINISHED, 0, "te-1"),
                    SubtaskSnapshot(1, ExecutionState.RUNNING, 1, "te-2"),
                ),
            ),
            VertexSnapshot(
                "clean",
                ExecutionState.CREATED,
                2,
                inputs=("extract",),
                subtasks=(SubtaskSnapshot(0, ExecutionState.CREATED, 0), SubtaskSnapshot(1, ExecutionState.CREATED, 0)),
            ),
        ),
    )


def failed_result() -> JobResult:
    failure = Failure("ValueError", "bad row")
    return JobResult(
        job_id=JOB_ID,
        name="sales",
        status=JobStatus.FAILED,
        start_time=1_000,
        end_time=5_200,
        vertices={
            "extract": VertexResult(ExecutionState.FINISHED, 1, rows=10),
            "clean": VertexResult(ExecutionState.FAILED, 3, failure=failure),
        },
        failure=failure,
    )


def test_flink_job_details_of_a_running_job_field_for_field() -> None:
    assert flink_job_details(running().overview).to_dict() == {
        "jid": JOB_ID,
        "name": "sales",
        "state": "RUNNING",
        "start-time": 1_000,
        "end-time": -1,
        "duration": 2_500,
        "last-modification": 3_000,
        "pending-operators": 0,
        "tasks": {
            "created": 2,
            "scheduled": 0,
            "deploying": 0,
            "running": 1,
            "finished": 1,
            "canceling": 0,
            "canceled": 0,
            "failed": 0,
            "reconciling": 0,
            "initializing": 0,
            "total": 4,
        },
    }


def test_a_job_known_from_its_result_alone_counts_each_vertex_as_a_task() -> None:
    overview = JobSnapshot.from_result(failed_result()).overview
    details = flink_job_details(overview).to_dict()
    assert details == {
        "jid": JOB_ID,
        "name": "sales",
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
    assert set(details["tasks"]) == FLINK_TASK_KEYS


def test_job_summary_has_no_end_or_duration_while_running() -> None:
    assert job_summary(running().overview).to_dict() == {
        "id": JOB_ID,
        "name": "sales",
        "status": "RUNNING",
        "start_time": 1_000,
        "end_time": None,
        "duration_ms": None,
    }
    ended = JobSnapshot.from_result(failed_result()).overview
    assert job_summary(ended).to_dict() == {
        "id": JOB_ID,
        "name": "sales",
        "status": "FAILED",
        "start_time": 1_000,
        "end_time": 5_200,
        "duration_ms": 4_200,
    }


def test_job_details_of_a_live_job_and_of_a_job_known_from_its_result() -> None:
    body = job_details(running()).to_dict()
    assert body == {
        "id": JOB_ID,
        "name": "sales",
        "status": "RUNNING",
        "start_time": 1_000,
        "end_time": None,
        "vertices": [
            {
                "id": "extract",
                "state": "RUNNING",
                "parallelism": 2,
                "inputs": [],
                "subtasks": [
                    {"index": 0, "state": "FINISHED", "attempt": 0, "taskmanager": "te-1"},
                    {"index": 1, "state": "RUNNING", "attempt": 1, "taskmanager": "te-2"},
                ],
            },
            {
                "id": "clean",
                "state": "CREATED",
                "parallelism": 2,
                "inputs": ["extract"],
                "subtasks": [
                    {"index": 0, "state": "CREATED", "attempt": 0, "taskmanager": None},
                    {"index": 1, "state": "CREATED", "attempt": 0, "taskmanager": None},
                ],
            },
        ],
        "repairs": [],
    }
    assert job_details(JobSnapshot.from_result(failed_result())).to_dict() == {
        "id": JOB_ID,
        "name": "sales",
        "status": "FAILED",
        "start_time": 1_000,
        "end_time": 5_200,
        "vertices": [
            {"id": "extract", "state": "FINISHED", "parallelism": None, "inputs": [], "attempts": 1, "subtasks": []},
            {"id": "clean", "state": "FAILED", "parallelism": None, "inputs": [], "attempts": 3, "subtasks": []},
        ],
        "repairs": [],
    }


def test_a_snapshot_round_trips_through_its_stored_form() -> None:
    repaired = dataclasses.replace(
        running(),
        repairs=(Repair(1, ("clean",), ("clean",), 1_500, JobStatus.FAILED), Repair(2, ("clean",), ("clean",), 1_900)),
    )
    for snapshot in (running(), JobSnapshot.from_result(failed_result()), repaired):
        assert JobSnapshot.from_dict(snapshot.to_dict()) == snapshot
