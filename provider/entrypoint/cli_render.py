"""What the `sparkdispatch` client commands print: a job as a readable table, a vertex's progress line.

Plain functions of the REST API's shapes (`sparkdispatch.model.rest_shapes`): `GET /jobs/{id}`
and, once the job ended, its JobResult.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from sparkdispatch.model.job_result import JobResult
from sparkdispatch.model.rest_shapes import JobDetails, SubtaskDetails, VertexDetails
from sparkdispatch.model.states import ExecutionState


def vertex_progress(vertex: VertexDetails) -> str:
    """`RUNNING      1/2 subtasks finished, attempt 1` for one vertex of `GET /jobs/{id}`."""
    total = len(vertex.subtasks) or vertex.parallelism or 1
    return (
        f"{vertex.state.value:<12} {_finished(vertex.subtasks)}/{total} subtasks finished, "
        f"attempt {_latest_attempt(vertex.subtasks)}"
    )


def _finished(subtasks: Sequence[SubtaskDetails]) -> int:
    return sum(1 for subtask in subtasks if subtask.state is ExecutionState.FINISHED)


def _latest_attempt(subtasks: Sequence[SubtaskDetails]) -> int:
    """The highest attempt of the subtasks, counted from 1."""
    return max((subtask.attempt for subtask in subtasks), default=0) + 1


def job_table(details: JobDetails, result: JobResult | None) -> str:
    """A job's status, times, a row per vertex (subtasks, attempts, rows, result) and its failure."""
    lines = [
        f"job {details.id}  {details.name}  {details.status.value}",
        f"started {_time(details.start_time)}   ended {_time(details.end_time)}"
        f"   took {_duration(details.start_time, details.end_time)}",
        "",
    ]
    outcomes = result.vertices if result is not None else {}
    rows = [("VERTEX", "STATE", "SUBTASKS", "ATTEMPTS", "ROWS", "RESULT")]
    for vertex in details.vertices:
        outcome = outcomes.get(vertex.id)
        attempts = (outcome.attempts if outcome is not None else 0) or _latest_attempt(vertex.subtasks)
        rows.append(
            (
                vertex.id,
                vertex.state.value,
                f"{_finished(vertex.subtasks)}/{len(vertex.subtasks)}",
                str(attempts),
                _or_dash(outcome.rows if outcome is not None else None),
                _or_dash(outcome.result_path if outcome is not None else None),
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    lines += [
        "  ".join(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in rows
    ]
    if result is not None and result.failure is not None:
        lines += ["", f"failure: {result.failure.cls}: {result.failure.message}"]
        for vertex_id, vertex_outcome in outcomes.items():
            if vertex_outcome.failure is not None:
                lines.append(f"  {vertex_id}: {vertex_outcome.failure.cls}: {vertex_outcome.failure.message}")
    for repair in details.repairs:
        lines.append(
            f"repair {repair.number}: {', '.join(repair.vertices)} "
            f"{repair.status.value if repair.status is not None else 'RUNNING'}"
        )
    return "\n".join(lines)


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def _time(epoch_ms: int | None) -> str:
    if epoch_ms is None or epoch_ms <= 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch_ms / 1000))


def _duration(start_ms: int, end_ms: int | None) -> str:
    if start_ms <= 0:
        return "-"
    end = end_ms if end_ms is not None and end_ms > 0 else int(time.time() * 1000)
    return f"{max(0, end - start_ms) / 1000:.1f} s" + ("" if end_ms else " so far")
