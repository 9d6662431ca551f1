"""A job's shapes in the REST API (and so in the web UI), made from its overview or snapshot.

Each function answers one entry of the REST contract (docs/rest-api.md); times are epoch ms.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sparkdispatch.storage.attempt_logs import LogSize
from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.model.job_result import VertexResult
from sparkdispatch.model.snapshot import JobOverview, JobSnapshot, VertexSnapshot

#: A job of more vertices is shaped, dumped and rendered in a thread: tens of ms that must not stall the loop.
LARGE_JOB_VERTICES = 100


def job_summary(job: JobOverview) -> dict[str, Any]:
    """An entry of `GET /jobs`; `end_time` and `duration_ms` are None while the job runs."""
    ended = job.end_time is not None
    return {"id": job.job_id, "name": job.name, "status": job.status.value, "start_time": job.start_time,
            "end_time": job.end_time, "duration_ms": job.duration_ms if ended else None}


def flink_job_details(job: JobOverview) -> dict[str, Any]:
    """An entry of `GET /jobs/overview`: Flink's JobDetails, field for field (`end-time` -1 while running)."""
    tasks = {state.value.lower(): job.tasks.get(state, 0) for state in ExecutionState}
    tasks["total"] = sum(job.tasks.values())
    return {
        "jid": job.job_id,
        "name": job.name,
        "state": job.status.value,
        "start-time": job.start_time,
        "end-time": job.end_time if job.end_time is not None else -1,
        "duration": job.duration_ms,
        "last-modification": job.last_modification,
        "pending-operators": 0,  # the whole graph is built up front; no vertex waits to be created
        "tasks": tasks,
    }


def job_details(job: JobSnapshot) -> dict[str, Any]:
    """The body of `GET /jobs/{job_id}`; `end_time` is None while the job runs."""
    overview = job.overview
    return {"id": overview.job_id, "name": overview.name, "status": overview.status.value,
            "start_time": overview.start_time, "end_time": overview.end_time,
            "vertices": [_vertex(vertex) for vertex in job.vertices],
            "repairs": [repair.to_dict() for repair in job.repairs]}


def vertex_result(job_id: str, job_status: JobStatus, vertex_id: str, vertex: VertexResult) -> dict[str, Any]:
    """The body of `GET /jobs/{job_id}/vertices/{vertex_id}`: the job's status and the vertex's
    outcome so far (a VertexResult: `rows`, `result_path` and `partitions` count its finished subtasks)."""
    return {"job_id": job_id, "job_status": job_status.value, "vertex": vertex_id, "result": vertex.to_dict()}


def job_progress(job_id: str, job_status: JobStatus, vertices: Mapping[str, VertexResult],
                 logs: Mapping[str, Sequence[LogSize]]) -> dict[str, Any]:
    """The body of `GET /jobs/{job_id}/progress`: the job's status, and per vertex its outcome so
    far and the size of each subtask's latest attempt log (so a follower reads only what grew)."""
    return {"job_id": job_id, "job_status": job_status.value,
            "vertices": [{"vertex": vertex_id, "result": result.to_dict(),
                          "logs": [size.to_dict() for size in logs.get(vertex_id, ())]}
                         for vertex_id, result in vertices.items()]}


def _vertex(vertex: VertexSnapshot) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": vertex.id,
        "state": vertex.state.value,
        "parallelism": vertex.parallelism,
        "inputs": list(vertex.inputs),
        "subtasks": [{"index": s.index, "state": s.state.value, "attempt": s.attempt,
                      "taskmanager": s.task_executor_id} for s in vertex.subtasks],
    }
    if vertex.attempts is not None:
        body["attempts"] = vertex.attempts
    return body
