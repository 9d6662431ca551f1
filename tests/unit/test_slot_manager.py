"""SlotManager: registration, slot reports, declarative requirements, timeouts, idleness."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkdispatch.errors import InvalidRequest, SlotRequestTimeout, SparkDispatchError
from sparkdispatch.model.job_graph import DEFAULT_POOL
from sparkdispatch.model.protocol import ExecutionReport, SlotReport, SlotStatus, TaskExecutorRegistration
from sparkdispatch.model.rest_shapes import TaskManager, TaskManagerSlot
from sparkdispatch.resourcemanager import AllocatedSlot, SlotManager
from sparkdispatch.testing.clock import ManualClock

JOB_A, JOB_B, JOB_C = "a" * 32, "b" * 32, "c" * 32


class Job:
    """A recording SlotListener."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.batches: list[list[AllocatedSlot]] = []
        self.failures: list[SparkDispatchError] = []
        self.lost: list[tuple[str, list[str], str]] = []
        self.heartbeats: list[tuple[str, list[ExecutionReport]]] = []

    @property
    def slots(self) -> list[AllocatedSlot]:
        return [slot for batch in self.batches for slot in batch]

    def slots_allocated(self, slots: Sequence[AllocatedSlot]) -> None:
        self.batches.append(list(slots))

    def slot_request_failed(self, error: SparkDispatchError) -> None:
        self.failures.append(error)

    def task_executor_lost(self, task_executor_id: str, allocation_ids: Sequence[str], reason: str) -> None:
        self.lost.append((task_executor_id, list(allocation_ids), reason))

    def task_executor_heartbeat(self, task_executor_id: str, executions: Sequence[ExecutionReport]) -> None:
        self.heartbeats.append((task_executor_id, list(executions)))


def registration(
    te_id: str,
    slots: int = 2,
    report: SlotReport | None = None,
    *,
    previous: str | None = None,
    pool: str = DEFAULT_POOL,
) -> TaskExecutorRegistration:
    return TaskExecutorRegistration(
        task_executor_id=te_id,
        hostname=f"celery@{te_id}",
        queue=f"sparkdispatch.te.{te_id}",
        slots=slots,
        slot_report=report or SlotReport.free(slots),
        spark_master="local[2]",
        previous_registration_id=previous,
        pool=pool,
    )


def entry_of(manager: SlotManager, task_executor_id: str) -> TaskManager | None:
    """The TaskExecutor's `GET /taskmanagers` entry (without heartbeat fields)."""
    return next((e for e in manager.describe_all() if e.id == task_executor_id), None)


def idle_ids(manager: SlotManager) -> list[str]:
    return [e.id for e in manager.describe_all() if e.idle]


# The SlotManager offers no query of requirements: the ResourceManager only hands them over. The
# tests read its state to check the accounting.


def requirement(manager: SlotManager, job_id: str) -> tuple[int, int]:
    """(required, acquired) slots of a job; (0, 0) if it needs and holds none."""
    job = manager._jobs.get(job_id)
    return (0, 0) if job is None else (job.required, len(job.allocations))


def waiting_jobs(manager: SlotManager, pool: str = DEFAULT_POOL) -> list[str]:
    """Jobs of a pool with unmet requirements, in the order they are served."""
    return list(manager._pool(pool).waiting)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def manager(clock: ManualClock) -> SlotManager:
    return SlotManager(slot_request_timeout=60.0, task_executor_idle_timeout=30.0, clock=clock)


def test_registration_adds_free_slots(manager: SlotManager) -> None:
    assert not manager.register_task_executor(registration("te-1", 3)).replaced
    manager.register_task_executor(registration("te-2", 2))
    assert (manager.task_executor_count, manager.slots_total, manager.slots_free) == (2, 5, 5)
    described = entry_of(manager, "te-1")
    assert described is not None
    assert described.hostname == "celery@te-1"
    assert described.queue == "sparkdispatch.te.te-1"
    assert described.slots == tuple(TaskManagerSlot(index=i, allocation_id=None, job_id=None) for i in range(3))
    assert (described.slots_total, described.slots_free) == (3, 3)


def test_allocation_tells_the_listener_where_its_slots_are(manager: SlotManager) -> None:
    manager.register_task_executor(registration("te-1", 2))
    job = Job(JOB_A)
    manager.declare_requirements(JOB_A, 2, job)
    assert manager.check_requirements() == 2
    assert len(job.batches) == 1
    slots = job.slots
    assert {(s.task_executor_id, s.slot_index) for s in slots} == {("te-1", 0), ("te-1", 1)}
    assert all(s.queue == "sparkdispatch.te.te-1" and s.hostname == "celery@te-1" for s in slots)
    assert len({s.allocation_id for s in slots}) == 2
    assert requirement(manager, JOB_A) == (2, 2)
    assert manager.slots_free == 0
    described = entry_of(manager, "te-1")
    assert described is not None
    assert {(s.allocation_id, s.job_id) for s in described.slots} == {(s.allocation_id, JOB_A) for s in slots}


