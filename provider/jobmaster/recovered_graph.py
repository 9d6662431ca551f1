"""The progress a resumed or repaired run keeps: recorded as subtasks finish, restored into the
ExecutionGraph a new run of the job builds.

A JobMaster records each FINISHED subtask in the ProgressStore (`record_finished`). A new leader
resumes a job with the subtasks a former leader saw finish (its `JobProgress`); a repair runs an
ended job again with the subtasks it keeps. Both start those subtasks FINISHED (`restore`), and
`finished` is what a later repair of the job keeps. A large job's graph is built in a thread
(`build_execution_graph`) and handed to its JobMaster on the loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sparkdispatch.errors import LeadershipLost
from sparkdispatch.ha.progress_store import Finished, JobProgress, ProgressStore, SubtaskProgress
from sparkdispatch.jobmaster.execution import ExecutionVertex, SubtaskId
from sparkdispatch.jobmaster.execution_graph import ExecutionGraph
from sparkdispatch.jobmaster.long_lived import LONG_LIVED_GRAPHS
from sparkdispatch.model.job_graph import JobGraph
from sparkdispatch.model.states import ExecutionState

log = logging.getLogger(__name__)


def build_execution_graph(
    graph: JobGraph, recovered_progress: JobProgress | None = None, *, clock: Callable[[], float] = time.time
) -> ExecutionGraph:
    """The ExecutionGraph of `graph`, with the subtasks `recovered_progress` names restored FINISHED.

    A large job's takes a second or so (100,000 subtasks: 0.5-2 s on a 2-core machine, by its load); it
    reads only its immutable arguments and shares what it builds with nobody, so the master calls
    it in a thread and hands the finished graph to the JobMaster on the loop (`execution_graph=`).
    """
    execution_graph = LONG_LIVED_GRAPHS.build(lambda: ExecutionGraph(graph, clock=clock), subtasks=graph.subtask_count)
    if recovered_progress is not None:
        restore(execution_graph, recovered_progress)
    return execution_graph


def restore(execution_graph: ExecutionGraph, progress: JobProgress) -> list[SubtaskId]:
    """Mark the subtasks a former leader saw finish as FINISHED (CREATED → RECONCILING → FINISHED).

    Entries naming no subtask of this graph are skipped and returned as not restored; entries a
    former leader recorded for a vertex it chained, and this graph keeps, are not restored (the
    vertex runs again).
    """
    skipped: list[SubtaskId] = []
    restored = 0
    # chained subtasks are restored with their head, or run again with it: all of them are known
    # before any head is restored, whatever order the store lists them in
    chained: dict[SubtaskId, SubtaskProgress] = {}
    tasks: list[tuple[ExecutionVertex, SubtaskProgress]] = []
    # A kept task's FINISHED entry with rows has its result's path; one without was a chained
    # subtask's, counted in its head's plan (a release before 2026-11-29 chained what `auto` now
    # keeps): restored, it would read as a task that returned nothing.
    replanned: list[SubtaskId] = []
    for vertex_id, subtasks in progress.finished.items():
        for index, entry in subtasks.items():
            subtask_id = SubtaskId(vertex_id, int(index))
            try:
                ev = execution_graph.subtask(subtask_id)
            except KeyError:
                skipped.append(subtask_id)
                continue
            if execution_graph.chains.is_chained(vertex_id):
                chained[subtask_id] = entry
            elif execution_graph.kept.is_kept(vertex_id) and entry.result_path is None and entry.rows is not None:
                replanned.append(subtask_id)
            else:
                tasks.append((ev, entry))
    if replanned:
        log.warning(
            "job %s: recovered progress records %s as chained into another task, which this master "
            "keeps on a TaskExecutor (an earlier release planned the job); they run again",
            execution_graph.job_id,
            ", ".join(map(str, replanned)),
        )
    for ev, entry in tasks:
        ev.current.transition(ExecutionState.RECONCILING)
        ev.current.transition(ExecutionState.FINISHED)
        ev.current.keep(entry)
        ev.deployed_attempts = 1
        ev.progress_recorded = True
        ev.recovered = True
        restored += 1
        for member in execution_graph.chain_members(ev):
            kept = chained.get(member.id)
            member.chained_rows = kept.rows if kept is not None else None
            member.deployed_attempts = 1
            member.progress_recorded = True
            member.recovered = True
            restored += 1
    execution_graph.restored = (restored, tuple(skipped))
    return skipped


def log_restored(graph: ExecutionGraph, session_id: str) -> None:
    """Log what `restore` kept of a former leader's progress, and the entries it could not place."""
    if graph.restored is None:
        return
    restored, skipped = graph.restored
    log.info(
        "job %s (session %s): %d subtask(s) finished before the failover; not run again",
        graph.job_id,
        session_id,
        restored,
    )
    if skipped:
        log.warning(
            "job %s (session %s): recovered progress names unknown subtasks %s; ignored",
            graph.job_id,
            session_id,
            ", ".join(map(str, skipped)),
        )


def finished(execution_graph: ExecutionGraph) -> Finished:
    """Every FINISHED subtask's result and rows (what a repair of the job keeps)."""
    kept: Finished = {}
    for ev in execution_graph.subtasks():
        if ev.state is ExecutionState.FINISHED:
            kept.setdefault(ev.vertex.id, {})[ev.subtask_index] = execution_graph.progress_of(ev)
    return kept


async def record_finished(
    store: ProgressStore, session_id: str, job_id: str, ev: ExecutionVertex, progress: SubtaskProgress
) -> bool:
    """Write `ev`'s FINISHED attempt (its `progress`) to the ProgressStore; False when this master no
    longer leads (the next leader runs the subtask again). A failed write is logged and the job goes
    on: only a failover before the job ends would run this subtask again."""
    try:
        await store.record_subtask(session_id, job_id, ev.vertex.id, ev.subtask_index, progress)
    except LeadershipLost:
        log.warning(
            "job %s (session %s): %s finished but this master no longer leads; the next leader runs it again",
            job_id,
            session_id,
            ev.id,
        )
        return False
    except Exception:
        log.exception("job %s (session %s): recording %s as finished failed", job_id, session_id, ev.id)
    return True


async def record_task(
    store: ProgressStore, session_id: str, job_id: str, graph: ExecutionGraph, ev: ExecutionVertex
) -> bool:
    """Record `ev`'s FINISHED attempt and, before it, the subtasks chained into it (a failover that
    finds the head recorded finds them too); False when this master no longer leads."""
    for subtask in [*graph.chain_members(ev), ev]:
        if not await record_finished(store, session_id, job_id, subtask, graph.progress_of(subtask)):
            return False
    return True


def mark_recorded(graph: ExecutionGraph, ev: ExecutionVertex) -> None:
    """`ev` and the subtasks chained into it are in the ProgressStore."""
    for subtask in [*graph.chain_members(ev), ev]:
        subtask.progress_recorded = True
