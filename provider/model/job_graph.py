"""The JobGraph: a job as submitted, its vertices, and its JSON form (validated by marshmallow).

Values are frozen dataclasses; their JSON form is defined by the schemas below and round-trips
exactly (`JobGraph.from_dict(g.to_dict()) == g`). Validation names the field and the reason, and
raises `InvalidJobGraph` before anything is stored.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar, overload

from marshmallow import ValidationError, fields, post_dump, post_load, validate, validates_schema

from sparkdispatch.errors import InvalidJobGraph
from sparkdispatch.model import spark_conf
from sparkdispatch.model.chaining import ResultKind, ResultsMode, refused_chains
from sparkdispatch.model.environment import Environment, environment_field
from sparkdispatch.model.kept_results import refused_kept
from sparkdispatch.model.restart import RestartStrategy, RestartStrategyField
from sparkdispatch.model.schema import StrictSchema, WholeMatch, drop_none, dump, dump_many, load, parse_json

# Matched with `fullmatch` (schema.WholeMatch in schemas): `$` alone also matches before a final
# newline; the anchors stay for the OpenAPI document, whose JSON Schema patterns are not anchored.
JOB_ID_PATTERN = re.compile(r"^[0-9a-f]{32}$")
VERTEX_ID_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
ENTRYPOINT_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
BLOB_KEY_PATTERN = re.compile(r"^[0-9a-f]{64}$")
POOL_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
POOL_RULE = "must be 1-64 letters, digits, '_', '.' or '-', not starting with '.' or '-'"
#: the pool of a TaskExecutor, and of a job, that names none
DEFAULT_POOL = "default"
MAX_VERTICES = 10_000
MAX_PARALLELISM = 10_000
MAX_PARAMS_DEPTH = 64


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
    #: the Python packages this vertex's code needs, instead of the job's `environment`
    environment: Environment | None = None
    #: what the vertex asks of its result: chained into its consumer, kept on its TaskExecutor,
    #: durable, or the master's choice
    result: ResultKind = ResultKind.AUTO


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
    #: the TaskExecutor pool (`taskexecutor.pool`) its subtasks run in
    pool: str = DEFAULT_POOL
    #: the Python packages the job's code needs beyond the TaskExecutor's (a vertex may have its own)
    environment: Environment | None = None
    #: `durable`: every vertex's result is written to the results directory (none is chained)
    results: ResultsMode = ResultsMode.AUTO

    @classmethod
    def from_dict(cls, data: Any) -> JobGraph:
        """Validate a JSON-shaped value; raises `InvalidJobGraph` naming every bad field.

        The vertex count is checked before any vertex is looked at.
        """
        if isinstance(data, Mapping):
            vertices = data.get("vertices")
            if isinstance(vertices, list) and len(vertices) > MAX_VERTICES:
                raise InvalidJobGraph({"vertices": [f"a job needs 1 to {MAX_VERTICES} vertices, got {len(vertices)}"]})
        return load(JOB_GRAPH, data, JobGraph, InvalidJobGraph)

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
        return dump(JOB_GRAPH, self)

    @property
    def subtask_count(self) -> int:
        """The job's subtasks in all: the sum of its vertices' parallelism."""
        return sum(vertex.parallelism for vertex in self.vertices)

    def to_json(self) -> str:
        """The canonical JSON form: `to_dict()` with sorted keys, compact."""
        return self._splice(dump(JOB_GRAPH_HEAD, self))

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
        head = dump(JOB_GRAPH_HEAD, self)
        head.pop("job_id", None)
        return hashlib.sha256(self._splice(head).encode()).hexdigest()

    @_computed_once
    def _vertices_json(self) -> str:
        return json.dumps(dump_many(JOB_VERTICES, self.vertices), sort_keys=True, separators=(",", ":"))

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

    def environment_of(self, vertex_id: str) -> Environment | None:
        """The environment `vertex_id`'s code runs in: its own, else the job's, else none."""
        return self.vertex(vertex_id).environment or self.environment

    def wheel_keys(self) -> dict[str, str]:
        """The uploaded wheels the job's environments name: blob key → the field naming it first."""
        keys: dict[str, str] = {}
        named = [("environment", self.environment)]
        named += [(f"vertices[{i}].environment", v.environment) for i, v in enumerate(self.vertices)]
        for where, environment in named:
            if environment is None:
                continue
            for index, entry in enumerate(environment.dependencies):
                if entry in environment.wheel_keys:
                    keys.setdefault(entry, f"{where}.dependencies[{index}]")
        return keys

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
                    cycle = path[path.index(nxt) :]
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


class _SparkConfField(fields.Dict):
    """Spark properties a job's session may set (`sparkdispatch.model.spark_conf`): string keys;
    scalar values, kept as strings."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(keys=fields.String(validate=validate.Length(min=1, max=256)), values=fields.Raw(), **kwargs)

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> dict[str, str]:
        # marshmallow leaves Dict._deserialize unannotated; it returns the checked dict
        result: dict[str, Any] = super()._deserialize(value, attr, data, **kwargs)  # type: ignore[no-untyped-call]
        converted: dict[str, str] = {}
        errors: dict[str, list[str]] = {}
        for key, item in result.items():
            if (refused := spark_conf.refusal(key)) is not None:
                errors.setdefault(key, []).append(refused)
            if isinstance(item, bool):
                converted[key] = "true" if item else "false"
            elif isinstance(item, (str, int, float)):
                converted[key] = str(item)
            else:
                errors.setdefault(key, []).append("must be a string, number or boolean")
        if errors:
            raise ValidationError(errors)
        return converted


class _ParamsField(fields.Dict):
    """A vertex's `params`: any JSON object, nested at most `MAX_PARAMS_DEPTH` levels (deeper ones
    could not be written out again)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(keys=fields.String(), values=fields.Raw(allow_none=True), **kwargs)

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> dict[str, Any]:
        # marshmallow leaves Dict._deserialize unannotated; it returns the checked dict
        result: dict[str, Any] = super()._deserialize(value, attr, data, **kwargs)  # type: ignore[no-untyped-call]
        level: list[dict[str, Any] | list[Any]] = [result]
        depth = 1
        while level:
            if depth > MAX_PARAMS_DEPTH:
                raise ValidationError(f"nested deeper than {MAX_PARAMS_DEPTH} levels")
            level = [
                child
                for item in level
                for child in (item.values() if isinstance(item, dict) else item)
                if isinstance(child, (dict, list))
            ]
            depth += 1
        return result


