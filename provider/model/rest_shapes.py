"""The answers of the REST API (docs/rest-api.md), each declared once as a shape (`model.codec`).

The master's views fill them (`sparkdispatch.rest.views`), the OpenAPI document's schemas are
generated from them (`sparkdispatch.rest.openapi`), and the client parses the answers into them
(`sparkdispatch.client`), which the CLI, the web UI and the Airflow operators then read. Their
JSON forms are the contract: names with dashes where Flink's are (`/jobs/overview`), `null` where a
value is absent, `attempts` of a vertex only when known. A repair (`model.repair.Repair`), a
JobResult and a vertex's result (`model.job_result`) appear in them as the model declares them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from sparkdispatch.model.codec import Shape, wire
from sparkdispatch.model.job_graph import BLOB_KEY_PATTERN, JOB_ID_PATTERN
from sparkdispatch.model.job_result import JobResult, VertexResult
from sparkdispatch.model.protocol import ExecutionReport
from sparkdispatch.model.repair import Repair, RepairAnswer
from sparkdispatch.model.states import ExecutionState, JobStatus


@dataclass(frozen=True)
class Overview(Shape):
    """`GET /overview`: whether this master leads and which one does (its REST address, None when
    no master leads), the leader's TaskExecutors and slots, and its jobs by status (a standby
    reports the leader's counts when the leader answers it, else zeros)."""

    is_leader: bool
    leader: str | None
    taskmanagers: int
    slots_total: int
    slots_available: int
    jobs_running: int
    jobs_finished: int
    jobs_failed: int
    jobs_cancelled: int


@dataclass(frozen=True)
class JobSummary(Shape):
    """An entry of `GET /jobs`; `end_time` and `duration_ms` are None while the job runs."""

    id: str
    name: str
    status: JobStatus
    start_time: int
    end_time: int | None
    duration_ms: int | None


@dataclass(frozen=True)
class JobList(Shape):
    """`GET /jobs`: a page of the running and finished jobs, the most recently started first;
    `next` is the cursor of the following page (`?after=`), None on the last."""

    jobs: tuple[JobSummary, ...]
    next: str | None = None


@dataclass(frozen=True)
class FlinkTaskCounts(Shape):
    """Flink's task counts of a job: subtasks per ExecutionState (in its order), and their total."""

    created: int
    scheduled: int
    deploying: int
    initializing: int
    running: int
    finished: int
    canceling: int
    canceled: int
    failed: int
    reconciling: int
    total: int

    @classmethod
    def of(cls, counts: Mapping[ExecutionState, int]) -> FlinkTaskCounts:
        """The counts of `counts` (subtasks by state; a state it lacks counts 0)."""
        by_state = {state.value.lower(): counts.get(state, 0) for state in ExecutionState}
        return cls(**by_state, total=sum(counts.values()))


@dataclass(frozen=True)
class FlinkJobDetails(Shape):
    """An entry of `GET /jobs/overview`: Flink's JobDetails, field for field (Flink's CLI reads it)."""

    jid: str
    name: str
    state: JobStatus
    start_time: int = field(metadata=wire("start-time"))
    end_time: int = field(metadata=wire("end-time", description="-1 while the job runs"))
    duration: int
    last_modification: int = field(metadata=wire("last-modification"))
    pending_operators: int = field(metadata=wire("pending-operators"))
    tasks: FlinkTaskCounts


@dataclass(frozen=True)
class FlinkJobList(Shape):
    """`GET /jobs/overview`: the jobs in Flink's shape."""

    jobs: tuple[FlinkJobDetails, ...]


@dataclass(frozen=True)
class SubtaskDetails(Shape):
    """One subtask of a vertex: the state and number (from 0) of its current attempt, and the
    TaskExecutor it runs on (None before it is deployed)."""

    index: int
    state: ExecutionState
    attempt: int
    taskmanager: str | None


