"""What the Dispatcher needs to repair an ended job: the plan, from the job's archive entry, and
the writes that make the repair survive a failover.

The writes go in an order a new leader's recovery reads safely at every step
(`sparkdispatch.dispatcher.recovery`): the progress the repair keeps, with the repair record
(`ProgressStore.start_repair`); the JobGraph; then the job's JobResult is removed. Until the last
write the job is still terminated for a new leader (its JobResult), which removes the other two
as leftovers; after it, the stored graph whose progress names a repair newer than the archive's
resumes as that repair. The caller hears of the repair only once all three are written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sparkdispatch.dispatcher.archive import ArchivedJob
from sparkdispatch.errors import RepairNotPossible, UnknownJob
from sparkdispatch.ha.job_result_store import FileSystemJobResultStore
from sparkdispatch.ha.jobgraph_store import JobGraphStore
from sparkdispatch.ha.progress_store import JobProgress, ProgressStore
from sparkdispatch.model.job_graph import JobGraph
from sparkdispatch.model.repair import Repair, check_requested, rerun_closure, vertices_to_run


@dataclass(frozen=True)
class RepairPlan:
    """The graph to run again, the progress it starts from (its `repair` set), and the repairs
    of the job so far, this one last."""

    graph: JobGraph
    progress: JobProgress
    repairs: tuple[Repair, ...]


def plan_repair(
    job_id: str, archived: ArchivedJob | None, requested: Sequence[str], *, results_deleted: bool, now_ms: int
) -> RepairPlan:
    """The repair of `requested` vertices of an archived job; `UnknownJob`, `InvalidRequest` for
    vertices it does not have, `RepairNotPossible` when its graph or results are gone."""
    if archived is None:
        raise UnknownJob(job_id)
    graph, finished = archived.graph, archived.finished
    if graph is None or finished is None:
        raise RepairNotPossible(
            job_id,
            "its graph and finished subtasks were not kept (it ended without running, "
            "its JobResult alone was recovered, or an older release archived it); "
            "submit it again",
        )
    if results_deleted:
        raise RepairNotPossible(
            job_id,
            "results.retention is `delete`, so the results a repair reuses were "
            "deleted; set results.retention: keep to repair jobs, or submit it again",
        )
    asked = check_requested(graph, requested)
    replaced = rerun_closure(graph, asked)
    parallelism = {vertex.id: vertex.parallelism for vertex in graph.vertices}
    kept = {
        vertex_id: dict(subtasks)
        for vertex_id, subtasks in finished.items()
        if vertex_id in parallelism and vertex_id not in replaced
    }
    complete = JobProgress(job_id, kept).complete_vertices(parallelism)
    repair = Repair(len(archived.snapshot.repairs) + 1, asked, vertices_to_run(graph, replaced, complete), now_ms)
    return RepairPlan(graph, JobProgress(job_id, kept, repair=repair), (*archived.snapshot.repairs, repair))


async def persist_repair(
    session_id: str,
    plan: RepairPlan,
    *,
    progress_store: ProgressStore,
    jobgraph_store: JobGraphStore,
    job_result_store: FileSystemJobResultStore,
) -> None:
    """Write the repair (see the module docstring for the order); `LeadershipLost` if this
    master no longer leads."""
    repair = plan.progress.repair
    assert repair is not None
    job_id = plan.progress.job_id
    await progress_store.start_repair(session_id, job_id, plan.progress.finished, repair)
    await jobgraph_store.put(session_id, plan.graph)
    await job_result_store.remove(session_id, job_id)
