"""Which vertices of a job run inside their consumer's task: operator chaining, in this project's terms.

A vertex's result is one of three kinds (`ResultKind`), chosen per vertex automatically unless the
JobGraph asks for one (`"result"` on a vertex, `"results": "durable"` on the job):

- **chained**: the vertex does not run as a task of its own. Its function builds its DataFrame
  inside its consumers' task, once per subtask and unioned, and each consumer reads that lazy
  DataFrame as `ctx.inputs[...]`: producer and consumers run as one Spark plan, with no result
  written between them.
- **kept**: the vertex runs as a task of its own and writes its result to the local disk of the
  TaskExecutor that ran it; its consumers are placed on that TaskExecutor and read it there, and it
  is deleted once they have all finished (`sparkdispatch.model.kept_results`). Asked for with
  `"result": "kept"`, or chosen by `auto` (below).
- **durable**: the result is written as Parquet to the results directory and read from there: the
  graph's sinks, vertices that ask for it, every vertex of a job that asks for it, and every `auto`
  result that is neither chained nor kept.

A producer *can* chain into the task its consumers run in when running them as one plan cannot
change what a consumer's function sees (`ctx.inputs[x]` stays the whole result of `x`):

1. every consumer of the producer runs in one task: each is that task's head or chained into it;
2. that task is one subtask: its head's parallelism is 1 (with more, each subtask would compute the
   producer's whole result again); chained vertices may have any parallelism, as all their
   subtasks run in that one task;
3. the producer runs in the head's Python environment (one slot process runs all the chain's functions);
4. neither the producer nor the job asks for a durable result, and the producer does not ask for a kept one.

An `auto` producer (the default), looked at after all its consumers:

- read by **one** vertex, and able to chain: it is **chained**, as Flink chains operators unless
  told not to;
- read by **several** vertices, where chaining would have put it in one task with all of them: it
  is **kept** instead. Chained, a result read twice stands twice in the one plan, and Spark
  computes each copy unless it can reuse a shuffle of it (P10's star join: 21.8 s chained, 13.5 s
  kept); kept, it is computed once, on the TaskExecutor its readers' task runs on anyway;
- not able to chain only because of what the choices above made of its consumers (one of them is
  now a kept vertex's task, of any parallelism, on that same TaskExecutor): it is **kept** too;
- otherwise **durable**.

So `auto` keeps a result only where chaining, the alternative, would have run producer and
readers in one slot of one TaskExecutor: it never ties to one TaskExecutor work that could have
spread over several. In the P7 pipeline `generate -> clean (x2) -> {by_region (x2), by_product}
-> report`, `clean` is read twice and is kept, `generate` (read by `clean`'s two subtasks) is
kept for it, and `by_region` and `by_product` chain into `report`'s task.

A vertex that asks for `"result": "chained"` is chained whenever it can be, read by several
vertices or not (each reads it within the one plan, as in one lazy Spark plan), and is refused
at submission when it cannot.
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


@dataclass
class _Walk:
    """What one walk over a graph found: each chained vertex's head, why each other vertex is not
    chained, and the vertices whose result is kept (asked for or chosen), in reversed topological order."""

    head_of: dict[str, str]
    refusals: dict[str, str]
    kept: list[str]


def _chaining(graph: JobGraph) -> _Walk:
    walk = _Walk(head_of={}, refusals={}, kept=[])
    # task or kept vertex → the one-subtask task its work would have run in, had every `auto`
    # result read by several vertices been chained (`auto` keeps a result only there)
    slot_of: dict[str, str] = {}
    # reversed topological order: every consumer's task is known before its producers are looked at
    for vertex_id in reversed(graph.topological_order()):
        vertex = graph.vertex(vertex_id)
        consumers = graph.consumers(vertex_id)
        reason = why_not_chained(graph, vertex, walk.head_of)
        if reason is None and (len(consumers) == 1 or vertex.result is ResultKind.CHAINED):
            walk.head_of[vertex_id] = walk.head_of.get(consumers[0], consumers[0])
            continue
        if reason is not None:
            walk.refusals[vertex_id] = reason
        slots = {slot_of.get(walk.head_of.get(c, c)) for c in consumers}
        slot = slots.pop() if len(slots) == 1 else None
        if (
            vertex.result is ResultKind.AUTO
            and graph.results is ResultsMode.AUTO
            and slot is not None
            and graph.environment_of(vertex_id) == graph.environment_of(slot)
        ):
            walk.kept.append(vertex_id)  # chaining would have run it in `slot`'s task
            slot_of[vertex_id] = slot
            continue
        if vertex.result is ResultKind.KEPT:
            walk.kept.append(vertex_id)
        if vertex.parallelism == 1:  # a task of one subtask of its own
            slot_of[vertex_id] = vertex_id
    return walk


def plan_results(graph: JobGraph) -> tuple[Chains, tuple[str, ...]]:
    """The chains of `graph` (validated: ids unique, inputs known, acyclic), and its vertices whose
    result is kept on their TaskExecutor (asked for, or chosen by `auto`), in topological order."""
    walk = _chaining(graph)
    kept = tuple(reversed(walk.kept))
    if not walk.head_of:
        return NO_CHAINS, kept
    members: dict[str, list[str]] = {}
    for vertex_id in graph.topological_order():
        if vertex_id in walk.head_of:
            members.setdefault(walk.head_of[vertex_id], []).append(vertex_id)
    chains = Chains(members={head: tuple(ids) for head, ids in members.items()}, head_of=walk.head_of)
    return chains, kept


def refused_chains(graph: JobGraph) -> dict[str, list[str]]:
    """The JobGraph fields of vertices that ask to be chained and cannot be, with why: `vertices[i].result`."""
    refusals = _chaining(graph).refusals
    return {
        f"vertices[{index}].result": [f"vertex {vertex.id!r} cannot be chained into its consumer: {reason}"]
        for index, vertex in enumerate(graph.vertices)
        if vertex.result is ResultKind.CHAINED and (reason := refusals.get(vertex.id)) is not None
    }
