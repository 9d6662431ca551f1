"""The ExecutionGraph: a JobGraph unfolded into subtasks, each with its current attempt.

Every vertex of parallelism *p* becomes *p* ExecutionVertices (sparkdispatch.jobmaster.execution);
each holds its current Execution (one attempt: id, attempt number, state, slot, result). Every exchange between
vertices is BLOCKING (a consumer reads its producers' finished partitions), so each subtask
is its own pipelined region, as in Flink's batch mode. State changes go through the
lifecycle tables of `JobStatus` and `ExecutionState`, which refuse an illegal change.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable, Container, Iterator, Mapping
from dataclasses import dataclass

from sparkdispatch.errors import InvalidJobGraph
from sparkdispatch.ha.progress_store import SubtaskProgress
from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.jobmaster.execution import (
    ConsumabilityListener,
    Execution,
    ExecutionVertex,
    StateTally,
    SubtaskId,
    aggregate_state,
)
from sparkdispatch.model.chaining import plan_results
from sparkdispatch.model.kept_results import plan_kept_groups
from sparkdispatch.model.job_graph import JobGraph
from sparkdispatch.model.job_result import MAX_INPUT_FILES, Failure, JobResult, VertexResult
from sparkdispatch.resourcemanager import AllocatedSlot
from sparkdispatch.storage.results import ResultLayout
from sparkdispatch.model.snapshot import JobOverview, JobSnapshot, SubtaskSnapshot, VertexSnapshot


def _through_weak_reference(listener: ConsumabilityListener) -> ConsumabilityListener:
    """`listener`, a bound method, called through a weak reference to its object (a no-op once it is gone)."""
    method = weakref.WeakMethod(listener)

    def call(ev: ExecutionVertex, consumable: bool) -> None:
        bound = method()
        if bound is not None:
            bound(ev, consumable)

    return call


def _random_ids(count: int) -> Iterator[str]:
    """`count` ids of 32 random hex digits (as `Execution`'s), from one read of the system's random
    source (a read per id made a 10,000-subtask build a fifth slower)."""
    digits = os.urandom(16 * count).hex()
    return (digits[start : start + 32] for start in range(0, 32 * count, 32))


class ExecutionGraph:
    """The running form of one job: its status, its subtasks and their attempts.

    `clock` gives epoch seconds for the job's timestamps.
    """

    def __init__(self, graph: JobGraph, *, clock: Callable[[], float] = time.time) -> None:
        if graph.job_id is None:
            raise InvalidJobGraph({"job_id": ["a running job needs a job id; the Dispatcher assigns one"]})
        self.graph = graph
        self.job_id: str = graph.job_id
        self._clock = clock
        self.status = JobStatus.INITIALIZING
        self._status_times: dict[JobStatus, int] = {JobStatus.INITIALIZING: self.now_ms()}
        self.last_modification = self.now_ms()
        self.failure: Failure | None = None
        # once `restore` ran: how many subtasks it restored, and the entries naming none it skipped
        self.restored: tuple[int, tuple[SubtaskId, ...]] | None = None
        self._order = tuple(graph.topological_order())
        self._position = {vertex_id: position for position, vertex_id in enumerate(self._order)}
        self._vertices: dict[str, list[ExecutionVertex]] = {}
        # Weakly: a strong reference from every subtask back to the graph would make the graph one
        # reference cycle, which only a full collection frees (a long pause of the loop for a large
        # job); without it reference counting frees the graph the moment its job is dropped.
        listener = _through_weak_reference(self._consumability_changed)
        execution_ids = _random_ids(graph.subtask_count)
        # kept as attempts change state, so an overview costs no walk over the subtasks
        self._tally: StateTally = dict.fromkeys(ExecutionState, 0)
        for vertex_id in self._order:
            vertex = graph.vertex(vertex_id)
            self._vertices[vertex_id] = [
                ExecutionVertex(vertex, i, listener, execution_id=next(execution_ids), tally=self._tally)
                for i in range(vertex.parallelism)
            ]
        self._consumers = {vertex_id: graph.consumers(vertex_id) for vertex_id in self._order}
        # A chained vertex runs in its head's task: its subtasks share the head's attempt (state,
        # attempt number, slot), are never scheduled themselves, and count no input of their own.
        self.chains, kept = plan_results(graph)
        for head, members in self.chains.members.items():
            (task,) = self._vertices[head]  # a head has parallelism 1
            for member in members:
                for ev in self._vertices[member]:
                    ev.current.superseded()
                    ev.current = task.current
        # Results kept on the TaskExecutor that made them tie their tasks into co-location groups.
        self.kept = plan_kept_groups(graph, self.chains, kept)
        self._by_execution: dict[str, ExecutionVertex] = {
            ev.current.execution_id: ev for ev in self.subtasks() if not self.chains.is_chained(ev.id.vertex_id)
        }
        # Scheduling state, kept up to date as subtasks become consumable or not, so that a
        # finished subtask costs work in proportion to its consumers, never to the whole graph:
        # per task vertex, how many subtasks of its chain's inputs cannot be read yet; how many
        # subtasks can be read in all; and the CREATED subtasks whose inputs can all be read ("candidates").
        self._task_consumers = {vertex_id: self._tasks_reading(vertex_id) for vertex_id in self._order}
        self._unready_inputs = {
            vertex_id: sum([graph.vertex(name).parallelism for name in self.chain_inputs(vertex_id)])
            for vertex_id in self._order
        }
        self._subtask_count = graph.subtask_count
        self._consumable_count = 0
        self._unconsumable = {vertex_id: graph.vertex(vertex_id).parallelism for vertex_id in self._order}
        self._candidates: dict[SubtaskId, ExecutionVertex] = {
            ev.id: ev
            for vertex_id in self._order
            if self._unready_inputs[vertex_id] == 0 and not self.chains.is_chained(vertex_id)
            for ev in self._vertices[vertex_id]
        }

    def head_of(self, vertex_id: str) -> str:
        """The vertex whose task runs `vertex_id`: its chain's head, or itself."""
        return self.chains.head_of.get(vertex_id, vertex_id)

    def chain_inputs(self, vertex_id: str) -> set[str]:
        """The vertices a task vertex's chain reads from outside it (none for a chained vertex)."""
        if self.chains.is_chained(vertex_id):
            return set()
        chain = {vertex_id, *self.chains.chained_into(vertex_id)}
        return {name for member in chain for name in self.graph.vertex(member).inputs if name not in chain}

    def _tasks_reading(self, vertex_id: str) -> list[str]:
        """The task vertices whose chains read `vertex_id`'s result from outside (not its own chain)."""
        own = self.head_of(vertex_id)
        return list(dict.fromkeys(h for c in self._consumers[vertex_id] if (h := self.head_of(c)) != own))

    # ---------------------------------------------------------------- structure

    @property
    def name(self) -> str:
        return self.graph.name

    @property
    def subtask_count(self) -> int:
        return self._subtask_count

    @property
    def vertex_ids(self) -> list[str]:
        """Vertex ids in topological order."""
        return list(self._order)

    def subtasks(self, vertex_id: str | None = None) -> Iterator[ExecutionVertex]:
        """The subtasks of one vertex, or of all vertices in topological order."""
        if vertex_id is not None:
            yield from self._vertices[vertex_id]
            return
        for vertex_id_ in self._order:
            yield from self._vertices[vertex_id_]

    def subtask(self, subtask_id: SubtaskId) -> ExecutionVertex:
        """The subtask `subtask_id`; `KeyError` if the job has none such."""
        subtasks = self._vertices[subtask_id.vertex_id]
        if not 0 <= subtask_id.subtask_index < len(subtasks):
            raise KeyError(subtask_id)
        return subtasks[subtask_id.subtask_index]

    def inputs_of(self, vertex_id: str) -> tuple[str, ...]:
        return self._vertices[vertex_id][0].vertex.inputs

    def consumers_of(self, vertex_id: str) -> list[str]:
        return self._consumers[vertex_id]

    def by_execution_id(self, execution_id: str) -> ExecutionVertex | None:
        """The subtask whose CURRENT attempt has this id; None for old attempts and unknown ids."""
        return self._by_execution.get(execution_id)

    # ---------------------------------------------------------------- state

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def transition(self, target: JobStatus) -> None:
        """Move the job to `target`; `IllegalStateTransition` if Flink's lifecycle forbids it."""
        self.status = self.status.transition(target)
        self._status_times[target] = self.now_ms()
        self.touch()

    def touch(self) -> None:
        self.last_modification = self.now_ms()

    @property
    def start_time(self) -> int:
        return self._status_times[JobStatus.INITIALIZING]

    @property
    def end_time(self) -> int | None:
        """When the job reached a terminal state (SUSPENDED included), else None."""
        return self._status_times.get(self.status) if self.status.is_terminal else None

    def new_attempt(self, ev: ExecutionVertex) -> Execution:
        """Replace `ev`'s current (terminal) attempt by a fresh CREATED one; a chain's head's new
        attempt is its chained subtasks' too, and a chained subtask's is its head's."""
        if self.chains.is_chained(ev.id.vertex_id):
            return ev.current  # renewed with its head, which a restart always includes (it reads it)
        if not ev.state.is_terminal:
            raise ValueError(f"subtask {ev.id} still runs attempt {ev.current.attempt} ({ev.state.value})")
        self._by_execution.pop(ev.current.execution_id, None)
        ev.current.superseded()
        ev.current = Execution(attempt=ev.current.attempt + 1, tally=self._tally)
        ev.partition_lost = False
        ev.progress_recorded = False
        ev.recovered = False
        self._by_execution[ev.current.execution_id] = ev
        for member in self.chain_members(ev):
            member.current = ev.current
            member.chained_rows = None
            member.partition_lost = False
            member.progress_recorded = False
            member.recovered = False
        if self._unready_inputs[ev.id.vertex_id] == 0:
            self._candidates[ev.id] = ev
        self.touch()
        return ev.current

    def progress_of(self, ev: ExecutionVertex) -> SubtaskProgress:
        """What the ProgressStore keeps of `ev`'s FINISHED attempt: its result, or a chained subtask's rows."""
        if self.chains.is_chained(ev.id.vertex_id):
            return SubtaskProgress(None, ev.chained_rows)
        return ev.current.progress()

    def chain_members(self, ev: ExecutionVertex) -> list[ExecutionVertex]:
        """The subtasks chained into `ev`'s task (none unless `ev` heads a chain), in chain order."""
        return [
            member for vertex_id in self.chains.chained_into(ev.id.vertex_id) for member in self._vertices[vertex_id]
        ]

    def deployed(self, ev: ExecutionVertex) -> None:
        """`ev`'s current attempt was deployed: it counts for `ev` and for the subtasks chained into it."""
        ev.deployed_attempts += 1
        for member in self.chain_members(ev):
            member.deployed_attempts += 1

    def keep_chained_rows(self, ev: ExecutionVertex, chained_rows: Mapping[str, tuple[int | None, ...]]) -> None:
        """The rows `ev`'s FINISHED attempt counted for each subtask chained into it (None where it has none)."""
        for member in self.chain_members(ev):
            counted = chained_rows.get(member.vertex.id, ())
            member.chained_rows = counted[member.subtask_index] if member.subtask_index < len(counted) else None

    def inputs_consumable(self, ev: ExecutionVertex) -> bool:
        """All partitions of all of `ev`'s input vertices can be read."""
        return self._unready_inputs[ev.id.vertex_id] == 0

    def all_finished(self) -> bool:
        """Every subtask's result can be read."""
        return self._consumable_count == self._subtask_count

    def all_consumable(self, vertex_id: str) -> bool:
        """Every subtask of `vertex_id` is FINISHED and recorded, none of its results lost."""
        return self._unconsumable[vertex_id] == 0

    def take_schedulable(self, held_back: Container[SubtaskId], limit: int | None = None) -> list[ExecutionVertex]:
        """The CREATED subtasks whose inputs can all be read, but those in `held_back`, in
        topological order (at most `limit`: the first that became schedulable); they are not
        offered again unless they get a new attempt.

        Costs time in proportion to the subtasks taken (and those still held back), not to the
        size of the graph.
        """
        taken: list[ExecutionVertex] = []
        gone: list[SubtaskId] = []
        for subtask_id, ev in self._candidates.items():
            if ev.state is not ExecutionState.CREATED:
                gone.append(subtask_id)  # scheduled, restored or stopped meanwhile
            elif subtask_id not in held_back:
                gone.append(subtask_id)
                taken.append(ev)
                if len(taken) == limit:
                    break
        for subtask_id in gone:
            del self._candidates[subtask_id]
        taken.sort(key=lambda ev: (self._position[ev.id.vertex_id], ev.subtask_index))
        return taken

    def _consumability_changed(self, ev: ExecutionVertex, consumable: bool) -> None:
        delta = -1 if consumable else 1
        self._consumable_count -= delta
        self._unconsumable[ev.id.vertex_id] += delta
        for consumer_id in self._task_consumers[ev.id.vertex_id]:
            unready = self._unready_inputs[consumer_id] + delta
            self._unready_inputs[consumer_id] = unready
            if unready == 0:
                for consumer in self._vertices[consumer_id]:
                    if consumer.state is ExecutionState.CREATED:
                        self._candidates[consumer.id] = consumer
            elif unready == 1 and delta == 1:
                for consumer in self._vertices[consumer_id]:
                    self._candidates.pop(consumer.id, None)

    def partition_paths(self, vertex_id: str) -> tuple[str, ...]:
        """The result paths of a vertex's finished subtasks that returned a DataFrame, by index
        (none for a chained vertex: its result is built in its consumer's task, never written)."""
        if self.chains.is_chained(vertex_id):
            return ()
        return tuple(
            ev.current.result_path
            for ev in self._vertices[vertex_id]
            if ev.state is ExecutionState.FINISHED and ev.current.result_path is not None
        )

    def result_schema(self, vertex_id: str) -> str | None:
        """The schema JSON of a vertex's result, if every finished subtask that wrote a partition
        reported the same one; None otherwise (its consumers then read it as Spark infers it)."""
        if self.chains.is_chained(vertex_id):
            return None
        schemas = {
            ev.current.result_schema
            for ev in self._vertices[vertex_id]
            if ev.state is ExecutionState.FINISHED and ev.current.result_path is not None
        }
        return schemas.pop() if len(schemas) == 1 else None

    def vertex_state(self, vertex_id: str) -> ExecutionState:
        return aggregate_state([ev.state for ev in self._vertices[vertex_id]])

    # ---------------------------------------------------------------- results

    def vertex_result(self, vertex_id: str, *, results: ResultLayout) -> VertexResult:
        """The vertex's outcome for the JobResult, its partitions laid out by `results`."""
        # One pass over the subtasks (a large job has 100,000).
        states: list[ExecutionState] = []
        attempts = 0
        rows: int | None = None
        partitions: list[str] = []
        input_files: dict[str, None] = {}  # in order, once each
        first_failed: Execution | None = None
        chained = self.chains.is_chained(vertex_id)
        kept = self.kept.is_kept(vertex_id)  # its partitions are a TaskExecutor's, deleted once read
        for ev in self._vertices[vertex_id]:
            execution = ev.current
            state = execution.state
            states.append(state)
            if ev.deployed_attempts > attempts:
                attempts = ev.deployed_attempts
            if state is ExecutionState.FINISHED and chained:
                if ev.chained_rows is not None:  # the head's result and the files it read are its own
                    rows = ev.chained_rows if rows is None else rows + ev.chained_rows
            elif state is ExecutionState.FINISHED:
                if execution.rows is not None:
                    rows = execution.rows if rows is None else rows + execution.rows
                if execution.result_path is not None and not kept:
                    partitions.append(execution.result_path)
                input_files.update(dict.fromkeys(execution.input_files))
            elif state is ExecutionState.FAILED and first_failed is None:
                first_failed = execution
        return VertexResult(
            state=aggregate_state(states),  # FAILED exactly when a subtask failed
            attempts=attempts,
            rows=rows,
            result_path=results.vertex_dir(self.job_id, vertex_id) if partitions else None,
            partitions=tuple(partitions),
            input_files=tuple(input_files)[:MAX_INPUT_FILES],
            failure=first_failed.failure if first_failed is not None else None,
        )

    def job_result(self, *, results: ResultLayout) -> JobResult:
        """The JobResult of a globally terminated job."""
        if not self.status.is_globally_terminal:
            raise ValueError(f"job {self.job_id} is {self.status.value}, not globally terminal")
        end_time = self.end_time or self.now_ms()
        return JobResult(
            job_id=self.job_id,
            name=self.name,
            status=self.status,
            start_time=self.start_time,
            end_time=end_time,
            vertices={vertex_id: self.vertex_result(vertex_id, results=results) for vertex_id in self._order},
            failure=self.failure if self.status is JobStatus.FAILED else None,
        )

    # ---------------------------------------------------------------- read-only views

    def overview(self) -> JobOverview:
        """The job's status, times and subtasks per state, as of now."""
        end = self.end_time
        duration = (end if end is not None else self.now_ms()) - self.start_time
        return JobOverview(
            job_id=self.job_id,
            name=self.name,
            status=self.status,
            start_time=self.start_time,
            end_time=end,
            duration_ms=max(0, duration),
            last_modification=self.last_modification,
            tasks=dict(self._tally),
        )

    def snapshot(self) -> JobSnapshot:
        """The overview and every vertex with its subtasks' current attempts, as of now."""
        return self.capture().build()

    def capture(self) -> GraphCapture:
        """The state `snapshot()` shows, as of now, in immutable values: cheap to take on the loop,
        and built into the snapshot anywhere (`GraphCapture.build`, in a thread for a large job)."""
        return GraphCapture(
            self.overview(),
            self.graph,
            self._order,
            tuple([(ev.current.state, ev.current.attempt, ev.current.slot) for ev in self.subtasks()]),
        )


SubtaskCapture = tuple[ExecutionState, int, AllocatedSlot | None]
"""A subtask's current attempt in a `GraphCapture`: its state, number and slot."""


@dataclass(frozen=True)
class GraphCapture:
    """An ExecutionGraph's state at one moment (`ExecutionGraph.capture`): its overview, its
    JobGraph, the vertex ids in topological order and the current attempt of each subtask in that
    order. Nothing in it changes, so it may be built in any thread."""

    overview: JobOverview
    graph: JobGraph
    order: tuple[str, ...]
    subtasks: tuple[SubtaskCapture, ...]

    def build(self) -> JobSnapshot:
        """The JobSnapshot of the captured moment."""
        vertices = []
        position = 0
        for vertex_id in self.order:
            vertex = self.graph.vertex(vertex_id)
            inputs, parallelism = vertex.inputs, vertex.parallelism
            subtasks = tuple(
                SubtaskSnapshot(index, state, attempt, None if slot is None else slot.task_executor_id)
                for index, (state, attempt, slot) in enumerate(self.subtasks[position : position + parallelism])
            )
            position += parallelism
            vertices.append(
                VertexSnapshot(
                    id=vertex_id,
                    state=aggregate_state([subtask.state for subtask in subtasks]),
                    parallelism=parallelism,
                    inputs=inputs,
                    subtasks=subtasks,
                )
            )
        return JobSnapshot(self.overview, tuple(vertices))
