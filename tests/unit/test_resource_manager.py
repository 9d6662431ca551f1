"""ResourceManager: fenced registration, heartbeats, lost TaskExecutors, requirements on the loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import pytest

from sparkdispatch.config import Configuration
from sparkdispatch.errors import (
    FencingTokenMismatch,
    InvalidRequest,
    LeadershipLost,
    SparkDispatchError,
    UnknownTaskExecutor,
)
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.protocol import (
    ExecutionReport,
    RegistrationAck,
    SlotReport,
    SlotStatus,
    TaskExecutorRegistration,
)
from sparkdispatch.model.rest_shapes import TaskManagerExecution, TaskManagerSlot
from sparkdispatch.resourcemanager import AllocatedSlot, ResourceManager, ResourceOverview
from sparkdispatch.resourcemanager.settings import ResourceManagerSettings
from sparkdispatch.testing.clock import ManualClock

SESSION = "11111111-2222-3333-4444-555555555555"
STALE = "99999999-2222-3333-4444-555555555555"
JOB_A, JOB_B = "a" * 32, "b" * 32


class Job:
    """A recording SlotListener."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.slots: list[AllocatedSlot] = []
        self.failures: list[SparkDispatchError] = []
        self.lost: list[tuple[str, list[str], str]] = []
        self.heartbeats: list[tuple[str, list[ExecutionReport]]] = []
        self.changed = asyncio.Event()

    def slots_allocated(self, slots: Sequence[AllocatedSlot]) -> None:
        self.slots.extend(slots)
        self.changed.set()

    def slot_request_failed(self, error: SparkDispatchError) -> None:
        self.failures.append(error)
        self.changed.set()

    def task_executor_lost(self, task_executor_id: str, allocation_ids: Sequence[str], reason: str) -> None:
        self.lost.append((task_executor_id, list(allocation_ids), reason))
        self.changed.set()

    def task_executor_heartbeat(self, task_executor_id: str, executions: Sequence[ExecutionReport]) -> None:
        self.heartbeats.append((task_executor_id, list(executions)))

    async def wait_for(self, predicate: Any) -> None:
        while not predicate():
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), timeout=30)


def registration_body(te_id: str, slots: int = 2, **overrides: Any) -> dict[str, Any]:
    return {
        "task_executor_id": te_id,
        "hostname": f"celery@{te_id}",
        "queue": f"sparkdispatch.te.{te_id}",
        "slots": slots,
        "slot_report": SlotReport.free(slots).to_dict(),
        "spark_master": "local[2]",
        **overrides,
    }


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def config() -> Configuration:
    return Configuration.from_mapping(
        {
            "heartbeat.interval": "1s",
            "heartbeat.timeout": "4s",
            "heartbeat.rpc-failure-threshold": 2,
            "slot.request.timeout": "10s",
            "resourcemanager.taskmanager-timeout": "5s",
        }
    )


@pytest.fixture
async def rm(config: Configuration, clock: ManualClock) -> Any:
    manager = ResourceManager(ResourceManagerSettings.from_config(config), SESSION, clock=clock)
    manager.start()
    try:
        yield manager
    finally:
        manager.stop()


async def settle() -> None:
    """Let the coalesced slot check run."""
    for _ in range(3):
        await asyncio.sleep(0)


async def test_registration_answers_with_heartbeat_settings(rm: ResourceManager) -> None:
    ack = rm.register_task_executor(SESSION, TaskExecutorRegistration.from_dict(registration_body("te-1", 3)))
    assert ack == RegistrationAck(rm.resource_manager_id, 1000, 4000, ack.registration_id, resumed=False)
    assert len(ack.registration_id) == 32
    assert RegistrationAck.from_dict(ack.to_dict()) == ack
    rm.register_task_executor(SESSION, registration_body("te-2", 2))  # the JSON form is accepted as well
    assert rm.overview() == ResourceOverview(taskmanagers=2, slots_total=5, slots_available=5)
    entries = {e.id: e for e in rm.task_executors()}
    assert set(entries) == {"te-1", "te-2"}
    entry = entries["te-1"]
    assert (entry.hostname, entry.slots_total, entry.slots_free) == ("celery@te-1", 3, 3)
    assert entry.slots[0] == TaskManagerSlot(index=0, allocation_id=None, job_id=None)
    assert entry.last_heartbeat is not None and abs(entry.last_heartbeat - time.time() * 1000) < 60_000


