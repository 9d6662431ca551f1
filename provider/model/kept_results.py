"""Results kept on the TaskExecutor that made them, and the tasks that must share that TaskExecutor.

A vertex whose result is kept (it asks for `"result": "kept"`, or `auto` chose it:
`sparkdispatch.model.chaining`) runs as a task of its own and writes its result to the
local disk of the TaskExecutor that ran it (`<storage.dir>/te-work/<id>/kept-results`), not to the
results directory. A slot reads only its own TaskExecutor's local files, so every task that reads a
kept result runs on the TaskExecutor that holds it, and so does every subtask of its producer (a
consumer reads the whole result). Kept results therefore tie tasks into *co-location groups*
(Flink's `CoLocationGroup`): the connected parts of the graph of tasks joined by kept results. All
subtasks of a group run on one TaskExecutor: the one its first subtask was deployed to.

Rules for a vertex that asks for it, checked at submission (each refusal names `vertices[i].result`):

1. a kept vertex has a consumer: a sink's result is the job's output, which is durable;
2. the job does not ask for durable results (`"results": "durable"`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkdispatch.model.chaining import Chains, ResultKind, ResultsMode

if TYPE_CHECKING:
    from sparkdispatch.model.job_graph import JobGraph


@dataclass(frozen=True)
class KeptGroups:
    """The kept results of one job and the co-location groups of the tasks that make and read them."""

    #: vertices whose result is kept on their TaskExecutor
    kept: frozenset[str]
    #: task (head vertex id) → its group's number; tasks in no group are absent
    group_of: Mapping[str, int]

    def is_kept(self, vertex_id: str) -> bool:
        """`vertex_id`'s result is kept on the TaskExecutor that made it."""
        return vertex_id in self.kept

    def group(self, head: str) -> int | None:
        """The co-location group of the task headed by `head`, if it has one."""
        return self.group_of.get(head)


NO_KEPT = KeptGroups(kept=frozenset(), group_of={})


def plan_kept_groups(graph: JobGraph, chains: Chains, kept: Iterable[str]) -> KeptGroups:
    """The co-location groups of `graph` (validated), whose chains are `chains` and whose kept
    results are `kept` (both from `sparkdispatch.model.chaining.plan_results`)."""
    kept = list(kept)
    if not kept:
        return NO_KEPT
    parent: dict[str, str] = {}

    def root(task: str) -> str:
        while parent.setdefault(task, task) != task:
            parent[task] = parent[parent[task]]
            task = parent[task]
        return task

    for producer in kept:
        for consumer in graph.consumers(producer):
            parent[root(chains.head_of.get(consumer, consumer))] = root(producer)
    numbers: dict[str, int] = {}
    group_of = {
        task: numbers.setdefault(root(task), len(numbers)) for task in graph.topological_order() if task in parent
    }
    return KeptGroups(kept=frozenset(kept), group_of=group_of)


def refused_kept(graph: JobGraph) -> dict[str, list[str]]:
    """The JobGraph fields of vertices that ask for a kept result and cannot have one, with why."""
    refusals: dict[str, list[str]] = {}
    for index, vertex in enumerate(graph.vertices):
        if vertex.result is not ResultKind.KEPT:
            continue
        if graph.results is ResultsMode.DURABLE:
            reason = 'the job asks for durable results ("results": "durable")'
        elif not graph.consumers(vertex.id):
            reason = "no vertex reads its result (a sink's result is the job's output, which is durable)"
        else:
            continue
        refusals[f"vertices[{index}].result"] = [
            f"vertex {vertex.id!r} cannot keep its result on its TaskExecutor: {reason}"
        ]
    return refusals
