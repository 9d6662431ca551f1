"""Repairs: some vertices of an ended job run again, the results of the rest are reused.

A repair (Databricks' `repair_run`) belongs to the same job and the same id. It runs again the
vertices asked for and every consumer downstream of them (their inputs change), the vertices
chained into the same tasks, and the producers of the kept results those tasks read (deleted at
the job's end; `rerun_closure`); the job then runs
to its end as a recovered one does: the other vertices keep their FINISHED subtasks and
partitions (`JobMaster` restores them from the progress), and any of them that had not finished
(failed, cancelled, never started) runs its unfinished subtasks.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from sparkdispatch.errors import InvalidRequest
from sparkdispatch.model.chaining import plan_results
from sparkdispatch.model.codec import Shape
from sparkdispatch.model.states import JobStatus
from sparkdispatch.model.job_graph import JobGraph


@dataclass(frozen=True)
class Repair(Shape):
    """One repair of a job: its number (1 for the first), the vertices asked for, the vertices
    it runs again (topological order), when it was asked for (epoch ms), and how the job ended
    after it (None while it runs). Its JSON form is also how the stores keep it."""

    number: int
    requested: tuple[str, ...]
    vertices: tuple[str, ...]
    requested_at: int
    status: JobStatus | None = None

    def ended(self, status: JobStatus) -> Repair:
        return Repair(self.number, self.requested, self.vertices, self.requested_at, status)

    def covers(self, vertex_ids: Collection[str]) -> bool:
        """Whether this repair runs every one of `vertex_ids` again."""
        return set(vertex_ids) <= set(self.vertices)


@dataclass(frozen=True)
class RepairAnswer(Shape):
    """The answer to a repair request (`POST /jobs/{id}/repair`): whether this call started the
    repair (False: the job already runs a repair that covers the vertices asked for), and the repair."""

    job_id: str
    created: bool
    repair: Repair


def check_requested(graph: JobGraph, requested: Sequence[str]) -> tuple[str, ...]:
    """The requested vertex ids without repeats; `InvalidRequest` naming those the graph lacks."""
    if not requested:
        raise InvalidRequest("repair request", {"vertices": ["name at least one vertex to run again"]})
    known = {vertex.id for vertex in graph.vertices}
    unknown = [v for v in requested if v not in known]
    if unknown:
        raise InvalidRequest(
            "repair request",
            {
                "vertices": [
                    f"job {graph.job_id} has no vertex {', '.join(map(repr, unknown))}; its vertices are "
                    f"{', '.join(graph.topological_order())}"
                ]
            },
        )
    return tuple(dict.fromkeys(requested))


def rerun_closure(graph: JobGraph, requested: Collection[str]) -> set[str]:
    """`requested` and every consumer downstream of them: the vertices whose results a repair
    replaces (a consumer reads an input that changes). A vertex runs in its task's attempt, so
    the vertices chained into that task run again with it. A result kept on a TaskExecutor was
    deleted when the job ended, so its producer runs again for a task that reads it, and the
    producer's other readers with it."""
    chains, kept = plan_results(graph)
    rerun: set[str] = set()
    pending = list(requested)
    while pending:
        vertex_id = pending.pop()
        if vertex_id in rerun:
            continue
        rerun.add(vertex_id)
        head = chains.head_of.get(vertex_id, vertex_id)
        task = (head, *chains.chained_into(head))
        kept_inputs = [name for member in task for name in graph.vertex(member).inputs if name in kept]
        pending.extend((*graph.consumers(vertex_id), *task, *kept_inputs))
    return rerun


def vertices_to_run(graph: JobGraph, replaced: Collection[str], complete: Collection[str]) -> tuple[str, ...]:
    """What a repair runs, in topological order: the `replaced` vertices, and every other one not
    `complete` (every subtask FINISHED), since a job ends FINISHED only once all of them have."""
    return tuple(v for v in graph.topological_order() if v in replaced or v not in complete)