async def test_a_stale_session_is_refused_and_registers_nothing(rm: ResourceManager) -> None:
    with pytest.raises(FencingTokenMismatch) as refused:
        rm.register_task_executor(STALE, registration_body("te-1"))
    assert refused.value.http_status == 409
    assert STALE in refused.value.message and SESSION in refused.value.message
    with pytest.raises(FencingTokenMismatch):
        rm.register_task_executor(None, registration_body("te-1"))
    assert rm.overview().taskmanagers == 0
    rm.register_task_executor(SESSION, registration_body("te-1"))
    with pytest.raises(FencingTokenMismatch):
        rm.heartbeat(STALE, "te-1", SlotReport.free(2), [])


async def test_a_bad_registration_is_refused_with_the_field_named(rm: ResourceManager) -> None:
    with pytest.raises(InvalidRequest) as refused:
        rm.register_task_executor(SESSION, registration_body("te-1", slots=0, color="red"))
    assert refused.value.http_status == 400
    assert any(m.startswith("slots:") for m in refused.value.messages())
    assert "color: unknown field" in refused.value.messages()
    assert rm.overview().taskmanagers == 0


async def test_pins_are_passed_to_the_slot_manager(rm: ResourceManager, clock: ManualClock) -> None:
    rm.register_task_executor(SESSION, registration_body("te-2", 1))
    rm.register_task_executor(SESSION, registration_body("te-1", 1))  # registered last: its slot would go first
    a = Job(JOB_A)
    rm.declare_requirements(JOB_A, 1, a, pinned={"te-2": 1, "te-9": 0})
    await a.wait_for(lambda: a.slots)
    assert [s.task_executor_id for s in a.slots] == ["te-2"]
    # a pin to a TaskExecutor that is not registered is dropped after heartbeat.timeout (4s), not slot.request.timeout
    clock.advance(3.9)
    for te_id in ("te-1", "te-2"):
        rm.heartbeat(SESSION, te_id, SlotReport.free(1), [])
    rm.check_timeouts()
    assert a.lost == []
    clock.advance(0.1)
    rm.check_timeouts()
    assert a.lost == [("te-9", [], "TaskExecutor te-9 is not registered")]
    with pytest.raises(InvalidRequest, match="pinned"):
        rm.declare_requirements(JOB_A, 1, a, pinned={"te-2": -1})


async def test_heartbeats_from_unknown_task_executors_ask_for_registration(rm: ResourceManager) -> None:
    with pytest.raises(UnknownTaskExecutor, match="register again"):
        rm.heartbeat(SESSION, "te-9", SlotReport.free(1), [])


async def test_slots_are_allocated_on_the_loop_not_inside_the_call(rm: ResourceManager) -> None:
    rm.register_task_executor(SESSION, registration_body("te-1", 2))
    a = Job(JOB_A)
    rm.declare_requirements(JOB_A, 2, a)
    assert a.slots == []  # nothing re-enters the caller
    await a.wait_for(lambda: len(a.slots) == 2)
    assert rm.overview().slots_available == 0
    entry = rm.task_executors()[0]
    assert {s.job_id for s in entry.slots} == {JOB_A}


async def test_release_makes_the_slot_available_to_another_job(rm: ResourceManager) -> None:
    rm.register_task_executor(SESSION, registration_body("te-1", 1))
    a, b = Job(JOB_A), Job(JOB_B)
    rm.declare_requirements(JOB_A, 1, a)
    await a.wait_for(lambda: a.slots)
    rm.declare_requirements(JOB_B, 1, b)
    await settle()
    assert b.slots == []
    rm.declare_requirements(JOB_A, 0, a)
    assert rm.release_slot(JOB_A, a.slots[0].allocation_id)
    await b.wait_for(lambda: b.slots)
    assert b.slots[0].slot_index == a.slots[0].slot_index
    assert not rm.release_slot(JOB_A, a.slots[0].allocation_id)


async def test_heartbeat_timeout_removes_the_task_executor_and_tells_the_jobs(
    rm: ResourceManager, clock: ManualClock
) -> None:
    rm.register_task_executor(SESSION, registration_body("te-1", 2))
    rm.register_task_executor(SESSION, registration_body("te-2", 2))
    a = Job(JOB_A)
    rm.declare_requirements(JOB_A, 4, a)
    await a.wait_for(lambda: len(a.slots) == 4)
    on_te1 = sorted(s.allocation_id for s in a.slots if s.task_executor_id == "te-1")
    clock.advance(3)
    rm.heartbeat(SESSION, "te-2", SlotReport.free(2), [])
    clock.advance(1.5)
    rm.check_timeouts()
    assert [(te, sorted(ids)) for te, ids, _ in a.lost] == [("te-1", on_te1)]
    assert "no heartbeat" in a.lost[0][2]
    assert rm.overview() == ResourceOverview(taskmanagers=1, slots_total=2, slots_available=0)
    assert [e.id for e in rm.task_executors()] == ["te-2"]
    with pytest.raises(UnknownTaskExecutor):
        rm.heartbeat(SESSION, "te-1", SlotReport.free(2), [])


