"""The job model: JobGraph, the job and execution lifecycles, restart specs and JobResult.

Values are frozen dataclasses; their JSON forms are defined by the marshmallow schemas in
`sparkdispatch.jobgraph_schemas` and round-trip exactly (`X.from_dict(x.to_dict()) == x`).
Validation names the field and the reason, and raises `InvalidJobGraph` before anything is
stored.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
import traceback as traceback_module
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, TypeAlias

from sparkdispatch.errors import IllegalStateTransition, InvalidJobGraph
from sparkdispatch.schema import dump, load

JOB_ID_PATTERN = re.compile(r"^[0-9a-f]{32}$")
VERTEX_ID_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
ENTRYPOINT_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
BLOB_KEY_PATTERN = re.compile(r"^[0-9a-f]{64}$")
MAX_VERTICES = 10_000
MAX_PARALLELISM = 10_000


# --------------------------------------------------------------------------------------------
# Lifecycles (Flink's JobStatus and ExecutionState)


class JobStatus(str, enum.Enum):
    """A job's state, as Flink's JobStatus; FINISHED, FAILED and CANCELED are globally terminal."""

    INITIALIZING = "INITIALIZING"
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    FAILING = "FAILING"
    FAILED = "FAILED"
    CANCELLING = "CANCELLING"
    CANCELED = "CANCELED"
    FINISHED = "FINISHED"
    RESTARTING = "RESTARTING"
    SUSPENDED = "SUSPENDED"
    RECONCILING = "RECONCILING"

    @property
    def is_globally_terminal(self) -> bool:
        return self in _GLOBALLY_TERMINAL_JOB

    @property
    def is_terminal(self) -> bool:
        """Globally terminal, or SUSPENDED (this master stopped leading; the job lives on)."""
        return self in _GLOBALLY_TERMINAL_JOB or self is JobStatus.SUSPENDED

    def can_become(self, target: JobStatus) -> bool:
        return target in _JOB_TRANSITIONS[self]

    def transition(self, target: JobStatus) -> JobStatus:
        """`target`, if Flink's lifecycle allows this → target; else `IllegalStateTransition`."""
        if not self.can_become(target):
            raise IllegalStateTransition(f"a job cannot go from {self.value} to {target.value}")
        return target


_GLOBALLY_TERMINAL_JOB = frozenset({JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED})
_JOB_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.INITIALIZING: frozenset({JobStatus.CREATED, JobStatus.FAILED, JobStatus.CANCELED, JobStatus.SUSPENDED}),
    JobStatus.CREATED: frozenset({JobStatus.RUNNING, JobStatus.RECONCILING, JobStatus.CANCELLING,
                                  JobStatus.CANCELED, JobStatus.FAILED, JobStatus.SUSPENDED}),
    JobStatus.RECONCILING: frozenset({JobStatus.RUNNING, JobStatus.FAILING, JobStatus.CANCELLING,
                                      JobStatus.FAILED, JobStatus.SUSPENDED}),
    JobStatus.RUNNING: frozenset({JobStatus.FINISHED, JobStatus.FAILING, JobStatus.RESTARTING,
                                  JobStatus.CANCELLING, JobStatus.SUSPENDED}),
    JobStatus.FAILING: frozenset({JobStatus.FAILED, JobStatus.RESTARTING, JobStatus.CANCELLING,
                                  JobStatus.SUSPENDED}),
    JobStatus.RESTARTING: frozenset({JobStatus.RUNNING, JobStatus.CREATED, JobStatus.CANCELLING,
                                     JobStatus.CANCELED, JobStatus.FAILED, JobStatus.SUSPENDED}),
    JobStatus.CANCELLING: frozenset({JobStatus.CANCELED, JobStatus.SUSPENDED}),
    JobStatus.FINISHED: frozenset(),
    JobStatus.FAILED: frozenset(),
    JobStatus.CANCELED: frozenset(),
    JobStatus.SUSPENDED: frozenset(),
}


