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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Generic, TypeAlias, TypeVar, overload

from sparkdispatch.errors import IllegalStateTransition, InvalidJobGraph
from sparkdispatch.schema import dump, dump_many, load, parse_json

JOB_ID_PATTERN = re.compile(r"^[0-9a-f]{32}$")
VERTEX_ID_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
ENTRYPOINT_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
BLOB_KEY_PATTERN = re.compile(r"^[0-9a-f]{64}$")
MAX_VERTICES = 10_000
MAX_PARALLELISM = 10_000
MAX_PARAMS_DEPTH = 64


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

T = TypeVar("T")


class _computed_once(Generic[T]):
    """`functools.cached_property` without Python 3.11's lock, which is shared by every instance:
    while a thread computes a large graph's value, the loop reading another graph's would wait.
    Two threads may both compute a value; they get equal ones."""

    def __init__(self, compute: Callable[[Any], T]) -> None:
        self._compute = compute
        self._name = compute.__name__

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> _computed_once[T]: ...

    @overload
    def __get__(self, instance: object, owner: type[Any]) -> T: ...

    def __get__(self, instance: object | None, owner: type[Any]) -> T | _computed_once[T]:
        if instance is None:
            return self
        value = self._compute(instance)
        instance.__dict__[self._name] = value  # found before this (non-data) descriptor from now on
        return value



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
    """A job as submitted: vertices, their artifacts, restart strategy and Spark properties.

    Lookups by vertex id and the JSON form of the vertices are computed once per graph (and
    shared with `with_job_id`'s copy), so a graph of 10,000 vertices is indexed and serialised
    in linear time, and the serialisation can be done off the master's loop (`prepare`).
    """

    name: str
    vertices: tuple[JobVertex, ...]
    job_id: str | None = None
    artifacts: tuple[str, ...] = ()
    restart_strategy: RestartStrategy | None = None
    config: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any) -> JobGraph:
        """Validate a JSON-shaped value; raises `InvalidJobGraph` naming every bad field.

        The vertex count is checked before any vertex is looked at.
        """
        if isinstance(data, Mapping):
            vertices = data.get("vertices")
            if isinstance(vertices, list) and len(vertices) > MAX_VERTICES:
                raise InvalidJobGraph({"vertices": [f"a job needs 1 to {MAX_VERTICES} vertices, "
                                                    f"got {len(vertices)}"]})
        return load(_schemas.JOB_GRAPH, data, JobGraph, InvalidJobGraph)

    @classmethod
    def from_json(cls, text: str | bytes) -> JobGraph:
        try:
            data = parse_json(text)
        except ValueError as exc:
            raise InvalidJobGraph({"body": [str(exc)]}) from None
        return cls.from_dict(data)

    def prepare(self) -> JobGraph:
        """Compute the vertex index and the JSON form now (e.g. in a thread); returns `self`."""
        self.fingerprint()
        _ = self._vertex_index, self._consumer_index, self._topological_order
        return self

    def to_dict(self) -> dict[str, Any]:
        return dump(_schemas.JOB_GRAPH, self)

    @property
    def subtask_count(self) -> int:
        """The job's subtasks in all: the sum of its vertices' parallelism."""
        return sum(vertex.parallelism for vertex in self.vertices)

    def to_json(self) -> str:
        """The canonical JSON form: `to_dict()` with sorted keys, compact."""
        return self._splice(dump(_schemas.JOB_GRAPH_HEAD, self))

    def with_job_id(self, job_id: str) -> JobGraph:
        if job_id == self.job_id:
            return self
        graph = replace(self, job_id=job_id)
        # the same vertices: what was computed from them holds for the copy (the fingerprint
        # leaves the job id out)
        for name in _SHARED_WITH_COPIES:
            if name in self.__dict__:
                graph.__dict__[name] = self.__dict__[name]
        return graph

    def fingerprint(self) -> str:
        """sha256 of the graph without its job id: two submissions are the same job iff equal."""
        return self._fingerprint

    @_computed_once
    def _fingerprint(self) -> str:
        head = dump(_schemas.JOB_GRAPH_HEAD, self)
        head.pop("job_id", None)
        return hashlib.sha256(self._splice(head).encode()).hexdigest()

    @_computed_once
    def _vertices_json(self) -> str:
        return json.dumps(dump_many(_schemas.JOB_VERTICES, self.vertices), sort_keys=True, separators=(",", ":"))

    def _splice(self, head: dict[str, Any]) -> str:
        # `vertices` sorts after every other key, so the sorted whole is the head and then it
        text = json.dumps(head, sort_keys=True, separators=(",", ":"))
        return f'{text[:-1]}{"," if head else ""}"vertices":{self._vertices_json}}}'

    @_computed_once
    def _vertex_index(self) -> dict[str, JobVertex]:
        index: dict[str, JobVertex] = {}
        for vertex in self.vertices:
            index.setdefault(vertex.id, vertex)
        return index

    @_computed_once
    def _consumer_index(self) -> dict[str, list[str]]:
        index: dict[str, list[str]] = {}
        for vertex in self.vertices:
            for name in dict.fromkeys(vertex.inputs):
                index.setdefault(name, []).append(vertex.id)
        return index

    def vertex(self, vertex_id: str) -> JobVertex:
        return self._vertex_index[vertex_id]

    def consumers(self, vertex_id: str) -> list[str]:
        """Ids of the vertices that read `vertex_id`'s result."""
        return list(self._consumer_index.get(vertex_id, ()))

    def topological_order(self) -> list[str]:
        """Vertex ids, every vertex after all of its inputs (the graph is acyclic once validated)."""
        return list(self._topological_order)

    @_computed_once
    def _topological_order(self) -> tuple[str, ...]:
        order, cycle = order_vertices(self.vertices)
        if cycle:
            raise InvalidJobGraph({"vertices": [cycle_message(cycle)]})
        return tuple(order)


_SHARED_WITH_COPIES = ("_fingerprint", "_vertices_json", "_vertex_index", "_consumer_index", "_topological_order")


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

    @classmethod
    def from_dict(cls, data: Any) -> VertexResult:
        return load(_schemas.VERTEX_RESULT, data, VertexResult, InvalidJobGraph)

    def to_dict(self) -> dict[str, Any]:
        return dump(_schemas.VERTEX_RESULT, self)


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