async def test_unreachable_after_failed_calls(rm: ResourceManager, clock: ManualClock) -> None:
    rm.register_task_executor(SESSION, registration_body("te-1", 1))
    a = Job(JOB_A)
    rm.declare_requirements(JOB_A, 1, a)
    await a.wait_for(lambda: a.slots)
    clock.advance(2.5)  # silent for more than two heartbeat intervals, less than the timeout
    rm.record_rpc_failure("te-1")
    rm.record_rpc_success("te-1")
    rm.record_rpc_failure("te-1")
    assert rm.overview().taskmanagers == 1
    rm.record_rpc_failure("te-1")
    assert rm.overview().taskmanagers == 0
    assert a.lost == [("te-1", [a.slots[0].allocation_id], "unreachable after 2 failed calls and no heartbeat for 2s")]


async def test_failed_calls_do_not_lose_a_task_executor_that_heartbeats(
    rm: ResourceManager, clock: ManualClock
) -> None:
    """The calls go through the broker; a TaskExecutor whose heartbeats arrive is alive (a broker restart)."""
    rm.register_task_executor(SESSION, registration_body("te-1", 1))
    a = Job(JOB_A)
    rm.declare_requirements(JOB_A, 1, a)
    await a.wait_for(lambda: a.slots)
    for _ in range(10):
        rm.record_rpc_failure("te-1")
        clock.advance(0.9)
        rm.heartbeat(SESSION, "te-1", SlotReport.free(1), [])
        rm.check_timeouts()
    assert rm.overview().taskmanagers == 1 and a.lost == []
    clock.advance(1.9)  # its heartbeats stop too
    rm.check_timeouts()
    assert rm.overview().taskmanagers == 1
    clock.advance(0.2)
    rm.check_timeouts()  # the timer finds it: ten failed calls in a row and two intervals of silence
    assert rm.overview().taskmanagers == 0
    assert a.lost == [("te-1", [a.slots[0].allocation_id], "unreachable after 2 failed calls and no heartbeat for 2s")]


async def test_registering_again_reports_the_old_allocations_lost(rm: ResourceManager) -> None:
    rm.register_task_executor(SESSION, registration_body("te-1", 2))
    a = Job(JOB_A)
    rm.declare_requirements(JOB_A, 1, a)
    await a.wait_for(lambda: a.slots)
    first = a.slots[0].allocation_id
    rm.register_task_executor(SESSION, registration_body("te-1", 2))
    assert a.lost == [("te-1", [first], "it registered again")]
    await a.wait_for(lambda: len(a.slots) == 2)  # the requirement still stands: a new slot
    assert a.slots[1].allocation_id != first
    assert rm.overview().taskmanagers == 1


async def test_registering_again_from_the_same_process_keeps_the_running_tasks(rm: ResourceManager) -> None:
    first = rm.register_task_executor(SESSION, registration_body("te-1", 2))
    a = Job(JOB_A)
    rm.declare_requirements(JOB_A, 1, a)
    await a.wait_for(lambda: a.slots)
    slot = a.slots[0]
    # the TaskExecutor lost sight of the leader for a while; its slot report says what runs
    report = SlotReport((SlotStatus(slot.slot_index, slot.allocation_id, JOB_A), SlotStatus(1 - slot.slot_index)))
    again = rm.register_task_executor(
        SESSION,
        registration_body("te-1", 2, slot_report=report.to_dict(), previous_registration_id=first.registration_id),
    )
    assert again.resumed and again.registration_id != first.registration_id
    await settle()
    assert a.lost == [] and len(a.slots) == 1
    assert rm.overview() == ResourceOverview(taskmanagers=1, slots_total=2, slots_available=1)
    rm.heartbeat(SESSION, "te-1", report, [])  # still monitored


async def test_unregistering_tells_the_jobs(rm: ResourceManager) -> None:
    rm.register_task_executor(SESSION, registration_body("te-1", 1))
    a = Job(JOB_A)
    rm.declare_requirements(JOB_A, 1, a)
    await a.wait_for(lambda: a.slots)
    assert rm.unregister_task_executor("te-1", "worker shut down")
    assert a.lost == [("te-1", [a.slots[0].allocation_id], "worker shut down")]
    assert not rm.unregister_task_executor("te-1", "again")
    assert rm.overview() == ResourceOverview(0, 0, 0)


