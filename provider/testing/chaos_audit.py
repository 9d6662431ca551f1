"""The end-of-run audit of a chaos run: what was lost, done twice, hung or left behind.

It judges each job from what the client saw (`JobRecord`), the JobResult store, the archive, the
leader's `GET /jobs`, ZooKeeper, the results directory and the task markers
(`bench/tasks/chaos_tasks.py`), and the cluster as a whole from its slots and the faults' records.
Every problem is a `Finding` of one category:

- lost: accepted, and neither a JobResult nor the leader knows of it at the end, or the
  JobResult it was answered with is not in the JobResult store;
- duplicated: more than one JobResult (dirty and clean entries, a stored or archived one that
  differs from the one answered first, two listings), or an execution that started after the
  job's JobResult was complete, or after its vertex's result was: a consumer only starts once
  every subtask of its producer is recorded FINISHED in the progress store, and result
  partitions are never lost here, so no leader may run that producer again. `transform` is
  chained into `summarize` (docs/jobgraph.md, "Result kinds"): its functions run in every attempt
  of summarize's task, also one a new leader runs again with the attempt numbers it starts anew,
  so for it only the JobResult's end bounds its executions. In a job whose `produce` keeps its
  result on its TaskExecutor, a lost TaskExecutor takes that result with it and `produce` runs
  again: there it may run after summarize's task started, but only after a TaskExecutor was
  killed or stopped while the job ran;
- hung: not accepted, or no JobResult, within `hang_after_s`;
- failed: a JobResult other than FINISHED;
- wrong-result: rows or partitions that do not add up (a chained vertex and a kept result have
  none), or a subtask FINISHED without an execution that completed;
- forgotten: the leader answered 404 for an accepted job;
- refused: a submission refused for good;
- leftover: a znode (jobgraphs, progress), dirty JobResult, JobGraph file, result directory, kept
  result on a TaskExecutor or slot left behind once the jobs were cleaned;
- crashed: a cluster process exited by itself; unhealed: the cluster did not heal after a fault,
  or no leader answered at the end.

A job is judged on JSON forms: the JobResult it was answered with and its `GET /jobs` entries (each
parsed by its shape when read, `model.rest_shapes`) are compared with what the stores hold, which
may be torn or unreadable.
"""

from __future__ import annotations

import re
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from sparkdispatch.errors import InvalidShape
from sparkdispatch.model.rest_shapes import JobList
from sparkdispatch.testing.chaos_leftovers import StoredState, leader_url, leftovers, read_json, zookeeper_client
from sparkdispatch.testing.chaos_model import FAULT_KINDS, ChaosSettings, Crash, FaultRecord, Finding, JobRecord
from sparkdispatch.testing.local_cluster import LocalCluster

CATEGORIES = (
    "lost",
    "duplicated",
    "hung",
    "failed",
    "wrong-result",
    "forgotten",
    "refused",
    "leftover",
    "crashed",
    "unhealed",
)
VERTICES = {"produce": 2, "transform": 2, "summarize": 1}  # vertex -> parallelism of a chaos job
CONSUMER = {"produce": "transform", "transform": "summarize"}
#: the chains the master makes of a chaos job (model.chaining): transform's subtasks run in summarize's task
CHAINED_INTO = {"transform": "summarize"}
#: the faults that may take a result kept on a TaskExecutor with them
TASK_EXECUTOR_FAULTS = ("taskexecutor-kill", "taskexecutor-stop")
HEX_ID = re.compile(r"\b[0-9a-f]{32}\b")
EVIDENCE = ("WARNING", "ERROR", "CRITICAL", "Traceback", "refused", "failed", "lost", "recover")


@dataclass(frozen=True)
class Execution:
    """One execution of a task function, from its marker file (epoch seconds)."""

    vertex: str
    subtask: int
    attempt: int
    execution: str
    start: float
    end: float | None
    output: Any

    @property
    def name(self) -> str:
        return f"{self.vertex}[{self.subtask}] attempt {self.attempt} ({self.execution})"