def test_jobs_are_served_in_declaration_order(manager: SlotManager) -> None:
    manager.register_task_executor(registration("te-1", 3))
    a, b, c = Job(JOB_A), Job(JOB_B), Job(JOB_C)
    manager.declare_requirements(JOB_A, 2, a)
    manager.declare_requirements(JOB_B, 2, b)
    manager.declare_requirements(JOB_C, 1, c)
    assert manager.check_requirements() == 3
    assert (len(a.slots), len(b.slots), len(c.slots)) == (2, 1, 0)
    assert waiting_jobs(manager) == [JOB_B, JOB_C]
    manager.declare_requirements(JOB_A, 0, a)
    manager.release_slot(JOB_A, a.slots[0].allocation_id)
    manager.check_requirements()
    assert (len(b.slots), len(c.slots)) == (2, 0)  # B waited first
    manager.release_slot(JOB_A, a.slots[1].allocation_id)
    manager.check_requirements()
    assert len(c.slots) == 1
    assert waiting_jobs(manager) == []


def test_a_freed_slot_goes_to_another_job(manager: SlotManager) -> None:
    manager.register_task_executor(registration("te-1", 1))
    a, b = Job(JOB_A), Job(JOB_B)
    manager.declare_requirements(JOB_A, 1, a)
    manager.check_requirements()
    manager.declare_requirements(JOB_B, 1, b)
    assert manager.check_requirements() == 0
    manager.declare_requirements(JOB_A, 0, a)
    assert manager.release_slot(JOB_A, a.slots[0].allocation_id)
    assert manager.check_requirements() == 1
    assert b.slots[0].slot_index == a.slots[0].slot_index
    assert b.slots[0].allocation_id != a.slots[0].allocation_id
    assert requirement(manager, JOB_A) == (0, 0)


def test_duplicate_declarations_are_idempotent(manager: SlotManager) -> None:
    manager.register_task_executor(registration("te-1", 4))
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 2, a)
    manager.declare_requirements(JOB_A, 2, a)
    manager.check_requirements()
    manager.declare_requirements(JOB_A, 2, a)
    assert manager.check_requirements() == 0
    assert len(a.batches) == 1 and len(a.slots) == 2
    assert manager.slots_free == 2


def test_a_lower_requirement_frees_nothing_until_released(manager: SlotManager) -> None:
    manager.register_task_executor(registration("te-1", 3))
    a, b = Job(JOB_A), Job(JOB_B)
    manager.declare_requirements(JOB_A, 3, a)
    manager.check_requirements()
    manager.declare_requirements(JOB_A, 1, a)
    manager.declare_requirements(JOB_B, 1, b)
    assert manager.check_requirements() == 0
    assert requirement(manager, JOB_A) == (1, 3)
    assert manager.slots_free == 0
    manager.release_slot(JOB_A, a.slots[0].allocation_id)
    assert manager.check_requirements() == 1
    assert len(b.slots) == 1
    assert requirement(manager, JOB_A) == (1, 2)  # still over its requirement: it gets nothing back


def test_releasing_below_the_requirement_asks_for_a_slot_again(manager: SlotManager) -> None:
    manager.register_task_executor(registration("te-1", 2))
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 1, a)
    manager.check_requirements()
    manager.release_slot(JOB_A, a.slots[0].allocation_id)
    assert manager.check_requirements() == 1
    assert requirement(manager, JOB_A) == (1, 1)


def test_declaring_zero_drops_an_unmet_requirement(manager: SlotManager) -> None:
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 5, a)
    assert waiting_jobs(manager) == [JOB_A]
    manager.declare_requirements(JOB_A, 0, a)
    assert waiting_jobs(manager) == []
    manager.register_task_executor(registration("te-1", 2))
    assert manager.check_requirements() == 0
    assert a.batches == []


@pytest.mark.parametrize("bad", [-1, True, "2", 1.5, None])
def test_a_bad_requirement_is_refused_and_changes_nothing(manager: SlotManager, bad: object) -> None:
    manager.register_task_executor(registration("te-1", 2))
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 1, a)
    with pytest.raises(InvalidRequest, match="slots"):
        manager.declare_requirements(JOB_A, bad, a)  # type: ignore[arg-type]
    assert requirement(manager, JOB_A) == (1, 0)
    assert manager.check_requirements() == 1


def test_releasing_what_a_job_does_not_hold_changes_nothing(manager: SlotManager) -> None:
    manager.register_task_executor(registration("te-1", 2))
    a, b = Job(JOB_A), Job(JOB_B)
    manager.declare_requirements(JOB_A, 1, a)
    manager.check_requirements()
    allocation = a.slots[0].allocation_id
    assert not manager.release_slot(JOB_B, allocation)
    assert not manager.release_slot(JOB_A, "no-such-allocation")
    assert manager.slots_free == 1
    assert requirement(manager, JOB_A) == (1, 1)
    assert manager.release_slot(JOB_A, allocation)
    assert not manager.release_slot(JOB_A, allocation)
    assert b.batches == []