async def test_heartbeats_reconcile_slots_and_reach_the_jobs(rm: ResourceManager) -> None:
    rm.register_task_executor(
        SESSION,
        registration_body(
            "te-1", 2, slot_report={"slots": [{"index": 0, "allocation_id": "from-old-leader", "job_id": JOB_B}]}
        ),
    )
    assert rm.overview().slots_available == 1
    a = Job(JOB_A)
    rm.declare_requirements(JOB_A, 1, a)
    await a.wait_for(lambda: a.slots)
    allocation = a.slots[0].allocation_id
    rm.heartbeat(
        SESSION,
        "te-1",
        {"slots": [{"index": 0}, {"index": 1, "allocation_id": allocation, "job_id": JOB_A}]},
        [{"job_id": JOB_A, "execution_id": "e1", "state": "RUNNING"}],
    )
    assert rm.overview().slots_available == 1  # the old task ended
    assert a.heartbeats == [("te-1", [ExecutionReport(JOB_A, "e1", ExecutionState.RUNNING)])]
    entry = rm.task_executors()[0]
    assert entry.executions == (TaskManagerExecution(job_id=JOB_A, execution_id="e1", state=ExecutionState.RUNNING),)
    with pytest.raises(InvalidRequest, match="executions"):
        rm.heartbeat(SESSION, "te-1", SlotReport.free(2), [{"job_id": JOB_A}])


async def test_slot_request_timeout_reaches_the_job(rm: ResourceManager, clock: ManualClock) -> None:
    rm.register_task_executor(SESSION, registration_body("te-1", 1))
    a = Job(JOB_A)
    rm.declare_requirements(JOB_A, 2, a)
    await a.wait_for(lambda: a.slots)
    clock.advance(11)
    rm.heartbeat(SESSION, "te-1", SlotReport((SlotStatus(0, a.slots[0].allocation_id, JOB_A),)), [])
    rm.check_timeouts()
    assert len(a.failures) == 1 and JOB_A in a.failures[0].message
    rm.register_task_executor(SESSION, registration_body("te-2", 1))  # the requirement dropped to what it holds
    await settle()
    assert len(a.slots) == 1 and rm.overview().slots_available == 1


async def test_the_timer_finds_a_silent_task_executor() -> None:
    config = Configuration.from_mapping({"heartbeat.interval": "50ms", "heartbeat.timeout": "200ms"})
    rm = ResourceManager(ResourceManagerSettings.from_config(config), SESSION)
    rm.start()
    try:
        rm.register_task_executor(SESSION, registration_body("te-1", 1))
        a = Job(JOB_A)
        rm.declare_requirements(JOB_A, 1, a)
        await a.wait_for(lambda: a.slots)
        await a.wait_for(lambda: a.lost)
        assert a.lost == [("te-1", [a.slots[0].allocation_id], "no heartbeat for 0.2s")]
        assert rm.overview().taskmanagers == 0
    finally:
        rm.stop()


async def test_idle_task_executors_show_in_the_listing(rm: ResourceManager, clock: ManualClock) -> None:
    rm.register_task_executor(SESSION, registration_body("te-1", 1))
    assert not rm.task_executors()[0].idle
    clock.advance(5)
    rm.heartbeat(SESSION, "te-1", SlotReport.free(1), [])
    entry = rm.task_executors()[0]
    assert entry.idle and entry.idle_since is not None and entry.last_heartbeat is not None
    assert entry.idle_since <= entry.last_heartbeat - 5000


async def test_stop_drops_everything_and_refuses_later_calls(config: Configuration, clock: ManualClock) -> None:
    rm = ResourceManager(ResourceManagerSettings.from_config(config), SESSION, clock=clock)
    rm.start()
    rm.register_task_executor(SESSION, registration_body("te-1", 1))
    a = Job(JOB_A)
    rm.declare_requirements(JOB_A, 1, a)
    await a.wait_for(lambda: a.slots)
    rm.stop()
    assert rm.overview() == ResourceOverview(0, 0, 0)
    assert a.lost == []  # the JobMasters are suspended with the leadership, not failed over
    with pytest.raises(LeadershipLost):
        rm.register_task_executor(SESSION, registration_body("te-1", 1))
    with pytest.raises(LeadershipLost):
        rm.heartbeat(SESSION, "te-1", SlotReport.free(1), [])
    with pytest.raises(LeadershipLost):
        rm.declare_requirements(JOB_A, 1, a)
    rm.stop()  # idempotent
