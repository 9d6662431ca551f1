"""Read-only pictures of a job, taken from its ExecutionGraph or rebuilt from its JobResult.

A `JobOverview` is a job's headline (status, times, subtasks per state): cheap, kept for every
job, enough for the job lists. A `JobSnapshot` adds each vertex and its subtasks. The REST
views (`sparkdispatch.rest.views`) turn both into the API's shapes; the archive stores the
snapshot of each finished job (`to_dict` / `from_dict`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.model.job_result import JobResult
from sparkdispatch.model.repair import Repair


@dataclass(frozen=True)
class JobOverview:
    """A job's status and times (epoch ms) and how many of its subtasks are in each state.

    `end_time` is None while the job runs; `duration_ms` then counts up to when the overview was
    taken. A job known from its JobResult alone counts each vertex as one task.
    """

    job_id: str
    name: str
    status: JobStatus
    start_time: int
    end_time: int | None
    duration_ms: int
    last_modification: int
    tasks: Mapping[ExecutionState, int] = field(default_factory=dict)

    @classmethod
    def of_ended(
        cls, result: JobResult, *, duration_ms: int, last_modification: int, tasks: Mapping[ExecutionState, int]
    ) -> JobOverview:
        """The overview of an ended job: its id, name, status and times from its JobResult."""
        return cls(
            job_id=result.job_id,
            name=result.name,
            status=result.status,
            start_time=result.start_time,
            end_time=result.end_time,
            duration_ms=duration_ms,
            last_modification=last_modification,
            tasks=tasks,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "name": self.name,
            "status": self.status.value,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "duration_ms": self.duration_ms,
            "last_modification": self.last_modification,
            "tasks": {state.value: count for state, count in self.tasks.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobOverview:
        end_time = data["end_time"]
        return cls(
            job_id=str(data["job_id"]),
            name=str(data["name"]),
            status=JobStatus(data["status"]),
            start_time=int(data["start_time"]),
            end_time=None if end_time is None else int(end_time),
            duration_ms=int(data["duration_ms"]),
            last_modification=int(data["last_modification"]),
            tasks={ExecutionState(state): int(count) for state, count in data["tasks"].items()},
        )


@dataclass(frozen=True)
class SubtaskSnapshot:
    """One subtask: its index, the state and number (from 0) of its current attempt, where it runs."""

    index: int
    state: ExecutionState
    attempt: int
    task_executor_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "state": self.state.value,
            "attempt": self.attempt,
            "task_executor_id": self.task_executor_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SubtaskSnapshot:
        task_executor_id = data["task_executor_id"]
        return cls(
            index=int(data["index"]),
            state=ExecutionState(data["state"]),
            attempt=int(data["attempt"]),
            task_executor_id=None if task_executor_id is None else str(task_executor_id),
        )


@dataclass(frozen=True)
class VertexSnapshot:
    """One vertex: its state (from its subtasks'), inputs and subtasks.

    A vertex known from the JobResult alone has no `parallelism`, inputs or subtasks, and
    carries the JobResult's `attempts` instead.
    """

    id: str
    state: ExecutionState
    parallelism: int | None
    inputs: tuple[str, ...] = ()
    subtasks: tuple[SubtaskSnapshot, ...] = ()
    attempts: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state.value,
            "parallelism": self.parallelism,
            "inputs": list(self.inputs),
            "subtasks": [s.to_dict() for s in self.subtasks],
            "attempts": self.attempts,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VertexSnapshot:
        parallelism, attempts = data["parallelism"], data["attempts"]
        return cls(
            id=str(data["id"]),
            state=ExecutionState(data["state"]),
            parallelism=None if parallelism is None else int(parallelism),
            inputs=tuple(str(i) for i in data["inputs"]),
            subtasks=tuple(SubtaskSnapshot.from_dict(s) for s in data["subtasks"]),
            attempts=None if attempts is None else int(attempts),
        )


@dataclass(frozen=True)
class JobSnapshot:
    """A job's overview, its vertices in topological order and its repairs (the last one may run)."""

    overview: JobOverview
    vertices: tuple[VertexSnapshot, ...] = ()
    repairs: tuple[Repair, ...] = ()

    @property
    def job_id(self) -> str:
        return self.overview.job_id

    @classmethod
    def from_result(cls, result: JobResult) -> JobSnapshot:
        """What a JobResult alone tells of its job (a job recovered from its dirty JobResult)."""
        tasks: dict[ExecutionState, int] = {}
        for vertex in result.vertices.values():
            tasks[vertex.state] = tasks.get(vertex.state, 0) + 1
        overview = JobOverview.of_ended(
            result, duration_ms=result.duration_ms, last_modification=result.end_time, tasks=tasks
        )
        vertices = tuple(
            VertexSnapshot(id=vertex_id, state=vertex.state, parallelism=None, attempts=vertex.attempts)
            for vertex_id, vertex in result.vertices.items()
        )
        return cls(overview, vertices)

    def to_dict(self) -> dict[str, Any]:
        return {
            "overview": self.overview.to_dict(),
            "vertices": [v.to_dict() for v in self.vertices],
            "repairs": [r.to_dict() for r in self.repairs],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobSnapshot:
        return cls(
            JobOverview.from_dict(data["overview"]),
            tuple(VertexSnapshot.from_dict(v) for v in data["vertices"]),
            tuple(Repair.from_dict(r) for r in data.get("repairs", ())),
        )
