"""One subtask of a job and its current attempt: `SubtaskId`, `Execution` (Flink's Execution) and
`ExecutionVertex`; `aggregate_state` gives a vertex's state from its subtasks'.

An attempt's state changes go through the lifecycle table of `ExecutionState`, which refuses an
illegal change; a subtask tells its ExecutionGraph when its result becomes readable or stops being.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

from sparkdispatch.ha.progress_store import SubtaskProgress
from sparkdispatch.model.job_graph import JobVertex
from sparkdispatch.model.job_result import Failure
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.resourcemanager import AllocatedSlot

# The way an attempt normally goes; a report may skip steps of it (a fast task reports
# FINISHED while its deployment is still being acknowledged), so reports walk along it.
_NORMAL_PATH = (
    ExecutionState.CREATED,
    ExecutionState.SCHEDULED,
    ExecutionState.DEPLOYING,
    ExecutionState.INITIALIZING,
    ExecutionState.RUNNING,
    ExecutionState.FINISHED,
)


@dataclass(frozen=True, order=True, slots=True)
class SubtaskId:
    """One subtask: a vertex and an index below its parallelism; also its region's id."""

    vertex_id: str
    subtask_index: int

    def __str__(self) -> str:
        return f"{self.vertex_id}[{self.subtask_index}]"


#: The states of an attempt that runs, or may, on a TaskExecutor.
LIVE = frozenset(
    {ExecutionState.DEPLOYING, ExecutionState.INITIALIZING, ExecutionState.RUNNING, ExecutionState.CANCELING}
)

StateTally = dict[ExecutionState, int]
"""How many of a graph's current attempts are in each state."""


class Execution:
    """One attempt of one subtask (Flink's Execution); while it is its subtask's current attempt, its
    state counts in its graph's `tally`."""

    __slots__ = (
        "execution_id",
        "attempt",
        "_state",
        "tally",
        "slot",
        "result_path",
        "rows",
        "result_schema",
        "input_files",
        "kept_on",
        "failure",
        "deployed_at",
    )

    def __init__(self, attempt: int, execution_id: str | None = None, *, tally: StateTally | None = None) -> None:
        # 32 random hex digits, as a uuid4's, at a third of the cost
        self.execution_id = execution_id or secrets.token_hex(16)
        self.attempt = attempt
        self._state = ExecutionState.CREATED
        self.tally = tally
        if tally is not None:
            tally[ExecutionState.CREATED] += 1
        self.slot: AllocatedSlot | None = None
        self.result_path: str | None = None
        self.rows: int | None = None
        self.result_schema: str | None = None  # the result's schema JSON, as its TaskExecutor reported it
        self.input_files: tuple[str, ...] = ()  # the datasets it read besides the job's results
        self.kept_on: str | None = None  # the TaskExecutor whose local disk keeps its result, if kept
        self.failure: Failure | None = None
        self.deployed_at = 0.0  # the JobMaster's clock when it was deployed

    @property
    def state(self) -> ExecutionState:
        return self._state

    @state.setter
    def state(self, value: ExecutionState) -> None:
        if self.tally is not None:
            self.tally[self._state] -= 1
            self.tally[value] += 1
        self._state = value

    def superseded(self) -> None:
        """No longer its subtask's current attempt: its state counts no more."""
        if self.tally is not None:
            self.tally[self._state] -= 1
            self.tally = None

    @property
    def task_executor_id(self) -> str | None:
        return self.slot.task_executor_id if self.slot is not None else None

    def keep(self, progress: SubtaskProgress) -> None:
        """Hold a FINISHED attempt's result (and where it is kept), rows, result schema and the files it read."""
        self.result_path = progress.result_path
        self.rows = progress.rows
        self.result_schema = progress.result_schema
        self.input_files = progress.input_files
        self.kept_on = progress.kept_on

    def progress(self) -> SubtaskProgress:
        """What `keep` holds, as the ProgressStore records it."""
        return SubtaskProgress(
            self.result_path,
            self.rows,
            result_schema=self.result_schema,
            input_files=self.input_files,
            kept_on=self.kept_on,
        )

    def ran_for(self, now: float) -> float | None:
        """Seconds from its deployment to `now`; None if it was never deployed."""
        return now - self.deployed_at if self.deployed_at else None

    @property
    def allocation_id(self) -> str | None:
        return self.slot.allocation_id if self.slot is not None else None

    def transition(self, target: ExecutionState) -> None:
        """Move to `target`; `IllegalStateTransition` if the lifecycle forbids it."""
        self.state = self.state.transition(target)

    def advance(self, target: ExecutionState) -> bool:
        """Follow a TaskExecutor's report: True if the state changed, False for a repeated or late one.

        Along the normal path the skipped steps are walked one by one; FAILED, CANCELING and
        CANCELED are entered directly. A report that would leave a terminal state raises
        `IllegalStateTransition`.
        """
        if target == self.state:
            return False
        if target in _NORMAL_PATH and self.state in _NORMAL_PATH:
            here, there = _NORMAL_PATH.index(self.state), _NORMAL_PATH.index(target)
            if there < here:
                return False
            for step in _NORMAL_PATH[here + 1 : there + 1]:
                self.transition(step)
            return True
        if target in (ExecutionState.INITIALIZING, ExecutionState.RUNNING) and self.state is ExecutionState.CANCELING:
            return False  # the task started before our cancel reached it
        self.transition(target)
        return True

    def __repr__(self) -> str:
        return f"Execution({self.execution_id}, attempt={self.attempt}, {self.state.value})"


