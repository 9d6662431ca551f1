"""What the ResourceManager hands out: slots allocated to jobs, and the slot counts of `/overview`.

The messages a TaskExecutor exchanges with the ResourceManager (registration, heartbeats) are
in `sparkdispatch.model.protocol`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple


class AllocatedSlot(NamedTuple):
    """A slot the SlotManager gave to a job. (A NamedTuple: allocation is the hot path.)

    `registration_id` is the TaskExecutor's registration the slot was allocated under; its
    deployments carry it, and the TaskExecutor runs them only while registered under it.
    """

    allocation_id: str
    task_executor_id: str
    slot_index: int
    queue: str
    hostname: str
    registration_id: str

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AllocatedSlot:
        return cls(**{name: data[name] for name in cls._fields})


@dataclass(frozen=True)
class ResourceOverview:
    """The slot counts of `GET /overview`."""

    taskmanagers: int
    slots_total: int
    slots_available: int

    def to_dict(self) -> dict[str, int]:
        return {
            "taskmanagers": self.taskmanagers,
            "slots_total": self.slots_total,
            "slots_available": self.slots_available,
        }