class ExecutionState(str, enum.Enum):
    """One attempt of one subtask, as Flink's ExecutionState."""

    CREATED = "CREATED"
    SCHEDULED = "SCHEDULED"
    DEPLOYING = "DEPLOYING"
    INITIALIZING = "INITIALIZING"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    CANCELING = "CANCELING"
    CANCELED = "CANCELED"
    FAILED = "FAILED"
    RECONCILING = "RECONCILING"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL_EXECUTION

    def can_become(self, target: ExecutionState) -> bool:
        return target in _EXECUTION_TRANSITIONS[self]

    def transition(self, target: ExecutionState) -> ExecutionState:
        if not self.can_become(target):
            raise IllegalStateTransition(f"an execution cannot go from {self.value} to {target.value}")
        return target


_TERMINAL_EXECUTION = frozenset({ExecutionState.FINISHED, ExecutionState.CANCELED, ExecutionState.FAILED})
_EXECUTION_TRANSITIONS: dict[ExecutionState, frozenset[ExecutionState]] = {
    ExecutionState.CREATED: frozenset({ExecutionState.SCHEDULED, ExecutionState.RECONCILING,
                                       ExecutionState.CANCELED, ExecutionState.FAILED}),
    ExecutionState.SCHEDULED: frozenset({ExecutionState.DEPLOYING, ExecutionState.CANCELING,
                                         ExecutionState.CANCELED, ExecutionState.FAILED}),
    ExecutionState.DEPLOYING: frozenset({ExecutionState.INITIALIZING, ExecutionState.CANCELING,
                                         ExecutionState.CANCELED, ExecutionState.FAILED}),
    ExecutionState.INITIALIZING: frozenset({ExecutionState.RUNNING, ExecutionState.CANCELING,
                                            ExecutionState.CANCELED, ExecutionState.FAILED}),
    ExecutionState.RUNNING: frozenset({ExecutionState.FINISHED, ExecutionState.CANCELING,
                                       ExecutionState.CANCELED, ExecutionState.FAILED}),
    ExecutionState.CANCELING: frozenset({ExecutionState.CANCELED, ExecutionState.FAILED}),
    ExecutionState.RECONCILING: frozenset({ExecutionState.INITIALIZING, ExecutionState.RUNNING,
                                           ExecutionState.FINISHED, ExecutionState.CANCELED,
                                           ExecutionState.FAILED}),
    ExecutionState.FINISHED: frozenset(),
    ExecutionState.CANCELED: frozenset(),
    ExecutionState.FAILED: frozenset(),
}


# --------------------------------------------------------------------------------------------
# Restart strategies (Flink's parameters and names)


@dataclass(frozen=True)
class NoRestart:
    type: ClassVar[str] = "none"


@dataclass(frozen=True)
class FixedDelayRestart:
    """Restart up to `attempts` times, `delay_s` apart (`restart-strategy.fixed-delay.*`)."""

    type: ClassVar[str] = "fixed-delay"
    attempts: int = 3
    delay_s: float = 1.0


@dataclass(frozen=True)
class ExponentialDelayRestart:
    """Pauses grow by `backoff_multiplier` up to `max_backoff_s` (`restart-strategy.exponential-delay.*`)."""

    type: ClassVar[str] = "exponential-delay"
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 300.0
    backoff_multiplier: float = 2.0
    reset_backoff_threshold_s: float = 3600.0
    jitter_factor: float = 0.1
    attempts: int = 10


@dataclass(frozen=True)
class FailureRateRestart:
    """Restart unless more than `max_failures_per_interval` failures fall in one interval."""

    type: ClassVar[str] = "failure-rate"
    max_failures_per_interval: int = 1
    failure_rate_interval_s: float = 60.0
    delay_s: float = 1.0


RestartStrategy: TypeAlias = NoRestart | FixedDelayRestart | ExponentialDelayRestart | FailureRateRestart


# --------------------------------------------------------------------------------------------
# JobGraph