ConsumabilityListener = Callable[["ExecutionVertex", bool], None]


class ExecutionVertex:
    """One subtask of a vertex and its current Execution.

    `listener(subtask, consumable)` hears whenever `is_consumable` changes through the flags
    below or a new attempt (its ExecutionGraph keeps its counts with it). A subtask is recorded
    only once FINISHED, so a state change alone never makes it consumable.
    """

    # one per subtask: slots keep the graph of a large job small and quick to build
    __slots__ = (
        "vertex",
        "subtask_index",
        "id",
        "current",
        "deployed_attempts",
        "recovered",
        "chained_rows",
        "_partition_lost",
        "_progress_recorded",
        "_consumable",
        "_listener",
    )

    def __init__(
        self,
        vertex: JobVertex,
        subtask_index: int,
        listener: ConsumabilityListener | None = None,
        *,
        execution_id: str | None = None,
        tally: StateTally | None = None,
    ) -> None:
        self.vertex = vertex
        self.subtask_index = subtask_index
        self.id = SubtaskId(vertex.id, subtask_index)
        self.current = Execution(attempt=0, execution_id=execution_id, tally=tally)
        self.deployed_attempts = 0
        self.recovered = False
        # a chained subtask's rows, as its head's FINISHED attempt counted them (it shares that attempt)
        self.chained_rows: int | None = None
        self._partition_lost = False
        self._progress_recorded = False
        self._consumable = False  # as last told to the listener
        self._listener = listener

    @property
    def state(self) -> ExecutionState:
        return self.current.state

    @property
    def partition_lost(self) -> bool:
        """Its finished result partition turned out unreadable; it must run again."""
        return self._partition_lost

    @partition_lost.setter
    def partition_lost(self, value: bool) -> None:
        self._partition_lost = value
        self._refresh()

    @property
    def progress_recorded(self) -> bool:
        """Its FINISHED attempt is recorded in the ProgressStore (a failover keeps it)."""
        return self._progress_recorded

    @progress_recorded.setter
    def progress_recorded(self, value: bool) -> None:
        self._progress_recorded = value
        self._refresh()

    @property
    def is_consumable(self) -> bool:
        """Its result partition can be read: finished, recorded in the ProgressStore, not lost."""
        return self.state is ExecutionState.FINISHED and self._progress_recorded and not self._partition_lost

    def _refresh(self) -> None:
        consumable = self.is_consumable
        if consumable != self._consumable:
            self._consumable = consumable
            if self._listener is not None:
                self._listener(self, consumable)

    def __repr__(self) -> str:
        return f"ExecutionVertex({self.id}, {self.current!r})"


def aggregate_state(states: list[ExecutionState]) -> ExecutionState:
    """A vertex's state from its subtasks' states, by Flink's precedence."""
    if len(states) == 1:
        return states[0]  # what the precedence below gives one state alone
    present = set(states)
    for state in (ExecutionState.FAILED, ExecutionState.CANCELING, ExecutionState.CANCELED):
        if state in present:
            return state
    if present == {ExecutionState.FINISHED}:
        return ExecutionState.FINISHED
    for state in (ExecutionState.RUNNING, ExecutionState.INITIALIZING, ExecutionState.RECONCILING):
        if state in present:
            return state
    if ExecutionState.FINISHED in present:
        return ExecutionState.RUNNING
    for state in (ExecutionState.DEPLOYING, ExecutionState.SCHEDULED):
        if state in present:
            return state
    return ExecutionState.CREATED
