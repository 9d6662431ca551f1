"""What the SlotManager keeps: the slot listener a job implements, and the records of
TaskExecutors, their slots, jobs' requirements and pins, and pools. Plain records, owned and
changed by the SlotManager on the ResourceManager's loop."""

from __future__ import annotations

from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Sequence
from typing import NamedTuple, Protocol

from sparkdispatch.errors import SparkDispatchError
from sparkdispatch.model.protocol import ExecutionReport, TaskExecutorRegistration
from sparkdispatch.resourcemanager.messages import AllocatedSlot


class SlotListener(Protocol):
    """A job's side of the slot contract (the JobMaster implements it).

    Plain methods, called on the master's loop after the SlotManager's state is consistent;
    what they raise is logged, never propagated.
    """

    @abstractmethod
    def slots_allocated(self, slots: Sequence[AllocatedSlot]) -> None:
        """These slots are the job's now."""

    @abstractmethod
    def slot_request_failed(self, error: SparkDispatchError) -> None:
        """The requirement stayed unmet for `slot.request.timeout` and dropped to what the job holds."""

    @abstractmethod
    def task_executor_lost(self, task_executor_id: str, allocation_ids: Sequence[str], reason: str) -> None:
        """The TaskExecutor is gone, and with it these allocations of the job."""

    @abstractmethod
    def task_executor_heartbeat(self, task_executor_id: str, executions: Sequence[ExecutionReport]) -> None:
        """A heartbeat of a TaskExecutor that holds a slot of the job or runs one of its
        executions, with that job's executions there."""


class Slot:
    """One slot of a TaskExecutor: the allocation and job it is handed to, if any."""

    __slots__ = ("task_executor", "index", "allocation_id", "job_id", "occupied")

    def __init__(self, task_executor: TaskExecutorSlots, index: int) -> None:
        self.task_executor = task_executor
        self.index = index
        self.allocation_id: str | None = None
        self.job_id: str | None = None
        # True while the TaskExecutor runs a task of an allocation this SlotManager did not make.
        self.occupied = False


class Registered(NamedTuple):
    """The outcome of a TaskExecutor's registration."""

    registration_id: str
    #: it continued its previous registration: its slots and their allocations were kept
    resumed: bool
    #: it replaced a registration of the same id, whose allocations were reported lost
    replaced: bool


class TaskExecutorSlots:
    """A registered TaskExecutor: what it registered with, its slots, and since when all are free."""

    __slots__ = (
        "id",
        "registration_id",
        "hostname",
        "queue",
        "spark_master",
        "pool",
        "slots",
        "busy",
        "idle_since",
        "registered_at",
    )

    def __init__(self, registration: TaskExecutorRegistration, registration_id: str, now: float) -> None:
        self.id = registration.task_executor_id
        self.registration_id = registration_id
        self.hostname = registration.hostname
        self.queue = registration.queue
        self.spark_master = registration.spark_master
        self.pool = registration.pool
        self.slots = [Slot(self, index) for index in range(registration.slots)]
        self.busy = 0  # slots allocated or occupied
        self.idle_since: float | None = now
        self.registered_at = now


class Pin:
    """A job's pin to a TaskExecutor (`SlotManager.declare_requirements`)."""

    __slots__ = ("count", "since")

    def __init__(self, count: int, since: float) -> None:
        self.count = count  # slots still to hand out from the TaskExecutor (0: it is only watched)
        self.since = since  # when the pin was first declared


class JobSlots:
    """One job's slot requirement, allocations and pins."""

    __slots__ = ("job_id", "seq", "pool", "required", "listener", "allocations", "waiting_since", "pins")

    def __init__(self, job_id: str, seq: int, pool: str, listener: SlotListener) -> None:
        self.job_id = job_id
        self.seq = seq  # order of first declaration
        self.pool = pool
        self.required = 0
        self.listener = listener
        self.allocations: dict[str, Slot] = {}
        self.waiting_since = 0.0
        self.pins: dict[str, Pin] = {}  # by TaskExecutor id


class PoolSlots:
    """The free slots of a pool's TaskExecutors and the jobs waiting for them, in the order they began to wait."""

    __slots__ = ("free", "waiting")

    def __init__(self) -> None:
        self.free: dict[Slot, None] = {}
        self.waiting: OrderedDict[str, JobSlots] = OrderedDict()


def continues(task_executor: TaskExecutorSlots, registration: TaskExecutorRegistration) -> bool:
    """Whether `registration` is the same TaskExecutor process registering again."""
    return registration.previous_registration_id == task_executor.registration_id and (
        registration.hostname,
        registration.queue,
        registration.slots,
        registration.pool,
    ) == (task_executor.hostname, task_executor.queue, len(task_executor.slots), task_executor.pool)
