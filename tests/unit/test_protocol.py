"""The master ↔ TaskExecutor protocol: exact JSON round trips and refusals that name the field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sparkdispatch.errors import InvalidJobGraph, InvalidRequest
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.job_result import Failure
from sparkdispatch.model.protocol import (
    ExecutionReport,
    ExecutionStateUpdate,
    HeartbeatPayload,
    RegistrationAck,
    SlotReport,
    SlotStatus,
    TaskDeploymentDescriptor,
    TaskExecutorRegistration,
    as_execution_reports,
    as_slot_report,
)

JOB_ID = "cd" * 16


def over_the_wire(body: dict[str, Any]) -> Any:
    return json.loads(json.dumps(body))


def test_slot_report_deployment_and_update_round_trips() -> None:
    report = SlotReport.free(2)
    assert SlotReport.from_dict(report.to_dict()) == report
    tdd = TaskDeploymentDescriptor(
        job_id=JOB_ID,
        job_master_id="s",
        execution_id="e" * 32,
        vertex_id="clean",
        entrypoint="pipelines.sales:clean",
        subtask_index=1,
        parallelism=2,
        attempt=0,
        allocation_id="a",
        slot_index=0,
        result_path="/r/clean/1-e",
        inputs={"extract": ("/r/extract/0",)},
        params={"k": 1},
        artifacts=("f" * 64,),
        spark_conf={"spark.x": "1"},
        input_schemas={"extract": '{"fields":[],"type":"struct"}'},
    )
    assert TaskDeploymentDescriptor.from_dict(json.loads(json.dumps(tdd.to_dict()))) == tdd
    update = ExecutionStateUpdate(
        job_id=JOB_ID,
        job_master_id="s",
        execution_id="e" * 32,
        state=ExecutionState.FINISHED,
        rows=3,
        result_path="/r",
        result_schema='{"fields":[],"type":"struct"}',
    )
    assert ExecutionStateUpdate.from_dict(update.to_dict()) == update


def test_a_finished_report_or_deployment_of_before_schemas_travelled_loads_without_them() -> None:
    update = ExecutionStateUpdate.from_dict(
        {
            "job_id": JOB_ID,
            "job_master_id": "s",
            "execution_id": "e1",
            "state": "FINISHED",
            "rows": 3,
            "result_path": "/r",
        }
    )
    assert update.result_schema is None
    tdd = TaskDeploymentDescriptor.from_dict(
        {
            "job_id": JOB_ID,
            "job_master_id": "s",
            "execution_id": "e1",
            "vertex_id": "v",
            "entrypoint": "m:f",
            "subtask_index": 0,
            "parallelism": 1,
            "attempt": 0,
            "allocation_id": "a",
            "slot_index": 0,
            "result_path": "/r",
            "inputs": {"up": ["/r/up/0"]},
        }
    )
    assert tdd.input_schemas == {}


def test_a_failed_update_carries_its_failure_and_drops_empty_fields() -> None:
    update = ExecutionStateUpdate(
        job_id=JOB_ID,
        job_master_id="s",
        execution_id="e1",
        state=ExecutionState.FAILED,
        task_executor_id="te-1",
        failure=Failure("ValueError", "bad row", "Traceback"),
    )
    body = update.to_dict()
    assert body == {
        "job_id": JOB_ID,
        "job_master_id": "s",
        "execution_id": "e1",
        "state": "FAILED",
        "task_executor_id": "te-1",
        "failure": {"class": "ValueError", "message": "bad row", "traceback": "Traceback"},
    }
    assert ExecutionStateUpdate.from_dict(over_the_wire(body)) == update


def test_registration_heartbeat_and_ack_round_trips() -> None:
    registration = TaskExecutorRegistration(
        task_executor_id="te-1",
        hostname="celery@host",
        queue="te-1",
        slots=2,
        slot_report=SlotReport((SlotStatus(0, "alloc-1", JOB_ID), SlotStatus(1))),
        spark_master="local[2]",
    )
    assert TaskExecutorRegistration.from_dict(over_the_wire(registration.to_dict())) == registration
    again = TaskExecutorRegistration(
        task_executor_id="te-1",
        hostname="celery@host",
        queue="te-1",
        slots=1,
        slot_report=SlotReport.free(1),
        previous_registration_id="reg-1",
    )
    assert TaskExecutorRegistration.from_dict(over_the_wire(again.to_dict())) == again
    heartbeat = HeartbeatPayload(SlotReport.free(1), (ExecutionReport(JOB_ID, "e1", ExecutionState.RUNNING),))
    assert HeartbeatPayload.from_dict(over_the_wire(heartbeat.to_dict())) == heartbeat
    ack = RegistrationAck(
        "rm-1", heartbeat_interval_ms=300, heartbeat_timeout_ms=2_000, registration_id="reg-2", resumed=True
    )
    assert RegistrationAck.from_dict(over_the_wire(ack.to_dict())) == ack
    with pytest.raises(InvalidRequest, match="registration_id"):
        RegistrationAck.from_dict({**ack.to_dict(), "registration_id": ""})
    assert (ack.heartbeat_interval_s, ack.heartbeat_timeout_s) == (0.3, 2.0)


def test_a_registration_without_a_slot_report_has_all_slots_free() -> None:
    registration = TaskExecutorRegistration.from_dict(
        {"task_executor_id": "te-1", "hostname": "h", "queue": "q", "slots": 3}
    )
    assert registration.slot_report == SlotReport.free(3)


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"task_executor_id": ".bad", "hostname": "h", "queue": "q", "slots": 1}, "task_executor_id", "letters"),
        ({"task_executor_id": "te", "hostname": "h", "queue": "q", "slots": 0}, "slots", "between 1 and"),
        ({"task_executor_id": "te", "hostname": "h", "queue": "q", "slots": 1, "colour": "red"}, "colour", "unknown"),
        ({"task_executor_id": "te", "hostname": "h", "queue": "q"}, "slots", "missing"),
        (
            {
                "task_executor_id": "te",
                "hostname": "h",
                "queue": "q",
                "slots": 1,
                "slot_report": {"slots": [{"index": 1}]},
            },
            "slot_report",
            "out of range",
        ),
    ],
)
def test_bad_registrations_are_refused_naming_the_field(body: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(InvalidRequest, match="invalid TaskExecutor registration") as refused:
        TaskExecutorRegistration.from_dict(body)
    assert any(words in reason for reason in refused.value.field_errors[field]), refused.value.field_errors


def test_each_message_refuses_with_its_own_error_class() -> None:
    with pytest.raises(InvalidRequest, match="invalid heartbeat: body: expected a JSON object, got list"):
        HeartbeatPayload.from_dict([])
    with pytest.raises(InvalidRequest, match="invalid registration answer: heartbeat_interval_ms"):
        RegistrationAck.from_dict({"resource_manager_id": "rm", "heartbeat_interval_ms": 0, "heartbeat_timeout_ms": 1})
    with pytest.raises(InvalidJobGraph, match="entrypoint"):
        TaskDeploymentDescriptor.from_dict(
            {
                **TaskDeploymentDescriptor(
                    job_id=JOB_ID,
                    job_master_id="s",
                    execution_id="e",
                    vertex_id="v",
                    entrypoint="m:f",
                    subtask_index=0,
                    parallelism=1,
                    attempt=0,
                    allocation_id="a",
                    slot_index=0,
                    result_path="/r",
                ).to_dict(),
                "entrypoint": "not one",
            }
        )
    with pytest.raises(InvalidJobGraph, match="state"):
        ExecutionStateUpdate.from_dict(
            {"job_id": JOB_ID, "job_master_id": "s", "execution_id": "e", "state": "DANCING"}
        )
    with pytest.raises(InvalidJobGraph, match="slots"):
        SlotReport.from_dict({})


def test_reports_are_taken_as_values_or_as_their_json_forms() -> None:
    report = SlotReport.free(2)
    assert as_slot_report(report) is report and as_slot_report(report.to_dict()) == report
    with pytest.raises(InvalidRequest, match="invalid slot report"):
        as_slot_report({"slots": [{"index": -1}]})
    running = ExecutionReport(JOB_ID, "e1", ExecutionState.RUNNING)
    assert as_execution_reports([running, running.to_dict()]) == (running, running)
    assert as_execution_reports(None) == ()
    with pytest.raises(InvalidRequest) as refused:
        as_execution_reports([running.to_dict(), {"job_id": JOB_ID}])
    assert set(refused.value.field_errors) == {"executions[1].execution_id", "executions[1].state"}
    with pytest.raises(InvalidRequest, match="executions: must be a list"):
        as_execution_reports({"job_id": JOB_ID})  # type: ignore[arg-type]