def test_an_unmet_requirement_times_out(manager: SlotManager, clock: ManualClock) -> None:
    manager.register_task_executor(registration("te-1", 2))
    a, b = Job(JOB_A), Job(JOB_B)
    manager.declare_requirements(JOB_A, 3, a)
    manager.check_requirements()
    clock.advance(59)
    assert manager.check_timeouts() == []
    clock.advance(2)
    assert manager.check_timeouts() == [JOB_A]
    assert len(a.failures) == 1
    error = a.failures[0]
    assert isinstance(error, SlotRequestTimeout)
    assert JOB_A in error.message and "1 more slot" in error.message and "needs 3, holds 2" in error.message
    assert requirement(manager, JOB_A) == (2, 2)
    assert waiting_jobs(manager) == []
    # a slot freed later does not go to the failed requirement
    manager.declare_requirements(JOB_B, 1, b)
    manager.check_requirements()
    clock.advance(100)
    assert manager.check_timeouts() == [JOB_B]
    assert len(a.failures) == 1


def test_progress_restarts_the_request_timeout(manager: SlotManager, clock: ManualClock) -> None:
    manager.register_task_executor(registration("te-1", 1))
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 2, a)
    clock.advance(50)
    manager.check_requirements()  # one slot now, one still missing
    clock.advance(50)
    assert manager.check_timeouts() == []
    clock.advance(11)
    assert manager.check_timeouts() == [JOB_A]


def test_a_lost_task_executor_takes_its_allocations_with_it(manager: SlotManager) -> None:
    manager.register_task_executor(registration("te-1", 2))
    a, b = Job(JOB_A), Job(JOB_B)
    manager.declare_requirements(JOB_A, 1, a)
    manager.declare_requirements(JOB_B, 1, b)
    manager.check_requirements()
    manager.register_task_executor(registration("te-2", 2))
    assert manager.unregister_task_executor("te-1", "no heartbeat for 25s")
    assert a.lost == [("te-1", [a.slots[0].allocation_id], "no heartbeat for 25s")]
    assert b.lost == [("te-1", [b.slots[0].allocation_id], "no heartbeat for 25s")]
    assert (manager.task_executor_count, manager.slots_total, manager.slots_free) == (1, 2, 2)
    assert waiting_jobs(manager) == [JOB_A, JOB_B]
    assert manager.check_requirements() == 2
    assert a.slots[-1].task_executor_id == "te-2" and b.slots[-1].task_executor_id == "te-2"
    assert not manager.unregister_task_executor("te-1", "again")


def test_only_the_owning_jobs_hear_about_a_lost_task_executor(manager: SlotManager) -> None:
    manager.register_task_executor(registration("te-1", 2))
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 2, a)
    manager.check_requirements()
    manager.register_task_executor(registration("te-2", 1))
    b = Job(JOB_B)
    manager.declare_requirements(JOB_B, 1, b)
    manager.check_requirements()
    manager.unregister_task_executor("te-1", "unregistered")
    assert sorted(a.lost[0][1]) == sorted(s.allocation_id for s in a.slots)
    assert b.lost == []


def test_registering_again_replaces_the_old_registration(manager: SlotManager) -> None:
    manager.register_task_executor(registration("te-1", 2))
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 1, a)
    manager.check_requirements()
    assert manager.register_task_executor(registration("te-1", 4)).replaced
    assert a.lost == [("te-1", [a.slots[0].allocation_id], "it registered again")]
    assert (manager.task_executor_count, manager.slots_total, manager.slots_free) == (1, 4, 4)


def test_each_registration_gets_a_fresh_id_which_its_allocations_carry(manager: SlotManager) -> None:
    first = manager.register_task_executor(registration("te-1", 1))
    second = manager.register_task_executor(registration("te-2", 1))
    assert (first.resumed, second.resumed) == (False, False) and first.registration_id != second.registration_id
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 2, a)
    manager.check_requirements()
    assert {(s.task_executor_id, s.registration_id) for s in a.slots} == {
        ("te-1", first.registration_id),
        ("te-2", second.registration_id),
    }


def test_registering_again_under_the_current_registration_keeps_the_allocations(manager: SlotManager) -> None:
    first = manager.register_task_executor(registration("te-1", 3))
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 2, a)
    manager.check_requirements()
    running, held = a.slots  # one runs a task, the other is held between two tasks
    report = SlotReport((SlotStatus(running.slot_index, running.allocation_id, JOB_A), SlotStatus(1), SlotStatus(2)))
    again = manager.register_task_executor(registration("te-1", 3, report, previous=first.registration_id))
    assert again.resumed and not again.replaced and again.registration_id != first.registration_id
    assert a.lost == [] and requirement(manager, JOB_A) == (2, 2)
    assert (manager.task_executor_count, manager.slots_total, manager.slots_free) == (1, 3, 1)
    entry = entry_of(manager, "te-1")
    assert entry is not None and {s.allocation_id for s in entry.slots} == {
        running.allocation_id,
        held.allocation_id,
        None,
    }
    # the job still owns both: it releases them as before, and new allocations carry the new id
    assert manager.release_slot(JOB_A, held.allocation_id)
    b = Job(JOB_B)
    manager.declare_requirements(JOB_B, 1, b)
    manager.check_requirements()
    assert b.slots[0].registration_id == again.registration_id