@dataclass(frozen=True)
class JobVertex:
    """One PySpark task of a job: `entrypoint` runs `parallelism` times, after all of `inputs`."""

    id: str
    entrypoint: str
    parallelism: int = 1
    inputs: tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JobGraph:
    """A job as submitted: vertices, their artifacts, restart strategy and Spark properties."""

    name: str
    vertices: tuple[JobVertex, ...]
    job_id: str | None = None
    artifacts: tuple[str, ...] = ()
    restart_strategy: RestartStrategy | None = None
    config: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any) -> JobGraph:
        """Validate a JSON-shaped value; raises `InvalidJobGraph` naming every bad field."""
        return load(_schemas.JOB_GRAPH, data, JobGraph, InvalidJobGraph)

    @classmethod
    def from_json(cls, text: str | bytes) -> JobGraph:
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidJobGraph({"body": [f"not valid JSON: {exc}"]}) from None
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        return dump(_schemas.JOB_GRAPH, self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def with_job_id(self, job_id: str) -> JobGraph:
        return replace(self, job_id=job_id)

    def fingerprint(self) -> str:
        """sha256 of the graph without its job id: two submissions are the same job iff equal."""
        body = self.to_dict()
        body.pop("job_id", None)
        return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def vertex(self, vertex_id: str) -> JobVertex:
        for vertex in self.vertices:
            if vertex.id == vertex_id:
                return vertex
        raise KeyError(vertex_id)

    def consumers(self, vertex_id: str) -> list[str]:
        """Ids of the vertices that read `vertex_id`'s result."""
        return [v.id for v in self.vertices if vertex_id in v.inputs]

    def topological_order(self) -> list[str]:
        """Vertex ids, every vertex after all of its inputs (the graph is acyclic once validated)."""
        order, cycle = order_vertices(self.vertices)
        if cycle:
            raise InvalidJobGraph({"vertices": [cycle_message(cycle)]})
        return order


def order_vertices(vertices: Iterable[JobVertex]) -> tuple[list[str], list[str]]:
    """(order, cycle): a topological order, or the vertex ids of one cycle when there is one."""
    inputs = {v.id: [i for i in v.inputs] for v in vertices}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    order: list[str] = []
    for root in inputs:
        if root in state:
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        path: list[str] = [root]
        state[root] = 1
        while stack:
            node, index = stack[-1]
            upstream = inputs.get(node, [])
            if index < len(upstream):
                stack[-1] = (node, index + 1)
                nxt = upstream[index]
                if nxt not in inputs:
                    continue
                if state.get(nxt) == 1:
                    cycle = path[path.index(nxt):]
                    return order, list(reversed(cycle))
                if nxt not in state:
                    state[nxt] = 1
                    stack.append((nxt, 0))
                    path.append(nxt)
            else:
                stack.pop()
                path.pop()
                state[node] = 2
                order.append(node)
    return order, []


def cycle_message(cycle: list[str]) -> str:
    """How a refused graph names its cycle: `a -> b -> a`."""
    return "the graph has a cycle: " + " -> ".join([*cycle, cycle[0]])


# --------------------------------------------------------------------------------------------
# JobResult


@dataclass(frozen=True)
class Failure:
    """An exception as it reaches the JobResult: class name, message and traceback text."""

    cls: str
    message: str
    traceback: str = ""

    @classmethod
    def from_exception(cls, exc: BaseException) -> Failure:
        return cls(cls=type(exc).__name__, message=str(exc),
                   traceback="".join(traceback_module.format_exception(exc)))

    def to_dict(self) -> dict[str, Any]:
        return dump(_schemas.FAILURE, self)


@dataclass(frozen=True)
class VertexResult:
    """A vertex's outcome: its state, highest attempt count, rows written and where.

    `result_path` is the vertex's results directory; `partitions` are the Parquet directories of
    its final subtask attempts inside it (read them with `spark.read.parquet(*partitions)`; the
    directory may also hold the output of attempts that were superseded).
    """

    state: ExecutionState
    attempts: int
    rows: int | None = None
    result_path: str | None = None
    partitions: tuple[str, ...] = ()
    failure: Failure | None = None


@dataclass(frozen=True)
class JobResult:
    """The outcome of a globally terminated job; written once, never changed."""

    job_id: str
    name: str
    status: JobStatus
    start_time: int
    end_time: int
    vertices: Mapping[str, VertexResult] = field(default_factory=dict)
    failure: Failure | None = None

    @property
    def duration_ms(self) -> int:
        return max(0, self.end_time - self.start_time)

    @classmethod
    def from_dict(cls, data: Any) -> JobResult:
        return load(_schemas.JOB_RESULT, data, JobResult, InvalidJobGraph)

    def to_dict(self) -> dict[str, Any]:
        return dump(_schemas.JOB_RESULT, self)


# The schemas are built from the classes above; imported last, they find them defined.
from sparkdispatch import jobgraph_schemas as _schemas  # noqa: E402
