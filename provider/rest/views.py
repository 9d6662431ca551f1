"""A job's answers in the REST API (and so in the web UI), filled from its overview or snapshot.

Each function fills one shape of the REST contract (`sparkdispatch.model.rest_shapes`,
docs/rest-api.md); times are epoch ms.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sparkdispatch.model.job_result import VertexResult
from sparkdispatch.model.rest_shapes import (
    AttemptLog,
    FlinkJobDetails,
    FlinkTaskCounts,
    JobDetails,
    JobProgress,
    JobSummary,
    SubtaskLogSize,
    SubtaskDetails,
    VertexDetails,
    VertexOutcome,
    VertexProgress,
)
from sparkdispatch.model.snapshot import JobOverview, JobSnapshot, VertexSnapshot
from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.storage.attempt_logs import LogPiece, LogSize

#: A job of more vertices is shaped, dumped and rendered in a thread: tens of ms that must not stall the loop.
LARGE_JOB_VERTICES = 100


def job_summary(job: JobOverview) -> JobSummary:
    """An entry of `GET /jobs`; `end_time` and `duration_ms` are None while the job runs."""
    ended = job.end_time is not None
    return JobSummary(
        id=job.job_id,
        name=job.name,
        status=job.status,
        start_time=job.start_time,
        end_time=job.end_time,
        duration_ms=job.duration_ms if ended else None,
    )


def flink_job_details(job: JobOverview) -> FlinkJobDetails:
    """An entry of `GET /jobs/overview`: Flink's JobDetails, field for field (`end-time` -1 while running)."""
    return FlinkJobDetails(
        jid=job.job_id,
        name=job.name,
        state=job.status,
        start_time=job.start_time,
        end_time=job.end_time if job.end_time is not None else -1,
        duration=job.duration_ms,
        last_modification=job.last_modification,
        pending_operators=0,  # the whole graph is built up front; no vertex waits to be created
        tasks=FlinkTaskCounts.of(job.tasks),
    )


def job_details(job: JobSnapshot) -> JobDetails:
    """The body of `GET /jobs/{job_id}`; `end_time` is None while the job runs."""
    overview = job.overview
    return JobDetails(
        id=overview.job_id,
        name=overview.name,
        status=overview.status,
        start_time=overview.start_time,
        end_time=overview.end_time,
        vertices=tuple(_vertex(vertex) for vertex in job.vertices),
        repairs=job.repairs,
    )


def vertex_result(job_id: str, job_status: JobStatus, vertex_id: str, vertex: VertexResult) -> VertexOutcome:
    """The body of `GET /jobs/{job_id}/vertices/{vertex_id}`: the job's status and the vertex's
    outcome so far (a VertexResult: `rows`, `result_path` and `partitions` count its finished subtasks)."""
    return VertexOutcome(job_id=job_id, job_status=job_status, vertex=vertex_id, result=vertex)


def attempt_log(
    job_id: str, job_status: JobStatus, vertex_id: str, vertex_state: ExecutionState, piece: LogPiece
) -> AttemptLog:
    """The body of `GET /jobs/{job_id}/vertices/{vertex_id}/log`: a piece of one attempt's log."""
    return AttemptLog(
        job_id=job_id,
        job_status=job_status,
        vertex=vertex_id,
        vertex_state=vertex_state,
        subtask=piece.subtask,
        attempt=piece.attempt,
        offset=piece.offset,
        next_offset=piece.next_offset,
        text=piece.text,
    )


def job_progress(
    job_id: str, job_status: JobStatus, vertices: Mapping[str, VertexResult], logs: Mapping[str, Sequence[LogSize]]
) -> JobProgress:
    """The body of `GET /jobs/{job_id}/progress`: the job's status, and per vertex its outcome so
    far and the size of each subtask's latest attempt log (so a follower reads only what grew)."""
    return JobProgress(
        job_id=job_id,
        job_status=job_status,
        vertices=tuple(
            VertexProgress(
                vertex=vertex_id,
                result=result,
                logs=tuple(
                    SubtaskLogSize(subtask=size.subtask, attempt=size.attempt, size=size.size)
                    for size in logs.get(vertex_id, ())
                ),
            )
            for vertex_id, result in vertices.items()
        ),
    )


def _vertex(vertex: VertexSnapshot) -> VertexDetails:
    return VertexDetails(
        id=vertex.id,
        state=vertex.state,
        parallelism=vertex.parallelism,
        inputs=vertex.inputs,
        # positional: a large job has 100,000 subtasks, and keywords cost a third more here
        subtasks=tuple(SubtaskDetails(s.index, s.state, s.attempt, s.task_executor_id) for s in vertex.subtasks),
        attempts=vertex.attempts,
    )