@pytest.mark.parametrize(
    "change", [{"previous": "another-registration"}, {"previous": None}, {"slots": 4}, {"pool": "gpu"}]
)
def test_registering_again_otherwise_replaces_the_registration(manager: SlotManager, change: dict[str, Any]) -> None:
    first = manager.register_task_executor(registration("te-1", 2))
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 1, a)
    manager.check_requirements()
    arguments: dict[str, Any] = {"slots": 2, "previous": first.registration_id, "pool": DEFAULT_POOL, **change}
    again = manager.register_task_executor(
        registration("te-1", arguments["slots"], previous=arguments["previous"], pool=arguments["pool"])
    )
    assert again.replaced and not again.resumed
    assert a.lost == [("te-1", [a.slots[0].allocation_id], "it registered again")]


def test_unregistering_a_former_registration_removes_nothing(manager: SlotManager) -> None:
    first = manager.register_task_executor(registration("te-1", 1))
    second = manager.register_task_executor(registration("te-1", 1))
    assert not manager.unregister_task_executor("te-1", "stopped", registration_id=first.registration_id)
    assert manager.task_executor_count == 1
    assert manager.unregister_task_executor("te-1", "stopped", registration_id=second.registration_id)
    assert manager.task_executor_count == 0


def test_a_busy_slot_in_a_registration_is_not_handed_out(manager: SlotManager) -> None:
    report = SlotReport((SlotStatus(0, "old-allocation", JOB_C), SlotStatus(1)))
    manager.register_task_executor(registration("te-1", 2, report))
    assert manager.slots_free == 1
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 2, a)
    assert manager.check_requirements() == 1
    assert a.slots[0].slot_index == 1
    # the TaskExecutor finished the old task: the slot is free and goes to the waiting job
    assert manager.report_slot_status(
        "te-1", SlotReport((SlotStatus(0), SlotStatus(1, a.slots[0].allocation_id, JOB_A)))
    )
    assert manager.check_requirements() == 1
    assert {s.slot_index for s in a.slots} == {0, 1}


def test_a_free_report_does_not_free_an_allocated_slot(manager: SlotManager) -> None:
    manager.register_task_executor(registration("te-1", 1))
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 1, a)
    manager.check_requirements()
    manager.report_slot_status("te-1", SlotReport.free(1))  # between two tasks of job A
    assert manager.slots_free == 0
    assert requirement(manager, JOB_A) == (1, 1)


def test_a_slot_released_while_its_task_runs_stays_occupied(manager: SlotManager) -> None:
    manager.register_task_executor(registration("te-1", 1))
    a, b = Job(JOB_A), Job(JOB_B)
    manager.declare_requirements(JOB_A, 1, a)
    manager.check_requirements()
    allocation = a.slots[0].allocation_id
    manager.declare_requirements(JOB_A, 0, a)
    manager.release_slot(JOB_A, allocation)
    manager.report_slot_status("te-1", SlotReport((SlotStatus(0, allocation, JOB_A),)))  # still running
    manager.declare_requirements(JOB_B, 1, b)
    assert manager.check_requirements() == 0
    described = entry_of(manager, "te-1")
    assert described is not None and described.slots_free == 0
    manager.report_slot_status("te-1", SlotReport.free(1))
    assert manager.check_requirements() == 1


def test_reports_of_unknown_task_executors_and_slots_are_ignored(manager: SlotManager) -> None:
    assert not manager.report_slot_status("stranger", SlotReport.free(2))
    manager.register_task_executor(registration("te-1", 1))
    assert manager.report_slot_status("te-1", SlotReport((SlotStatus(7, "x", JOB_A),)))
    assert (manager.task_executor_count, manager.slots_total, manager.slots_free) == (1, 1, 1)


def test_idle_task_executors_are_reported(manager: SlotManager, clock: ManualClock) -> None:
    manager.register_task_executor(registration("te-1", 1))
    manager.register_task_executor(registration("te-2", 1))
    registered = entry_of(manager, "te-1")
    assert registered is not None and registered.idle_since is not None and not registered.idle
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 1, a)
    manager.check_requirements()
    busy_id = a.slots[0].task_executor_id
    idle_id = "te-2" if busy_id == "te-1" else "te-1"
    clock.advance(31)
    assert idle_ids(manager) == [idle_id]
    busy = entry_of(manager, busy_id)
    assert busy is not None and busy.idle_since is None and not busy.idle
    idle = entry_of(manager, idle_id)
    assert idle is not None and idle.idle
    manager.declare_requirements(JOB_A, 0, a)
    manager.release_slot(JOB_A, a.slots[0].allocation_id)
    freed = entry_of(manager, busy_id)
    assert freed is not None and freed.idle_since is not None and not freed.idle
    clock.advance(30)
    assert sorted(idle_ids(manager)) == ["te-1", "te-2"]