@dataclass
class ChaosReport:
    """The counts of a chaos run and its findings."""

    seed: int
    settings: dict[str, Any]
    jobs: int
    accepted: int
    finished: int
    faults: list[FaultRecord]
    crashes: list[Crash]
    executions: int
    re_executions: int  # executions beyond the first of each subtask
    reruns_of_completed: int  # executions of a subtask that had already completed one
    latencies: list[float]
    findings: list[Finding]
    duration_s: float = 0.0
    stream_s: float = 0.0

    def counts(self) -> dict[str, int]:
        """Jobs per category (leftovers, crashes and unhealed faults: items)."""
        counts = dict.fromkeys(CATEGORIES, 0)
        for category in CATEGORIES:
            found = [f for f in self.findings if f.category == category]
            per_item = category in ("leftover", "crashed", "unhealed")
            counts[category] = len(found) if per_item else len({f.subject for f in found})
        return counts

    def faults_by_kind(self) -> dict[str, int]:
        kinds = Counter(record.fault.kind for record in self.faults)
        return {kind: kinds[kind] for kind in FAULT_KINDS}

    def summary(self) -> str:
        counts = self.counts()
        latencies = sorted(self.latencies)
        lines = [
            f"chaos run, seed {self.seed}: {self.jobs} jobs ({self.accepted} accepted, {self.finished} FINISHED), "
            f"{len(self.faults)} faults, {self.duration_s:.0f}s ({self.stream_s:.0f}s of jobs and faults)",
            "faults injected: " + ", ".join(f"{kind} {n}" for kind, n in self.faults_by_kind().items()),
            *(
                f"  #{r.fault.number} {r.fault.kind} after job {r.fault.after_job}: {r.detail}"
                + (f" — {r.error}" if r.error else f"; healed after {r.healed_s:.1f}s")
                for r in self.faults
            ),
            f"executions {self.executions}, re-executions {self.re_executions} "
            f"(of subtasks that had completed: {self.reruns_of_completed}), crashes {len(self.crashes)}",
            ", ".join(f"{category} {n}" for category, n in counts.items()),
        ]
        if latencies:
            lines.append(
                f"job latency (accepted -> JobResult): median {statistics.median(latencies):.1f}s, "
                f"p95 {latencies[max(0, round(0.95 * len(latencies)) - 1)]:.1f}s, max {latencies[-1]:.1f}s"
            )
        for finding in self.findings:
            job = f" ({finding.job})" if finding.job else ""
            during = f"; during faults {', '.join(f'#{n}' for n in finding.faults)}" if finding.faults else ""
            lines.append(f"[{finding.category}] {finding.subject}{job}: {finding.message}{during}")
            lines += [f"    {line}" for line in finding.evidence]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "settings": self.settings,
            "jobs": self.jobs,
            "accepted": self.accepted,
            "finished": self.finished,
            "duration_s": self.duration_s,
            "stream_s": self.stream_s,
            "faults_by_kind": self.faults_by_kind(),
            "faults": [r.to_dict() for r in self.faults],
            "crashes": [vars(c) for c in self.crashes],
            "executions": self.executions,
            "re_executions": self.re_executions,
            "reruns_of_completed": self.reruns_of_completed,
            "counts": self.counts(),
            "latencies_s": [round(x, 2) for x in self.latencies],
            "findings": [f.to_dict() for f in self.findings],
        }


def read_markers(markers: Path) -> dict[str, list[Execution]]:
    """Job id -> its executions, from the task markers."""
    executions: dict[str, list[Execution]] = {}
    if not markers.is_dir():
        return executions
    for path in sorted(markers.glob("*/*.json")):
        raw = read_json(path)
        if "execution" not in raw:
            continue
        executions.setdefault(raw["job_id"], []).append(
            Execution(
                vertex=raw["vertex"],
                subtask=int(raw["subtask"]),
                attempt=int(raw["attempt"]),
                execution=raw["execution"],
                start=float(raw["start"]),
                end=raw["end"],
                output=raw["output"],
            )
        )
    return executions


class LogIndex:
    """The lines of the cluster's logs that tell of trouble, by the ids (32 hex digits) they name."""

    def __init__(self, log_dir: Path) -> None:
        self._lines: dict[str, list[str]] = {}
        for path in sorted(log_dir.glob("*.log")):
            for line in path.read_text(errors="replace").splitlines():
                if any(word in line for word in EVIDENCE):
                    for found in set(HEX_ID.findall(line)):
                        self._lines.setdefault(found, []).append(f"{path.name}: {line.strip()[:300]}")

    def about(self, job_id: str, limit: int = 8) -> tuple[str, ...]:
        return tuple(self._lines.get(job_id, [])[-limit:])