@dataclass(frozen=True)
class VertexDetails(Shape):
    """One vertex of a job: its state, parallelism, inputs and subtasks. A vertex known from the
    JobResult alone has no parallelism, inputs or subtasks, and carries its `attempts`."""

    id: str
    state: ExecutionState
    parallelism: int | None
    inputs: tuple[str, ...]
    subtasks: tuple[SubtaskDetails, ...]
    attempts: int | None = field(
        default=None, metadata=wire(omit_none=True, description="of a job known only from its JobResult")
    )


@dataclass(frozen=True)
class JobDetails(Shape):
    """`GET /jobs/{job_id}`: a job's status and times (`end_time` None while it runs), its vertices
    in topological order and its repairs (the last one may run)."""

    id: str
    name: str
    status: JobStatus
    start_time: int
    end_time: int | None
    vertices: tuple[VertexDetails, ...]
    repairs: tuple[Repair, ...]


@dataclass(frozen=True)
class VertexOutcome(Shape):
    """`GET /jobs/{job_id}/vertices/{vertex_id}`: the job's status and the vertex's outcome so far
    (its `rows`, `result_path` and `partitions` count its finished subtasks)."""

    job_id: str
    job_status: JobStatus
    vertex: str
    result: VertexResult


@dataclass(frozen=True)
class SubtaskLogSize(Shape):
    """How long one subtask's latest attempt log is (`storage.attempt_logs.LogSize`)."""

    subtask: int
    attempt: int
    size: int = field(metadata=wire(description="bytes in the subtask's latest attempt log"))


@dataclass(frozen=True)
class VertexProgress(Shape):
    """A vertex of `GET /jobs/{job_id}/progress`: its outcome so far and its subtasks' log sizes."""

    vertex: str
    result: VertexResult
    logs: tuple[SubtaskLogSize, ...]


@dataclass(frozen=True)
class JobProgress(Shape):
    """`GET /jobs/{job_id}/progress`: the job's status and every vertex's progress, in the graph's
    order (one answer per poll for all the Airflow tasks that follow the job's vertices)."""

    job_id: str
    job_status: JobStatus
    vertices: tuple[VertexProgress, ...]

    def outcome(self, vertex: VertexProgress) -> VertexOutcome:
        """`vertex` as `GET /jobs/{job_id}/vertices/{vertex}` answers it."""
        return VertexOutcome(job_id=self.job_id, job_status=self.job_status, vertex=vertex.vertex, result=vertex.result)


@dataclass(frozen=True)
class AttemptLog(Shape):
    """`GET /jobs/{job_id}/vertices/{vertex_id}/log`: a piece of one attempt's log, the bytes from
    `offset` to `next_offset` as text, with the job's and the vertex's state."""

    job_id: str
    job_status: JobStatus
    vertex: str
    vertex_state: ExecutionState
    subtask: int
    attempt: int
    offset: int
    next_offset: int
    text: str


@dataclass(frozen=True)
class ResultStatus(Shape):
    """Whether a job's result is there: Flink's queue status."""

    id: Literal["IN_PROGRESS", "COMPLETED"]


@dataclass(frozen=True)
class ExecutionResult(Shape):
    """`GET /jobs/{job_id}/execution-result`: IN_PROGRESS, or COMPLETED with the JobResult."""

    status: ResultStatus
    job_execution_result: JobResult | None = field(default=None, metadata=wire(omit_none=True))

    @classmethod
    def of(cls, result: JobResult | None) -> ExecutionResult:
        """COMPLETED with `result`, or IN_PROGRESS while there is none."""
        if result is None:
            return cls(ResultStatus("IN_PROGRESS"))
        return cls(ResultStatus("COMPLETED"), result)

    @property
    def result(self) -> JobResult | None:
        """The JobResult once the job is globally terminal, None while it runs."""
        return self.job_execution_result if self.status.id == "COMPLETED" else None