def test_a_failing_listener_does_not_break_the_slot_manager(manager: SlotManager) -> None:
    class Broken(Job):
        def slots_allocated(self, slots: Sequence[AllocatedSlot]) -> None:
            raise RuntimeError("bug in a JobMaster")

    manager.register_task_executor(registration("te-1", 2))
    broken, a = Broken(JOB_A), Job(JOB_B)
    manager.declare_requirements(JOB_A, 1, broken)
    manager.declare_requirements(JOB_B, 1, a)
    assert manager.check_requirements() == 2
    assert len(a.slots) == 1


def test_a_job_gets_slots_of_its_own_pool_only(manager: SlotManager) -> None:
    manager.register_task_executor(registration("te-a", 2, pool="team-a"))
    manager.register_task_executor(registration("te-b", 2, pool="team-b"))
    manager.register_task_executor(registration("te-d", 2))
    a, b, d = Job(JOB_A), Job(JOB_B), Job(JOB_C)
    manager.declare_requirements(JOB_A, 3, a, pool="team-a")
    manager.declare_requirements(JOB_B, 1, b, pool="team-b")
    manager.declare_requirements(JOB_C, 1, d)  # a job that names no pool: the default one
    manager.check_requirements()
    assert {slot.task_executor_id for slot in a.slots} == {"te-a"} and len(a.slots) == 2
    assert [slot.task_executor_id for slot in b.slots] == ["te-b"]
    assert [slot.task_executor_id for slot in d.slots] == ["te-d"]
    assert waiting_jobs(manager, "team-a") == [JOB_A]  # free slots of other pools are not its
    assert entry_of(manager, "te-a") is not None and entry_of(manager, "te-a").pool == "team-a"  # type: ignore[union-attr]


def test_a_job_waiting_in_one_pool_does_not_hold_up_another(manager: SlotManager, clock: ManualClock) -> None:
    manager.register_task_executor(registration("te-1", 1))
    gpu, later = Job(JOB_A), Job(JOB_B)
    manager.declare_requirements(JOB_A, 1, gpu, pool="gpu")  # first in line, in a pool with no TaskExecutor
    manager.declare_requirements(JOB_B, 1, later)
    manager.check_requirements()
    assert (gpu.slots, [slot.task_executor_id for slot in later.slots]) == ([], ["te-1"])
    clock.advance(61)
    assert manager.check_timeouts() == [JOB_A]
    message = gpu.failures[0].message
    assert "pool 'gpu' has 0 free of 0 slots on 0 TaskExecutors" in message
    assert "taskexecutor.pool: gpu" in message


def test_clear_forgets_everything_silently(manager: SlotManager) -> None:
    manager.register_task_executor(registration("te-1", 2))
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 1, a)
    manager.check_requirements()
    manager.clear()
    assert (manager.task_executor_count, manager.slots_total, manager.slots_free) == (0, 0, 0)
    assert requirement(manager, JOB_A) == (0, 0)
    assert a.lost == []


# ---------------------------------------------------------------- pins


def pin_count(manager: SlotManager, job_id: str, te_id: str) -> int | None:
    """The job's pinned count on the TaskExecutor; None if it has no such pin."""
    job = manager._jobs.get(job_id)
    pin = None if job is None else job.pins.get(te_id)
    return None if pin is None else pin.count


def test_pinned_slots_come_only_from_the_named_task_executor(manager: SlotManager) -> None:
    manager.register_task_executor(registration("te-1", 2))
    manager.register_task_executor(registration("te-2", 2))  # registered last: its slots would go first
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 3, a, pinned={"te-1": 3})
    assert manager.check_requirements() == 2
    assert [s.task_executor_id for s in a.slots] == ["te-1", "te-1"]
    assert waiting_jobs(manager) == [JOB_A] and manager.slots_free == 2  # te-2's slots are not its


def test_an_unpinned_remainder_comes_from_anywhere(manager: SlotManager) -> None:
    manager.register_task_executor(registration("te-1", 1))
    manager.register_task_executor(registration("te-2", 1))
    manager.register_task_executor(registration("te-3", 2))
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 3, a, pinned={"te-1": 1, "te-2": 0})
    assert manager.check_requirements() == 3
    assert [s.task_executor_id for s in a.slots] == ["te-1", "te-3", "te-3"]  # the pinned one first
    assert requirement(manager, JOB_A) == (3, 3) and waiting_jobs(manager) == []