def audit(
    cluster: LocalCluster,
    records: list[JobRecord],
    *,
    faults: list[FaultRecord],
    crashes: list[Crash],
    markers: Path,
    settings: ChaosSettings,
) -> ChaosReport:
    """Judge the run (see the module docstring)."""
    executions = read_markers(markers)
    zookeeper = zookeeper_client(cluster)
    try:
        stored = StoredState.read(cluster, zookeeper)
    finally:
        zookeeper.stop()
        zookeeper.close()
    listing = _listing(cluster)
    logs = LogIndex(cluster.log_dir)
    end = time.time()
    findings: list[Finding] = []
    for record in records:
        problems = judge_job(
            record,
            stored,
            listing,
            executions.get(record.spec.job_id, []),
            settings,
            faults=faults,
        )
        if problems:
            life = (record.submitted_at or end, record.result_at or end)
            during = tuple(f.fault.number for f in faults if f.overlaps(*life))
            evidence = logs.about(record.spec.job_id)
            findings += [
                Finding(
                    category,
                    record.spec.job_id,
                    message,
                    job=f"chaos-{record.spec.index:04d}",
                    faults=during,
                    evidence=evidence,
                )
                for category, message in problems
            ]
    findings += leftovers(cluster, records, stored)
    findings += [
        Finding("crashed", c.process, f"exited by itself with {c.exit_code}", evidence=tuple(c.log_tail))
        for c in crashes
    ]
    findings += [
        Finding("unhealed", f"fault #{f.fault.number}", f"{f.fault.kind}: {f.error}") for f in faults if f.error
    ]
    if listing is None:
        findings.append(Finding("unhealed", "GET /jobs", "no leader answered GET /jobs at the end"))
    per_subtask = Counter((job_id, e.vertex, e.subtask) for job_id, job in executions.items() for e in job)
    return ChaosReport(
        seed=settings.seed,
        settings={k: v for k, v in vars(settings).items() if k != "overrides"}
        | {"overrides": dict(settings.overrides)},
        jobs=len(records),
        accepted=sum(1 for r in records if r.accepted_at is not None),
        finished=sum(1 for r in records if r.result and r.result["status"] == "FINISHED"),
        faults=faults,
        crashes=crashes,
        executions=sum(per_subtask.values()),
        re_executions=sum(n - 1 for n in per_subtask.values()),
        reruns_of_completed=sum(_reruns_of_completed(job) for job in executions.values()),
        latencies=[r.latency_s for r in records if r.latency_s is not None],
        findings=findings,
    )


def _listing(cluster: LocalCluster) -> dict[str, list[dict[str, Any]]] | None:
    """Job id -> its entries in the leader's `GET /jobs` (their JSON forms, as the audit compares them);
    None when the leader cannot be asked."""
    try:
        _, body = cluster.request("GET", leader_url(cluster) + "/jobs", timeout=30)
        listing: dict[str, list[dict[str, Any]]] = {}
        for entry in JobList.from_dict(body).jobs:
            listing.setdefault(entry.id, []).append(entry.to_dict())
        return listing
    except (OSError, TimeoutError, KeyError, TypeError, InvalidShape):
        return None


def _reruns_of_completed(executions: list[Execution]) -> int:
    """Executions that started after an earlier execution of the same subtask had completed."""
    count = 0
    by_subtask: dict[tuple[str, int], list[Execution]] = {}
    for e in executions:
        by_subtask.setdefault((e.vertex, e.subtask), []).append(e)
    for runs in by_subtask.values():
        ends = [e.end for e in runs if e.end is not None]
        count += sum(1 for e in runs if any(end < e.start for end in ends))
    return count


def _brief(result: dict[str, Any]) -> str:
    return f"{result.get('status')} ending {result.get('end_time')}"