@dataclass(frozen=True)
class TaskManagerSlot(Shape):
    """A slot of a TaskExecutor, and the allocation and job holding it (None while it is free)."""

    index: int
    allocation_id: str | None
    job_id: str | None


@dataclass(frozen=True)
class TaskManagerExecution(Shape):
    """An execution a TaskExecutor's last heartbeat listed (`model.protocol.ExecutionReport`); its
    `execution_id` is None in a viewer's answer, which shows what runs where, not the attempts' ids."""

    job_id: str
    execution_id: str | None
    state: ExecutionState

    @classmethod
    def of(cls, report: ExecutionReport) -> TaskManagerExecution:
        """The entry of a heartbeat's execution."""
        return cls(job_id=report.job_id, execution_id=report.execution_id, state=report.state)


@dataclass(frozen=True)
class TaskManager(Shape):
    """An entry of `GET /taskmanagers`: a TaskExecutor, its slots, since when it is idle (epoch ms;
    `idle` once for longer than `resourcemanager.taskexecutor.idle-timeout`), its last heartbeat
    and the executions that heartbeat listed."""

    id: str
    hostname: str
    queue: str
    spark_master: str
    registered_at: int
    slots_total: int
    slots_free: int
    slots: tuple[TaskManagerSlot, ...]
    idle_since: int | None
    idle: bool
    last_heartbeat: int | None
    executions: tuple[TaskManagerExecution, ...]
    pool: str = "default"  # `taskexecutor.pool`; masters before pools did not say

    def without_execution_ids(self) -> TaskManager:
        """This entry as a viewer sees it: each execution without its id."""
        return replace(self, executions=tuple(replace(e, execution_id=None) for e in self.executions))


@dataclass(frozen=True)
class TaskManagerList(Shape):
    """`GET /taskmanagers`: a page of the TaskExecutors registered with the leader, by id; `next` is
    the cursor of the following page (`?after=`), None on the last."""

    taskmanagers: tuple[TaskManager, ...]
    next: str | None = None


@dataclass(frozen=True)
class Submitted(Shape):
    """`POST /jobs`: the job's id, where it is, and its status (202 new, 200 submitted before)."""

    job_id: str = field(metadata=wire(pattern=JOB_ID_PATTERN))
    job_url: str = field(metadata=wire("jobUrl"))
    status: JobStatus


@dataclass(frozen=True)
class Artifact(Shape):
    """`POST /artifacts`: the blob key an uploaded file is stored under, and its file name."""

    key: str = field(metadata=wire(pattern=BLOB_KEY_PATTERN))
    filename: str


@dataclass(frozen=True)
class Unregistered(Shape):
    """A TaskExecutor's `POST /taskexecutors/{id}/unregister`: whether its registration was removed."""

    unregistered: bool


@dataclass(frozen=True)
class HeartbeatAnswer(Shape):
    """`POST /taskexecutors/{id}/heartbeat`: which of the heartbeat's `kept_jobs` ended (none while
    the master recovers its jobs), so the TaskExecutor deletes the results it keeps of them: the
    release its JobMaster sent at the job's end may have been lost with a leadership change."""

    release_kept: tuple[str, ...] = ()


@dataclass(frozen=True)
class LeaderSession(Shape):
    """`GET /taskexecutors/leader-session`: the session the answering master leads under, which a
    TaskExecutor of `high-availability.mode: none` registers under (ZooKeeper publishes it otherwise)."""

    session_id: str


@dataclass(frozen=True)
class Empty(Shape):
    """An answer without content: `{}`."""


#: Every shape an answer of the REST API has, in the order the OpenAPI document lists them.
ANSWERS: tuple[type[Shape], ...] = (
    Overview,
    JobList,
    FlinkJobList,
    JobDetails,
    RepairAnswer,
    AttemptLog,
    VertexOutcome,
    JobProgress,
    ExecutionResult,
    TaskManagerList,
    Submitted,
    Artifact,
    Unregistered,
    HeartbeatAnswer,
    LeaderSession,
    Empty,
)