def test_a_job_whose_pin_cannot_be_met_does_not_block_a_later_job(manager: SlotManager) -> None:
    manager.register_task_executor(registration("te-1", 1))
    c = Job(JOB_C)
    manager.declare_requirements(JOB_C, 1, c)
    manager.check_requirements()
    manager.register_task_executor(registration("te-2", 2))
    a, b = Job(JOB_A), Job(JOB_B)
    manager.declare_requirements(JOB_A, 1, a, pinned={"te-1": 1})  # first in line, te-1 is full
    manager.declare_requirements(JOB_B, 1, b)
    assert manager.check_requirements() == 1
    assert (a.slots, [s.task_executor_id for s in b.slots]) == ([], ["te-2"])
    assert waiting_jobs(manager) == [JOB_A] and manager.slots_free == 1
    manager.declare_requirements(JOB_C, 0, c)
    manager.release_slot(JOB_C, c.slots[0].allocation_id)
    assert manager.check_requirements() == 1
    assert [s.task_executor_id for s in a.slots] == ["te-1"]


def test_the_pinned_count_is_consumed_as_slots_are_handed_out(manager: SlotManager) -> None:
    manager.register_task_executor(registration("te-1", 1))
    manager.register_task_executor(registration("te-2", 1))
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 3, a, pinned={"te-1": 1})
    assert manager.check_requirements() == 2
    assert pin_count(manager, JOB_A, "te-1") == 0  # met: it only watches te-1 now
    manager.register_task_executor(registration("te-3", 2))
    assert manager.check_requirements() == 1  # the last slot may come from anywhere, and no more
    assert [s.task_executor_id for s in a.slots] == ["te-1", "te-2", "te-3"]
    assert requirement(manager, JOB_A) == (3, 3) and manager.slots_free == 1


def test_pins_beyond_the_missing_slots_hand_out_no_more(manager: SlotManager) -> None:
    manager.register_task_executor(registration("te-1", 3))
    manager.register_task_executor(registration("te-2", 1))
    a, b = Job(JOB_A), Job(JOB_B)
    manager.declare_requirements(JOB_A, 2, a, pinned={"te-1": 3, "te-2": 1})  # a slot it got but had not seen
    assert manager.check_requirements() == 2
    assert [s.task_executor_id for s in a.slots] == ["te-1", "te-1"]
    assert requirement(manager, JOB_A) == (2, 2) and waiting_jobs(manager) == []
    manager.declare_requirements(JOB_B, 2, b)
    assert manager.check_requirements() == 2


def test_a_watched_task_executor_that_unregisters_is_reported_lost(manager: SlotManager) -> None:
    manager.register_task_executor(registration("te-1", 2))
    manager.register_task_executor(registration("te-2", 2))
    a, b = Job(JOB_A), Job(JOB_B)
    manager.declare_requirements(JOB_A, 0, a, pinned={"te-1": 0})
    manager.declare_requirements(JOB_B, 1, b, pinned={"te-1": 1})
    manager.check_requirements()
    manager.declare_requirements(JOB_B, 1, b, pinned={"te-1": 0})
    assert manager.unregister_task_executor("te-1", "stopped")
    assert a.lost == [("te-1", [], "stopped")]
    assert b.lost == [("te-1", [b.slots[0].allocation_id], "stopped")]  # once, with its allocation
    assert pin_count(manager, JOB_B, "te-1") is None
    assert requirement(manager, JOB_A) == (0, 0) and JOB_A not in manager._jobs  # nothing left to watch
    manager.register_task_executor(registration("te-1", 2))
    assert manager.unregister_task_executor("te-1", "stopped again")
    assert (len(a.lost), len(b.lost)) == (1, 1)


def test_a_replaced_registration_is_reported_to_watching_jobs(manager: SlotManager) -> None:
    first = manager.register_task_executor(registration("te-1", 2))
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 0, a, pinned={"te-1": 0})
    manager.register_task_executor(registration("te-1", 2, previous=first.registration_id))  # resumed
    assert a.lost == []
    assert manager.register_task_executor(registration("te-1", 2)).replaced
    assert a.lost == [("te-1", [], "it registered again")]
    assert JOB_A not in manager._jobs


def test_a_pin_to_an_unregistered_task_executor_times_out(clock: ManualClock) -> None:
    manager = SlotManager(
        slot_request_timeout=60.0, task_executor_idle_timeout=30.0, unregistered_pin_timeout=20.0, clock=clock
    )
    manager.register_task_executor(registration("te-1", 1))
    a, b = Job(JOB_A), Job(JOB_B)
    manager.declare_requirements(JOB_A, 1, a, pinned={"te-9": 1})
    manager.declare_requirements(JOB_B, 0, b, pinned={"te-8": 0})
    assert manager.check_requirements() == 0
    clock.advance(10)
    manager.register_task_executor(registration("te-8", 1))  # in time: b's pin stays
    manager.declare_requirements(JOB_A, 1, a, pinned={"te-9": 1})  # declared again: it keeps its time
    clock.advance(9.5)
    manager.check_timeouts()
    assert a.lost == []
    clock.advance(0.5)
    assert manager.check_timeouts() == []
    assert a.lost == [("te-9", [], "TaskExecutor te-9 is not registered")]
    assert (b.lost, pin_count(manager, JOB_B, "te-8")) == ([], 0)
    assert pin_count(manager, JOB_A, "te-9") is None
    assert manager.check_requirements() == 1  # no longer pinned: any slot will do
    clock.advance(100)
    manager.check_timeouts()
    assert len(a.lost) == 1 and a.failures == []


