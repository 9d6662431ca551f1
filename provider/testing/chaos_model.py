"""What a chaos run is made of: its settings, the planned faults and jobs, and what was recorded of them.

`sparkdispatch.testing.chaos` runs these; `sparkdispatch.testing.chaos_audit` judges them, each problem a `Finding`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkdispatch.config import Configuration

FAULT_KINDS = ("leader-kill", "taskexecutor-kill", "taskexecutor-stop", "redis-restart", "zookeeper-pause")


def _ms(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


@dataclass(frozen=True)
class ChaosSettings:
    """Size, seed and timeouts of a chaos run. The cluster's timeouts are short so it recovers in
    seconds; the jobs' restart budget covers the faults a job may live through."""

    jobs: int = 24
    faults: int = 6
    seed: int = 0
    in_flight: int = 3  # jobs running at once
    hang_after_s: float = 120.0  # an accepted job without its JobResult this long after acceptance hangs
    final_grace_s: float = 60.0  # after the faults, how long a hung job may still take to end
    cleanup_grace_s: float = 60.0  # after the last result, how long the cleanups may take
    heal_timeout_s: float = 240.0  # how long the cluster may take to heal after a fault (or to start)
    restart_attempts: int = 10  # each job's fixed-delay restart budget
    max_task_sleep_s: float = 0.5  # each task pauses up to this long, so faults land mid-task
    session_timeout_s: float = 4.0
    heartbeat_interval_s: float = 0.5
    heartbeat_timeout_s: float = 4.0
    slot_request_timeout_s: float = 15.0
    overrides: tuple[tuple[str, str], ...] = ()  # further configuration keys of the cluster

    def cluster_config(self, storage: Path, *, zookeeper_hosts: str, redis_url: str) -> Configuration:
        """Two masters' and two TaskExecutors' configuration; JobResults kept as `<id>.json` when clean
        and results deleted at cleanup, so the audit can count both."""
        return Configuration.from_mapping(
            {
                "high-availability.mode": "zookeeper",
                "high-availability.zookeeper.quorum": zookeeper_hosts,
                "high-availability.zookeeper.path.root": "/chaos",
                "high-availability.zookeeper.session-timeout": _ms(self.session_timeout_s),
                "storage.dir": str(storage),
                "broker.url": redis_url,
                "heartbeat.interval": _ms(self.heartbeat_interval_s),
                "heartbeat.timeout": _ms(self.heartbeat_timeout_s),
                "slot.request.timeout": _ms(self.slot_request_timeout_s),
                "taskexecutor.slots": 2,
                "taskexecutor.slot-process.spares": 2,  # every job needs fresh slot processes
                "taskexecutor.registration.max-backoff": "1s",
                "taskexecutor.cancellation.timeout": "5s",
                "job-result-store.delete-on-commit": "false",
                "results.retention": "delete",
                "cleanup-strategy.initial-backoff": "200ms",
                "cleanup-strategy.max-backoff": "2s",
                "rest.execution-result.long-poll": "1s",
                "spark.master": "local[2]",
                "spark.ui.enabled": "false",
                "spark.sql.shuffle.partitions": "2",
                **dict(self.overrides),
            }
        )


@dataclass(frozen=True)
class PlannedFault:
    """Fault `number`: fires `delay_s` after the stream submitted `after_job` jobs. `target` is the
    TaskExecutor of TaskExecutor faults; `hold_s` how long a process stays stopped, down or paused
    (for the kills: dead before its restart)."""

    number: int
    kind: str
    after_job: int
    delay_s: float
    target: int
    hold_s: float

    def describe(self) -> str:
        what = {
            "leader-kill": "SIGKILL the leader master, restart it",
            "taskexecutor-kill": f"SIGKILL TaskExecutor {self.target}, restart it after {self.hold_s:.1f}s",
            "taskexecutor-stop": f"SIGSTOP TaskExecutor {self.target} for {self.hold_s:.1f}s",
            "redis-restart": f"stop Redis for {self.hold_s:.1f}s",
            "zookeeper-pause": f"SIGSTOP ZooKeeper for {self.hold_s:.1f}s",
        }[self.kind]
        return f"{self.kind} after job {self.after_job} + {self.delay_s:.1f}s: {what}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "kind": self.kind,
            "after_job": self.after_job,
            "delay_s": self.delay_s,
            "target": self.target,
            "hold_s": self.hold_s,
        }


@dataclass
class FaultRecord:
    """What happened when a fault was injected (epoch seconds)."""

    fault: PlannedFault
    started: float
    ended: float | None = None  # the process is back (restarted, resumed)
    healed: float | None = None  # the cluster is whole again; None: it did not heal
    detail: str = ""
    error: str | None = None

    @property
    def healed_s(self) -> float:
        return (self.healed or self.started) - self.started

    def overlaps(self, start: float, end: float) -> bool:
        return self.started <= end and (self.healed or float("inf")) >= start

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.fault.to_dict(),
            "started": self.started,
            "ended": self.ended,
            "healed": self.healed,
            "healed_after_s": round(self.healed_s, 2) if self.healed else None,
            "detail": self.detail,
            "error": self.error,
        }


@dataclass(frozen=True)
class Crash:
    """A cluster process that exited without being told to (it was restarted)."""

    process: str
    exit_code: int | None
    at: float
    log_tail: list[str]


@dataclass(frozen=True)
class JobSpec:
    """One planned job: its id, rows, each vertex's pause, and whether `produce` keeps its result on
    its TaskExecutor (`"result": "kept"`) instead of writing it to the results directory."""

    index: int
    job_id: str
    rows: int
    sleeps: dict[str, float]
    kept: bool = False


@dataclass
class JobRecord:
    """What the client saw of one job (epoch seconds)."""

    spec: JobSpec
    submitted_at: float | None = None
    accepted_at: float | None = None
    answers: list[str] = field(default_factory=list)  # each POST's status, or the error that ended it
    refused: str | None = None
    result: dict[str, Any] | None = None  # the first JobResult the leader answered with
    result_at: float | None = None
    unknown_answers: list[str] = field(default_factory=list)  # when and from where 404s came after acceptance

    @property
    def latency_s(self) -> float | None:
        if self.accepted_at is None or self.result_at is None:
            return None
        return self.result_at - self.accepted_at


@dataclass(frozen=True)
class Finding:
    """One problem the audit found. `subject`: a job id, a path, a process or a fault."""

    category: str
    subject: str
    message: str
    job: str = ""  # the job's name
    faults: tuple[int, ...] = ()  # faults during the job's life
    evidence: tuple[str, ...] = ()  # log lines about it

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "subject": self.subject,
            "job": self.job,
            "message": self.message,
            "faults": list(self.faults),
            "evidence": list(self.evidence),
        }
