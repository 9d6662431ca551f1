"""What the `sparkdispatch` client commands print: a job as a readable table, a vertex's progress line.

Plain functions of the REST API's shapes (docs/rest-api.md): `GET /jobs/{id}` and, once the job
ended, its JobResult.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any


def vertex_progress(vertex: Mapping[str, Any]) -> str:
    """`RUNNING      1/2 subtasks finished, attempt 1` for one vertex of `GET /jobs/{id}`."""
    subtasks: Sequence[Mapping[str, Any]] = vertex.get("subtasks") or []
    total = len(subtasks) or int(vertex.get("parallelism") or 1)
    return (f"{vertex.get('state', '?'):<12} {_finished(subtasks)}/{total} subtasks finished, "
            f"attempt {_latest_attempt(subtasks)}")


def _finished(subtasks: Sequence[Mapping[str, Any]]) -> int:
    return sum(1 for subtask in subtasks if subtask.get("state") == "FINISHED")


def _latest_attempt(subtasks: Sequence[Mapping[str, Any]]) -> int:
    """The highest attempt of the subtasks, counted from 1."""
    return max((int(subtask.get("attempt") or 0) for subtask in subtasks), default=0) + 1


def job_table(details: Mapping[str, Any], result: Mapping[str, Any] | None) -> str:
    """A job's status, times, a row per vertex (subtasks, attempts, rows, result) and its failure."""
    lines = [f"job {details.get('id')}  {details.get('name') or ''}  {details.get('status')}",
             f"started {_time(details.get('start_time'))}   ended {_time(details.get('end_time'))}"
             f"   took {_duration(details.get('start_time'), details.get('end_time'))}", ""]
    outcomes: Mapping[str, Mapping[str, Any]] = (result or {}).get("vertices") or {}
    rows = [("VERTEX", "STATE", "SUBTASKS", "ATTEMPTS", "ROWS", "RESULT")]
    for vertex in details.get("vertices") or []:
        outcome = outcomes.get(str(vertex.get("id")), {})
        subtasks = vertex.get("subtasks") or []
        attempts = outcome.get("attempts") or _latest_attempt(subtasks)
        rows.append((str(vertex.get("id")), str(vertex.get("state")), f"{_finished(subtasks)}/{len(subtasks)}",
                     str(attempts),
                     _or_dash(outcome.get("rows")), _or_dash(outcome.get("result_path"))))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
              for row in rows]
    failure = (result or {}).get("failure")
    if failure:
        lines += ["", f"failure: {failure.get('class')}: {failure.get('message')}"]
        for vertex_id, outcome in outcomes.items():
            if outcome.get("failure"):
                lines.append(f"  {vertex_id}: {outcome['failure'].get('class')}: {outcome['failure'].get('message')}")
    for repair in details.get("repairs") or []:
        lines.append(f"repair {repair.get('number')}: {', '.join(repair.get('vertices') or [])} "
                     f"{repair.get('status') or 'RUNNING'}")
    return "\n".join(lines)


def _or_dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _time(epoch_ms: Any) -> str:
    if not isinstance(epoch_ms, int) or epoch_ms <= 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch_ms / 1000))


def _duration(start_ms: Any, end_ms: Any) -> str:
    if not isinstance(start_ms, int) or start_ms <= 0:
        return "-"
    end = end_ms if isinstance(end_ms, int) and end_ms > 0 else int(time.time() * 1000)
    return f"{max(0, end - start_ms) / 1000:.1f} s" + ("" if end_ms else " so far")