def judge_job(
    record: JobRecord,
    stored: StoredState,
    listing: dict[str, list[dict[str, Any]]] | None,
    executions: list[Execution],
    settings: ChaosSettings,
    *,
    faults: Sequence[FaultRecord] = (),
) -> list[tuple[str, str]]:
    """(category, message) for each problem of one job; `faults` are the run's (kills and stops of
    TaskExecutors may take a kept result with them)."""
    job_id = record.spec.job_id
    problems: list[tuple[str, str]] = []
    if record.refused:
        problems.append(("refused", record.refused))
    if record.accepted_at is None:
        if not record.refused:
            problems.append(
                ("hung", f"not accepted within {settings.hang_after_s:.0f}s; POST answers {record.answers}")
            )
        return problems
    if record.unknown_answers:
        problems.append(
            (
                "forgotten",
                f"execution-result answered 404 after the job was accepted: {', '.join(record.unknown_answers)}",
            )
        )
    entries = stored.job_results.get(job_id, {})
    listed = listing.get(job_id, []) if listing is not None else None
    result = record.result
    if result is None:
        if not entries and listed == []:
            problems.append(("lost", "no JobResult is stored and the leader does not list the job"))
        else:
            state = listed[0]["status"] if listed else "not listed"
            waited = settings.hang_after_s + settings.final_grace_s
            problems.append(
                (
                    "hung",
                    f"no JobResult answered within {waited:.0f}s"
                    f" (GET /jobs: {state}; stored: {sorted(entries) or 'none'})",
                )
            )
        return problems
    latency = record.latency_s or 0.0
    if latency > settings.hang_after_s:
        problems.append(
            ("hung", f"its JobResult came {latency:.0f}s after acceptance (bound {settings.hang_after_s:.0f}s)")
        )
    if result["status"] != "FINISHED":
        failure = result.get("failure") or {}
        message = str(failure.get("message", "")).strip().splitlines()
        problems.append(
            ("failed", f"{result['status']}: {failure.get('class', '?')}: {message[0][:300] if message else ''}")
        )
    else:
        problems += [("wrong-result", m) for m in _wrong_results(record, executions)]
    if not entries:
        problems.append(("lost", "its JobResult is not in the JobResult store"))
    if len(entries) > 1:
        problems.append(("duplicated", "it has both a dirty and a clean JobResult entry"))
    for kind, entry in entries.items():
        if _brief(entry) != _brief(result):
            problems.append(
                (
                    "duplicated",
                    f"the {kind} JobResult ({_brief(entry)}) differs from the one answered first ({_brief(result)})",
                )
            )
    archived = stored.archive.get(job_id)
    if archived is not None and _brief(archived) != _brief(result):
        problems.append(
            ("duplicated", f"the archive holds {_brief(archived)}, the JobResult answered was {_brief(result)}")
        )
    if listed is not None:
        if not listed:
            problems.append(("forgotten", "the leader's GET /jobs does not list it"))
        elif len(listed) > 1:
            problems.append(("duplicated", f"the leader's GET /jobs lists it {len(listed)} times"))
        elif listed[0]["status"] != result["status"]:
            problems.append(("duplicated", f"GET /jobs says {listed[0]['status']}, its JobResult {result['status']}"))
    ended = float(result["end_time"]) / 1000
    for e in executions:
        if e.start > ended:
            problems.append(("duplicated", f"{e.name} started {e.start - ended:.1f}s after the JobResult's end"))
    for producer, consumer in CONSUMER.items():
        if producer in CHAINED_INTO:
            continue
        consumed = min((e.start for e in executions if e.vertex == consumer), default=None)
        for e in executions:
            if consumed is not None and e.vertex == producer and e.start > consumed:
                if record.spec.kept and any(
                    f.fault.kind in TASK_EXECUTOR_FAULTS and f.overlaps(consumed, e.start) for f in faults
                ):
                    continue  # its kept result went with a TaskExecutor: made again, as it must be
                problems.append(
                    (
                        "duplicated",
                        f"{e.name} started {e.start - consumed:.1f}s after {consumer} had "
                        f"started: it ran again after its vertex's result was complete",
                    )
                )
    return problems


def _wrong_results(record: JobRecord, executions: list[Execution]) -> list[str]:
    """What does not add up in a FINISHED job."""
    assert record.result is not None
    rows = record.spec.rows
    wrong: list[str] = []
    vertices = record.result.get("vertices", {})
    for vertex, expected in (("produce", rows), ("transform", rows), ("summarize", 1)):
        outcome = vertices.get(vertex, {})
        if outcome.get("rows") != expected:
            wrong.append(f"{vertex} wrote {outcome.get('rows')} rows, expected {expected}")
        subtasks = sorted(p.rstrip("/").rsplit("/", 1)[-1].split("-")[0] for p in outcome.get("partitions", []))
        if vertex in CHAINED_INTO and subtasks:
            wrong.append(f"{vertex} is chained into {CHAINED_INTO[vertex]} but wrote partitions {subtasks}")
        elif vertex == "produce" and record.spec.kept:
            if subtasks:
                wrong.append(f"produce keeps its result on its TaskExecutor but lists partitions {subtasks}")
        elif vertex not in CHAINED_INTO and subtasks != [str(i) for i in range(VERTICES[vertex])]:
            wrong.append(f"{vertex}'s partitions are of subtasks {subtasks}, expected one per subtask")
    for vertex, parallelism in VERTICES.items():
        for subtask in range(parallelism):
            if not any(e.vertex == vertex and e.subtask == subtask and e.end is not None for e in executions):
                wrong.append(f"{vertex}[{subtask}] is FINISHED but no execution of it completed")
    expected_output = {"rows": rows, "total": rows * (rows - 1)}
    for e in executions:
        if e.vertex == "summarize" and e.output is not None and e.output != expected_output:
            wrong.append(f"{e.name} read {e.output}, expected {expected_output}")
    return wrong
