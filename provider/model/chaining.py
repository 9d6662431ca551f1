"""Which vertices of a job run inside their consumer's task: operator chaining, in this project's terms.

A vertex's result is one of three kinds (`ResultKind`), chosen per vertex automatically unless the
JobGraph asks for one (`"result"` on a vertex, `"results": "durable"` on the job):

- **chained**: the vertex does not run as a task of its own. Its function builds its DataFrame
  inside its consumers' task, once per subtask and unioned, and each consumer reads that lazy
  DataFrame as `ctx.inputs[...]`: producer and consumers run as one Spark plan, with no result
  written between them.
- **kept** (asked for with `"result": "kept"`): the vertex runs as a task of its own and writes its
  result to the local disk of the TaskExecutor that ran it; its consumers are placed on that
  TaskExecutor and read it there, and it is deleted once they have all finished
  (`sparkdispatch.model.kept_results`).
- **durable**: the result is written as Parquet to the results directory and read from there: the
  graph's sinks, vertices that ask for it, every vertex of a job that asks for it, and every result
  that cannot be chained.

A producer chains into the task its consumers run in when running them as one plan cannot change
what a consumer's function sees (`ctx.inputs[x]` stays the whole result of `x`):

1. every consumer of the producer runs in one task: each is that task's head or chained into it
   (a result read by several vertices of one chain is read within that one plan by each, as it
   would be in one lazy Spark plan, where Spark reuses what it can);
2. that task is one subtask: its head's parallelism is 1 (with more, each subtask would compute the
   producer's whole result again); chained vertices may have any parallelism, as all their
   subtasks run in that one task;
3. the producer runs in the head's Python environment (one slot process runs all the chain's functions);
4. neither the producer nor the job asks for a durable result.

A producer whose result is `auto` (the default) is chained wherever these rules allow, as Flink
chains operators unless told not to. Chains are transitive and need not be lines: in the P7
pipeline `generate -> clean (x2) -> {by_region (x2), by_product} -> report`, all four producers
run in `report`'s task, as one plan. A vertex that asks for `"result": "chained"` and does not
qualify is refused at submission.
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
    KEPT = "kept"
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


def why_not_chained(graph: JobGraph, producer: JobVertex, task_of: Mapping[str, str]) -> str | None:
    """Why `producer` cannot chain into the task its consumers run in (a sentence), or None when it can.

    `task_of` maps each vertex chained so far to its head: every consumer of `producer` has been
    looked at (reversed topological order), so a consumer missing from it is a task's head."""
    if graph.results is ResultsMode.DURABLE:
        return 'the job asks for durable results ("results": "durable")'
    if producer.result is ResultKind.DURABLE:
        return 'it asks for a durable result ("result": "durable")'
    if producer.result is ResultKind.KEPT:
        return 'it asks for its result to be kept on its TaskExecutor ("result": "kept")'
    consumers = graph.consumers(producer.id)
    if not consumers:
        return "no vertex reads its result (a sink's result is durable)"
    heads = list(dict.fromkeys(task_of.get(c, c) for c in consumers))
    if len(heads) > 1:
        return (
            f"{len(consumers)} vertices read its result ({', '.join(repr(c) for c in consumers)}) "
            f"in {len(heads)} different tasks ({', '.join(repr(h) for h in heads)}'s)"
        )
    head = graph.vertex(heads[0])
    # only a head that reads it alone can be parallel: one with a vertex chained into it has parallelism 1
    if head.parallelism != 1:
        return (
            f"its consumer {head.id!r} has parallelism {head.parallelism}: each subtask would compute "
            "its whole result again"
        )
    if graph.environment_of(producer.id) != graph.environment_of(head.id):
        return f"its consumer {consumers[0]!r} runs in another Python environment"
    return None


def _chaining(graph: JobGraph) -> tuple[dict[str, str], dict[str, str]]:
    """Each chained vertex's head, and why each other vertex is not chained."""
    head_of: dict[str, str] = {}
    refusals: dict[str, str] = {}
    # reversed topological order: every consumer's task is known before its producers are looked at
    for vertex_id in reversed(graph.topological_order()):
        reason = why_not_chained(graph, graph.vertex(vertex_id), head_of)
        if reason is None:
            consumer = graph.consumers(vertex_id)[0]
            head_of[vertex_id] = head_of.get(consumer, consumer)
        else:
            refusals[vertex_id] = reason
    return head_of, refusals


def plan_chains(graph: JobGraph) -> Chains:
    """The chains of `graph` (validated: ids unique, inputs known, acyclic)."""
    head_of, _ = _chaining(graph)
    if not head_of:
        return NO_CHAINS
    members: dict[str, list[str]] = {}
    for vertex_id in graph.topological_order():
        if vertex_id in head_of:
            members.setdefault(head_of[vertex_id], []).append(vertex_id)
    return Chains(members={head: tuple(ids) for head, ids in members.items()}, head_of=head_of)


def refused_chains(graph: JobGraph) -> dict[str, list[str]]:
    """The JobGraph fields of vertices that ask to be chained and cannot be, with why: `vertices[i].result`."""
    _, refusals = _chaining(graph)
    return {
        f"vertices[{index}].result": [f"vertex {vertex.id!r} cannot be chained into its consumer: {reason}"]
        for index, vertex in enumerate(graph.vertices)
        if vertex.result is ResultKind.CHAINED and (reason := refusals.get(vertex.id)) is not None
    }