class JobVertexSchema(StrictSchema):
    id = fields.String(
        required=True,
        validate=WholeMatch(
            VERTEX_ID_PATTERN, error="must be 1-128 letters, digits, '_', '.' or '-', not starting with '.' or '-'"
        ),
    )
    entrypoint = fields.String(
        required=True,
        validate=WholeMatch(ENTRYPOINT_PATTERN, error="must be 'module.path:function', e.g. 'pipelines.sales:extract'"),
    )
    parallelism = fields.Integer(
        load_default=1,
        strict=True,
        validate=validate.Range(
            min=1, max=MAX_PARALLELISM, error=f"parallelism must be between 1 and {MAX_PARALLELISM}"
        ),
    )
    inputs = fields.List(fields.String(), load_default=list)
    params = _ParamsField(load_default=dict)
    environment = environment_field()
    result = fields.Enum(ResultKind, by_value=True, load_default=ResultKind.AUTO)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> JobVertex:
        data["inputs"] = tuple(data["inputs"])
        return JobVertex(**data)

    @post_dump
    def lists(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        data["inputs"] = list(data["inputs"])
        data["params"] = dict(data["params"])
        if data["result"] == ResultKind.AUTO.value:
            del data["result"]  # the form of a vertex that asks nothing of its result stays what it was
        return drop_none(data, "environment")


class JobGraphSchema(StrictSchema):
    job_id = fields.String(
        allow_none=True,
        load_default=None,
        validate=WholeMatch(JOB_ID_PATTERN, error="must be 32 lowercase hex characters"),
    )
    name = fields.String(required=True, validate=validate.Length(min=1, max=200, error="must be 1-200 characters"))
    vertices = fields.List(
        fields.Nested(JobVertexSchema),
        required=True,
        validate=validate.Length(min=1, max=MAX_VERTICES, error=f"a job needs 1 to {MAX_VERTICES} vertices"),
    )
    artifacts = fields.List(
        fields.String(
            validate=WholeMatch(BLOB_KEY_PATTERN, error="must be a blob key (64 hex characters) from POST /artifacts")
        ),
        load_default=list,
    )
    restart_strategy = RestartStrategyField(allow_none=True, load_default=None)
    config = _SparkConfField(load_default=dict)
    pool = fields.String(load_default=DEFAULT_POOL, validate=WholeMatch(POOL_PATTERN, error=POOL_RULE))
    environment = environment_field()
    results = fields.Enum(ResultsMode, by_value=True, load_default=ResultsMode.AUTO)

    @validates_schema(skip_on_field_errors=True)
    def check_graph(self, data: dict[str, Any], **_: Any) -> None:
        vertices: list[JobVertex] = data["vertices"]
        errors: dict[str, list[str]] = {}
        seen: dict[str, int] = {}
        for index, vertex in enumerate(vertices):
            if vertex.id in seen:
                errors.setdefault(f"vertices[{index}].id", []).append(
                    f"duplicate vertex id {vertex.id!r} (also vertices[{seen[vertex.id]}])"
                )
            else:
                seen[vertex.id] = index
        for index, vertex in enumerate(vertices):
            for name in vertex.inputs:
                if name not in seen:
                    errors.setdefault(f"vertices[{index}].inputs", []).append(f"{name!r} names no vertex")
                elif name == vertex.id:
                    errors.setdefault(f"vertices[{index}].inputs", []).append(f"vertex {name!r} reads itself")
            if len(set(vertex.inputs)) != len(vertex.inputs):
                errors.setdefault(f"vertices[{index}].inputs", []).append("an input is named twice")
        if not errors:
            cycle = order_vertices(vertices)[1]
            if cycle:
                errors["vertices"] = [cycle_message(cycle)]
        if not errors and any(vertex.result in (ResultKind.CHAINED, ResultKind.KEPT) for vertex in vertices):
            graph = JobGraph(
                name=data["name"],
                vertices=tuple(vertices),
                environment=data.get("environment"),
                results=data.get("results", ResultsMode.AUTO),
            )
            errors.update(refused_chains(graph))
            errors.update(refused_kept(graph))
        if errors:
            raise ValidationError(errors)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> JobGraph:
        data["vertices"] = tuple(data["vertices"])
        data["artifacts"] = tuple(data["artifacts"])
        return JobGraph(**data)

    @post_dump
    def lists(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        data["artifacts"] = list(data["artifacts"])
        data["config"] = dict(data["config"])
        if data["pool"] == DEFAULT_POOL:
            del data["pool"]  # the form of a graph that names no pool stays what it was before pools
        if data["results"] == ResultsMode.AUTO.value:
            del data["results"]
        return drop_none(data, "environment")


# one instance of each schema: they keep no state between calls, and building one per call costs
JOB_GRAPH = JobGraphSchema()
JOB_GRAPH_HEAD = JobGraphSchema(exclude=("vertices",))  # `JobGraph.to_json` adds the vertices' own JSON
JOB_VERTICES = JobVertexSchema(many=True)
