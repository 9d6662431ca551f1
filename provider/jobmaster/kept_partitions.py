"""The JobMaster's tracker of results kept on TaskExecutors (Flink's JobMasterPartitionTracker).

A kept result lives on the local disk of the TaskExecutor that made it, so the tasks of its
co-location group (`sparkdispatch.model.kept_results`) run there. The tracker knows

- where each group runs: the TaskExecutor its first subtask was deployed to, or after a failover
  the one the stored progress names (`SubtaskProgress.kept_on`);
- which kept results are still needed: a task that reads one has a subtask not FINISHED and
  recorded;
- which results a lost TaskExecutor took with it (their producers run again), and which results
  every reader has finished with (released: deleted from the TaskExecutor's disk).

A released result counts as lost should a reader have to run again (a restart of its region, a
repair): its producer then runs again too.
"""

from __future__ import annotations

from collections import Counter

from sparkdispatch.jobmaster.execution import ExecutionVertex, SubtaskId
from sparkdispatch.jobmaster.execution_graph import ExecutionGraph
from sparkdispatch.model.states import ExecutionState


class KeptPartitions:
    """Where one job's kept results and their co-location groups are; used on the master's loop."""

    def __init__(self, graph: ExecutionGraph) -> None:
        self._graph = graph
        self._groups = graph.kept
        self._sites: dict[int, str] = {}  # group → the TaskExecutor its subtasks run on
        self._released: set[str] = set()  # execution ids of attempts whose kept result was deleted
        # every TaskExecutor an attempt of a kept producer was deployed to: one that failed, or
        # one whose TaskExecutor was lost and came back, may have left files there
        self._deployed_to: set[str] = set()
        # the TaskExecutor that keeps each FINISHED, unreleased result now, by subtask, and how many
        # of each vertex each keeps: `watched` is asked after every report, and must not walk a
        # large vertex's subtasks
        self._holding: dict[SubtaskId, str] = {}
        self._holders: dict[str, Counter[str]] = {}
        for vertex_id in sorted(self._groups.kept):
            group = self._groups.group(vertex_id)
            for ev in graph.subtasks(vertex_id):
                kept_on = ev.current.kept_on if ev.state is ExecutionState.FINISHED else None
                if kept_on is not None:
                    self._hold(ev, kept_on)
                if kept_on is not None and group is not None and self._needed(vertex_id):
                    self._sites.setdefault(group, kept_on)

    @property
    def active(self) -> bool:
        """The job keeps results on TaskExecutors."""
        return bool(self._groups.kept)

    def site_of(self, ev: ExecutionVertex) -> str | None:
        """The TaskExecutor `ev`'s task must run on, when its group has one by now."""
        group = self._groups.group(ev.vertex.id)
        return None if group is None else self._sites.get(group)

    def placed(self, ev: ExecutionVertex, task_executor_id: str) -> None:
        """`ev`'s task was deployed to `task_executor_id`: its group runs there from now on."""
        group = self._groups.group(ev.vertex.id)
        if group is not None:
            self._sites.setdefault(group, task_executor_id)
        if self._groups.is_kept(ev.vertex.id):
            self._deployed_to.add(task_executor_id)

    def kept(self, ev: ExecutionVertex) -> None:
        """`ev`'s attempt FINISHED with its result kept on its TaskExecutor (`current.kept_on`)."""
        if ev.state is ExecutionState.FINISHED and ev.current.kept_on is not None:
            self._hold(ev, ev.current.kept_on)

    def restarted(self, ev: ExecutionVertex) -> None:
        """`ev` has a new attempt: the result of its last one, kept or not, is not held any more."""
        self._let_go(ev)

    def watched(self) -> set[str]:
        """The TaskExecutors that keep results this job still needs (it must hear when one goes)."""
        return {
            task_executor_id
            for vertex_id, holders in self._holders.items()
            if self._needed(vertex_id)
            for task_executor_id in holders
        }

    def lost(self, task_executor_id: str) -> list[ExecutionVertex]:
        """`task_executor_id` is gone: the FINISHED producers whose needed results it kept, marked
        lost (they must run again); groups that ran there may run anywhere again."""
        for group, site in list(self._sites.items()):
            if site == task_executor_id:
                del self._sites[group]
        lost = [
            ev
            for vertex_id in sorted(self._groups.kept)
            if self._needed(vertex_id)
            for ev in self._graph.subtasks(vertex_id)
            if self._holding.get(ev.id) == task_executor_id
        ]
        for ev in lost:
            ev.partition_lost = True
        return lost

    def finished(self, ev: ExecutionVertex) -> list[tuple[str, str]]:
        """`ev`'s task finished: the kept results no reader needs any more, released now, as
        (TaskExecutor id, vertex id) pairs to delete."""
        release: list[tuple[str, str]] = []
        for vertex_id in sorted(self._graph.chain_inputs(ev.vertex.id) & self._groups.kept):
            if self._needed(vertex_id):
                continue
            for producer in self._graph.subtasks(vertex_id):
                if (kept_on := self._holding.get(producer.id)) is not None:
                    self._released.add(producer.current.execution_id)
                    self._let_go(producer)
                    if (kept_on, vertex_id) not in release:
                        release.append((kept_on, vertex_id))
        return release

    def released(self, ev: ExecutionVertex) -> bool:
        """`ev`'s FINISHED result was deleted: a reader that runs again needs it made again."""
        return ev.state is ExecutionState.FINISHED and ev.current.execution_id in self._released

    def sites(self) -> set[str]:
        """Every TaskExecutor that may keep a result of this job (to release them all at its end)."""
        held = {
            ev.current.kept_on
            for vertex_id in self._groups.kept
            for ev in self._graph.subtasks(vertex_id)
            if ev.current.kept_on is not None
        }
        return held | set(self._sites.values()) | self._deployed_to

    def _hold(self, ev: ExecutionVertex, task_executor_id: str) -> None:
        self._let_go(ev)
        self._holding[ev.id] = task_executor_id
        self._holders.setdefault(ev.id.vertex_id, Counter())[task_executor_id] += 1

    def _let_go(self, ev: ExecutionVertex) -> None:
        task_executor_id = self._holding.pop(ev.id, None)
        if task_executor_id is None:
            return
        holders = self._holders[ev.id.vertex_id]
        holders[task_executor_id] -= 1
        if not holders[task_executor_id]:
            del holders[task_executor_id]
            if not holders:
                del self._holders[ev.id.vertex_id]

    def _needed(self, vertex_id: str) -> bool:
        """A task that reads `vertex_id`'s result has a subtask not FINISHED and recorded (one a
        new leader would run again)."""
        graph = self._graph
        return not all(graph.all_consumable(graph.head_of(c)) for c in graph.consumers_of(vertex_id))
