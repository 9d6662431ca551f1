"""A JobMaster's slots: the subtasks waiting for one, the slots it holds, and the requirement it
declares to the ResourceManager, pinned to the TaskExecutors its kept results tie tasks to
(sparkdispatch.jobmaster.kept_partitions). Used on the master's loop."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Collection

from sparkdispatch.jobmaster.execution import Execution, ExecutionVertex, SubtaskId
from sparkdispatch.jobmaster.execution_graph import ExecutionGraph
from sparkdispatch.jobmaster.kept_partitions import KeptPartitions
from sparkdispatch.jobmaster.task_executor_calls import TaskExecutorCalls
from sparkdispatch.model.states import JobStatus
from sparkdispatch.resourcemanager import AllocatedSlot, ResourceManagerGateway, SlotListener


class SlotRequests:
    """One job's side of the slot contract: what it waits for, holds, declares and gives back."""

    def __init__(
        self,
        graph: ExecutionGraph,
        *,
        pool: str,
        resource_manager: ResourceManagerGateway,
        calls: TaskExecutorCalls,
        listener: SlotListener,
        kept: KeptPartitions,
    ) -> None:
        self._graph = graph
        self._job_id = graph.job_id
        self._pool = pool  # the TaskExecutor pool its slots come from
        self._resource_manager = resource_manager
        self._calls = calls
        # Weakly: the JobMaster holds this, and a cycle back would keep a dropped JobMaster (and its
        # graph) alive until a full collection.
        self._listener = weakref.ref(listener)
        self._kept = kept
        self.waiting: dict[SubtaskId, ExecutionVertex] = {}  # SCHEDULED, waiting for a slot, in order
        self.held: dict[str, Execution] = {}  # allocation id -> the attempt it runs
        self._declared: tuple[int, dict[str, int]] | None = None  # slots in all, and pinned per TaskExecutor

    def declare(self) -> None:
        """Tell the ResourceManager how many slots the job needs in all (held + waiting), and how
        many of the waiting ones must be on which TaskExecutor (0 for those that only keep results
        it needs); nothing at the end."""
        running = self._graph.status is JobStatus.RUNNING
        needed = len(self.held) + len(self.waiting) if running else 0
        pinned: dict[str, int] = {}
        if running and self._kept.active:
            pinned = dict.fromkeys(sorted(self._kept.watched()), 0)
            for ev in self.waiting.values():
                if (site := self._kept.site_of(ev)) is not None:
                    pinned[site] = pinned.get(site, 0) + 1
        if (needed, pinned) == self._declared:
            return
        self._declared = (needed, pinned)
        declare = functools.partial(self._resource_manager.declare_requirements, pool=self._pool, pinned=pinned)
        listener = self._listener()
        if listener is not None:
            self._calls.call_resource_manager(declare, self._job_id, needed, listener)

    def forget_declared(self) -> None:
        """The ResourceManager dropped the unmet part of the requirement: the next `declare` is sent."""
        self._declared = None

    def take(self, slot: AllocatedSlot) -> ExecutionVertex | None:
        """The first waiting subtask that may run in `slot`, no longer waiting: one whose task is not
        bound to another TaskExecutor by the results it makes or reads there (those bound to the
        slot's TaskExecutor first). None when no waiting subtask may run there."""
        chosen = None
        if not self._kept.active:
            chosen = next(iter(self.waiting.values()), None)
        else:
            for ev in self.waiting.values():
                site = self._kept.site_of(ev)
                if site == slot.task_executor_id:
                    chosen = ev
                    break
                if site is None and chosen is None:
                    chosen = ev
        if chosen is not None:
            del self.waiting[chosen.id]
        return chosen

    def give_back(self, allocation_id: str) -> None:
        """Return a slot to the ResourceManager (after lowering the requirement, or it is replaced)."""
        self._calls.call_resource_manager(self._resource_manager.release_slot, self._job_id, allocation_id)

    def release(self, execution: Execution) -> None:
        """`execution` no longer needs its slot: give it back, if it still holds it."""
        allocation_id = execution.allocation_id
        if allocation_id is not None and self.held.get(allocation_id) is execution:
            del self.held[allocation_id]
            self.declare()
            self.give_back(allocation_id)

    def lost_with(self, task_executor_id: str, allocation_ids: Collection[str]) -> None:
        """The slots held on a lost TaskExecutor are gone with it: nothing to give back."""
        for allocation_id, execution in list(self.held.items()):
            if allocation_id in allocation_ids or execution.task_executor_id == task_executor_id:
                del self.held[allocation_id]