def test_the_unregistered_pin_timeout_defaults_to_the_slot_request_timeout(
    manager: SlotManager, clock: ManualClock
) -> None:
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 0, a, pinned={"te-9": 0})
    clock.advance(59)
    manager.check_timeouts()
    assert a.lost == []
    clock.advance(1)
    manager.check_timeouts()
    assert a.lost == [("te-9", [], "TaskExecutor te-9 is not registered")]
    assert JOB_A not in manager._jobs


def test_the_request_timeout_names_the_pinned_task_executors(manager: SlotManager, clock: ManualClock) -> None:
    manager.register_task_executor(registration("te-1", 1))
    manager.register_task_executor(registration("te-2", 1))
    a, b = Job(JOB_A), Job(JOB_B)
    manager.declare_requirements(JOB_B, 2, b)
    manager.check_requirements()
    manager.declare_requirements(JOB_A, 2, a, pinned={"te-1": 1, "te-2": 0})
    clock.advance(61)
    assert manager.check_timeouts() == [JOB_A]
    message = a.failures[0].message
    assert "(it needs 2, holds 0; 1 of them on TaskExecutor te-1, which has 0 free slots);" in message
    assert "te-2" not in message  # only watched
    # the requirement dropped to what it holds; the pins only watch
    assert requirement(manager, JOB_A) == (0, 0) and pin_count(manager, JOB_A, "te-1") == 0
    manager.unregister_task_executor("te-1", "stopped")
    assert a.lost == [("te-1", [], "stopped")]


@pytest.mark.parametrize("bad", [-1, True, "1", 1.5, None])
def test_a_bad_pinned_count_is_refused_and_changes_nothing(manager: SlotManager, bad: object) -> None:
    manager.register_task_executor(registration("te-1", 1))
    manager.register_task_executor(registration("te-2", 1))
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 1, a, pinned={"te-1": 1})
    with pytest.raises(InvalidRequest, match="pinned.te-2"):
        manager.declare_requirements(JOB_A, 2, a, pinned={"te-1": 0, "te-2": bad})  # type: ignore[dict-item]
    assert requirement(manager, JOB_A) == (1, 0) and pin_count(manager, JOB_A, "te-1") == 1
    assert pin_count(manager, JOB_A, "te-2") is None
    with pytest.raises(InvalidRequest):
        manager.declare_requirements(JOB_B, 0, Job(JOB_B), pinned={"te-1": bad})  # type: ignore[dict-item]
    assert JOB_B not in manager._jobs
    assert manager.check_requirements() == 1
    assert [s.task_executor_id for s in a.slots] == ["te-1"]


def test_a_job_with_only_watch_pins_is_remembered_until_it_drops_them(manager: SlotManager) -> None:
    manager.register_task_executor(registration("te-1", 1))
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 0, a, pinned={"te-1": 0})
    assert JOB_A in manager._jobs and waiting_jobs(manager) == []
    assert manager.check_requirements() == 0
    manager.declare_requirements(JOB_A, 0, a)
    assert JOB_A not in manager._jobs
    manager.unregister_task_executor("te-1", "stopped")
    assert a.lost == []


def test_clear_forgets_pins(manager: SlotManager, clock: ManualClock) -> None:
    manager.register_task_executor(registration("te-1", 1))
    a = Job(JOB_A)
    manager.declare_requirements(JOB_A, 0, a, pinned={"te-1": 0, "te-9": 0})
    manager.clear()
    clock.advance(100)
    manager.check_timeouts()
    manager.register_task_executor(registration("te-1", 1))
    manager.unregister_task_executor("te-1", "stopped")
    assert a.lost == [] and JOB_A not in manager._jobs


