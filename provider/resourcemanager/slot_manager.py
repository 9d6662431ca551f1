"""The SlotManager: which slots exist, which are free, and which job holds which (Flink's
DeclarativeSlotManager, FLIP-138).

A job declares how many slots it needs in all; the SlotManager matches the missing ones
(required - acquired) against free slots and tells the job's listener. Jobs waiting for slots
are served in the order they began to wait. Costs, with T TaskExecutors and J waiting jobs:
taking or freeing a slot is O(1) (free slots live in an insertion-ordered dict used as a set;
the most recently freed slot is taken first), a check is O(J + slots handed out + slots of the
TaskExecutors waiting jobs are pinned to), and losing a TaskExecutor is O(its slots + jobs
pinned to it). Nothing on the allocation path looks at all TaskExecutors.

A job may pin some of its missing slots to TaskExecutors (`pinned[te_id] = n`: n of them must
be slots of that TaskExecutor, e.g. where it keeps results; the rest come from any TaskExecutor
of its pool). A check hands a waiting job its pinned slots first, each from the free slots of
that TaskExecutor only, then the rest from any free slot; a job whose unmet needs are all pins
on TaskExecutors without a free slot is passed over, not waited for. A pin (n >= 0: n == 0
only *watches* the TaskExecutor) also makes the job hear `task_executor_lost` when that
TaskExecutor unregisters, or when it is not registered `unregistered_pin_timeout` after the pin
was first declared (a new leader's JobMaster learns that way that results kept on a
TaskExecutor that died with the old leader are gone); the pin is then dropped.

Reconciling slot reports (from registrations and heartbeats) with this view:

- a slot we think free that the TaskExecutor reports busy (a task of an allocation we do not
  know, e.g. from a former leader or one released while its task still ran) is *occupied*: it
  is not handed out until a report says it is free again;
- a slot we think allocated that the TaskExecutor reports free stays allocated: a job holds its
  slot between tasks, so a free report is no evidence the job let it go. The slot is freed by
  its job (`release_slot`, after lowering its requirement) or lost with its TaskExecutor;
- a slot we think allocated that runs another allocation keeps our allocation (logged);
- reports from TaskExecutors that are not registered are ignored.

Each registration gets a fresh registration id, which the allocations made under it carry to
the TaskExecutor. A TaskExecutor that registers again naming its current registration id
(`previous_registration_id`: the same process, e.g. after it lost sight of the leader for a
while) keeps its slots and their allocations, and its slot report is reconciled as a
heartbeat's; any other registration under a known id replaces the old one, whose allocations
are reported lost.

A requirement that stays unmet, with no slot reaching it, for `slot.request.timeout` fails:
the listener gets `SlotRequestTimeout` and the requirement drops to what the job holds (it may
declare again; its pins only watch from then on). `GET /taskmanagers` shows since when a
TaskExecutor's slots have all been free, and calls it idle after
`resourcemanager.taskmanager-timeout`; nothing is released for it (a standalone cluster's
TaskExecutors are started by their operators, as in Flink's standalone ResourceManager).

The SlotManager is plain synchronous code owned by the ResourceManager's loop; listeners are
called after the state is consistent, and their errors are logged, never propagated.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import time
import uuid
from collections.abc import Callable, Iterator, Mapping

from sparkdispatch.errors import InvalidRequest, SlotRequestTimeout
from sparkdispatch.resourcemanager.heartbeat import Clock
from sparkdispatch.model.job_graph import DEFAULT_POOL
from sparkdispatch.model.protocol import SlotReport, TaskExecutorRegistration
from sparkdispatch.model.rest_shapes import TaskManager, TaskManagerSlot
from sparkdispatch.resourcemanager.messages import AllocatedSlot
from sparkdispatch.resourcemanager.slot_records import (
    JobSlots,
    Pin,
    PoolSlots,
    Registered,
    Slot,
    SlotListener,
    TaskExecutorSlots,
    continues,
)

log = logging.getLogger(__name__)


class SlotManager:
    """Registered TaskExecutors, their slots, and the slot requirements of jobs.

    Each TaskExecutor belongs to one pool (`taskexecutor.pool`) and each job asks for slots of one
    pool (its JobGraph's `pool`): a job's subtasks run only on TaskExecutors of its pool, and jobs
    waiting in one pool never hold up those of another.
    """

    def __init__(
        self,
        *,
        slot_request_timeout: float,
        task_executor_idle_timeout: float,
        unregistered_pin_timeout: float | None = None,
        clock: Clock | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        """`on_change` is called whenever a check could hand out slots (the ResourceManager
        schedules `check_requirements` from it); without it, call the check yourself.
        `unregistered_pin_timeout` (default: `slot_request_timeout`) is how long a pin may name a
        TaskExecutor that is not registered."""
        self._slot_request_timeout = slot_request_timeout
        self._pin_timeout = slot_request_timeout if unregistered_pin_timeout is None else unregistered_pin_timeout
        self._idle_timeout = task_executor_idle_timeout
        self._clock: Clock = clock or time.monotonic
        self._epoch_offset = time.time() - self._clock()
        self._on_change = on_change or (lambda: None)
        self._task_executors: dict[str, TaskExecutorSlots] = {}
        self._pools: dict[str, PoolSlots] = {}
        self._jobs: dict[str, JobSlots] = {}
        self._pinned_by: dict[str, dict[str, None]] = {}  # TaskExecutor id -> ids of the jobs pinned to it
        self._slots_total = 0
        self._allocation_prefix = secrets.token_hex(6) + "-"
        self._allocation_counter = itertools.count(1)
        self._job_counter = itertools.count()

    # ---------------------------------------------------------------- TaskExecutors

    def register_task_executor(self, registration: TaskExecutorRegistration) -> Registered:
        """Add a TaskExecutor and its slots under a fresh registration id, or keep them when it
        continues its current registration (`previous_registration_id`); any other registration
        under a known id replaces the old one, whose allocations are reported lost to their jobs."""
        registration_id = uuid.uuid4().hex
        now = self._clock()
        known = self._task_executors.get(registration.task_executor_id)
        if known is not None and continues(known, registration):
            previous, known.registration_id = known.registration_id, registration_id
            freed = self._apply_report(known, registration.slot_report, now)
            log.info(
                "TaskExecutor %s (%s) registered again, continuing registration %s; its %d busy slots stay "
                "with their jobs",
                known.id,
                known.hostname,
                previous,
                known.busy,
            )
            if freed:
                self._on_change()
            return Registered(registration_id, resumed=True, replaced=False)
        replaced = self.unregister_task_executor(registration.task_executor_id, "it registered again")
        task_executor = TaskExecutorSlots(registration, registration_id, now)
        self._task_executors[task_executor.id] = task_executor
        self._slots_total += len(task_executor.slots)
        free = self._pool(task_executor.pool).free
        for slot in reversed(task_executor.slots):  # taken last in, first out: slot 0 first
            free[slot] = None
        self._apply_report(task_executor, registration.slot_report, now)
        log.info(
            "TaskExecutor %s (%s) registered with %d slots in pool %s",
            task_executor.id,
            task_executor.hostname,
            len(task_executor.slots),
            task_executor.pool,
        )
        self._on_change()
        return Registered(registration_id, resumed=False, replaced=replaced)

    def unregister_task_executor(
        self, task_executor_id: str, reason: str, *, registration_id: str | None = None
    ) -> bool:
        """Remove a TaskExecutor and its slots; each job that held one or was pinned to it is told
        which allocations it lost (maybe none), and its pin is dropped. False if no such
        TaskExecutor is registered (under `registration_id`, if given)."""
        task_executor = self._task_executors.get(task_executor_id)
        if task_executor is None or registration_id not in (None, task_executor.registration_id):
            return False
        del self._task_executors[task_executor_id]
        self._slots_total -= len(task_executor.slots)
        lost: dict[str, list[str]] = {}
        for slot in task_executor.slots:
            if slot.allocation_id is None:
                del self._pools[task_executor.pool].free[slot]
            elif not slot.occupied:
                assert slot.job_id is not None  # an allocation this SlotManager made names its job
                job = self._jobs[slot.job_id]
                del job.allocations[slot.allocation_id]
                lost.setdefault(job.job_id, []).append(slot.allocation_id)
        pinned = self._pinned_by.pop(task_executor_id, {})
        log.info(
            "TaskExecutor %s removed (%s); %d allocations of %d jobs lost",
            task_executor_id,
            reason,
            sum(map(len, lost.values())),
            len(lost),
        )
        now = self._clock()
        for job_id in pinned:
            lost.setdefault(job_id, [])
        # Jobs that lose slots together wait again in the order they first declared.
        for job_id, allocation_ids in sorted(lost.items(), key=lambda item: self._jobs[item[0]].seq):
            job = self._jobs[job_id]
            if job_id in pinned:
                self._drop_pin(job, task_executor_id, now)
            self._update_waiting(job, now)
            _call(job.listener.task_executor_lost, task_executor_id, allocation_ids, reason, job_id=job_id)
        if lost:
            self._on_change()
        return True

    def report_slot_status(self, task_executor_id: str, report: SlotReport) -> bool:
        """Reconcile a TaskExecutor's slot report with this view; False (ignored) if unknown."""
        task_executor = self._task_executors.get(task_executor_id)
        if task_executor is None:
            log.debug("slot report of unknown TaskExecutor %s ignored", task_executor_id)
            return False
        if self._apply_report(task_executor, report, self._clock()):
            self._on_change()
        return True

    def _apply_report(self, task_executor: TaskExecutorSlots, report: SlotReport, now: float) -> bool:
        """Returns True if a slot became free."""
        freed = False
        slots = task_executor.slots
        for status in report.slots:
            if not 0 <= status.index < len(slots):
                log.warning(
                    "TaskExecutor %s reported slot %d, but has %d slots; ignored",
                    task_executor.id,
                    status.index,
                    len(slots),
                )
                continue
            slot = slots[status.index]
            if slot.occupied:
                if status.allocation_id is None:
                    slot.occupied = False
                    self._make_free(slot, now)
                    freed = True
                else:
                    slot.allocation_id, slot.job_id = status.allocation_id, status.job_id
            elif slot.allocation_id is None:
                if status.allocation_id is not None:
                    log.info(
                        "TaskExecutor %s runs allocation %s (job %s) in slot %d, unknown here; the slot is "
                        "occupied until it is reported free",
                        task_executor.id,
                        status.allocation_id,
                        status.job_id,
                        status.index,
                    )
                    del self._pools[task_executor.pool].free[slot]
                    slot.allocation_id, slot.job_id, slot.occupied = status.allocation_id, status.job_id, True
                    self._mark_busy(task_executor)
            elif status.allocation_id is not None and status.allocation_id != slot.allocation_id:
                log.warning(
                    "TaskExecutor %s runs allocation %s in slot %d, which is allocated to %s of job %s; "
                    "keeping the allocation",
                    task_executor.id,
                    status.allocation_id,
                    status.index,
                    slot.allocation_id,
                    slot.job_id,
                )
        return freed

    def _mark_busy(self, task_executor: TaskExecutorSlots) -> None:
        task_executor.busy += 1
        task_executor.idle_since = None

    def _make_free(self, slot: Slot, now: float) -> None:
        slot.allocation_id = slot.job_id = None
        self._pool(slot.task_executor.pool).free[slot] = None
        task_executor = slot.task_executor
        task_executor.busy -= 1
        if task_executor.busy == 0:
            task_executor.idle_since = now

    # ---------------------------------------------------------------- requirements

    def declare_requirements(
        self,
        job_id: str,
        slots: int,
        listener: SlotListener,
        *,
        pool: str = DEFAULT_POOL,
        pinned: Mapping[str, int] | None = None,
    ) -> None:
        """Job `job_id` needs `slots` slots of TaskExecutors of `pool` in all (0: none). Declaring the
        same number again changes nothing; declaring fewer than it holds frees nothing (release them).

        `pinned[te_id] = n`: n of the missing slots (`slots` - held) must be slots of that
        TaskExecutor, the rest may come from any; pins that add up to more than the missing slots
        are all that is missing. n == 0 only watches the TaskExecutor. Each pin makes the listener
        hear `task_executor_lost` when its TaskExecutor goes (see the module docstring). The map
        replaces the job's pins; as slots of a pinned TaskExecutor are handed out, its count drops."""
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 0:
            raise InvalidRequest("slot requirement", {"slots": [f"must be a whole number >= 0, got {slots!r}"]})
        pins = dict(pinned or {})
        bad = [te_id for te_id, n in pins.items() if isinstance(n, bool) or not isinstance(n, int) or n < 0]
        if bad:
            raise InvalidRequest(
                "slot requirement",
                {f"pinned.{te_id}": [f"must be a whole number >= 0, got {pins[te_id]!r}"] for te_id in bad},
            )
        job = self._jobs.get(job_id)
        if job is None:
            if slots == 0 and not pins:
                return
            job = self._jobs[job_id] = JobSlots(job_id, next(self._job_counter), pool, listener)
        elif job.pool != pool:  # not what a JobMaster does: its graph names one pool
            self._pool(job.pool).waiting.pop(job_id, None)
            job.pool = pool
        job.listener = listener
        if job.required != slots:
            log.debug("job %s requires %d slots (holds %d)", job_id, slots, len(job.allocations))
        job.required = slots
        now = self._clock()
        had_pins = bool(job.pins)
        if pins or had_pins:
            self._set_pins(job, pins, now)
        self._update_waiting(job, now)
        if (pins or had_pins) and job.required > len(job.allocations):
            self._on_change()  # free slots a pin left alone may meet the new requirement

    def _set_pins(self, job: JobSlots, pins: dict[str, int], now: float) -> None:
        """Replace the job's pins; a pin declared again keeps the time it was first declared."""
        for te_id in job.pins.keys() - pins.keys():
            self._unindex_pin(job.job_id, te_id)
        old = job.pins
        job.pins = {}
        for te_id, count in pins.items():
            pin = old.get(te_id)
            if pin is None:
                pin = Pin(count, now)
                self._pinned_by.setdefault(te_id, {})[job.job_id] = None
            else:
                pin.count = count
            job.pins[te_id] = pin

    def _drop_pin(self, job: JobSlots, task_executor_id: str, now: float) -> None:
        """Forget the job's pin (its TaskExecutor is gone); a job that waited for slots there may take
        any now, and waits afresh for them. The caller updates the pin index and the waiting queue."""
        pin = job.pins.pop(task_executor_id)
        if pin.count and job.job_id in self._pool(job.pool).waiting:
            job.waiting_since = now

    def _unindex_pin(self, job_id: str, task_executor_id: str) -> None:
        jobs = self._pinned_by[task_executor_id]
        del jobs[job_id]
        if not jobs:
            del self._pinned_by[task_executor_id]

    def release_slot(self, job_id: str, allocation_id: str) -> bool:
        """The job lets its slot go; False if the job holds no such allocation (released before,
        or lost with its TaskExecutor)."""
        job = self._jobs.get(job_id)
        slot = None if job is None else job.allocations.pop(allocation_id, None)
        if job is None or slot is None:
            log.debug("job %s released allocation %s, which it does not hold", job_id, allocation_id)
            return False
        now = self._clock()
        self._make_free(slot, now)
        self._update_waiting(job, now)
        self._on_change()
        return True

    def _pool(self, name: str) -> PoolSlots:
        pool = self._pools.get(name)
        if pool is None:
            pool = self._pools[name] = PoolSlots()
        return pool

    def _update_waiting(self, job: JobSlots, now: float) -> None:
        """Put the job into, or out of, its pool's queue of waiting jobs; forget a job that needs,
        holds and watches nothing."""
        waiting = self._pool(job.pool).waiting
        if job.required > len(job.allocations):
            if job.job_id not in waiting:
                job.waiting_since = now
                waiting[job.job_id] = job
                self._on_change()
            return
        waiting.pop(job.job_id, None)
        if job.required == 0 and not job.allocations and not job.pins:
            del self._jobs[job.job_id]

    def check_requirements(self) -> int:
        """Hand each pool's free slots to its waiting jobs, in the order they began to wait (pinned
        slots first; a job that can take none of them is passed over); returns how many."""
        batches: list[tuple[JobSlots, list[AllocatedSlot]]] = []
        for pool in self._pools.values():
            if pool.free and pool.waiting:
                self._hand_out(pool, batches)
        for job, batch in batches:
            _call(job.listener.slots_allocated, batch, job_id=job.job_id)
        return sum(len(batch) for _, batch in batches)

    def _hand_out(self, pool: PoolSlots, batches: list[tuple[JobSlots, list[AllocatedSlot]]]) -> None:
        free, waiting = pool.free, pool.waiting
        now = self._clock()
        served: list[str] = []
        for job in waiting.values():
            if not free:
                break
            batch: list[AllocatedSlot] = []
            missing = job.required - len(job.allocations)
            if job.pins:
                missing -= self._hand_out_pinned(job, free, missing, batch)
                missing -= sum(pin.count for pin in job.pins.values())  # what may come from anywhere
            for _ in range(min(missing, len(free))):
                self._allocate(free.popitem()[0], job, batch)
            if batch:
                batches.append((job, batch))
            if len(job.allocations) >= job.required:
                served.append(job.job_id)
            elif batch:
                job.waiting_since = now  # progress: its timeout starts again
        for job_id in served:
            del waiting[job_id]

    def _hand_out_pinned(self, job: JobSlots, free: dict[Slot, None], missing: int, batch: list[AllocatedSlot]) -> int:
        """Hand the job free slots of the TaskExecutors it is pinned to, at most `missing`; returns how many."""
        handed = 0
        for te_id, pin in job.pins.items():
            if handed == missing:
                break
            task_executor = self._task_executors.get(te_id)
            if not pin.count or task_executor is None or task_executor.pool != job.pool:
                continue
            for slot in task_executor.slots:
                if slot in free:
                    del free[slot]
                    self._allocate(slot, job, batch)
                    pin.count -= 1
                    handed += 1
                    if not pin.count or handed == missing:
                        break
        return handed

    def _allocate(self, slot: Slot, job: JobSlots, batch: list[AllocatedSlot]) -> None:
        allocation_id = f"{self._allocation_prefix}{next(self._allocation_counter):x}"
        slot.allocation_id = allocation_id
        slot.job_id = job.job_id
        task_executor = slot.task_executor
        if task_executor.busy == 0:
            task_executor.idle_since = None
        task_executor.busy += 1
        job.allocations[allocation_id] = slot
        batch.append(
            AllocatedSlot(
                allocation_id,
                task_executor.id,
                slot.index,
                task_executor.queue,
                task_executor.hostname,
                task_executor.registration_id,
            )
        )

    def check_timeouts(self) -> list[str]:
        """Drop the pins to TaskExecutors not registered for `unregistered_pin_timeout` (telling their
        jobs the TaskExecutor is lost), then fail the requirements unmet for `slot.request.timeout`;
        returns the ids of the jobs whose requirements failed."""
        self._expire_pins()
        deadline = self._clock() - self._slot_request_timeout
        expired = [
            job for pool in self._pools.values() for job in pool.waiting.values() if job.waiting_since <= deadline
        ]
        for job in expired:
            wanted, held = job.required, len(job.allocations)
            members = [te for te in self._task_executors.values() if te.pool == job.pool]
            error = SlotRequestTimeout(
                f"job {job.job_id} waited {self._slot_request_timeout:g}s for {wanted - held} more slot(s) "
                f"(it needs {wanted}, holds {held}{self._describe_pins(job)}); its pool {job.pool!r} has "
                f"{len(self._pool(job.pool).free)} free of {sum(len(te.slots) for te in members)} slots on "
                f"{len(members)} TaskExecutors. Start more TaskExecutors with taskexecutor.pool: {job.pool}, lower "
                "the job's parallelism, or raise slot.request.timeout"
            )
            log.warning("%s", error.message)
            job.required = held
            for pin in job.pins.values():
                pin.count = 0
            self._update_waiting(job, self._clock())
            _call(job.listener.slot_request_failed, error, job_id=job.job_id)
        return [job.job_id for job in expired]

    def _expire_pins(self) -> None:
        now = self._clock()
        deadline = now - self._pin_timeout
        expired = [
            (self._jobs[job_id], te_id)
            for te_id, job_ids in self._pinned_by.items()
            if te_id not in self._task_executors
            for job_id in job_ids
            if self._jobs[job_id].pins[te_id].since <= deadline
        ]
        expired.sort(key=lambda item: item[0].seq)
        for job, te_id in expired:
            reason = f"TaskExecutor {te_id} is not registered"
            log.info(
                "job %s: its pin to TaskExecutor %s dropped, not registered for %gs",
                job.job_id,
                te_id,
                self._pin_timeout,
            )
            self._unindex_pin(job.job_id, te_id)
            self._drop_pin(job, te_id, now)
            self._update_waiting(job, now)
            _call(job.listener.task_executor_lost, te_id, (), reason, job_id=job.job_id)
        if expired:
            self._on_change()

    def _describe_pins(self, job: JobSlots) -> str:
        """Where the job's pinned slots are to come from, for a timeout's message."""
        parts: list[str] = []
        free = self._pool(job.pool).free
        for te_id, pin in job.pins.items():
            if not pin.count:
                continue
            te = self._task_executors.get(te_id)
            if te is None:
                where = "which is not registered"
            elif te.pool != job.pool:
                where = f"which is in pool {te.pool!r}"
            else:
                where = f"which has {sum(slot in free for slot in te.slots)} free slots"
            parts.append(f"; {pin.count} of them on TaskExecutor {te_id}, {where}")
        return "".join(parts)

    # ---------------------------------------------------------------- queries

    @property
    def task_executor_count(self) -> int:
        return len(self._task_executors)

    @property
    def slots_total(self) -> int:
        return self._slots_total

    @property
    def slots_free(self) -> int:
        return sum(len(pool.free) for pool in self._pools.values())

    def listener_of(self, job_id: str) -> SlotListener | None:
        job = self._jobs.get(job_id)
        return None if job is None else job.listener

    def hostname_of(self, task_executor_id: str) -> str | None:
        """The registered TaskExecutor's Celery host name; None if it is not registered."""
        task_executor = self._task_executors.get(task_executor_id)
        return None if task_executor is None else task_executor.hostname

    def jobs_on(self, task_executor_id: str) -> set[str]:
        """Jobs holding a slot of this TaskExecutor."""
        task_executor = self._task_executors.get(task_executor_id)
        if task_executor is None:
            return set()
        return {slot.job_id for slot in task_executor.slots if slot.job_id is not None and not slot.occupied}

    def describe_all(self) -> Iterator[TaskManager]:
        """Every TaskExecutor as `GET /taskmanagers` shows it (without its last heartbeat and executions)."""
        now = self._clock()
        for task_executor in self._task_executors.values():
            yield self._describe(task_executor, now)

    def _describe(self, te: TaskExecutorSlots, now: float) -> TaskManager:
        idle_since = te.idle_since
        return TaskManager(
            id=te.id,
            hostname=te.hostname,
            queue=te.queue,
            spark_master=te.spark_master,
            pool=te.pool,
            registered_at=self._epoch_ms(te.registered_at),
            slots_total=len(te.slots),
            slots_free=len(te.slots) - te.busy,
            slots=tuple(
                TaskManagerSlot(index=s.index, allocation_id=s.allocation_id, job_id=s.job_id) for s in te.slots
            ),
            idle_since=None if idle_since is None else self._epoch_ms(idle_since),
            idle=idle_since is not None and now - idle_since >= self._idle_timeout,
            last_heartbeat=None,
            executions=(),
        )

    def _epoch_ms(self, clock_time: float) -> int:
        return int((clock_time + self._epoch_offset) * 1000)

    # ---------------------------------------------------------------- lifecycle

    def clear(self) -> None:
        """Forget every TaskExecutor, requirement and pin without telling anyone (leadership lost)."""
        self._task_executors.clear()
        self._pools.clear()
        self._jobs.clear()
        self._pinned_by.clear()
        self._slots_total = 0


def _call(method: Callable[..., None], *args: object, job_id: str) -> None:
    try:
        method(*args)
    except Exception:
        log.exception("slot listener of job %s failed in %s", job_id, getattr(method, "__name__", method))
