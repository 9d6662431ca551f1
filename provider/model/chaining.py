"""Which vertices of a job run inside their consumer's task: operator chaining, in this project's terms.

A vertex's result is one of three kinds (`ResultKind`), chosen per vertex automatically unless the
JobGraph asks for one (`"result"` on a vertex, `"results": "durable"` on the job):

- **chained**: the vertex does not run as a task of its own. Its function builds its DataFrame
  inside its consumer's task, once per subtask and unioned, and the consumer reads that lazy
  DataFrame as `ctx.inputs[...]`: producer and consumer run as one Spark plan, with no result
  written between them.
- **kept** (not built yet): the result stays in the producing TaskExecutor's Spark for consumers
  placed beside it.
- **durable**: the result is written as Parquet to the results directory and read from there: the
  graph's sinks, vertices that ask for it, every vertex of a job that asks for it, and every result
  that cannot be chained.

A producer chains into its consumer when running the two as one plan cannot change what the
consumer's function sees (`ctx.inputs[x]` stays the whole result of `x`, computed once per attempt of
the consumer):

1. the producer has exactly one consumer, and the consumer's parallelism is 1 (with more subtasks
   each would compute the producer's whole result again);
2. both run in the same Python environment (one slot process runs both functions);
3. neither the producer nor the job asks for a durable result.

A producer whose result is `auto` (the default) is chained wherever these rules allow, as Flink
chains operators unless told not to. Chains are transitive: `a -> b -> c` where both links qualify
runs as one task, `c`'s, whose head is `c`. A vertex that asks for `"result": "chained"` and does
not qualify is refused at submission.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkdispatch.model.job_graph import JobGraph, JobVertex


class ResultKind(str, enum.Enum):
    """What a vertex asks of its result (`"result"` in the JobGraph); `AUTO` lets the master choose."""

    AUTO = "auto"
    CHAINED = "chained"
    DURABLE = "durable"


class ResultsMode(str, enum.Enum):
    """What a job asks of all its results (`"results"` in the JobGraph)."""

    AUTO = "auto"
    #: every vertex's result written to the results directory, for users who read them later
    DURABLE = "durable"


@dataclass(frozen=True)
class Chains:
    """The chains of one job: each head (a vertex that runs as a task) and the producers chained into it."""

    #: head vertex id → the vertices chained into it, in topological order (only heads with a chain)
    members: Mapping[str, tuple[str, ...]]
    #: chained vertex id → the head whose task runs it
    head_of: Mapping[str, str]

    def is_chained(self, vertex_id: str) -> bool:
        """`vertex_id` runs inside another vertex's task."""
        return vertex_id in self.head_of

    def chained_into(self, head: str) -> tuple[str, ...]:
        """The vertices `head`'s task runs before its own function, in topological order."""
        return self.members.get(head, ())


NO_CHAINS = Chains(members={}, head_of={})


def why_not_chained(graph: JobGraph, producer: JobVertex) -> str | None:
    """Why `producer` cannot chain into its consumer (a sentence), or None when it can."""
    if graph.results is ResultsMode.DURABLE:
        return 'the job asks for durable results ("results": "durable")'
    if producer.result is ResultKind.DURABLE:
        return 'it asks for a durable result ("result": "durable")'
    consumers = graph.consumers(producer.id)
    if not consumers:
        return "no vertex reads its result (a sink's result is durable)"
    if len(consumers) > 1:
        return f"{len(consumers)} vertices read its result ({', '.join(repr(c) for c in consumers)})"
    consumer = graph.vertex(consumers[0])
    if consumer.parallelism != 1:
        return (
            f"its consumer {consumer.id!r} has parallelism {consumer.parallelism}: each subtask would compute "
            "its whole result again"
        )
    if graph.environment_of(producer.id) != graph.environment_of(consumer.id):
        return f"its consumer {consumer.id!r} runs in another Python environment"
    return None


def plan_chains(graph: JobGraph) -> Chains:
    """The chains of `graph` (validated: ids unique, inputs known, acyclic)."""
    head_of: dict[str, str] = {}
    # reversed topological order: a consumer's head is known before its producers are looked at
    for vertex_id in reversed(graph.topological_order()):
        vertex = graph.vertex(vertex_id)
        if why_not_chained(graph, vertex) is None:
            consumer = graph.consumers(vertex_id)[0]
            head_of[vertex_id] = head_of.get(consumer, consumer)
    if not head_of:
        return NO_CHAINS
    members: dict[str, list[str]] = {}
    for vertex_id in graph.topological_order():
        if vertex_id in head_of:
            members.setdefault(head_of[vertex_id], []).append(vertex_id)
    return Chains(members={head: tuple(ids) for head, ids in members.items()}, head_of=head_of)


def refused_chains(graph: JobGraph) -> dict[str, list[str]]:
    """The JobGraph fields of vertices that ask to be chained and cannot be, with why: `vertices[i].result`."""
    errors: dict[str, list[str]] = {}
    for index, vertex in enumerate(graph.vertices):
        if vertex.result is ResultKind.CHAINED and (reason := why_not_chained(graph, vertex)) is not None:
            errors[f"vertices[{index}].result"] = [
                f"vertex {vertex.id!r} cannot be chained into its consumer: {reason}"
            ]
    return errors