operations = st.lists(
    st.one_of(
        st.tuples(st.just("register"), st.integers(0, 3), st.integers(1, 3)),
        st.tuples(st.just("unregister"), st.integers(0, 3)),
        st.tuples(st.just("declare"), st.integers(0, 2), st.integers(0, 5)),
        st.tuples(st.just("release"), st.integers(0, 2), st.integers(0, 10)),
        st.tuples(st.just("check")),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(operations)
def test_slot_accounting_holds_under_any_sequence(ops: list[tuple[Any, ...]]) -> None:
    manager = SlotManager(slot_request_timeout=60.0, task_executor_idle_timeout=30.0, clock=ManualClock())
    jobs = [Job(f"{i:032x}") for i in range(3)]
    te_pools = ["a", "b", "a", DEFAULT_POOL]  # of te-0 .. te-3
    job_pools = ["a", "b", DEFAULT_POOL]
    held: dict[int, set[str]] = {i: set() for i in range(3)}
    for op in ops:
        if op[0] == "register":
            manager.register_task_executor(registration(f"te-{op[1]}", op[2], pool=te_pools[op[1]]))
        elif op[0] == "unregister":
            manager.unregister_task_executor(f"te-{op[1]}", "test")
        elif op[0] == "declare":
            manager.declare_requirements(jobs[op[1]].job_id, op[2], jobs[op[1]], pool=job_pools[op[1]])
        elif op[0] == "release":
            job = jobs[op[1]]
            mine = sorted(held[op[1]])
            if mine:
                allocation = mine[op[2] % len(mine)]
                assert manager.release_slot(job.job_id, allocation)
                held[op[1]].discard(allocation)
        else:
            manager.check_requirements()
        for index, job in enumerate(jobs):
            assert all(te_pools[int(s.task_executor_id[3:])] == job_pools[index] for s in job.slots)
            held[index] |= {s.allocation_id for s in job.slots}
            held[index] -= {a for lost in job.lost for a in lost[1]}
            job.batches.clear()
            job.lost.clear()
        described = list(manager.describe_all())
        allocated = {s.allocation_id for te in described for s in te.slots if s.allocation_id}
        assert allocated == set().union(*held.values())
        assert manager.slots_total == sum(te.slots_total for te in described)
        assert manager.slots_free == sum(te.slots_free for te in described) == manager.slots_total - len(allocated)
        for index, job in enumerate(jobs):
            required, acquired = requirement(manager, job.job_id)
            assert acquired == len(held[index])
            assert (job.job_id in waiting_jobs(manager, job_pools[index])) == (required > acquired)


pinned_operations = st.lists(
    st.one_of(
        st.tuples(st.just("register"), st.integers(0, 3), st.integers(1, 3)),
        st.tuples(st.just("unregister"), st.integers(0, 3)),
        st.tuples(
            st.just("declare"),
            st.integers(0, 1),
            st.integers(0, 4),
            st.dictionaries(st.integers(0, 4), st.integers(0, 3), max_size=3),
        ),
        st.tuples(st.just("release"), st.integers(0, 1), st.integers(0, 10)),
        st.tuples(st.just("check")),
        st.tuples(st.just("timeouts"), st.integers(0, 30)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(pinned_operations)
def test_slot_accounting_with_pins_holds_under_any_sequence(ops: list[tuple[Any, ...]]) -> None:
    clock = ManualClock()
    manager = SlotManager(
        slot_request_timeout=60.0, task_executor_idle_timeout=30.0, unregistered_pin_timeout=20.0, clock=clock
    )
    jobs = [Job(f"{i:032x}") for i in range(2)]  # te-4 never registers
    held: dict[int, set[str]] = {i: set() for i in range(2)}
    pinned: dict[int, dict[str, int]] = {i: {} for i in range(2)}
    for op in ops:
        if op[0] == "register":
            manager.register_task_executor(registration(f"te-{op[1]}", op[2]))
        elif op[0] == "unregister":
            manager.unregister_task_executor(f"te-{op[1]}", "test")
        elif op[0] == "declare":
            pinned[op[1]] = {f"te-{te}": n for te, n in op[3].items()}
            manager.declare_requirements(jobs[op[1]].job_id, op[2], jobs[op[1]], pinned=pinned[op[1]])
        elif op[0] == "release":
            mine = sorted(held[op[1]])
            if mine:
                allocation = mine[op[2] % len(mine)]
                assert manager.release_slot(jobs[op[1]].job_id, allocation)
                held[op[1]].discard(allocation)
        elif op[0] == "timeouts":
            clock.advance(op[1])
            manager.check_timeouts()
        else:
            manager.check_requirements()
            free = manager._pool(DEFAULT_POOL).free
            for job_id in waiting_jobs(manager):  # none is left waiting for a slot it could take
                state = manager._jobs[job_id]
                pins = {te: pin.count for te, pin in state.pins.items() if pin.count}
                assert not free or state.required - len(state.allocations) <= sum(pins.values())
                assert not any(slot.task_executor.id in pins for slot in free)
        for index, job in enumerate(jobs):
            for te_id, allocation_ids, _ in job.lost:
                pinned[index].pop(te_id, None)
                held[index] -= set(allocation_ids)
            for slot in job.slots:
                held[index].add(slot.allocation_id)
            assert len({te for te, _, _ in job.lost}) == len(job.lost)  # one call per TaskExecutor
            job.batches.clear()
            job.lost.clear()
        described = list(manager.describe_all())
        allocated = {s.allocation_id for te in described for s in te.slots if s.allocation_id}
        assert allocated == set().union(*held.values())
        assert manager.slots_free == sum(te.slots_free for te in described) == manager.slots_total - len(allocated)
        for index, job in enumerate(jobs):
            required, acquired = requirement(manager, job.job_id)
            assert acquired == len(held[index])
            assert (job.job_id in waiting_jobs(manager)) == (required > acquired)
            assert {te for te in pinned[index] if pin_count(manager, job.job_id, te) is not None} == set(
                pinned[index]
            )  # a pin goes only when its job hears of it
        assert manager._pinned_by == {
            te: dict.fromkeys(j.job_id for i, j in enumerate(jobs) if te in pinned[i])
            for te in {te for p in pinned.values() for te in p}
        }
