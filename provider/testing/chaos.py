"""Chaos runs: a real HA cluster drives a stream of jobs while faults hit it at seeded random points.

`ChaosRun(settings, work_dir=..., tasks=...).run()` starts ZooKeeper, Redis, two masters (ZooKeeper
HA) and two TaskExecutors (`LocalCluster`), uploads the chaos task module
(`bench/tasks/chaos_tasks.py`), and submits `settings.jobs` jobs produce(2) → transform(2) →
summarize(1) (transform chained into summarize's task; produce's result durable, or kept on its
TaskExecutor in every second job), `settings.in_flight` at a time, each with an id chosen here (a retried POST is the
same job). Meanwhile a fault thread works through `plan_faults(settings)`: SIGKILL of the leader
master (restarted), SIGKILL of a TaskExecutor (restarted), SIGSTOP of a TaskExecutor past the
heartbeat timeout (SIGCONT), a Redis restart on the same port, and a ZooKeeper SIGSTOP past the
session timeout (SIGCONT). A fault fires `delay_s` after the stream submitted its `after_job`
jobs; the fault thread then waits until the cluster healed (a leader, both masters answering,
every TaskExecutor heartbeating the leader; a process that exited by itself is restarted and
reported) before the next one. The stream never runs more than `in_flight` jobs ahead of a fault
that has not fired. At the end `sparkdispatch.testing.chaos_audit` audits what happened. Every
process started is stopped, also on errors.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkdispatch.model.rest_shapes import ExecutionResult, TaskManagerList
from sparkdispatch.testing.chaos_audit import ChaosReport, audit
from sparkdispatch.testing.chaos_leftovers import wait_for_cleanup
from sparkdispatch.testing.chaos_model import (
    FAULT_KINDS,
    ChaosSettings,
    Crash,
    FaultRecord,
    JobRecord,
    JobSpec,
    PlannedFault,
)
from sparkdispatch.testing.local_cluster import LocalCluster
from sparkdispatch.testing.services import RedisServer, ZooKeeperServer

Echo = Callable[[str], None]


def plan_faults(settings: ChaosSettings) -> list[PlannedFault]:
    """The faults of a run, from `settings.seed`: every kind once when there are at least as many
    faults as kinds, the rest drawn at random; one point drawn in each of `faults` equal stretches
    of the stream."""
    rng = random.Random(f"faults-{settings.seed}")
    if settings.faults >= len(FAULT_KINDS):
        kinds = list(FAULT_KINDS) + [rng.choice(FAULT_KINDS) for _ in range(settings.faults - len(FAULT_KINDS))]
    else:
        kinds = rng.sample(FAULT_KINDS, settings.faults)
    rng.shuffle(kinds)
    last = max(1, settings.jobs - settings.in_flight - 1)  # a few jobs run after the last fault
    stretch = last / len(kinds) if kinds else 1.0
    points = [1 + int(n * stretch + rng.random() * stretch) for n in range(len(kinds))]
    holds: dict[str, Callable[[], float]] = {
        "leader-kill": lambda: rng.uniform(0.0, 2.0),
        "taskexecutor-kill": lambda: rng.uniform(0.0, 3.0),
        "taskexecutor-stop": lambda: settings.heartbeat_timeout_s + rng.uniform(1.0, 3.0),
        "redis-restart": lambda: rng.uniform(2.0, 5.0),
        "zookeeper-pause": lambda: settings.session_timeout_s + rng.uniform(1.0, 3.0),
    }
    return [
        PlannedFault(
            number=n,
            kind=kind,
            after_job=point,
            delay_s=round(rng.uniform(0.0, 2.0), 2),
            target=rng.randrange(2),
            hold_s=round(holds[kind](), 2),
        )
        for n, (kind, point) in enumerate(zip(kinds, points, strict=True), 1)
    ]


def plan_jobs(settings: ChaosSettings) -> list[JobSpec]:
    """The jobs of a run, from `settings.seed`: ids, row counts and each vertex's pause."""
    rng = random.Random(f"jobs-{settings.seed}")
    return [
        JobSpec(
            index=i,
            job_id=f"{rng.getrandbits(128):032x}",
            rows=rng.randint(50, 500),
            sleeps={
                v: round(rng.uniform(0.0, settings.max_task_sleep_s), 2) for v in ("produce", "transform", "summarize")
            },
            kept=i % 2 == 1,
        )
        for i in range(settings.jobs)
    ]


def chaos_graph(spec: JobSpec, *, artifact: str, markers: Path, restart_attempts: int) -> dict[str, Any]:
    """The JobGraph of one chaos job (task functions in `bench/tasks/chaos_tasks.py`)."""

    def vertex(vid: str, parallelism: int, inputs: list[str], **extra: str) -> dict[str, Any]:
        return {
            "id": vid,
            "entrypoint": f"chaos_tasks:{vid}",
            "parallelism": parallelism,
            "inputs": inputs,
            "params": {"markers": str(markers), "rows": spec.rows, "sleep_s": spec.sleeps[vid]},
            **extra,
        }

    return {
        "job_id": spec.job_id,
        "name": f"chaos-{spec.index:04d}",
        "artifacts": [artifact],
        "vertices": [
            # durable, so that a chaos job has tasks on both sides of a written result, or kept on
            # its TaskExecutor, summarize's task placed beside it; the master chains transform
            # into summarize's task
            vertex("produce", 2, [], result="kept" if spec.kept else "durable"),
            vertex("transform", 2, ["produce"]),
            vertex("summarize", 1, ["transform"]),
        ],
        "restart_strategy": {"type": "fixed-delay", "attempts": restart_attempts, "delay_s": 0.5},
    }


class FaultSchedule:
    """Keeps the job stream and the fault thread in step (see the module docstring)."""

    def __init__(self, faults: list[PlannedFault], *, lag: int) -> None:
        self._faults = faults
        self._lag = lag
        self._cond = threading.Condition()
        self._submitted = 0
        self._fired = 0
        self.aborted = False

    def job_submitted(self) -> None:
        with self._cond:
            self._submitted += 1
            self._cond.notify_all()

    def fault_fired(self) -> None:
        with self._cond:
            self._fired += 1
            self._cond.notify_all()

    def abort(self) -> None:
        with self._cond:
            self.aborted = True
            self._cond.notify_all()

    def wait_for_turn(self, index: int) -> None:
        """Job `index` may go once every fault planned at least `lag` jobs before it has fired."""
        due = sum(1 for f in self._faults if f.after_job + self._lag <= index)
        with self._cond:
            self._cond.wait_for(lambda: self.aborted or self._fired >= due)

    def wait_for_trigger(self, fault: PlannedFault) -> bool:
        with self._cond:
            self._cond.wait_for(lambda: self.aborted or self._submitted >= fault.after_job)
            return not self.aborted


class Leader:
    """The leader's REST address as last seen, looked up again when a call to it fails."""

    def __init__(self, cluster: LocalCluster) -> None:
        self._cluster = cluster
        self._url: str | None = None
        self._lock = threading.Lock()

    def url(self, *, deadline: float) -> str | None:
        """The leader's address; None if no master leads before `deadline` (monotonic seconds)."""
        with self._lock:
            if self._url is None:
                try:
                    self._url = self._cluster.leader_url(max(0.0, deadline - time.monotonic()), watch=False)
                except TimeoutError:
                    pass
            return self._url

    def forget(self, url: str | None) -> None:
        with self._lock:
            if self._url == url:
                self._url = None


class JobStream:
    """Submits the jobs, `in_flight` at a time, and waits for each one's JobResult."""

    def __init__(
        self,
        cluster: LocalCluster,
        records: list[JobRecord],
        graphs: list[dict[str, Any]],
        *,
        settings: ChaosSettings,
        schedule: FaultSchedule,
        echo: Echo,
    ) -> None:
        self._cluster = cluster
        self._records = records
        self._graphs = graphs
        self._settings = settings
        self._schedule = schedule
        self._echo = echo
        self._leader = Leader(cluster)
        self._next = 0
        self._done = 0
        self._lock = threading.Lock()

    def run(self) -> None:
        workers = [
            threading.Thread(target=self._work, name=f"chaos-jobs-{n}", daemon=True)
            for n in range(self._settings.in_flight)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    def _work(self) -> None:
        while not self._schedule.aborted:
            with self._lock:
                if self._next >= len(self._records):
                    return
                record, graph = self._records[self._next], self._graphs[self._next]
                self._next += 1
            self._schedule.wait_for_turn(record.spec.index)
            try:
                self._submit(record, graph)
            finally:
                self._schedule.job_submitted()
            if record.accepted_at is not None:
                self.await_result(record, deadline=time.monotonic() + self._settings.hang_after_s)
            with self._lock:
                self._done += 1
                done = self._done
            if done % 10 == 0 or done == len(self._records):
                self._echo(f"{done}/{len(self._records)} jobs done")

    def _submit(self, record: JobRecord, graph: dict[str, Any]) -> None:
        record.submitted_at = time.time()
        deadline = time.monotonic() + self._settings.hang_after_s
        while time.monotonic() < deadline and not self._schedule.aborted:
            url = self._leader.url(deadline=deadline)
            if url is None:
                break
            try:
                status, body = self._cluster.request("POST", url + "/jobs", graph, timeout=15)
            except (OSError, TimeoutError) as exc:
                record.answers.append(type(exc).__name__)
                self._leader.forget(url)
                time.sleep(0.2)
                continue
            record.answers.append(str(status))
            if status in (200, 202):
                record.accepted_at = time.time()
                return
            outcome_unknown = any(not answer.isdigit() for answer in record.answers[:-1])
            if status == 409 and outcome_unknown and "terminal" in str(body):
                # an earlier POST went through unanswered and the job has already finished
                record.accepted_at = time.time()
                return
            if status in (409, 400, 413):
                record.refused = f"POST /jobs answered {status}: {body}"
                return
            self._leader.forget(url)  # 503 from a standby or a recovering leader, or a 5xx
            time.sleep(0.2)

    def await_result(self, record: JobRecord, *, deadline: float) -> None:
        """Poll `GET /jobs/{id}/execution-result` (long-polling) until COMPLETED or `deadline`."""
        job_id = record.spec.job_id
        while time.monotonic() < deadline and record.result is None and not self._schedule.aborted:
            url = self._leader.url(deadline=deadline)
            if url is None:
                return
            try:
                status, body = self._cluster.request("GET", f"{url}/jobs/{job_id}/execution-result", timeout=15)
            except (OSError, TimeoutError):
                self._leader.forget(url)
                time.sleep(0.2)
                continue
            if status == 200 and (result := ExecutionResult.from_dict(body).result) is not None:
                record.result = result.to_dict()  # the audit compares it with the stores' JSON forms
                record.result_at = time.time()
            elif status == 404:
                record.unknown_answers.append(f"{time.strftime('%H:%M:%S')} from {url}")
                time.sleep(0.5)
            elif status != 200:
                self._leader.forget(url)
                time.sleep(0.2)


class FaultInjector:
    """Injects one planned fault into the cluster and its services, then waits until it healed."""

    def __init__(
        self,
        cluster: LocalCluster,
        zookeeper: ZooKeeperServer,
        redis: RedisServer,
        *,
        settings: ChaosSettings,
        schedule: FaultSchedule,
        echo: Echo,
    ) -> None:
        self._cluster = cluster
        self._zookeeper = zookeeper
        self._redis = redis
        self._settings = settings
        self._schedule = schedule
        self._echo = echo
        self.crashes: list[Crash] = []

    def inject(self, fault: PlannedFault) -> FaultRecord:
        record = FaultRecord(fault=fault, started=time.time())
        self._echo(f"fault #{fault.number}: {fault.describe()}")
        try:
            record.detail = getattr(self, "_" + fault.kind.replace("-", "_"))(fault)
        except Exception as exc:  # noqa: BLE001 - a fault that could not be injected is reported, the run goes on
            record.error = f"{type(exc).__name__}: {exc}"
        record.ended = time.time()
        problem = self.heal(since=record.ended)
        record.healed = None if problem else time.time()
        record.error = "; ".join(filter(None, [record.error, problem])) or None
        self._echo(
            f"fault #{fault.number} {fault.kind}: {record.detail or ''}"
            + (f" — ERROR {record.error}" if record.error else f"; healed after {record.healed_s:.1f}s")
        )
        return record

    def _leader_kill(self, fault: PlannedFault) -> str:
        deadline = time.monotonic() + self._settings.heal_timeout_s
        leader = self._leader(deadline)
        self._cluster.kill_master(leader, signal.SIGKILL)
        killed = time.monotonic()
        try:
            new_leader = self._leader(deadline, exclude=leader)
            took = time.monotonic() - killed
            time.sleep(fault.hold_s)
        finally:
            self._cluster.start_master(leader)
        return (
            f"SIGKILL master {leader} (leader); master {new_leader} leads after {took:.1f}s; master {leader} restarted"
        )

    def _taskexecutor_kill(self, fault: PlannedFault) -> str:
        self._cluster.kill_task_executor(fault.target, signal.SIGKILL)
        try:
            time.sleep(fault.hold_s)
        finally:
            self._cluster.start_task_executor(fault.target)
        return f"SIGKILL {self._cluster.task_executor_id(fault.target)} and its children; restarted"

    def _taskexecutor_stop(self, fault: PlannedFault) -> str:
        self._cluster.pause_task_executor(fault.target)
        try:
            time.sleep(fault.hold_s)
        finally:
            self._cluster.resume_task_executor(fault.target)
        return f"SIGSTOP {self._cluster.task_executor_id(fault.target)} and its children for {fault.hold_s:.1f}s"

    def _redis_restart(self, fault: PlannedFault) -> str:
        self._redis.restart(down_s=fault.hold_s)
        return f"Redis down {fault.hold_s:.1f}s, started again on port {self._redis.port}"

    def _zookeeper_pause(self, fault: PlannedFault) -> str:
        self._zookeeper.pause()
        try:
            time.sleep(fault.hold_s)
        finally:
            self._zookeeper.resume()
        return f"ZooKeeper SIGSTOPped for {fault.hold_s:.1f}s"

    def _leader(self, deadline: float, *, exclude: int | None = None) -> int:
        return self._cluster.wait_for_leader(
            timeout=max(0.0, deadline - time.monotonic()), exclude=exclude, watch=False
        )

    def heal(self, *, since: float) -> str | None:
        """Wait until a master leads, every master answers and every TaskExecutor has heartbeated the
        leader after `since` (epoch s); restart processes that exited by themselves. None when healed,
        else what is still wrong."""
        deadline = time.monotonic() + self._settings.heal_timeout_s
        problem: str | None = "not checked"
        while time.monotonic() < deadline and not self._schedule.aborted:
            self._restart_crashed()
            problem = self._unhealthy(since)
            if problem is None:
                return None
            time.sleep(0.5)
        return f"not healed within {self._settings.heal_timeout_s:.0f}s: {problem}"

    def _unhealthy(self, since: float) -> str | None:
        cluster = self._cluster
        leader = cluster.leader_index()
        if leader is None:
            return "no leader"
        for index, process in enumerate(cluster.masters):
            if process is None:
                return f"master {index} is not running"
            try:
                status, _ = cluster.request("GET", cluster.master_url(index) + "/overview", timeout=3)
            except (OSError, TimeoutError):
                status = 0
            if status != 200:
                return f"master {index} does not answer /overview"
        try:
            status, body = cluster.request("GET", cluster.master_url(leader) + "/taskmanagers", timeout=5)
        except (OSError, TimeoutError):
            return "the leader does not answer /taskmanagers"
        if status != 200:
            return f"the leader answered /taskmanagers with {status}"
        heartbeats = {entry.id: entry.last_heartbeat or 0 for entry in TaskManagerList.from_dict(body).taskmanagers}
        for index in range(len(cluster.taskexecutors)):
            te = cluster.task_executor_id(index)
            if heartbeats.get(te, 0) < since * 1000:
                return f"{te} has not heartbeated the leader since the fault"
        return None

    def _restart_crashed(self) -> None:
        cluster = self._cluster
        for kind, processes, restart in (
            ("master", cluster.masters, cluster.start_master),
            ("taskexecutor", cluster.taskexecutors, cluster.start_task_executor),
        ):
            for index, process in enumerate(processes):
                if process is not None and process.poll() is not None:
                    log = cluster.log_dir / f"{kind}-{index}.log"
                    tail = log.read_text(errors="replace").splitlines()[-15:] if log.exists() else []
                    crash = Crash(
                        process=f"{kind}-{index}", exit_code=process.returncode, at=time.time(), log_tail=tail
                    )
                    self.crashes.append(crash)
                    self._echo(f"{crash.process} exited by itself with {crash.exit_code}; restarting it")
                    restart(index)


@dataclass
class ChaosRun:
    """One chaos run in `work_dir` (storage, logs, markers); `run()` returns the audit's report."""

    settings: ChaosSettings
    work_dir: Path
    tasks: Path  # bench/tasks/chaos_tasks.py
    echo: Echo = print
    faults: list[FaultRecord] = field(default_factory=list)

    def run(self) -> ChaosReport:
        settings = self.settings
        began = time.monotonic()
        self._say(
            f"chaos run: seed {settings.seed}, {settings.jobs} jobs, {settings.faults} faults; work dir {self.work_dir}"
        )
        plan = plan_faults(settings)
        for fault in plan:
            self._say(f"  planned #{fault.number}: {fault.describe()}")
        specs = plan_jobs(settings)
        records = [JobRecord(spec) for spec in specs]
        markers = self.work_dir / "markers"
        zookeeper, redis = ZooKeeperServer(), RedisServer()
        cluster: LocalCluster | None = None
        schedule = FaultSchedule(plan, lag=settings.in_flight)
        fault_thread: threading.Thread | None = None
        try:
            zookeeper.start()
            redis.start()
            config = settings.cluster_config(
                self.work_dir / "storage", zookeeper_hosts=zookeeper.hosts, redis_url=redis.url
            )
            cluster = LocalCluster(config, masters=2, taskexecutors=2, log_dir=self.work_dir / "log")
            cluster.start(timeout=settings.heal_timeout_s)
            self._say(f"cluster up after {time.monotonic() - began:.0f}s; logs in {cluster.log_dir}")
            artifact = cluster.upload_artifact(self.tasks)
            graphs = [
                chaos_graph(spec, artifact=artifact, markers=markers, restart_attempts=settings.restart_attempts)
                for spec in specs
            ]
            injector = FaultInjector(cluster, zookeeper, redis, settings=settings, schedule=schedule, echo=self._say)
            stream = JobStream(cluster, records, graphs, settings=settings, schedule=schedule, echo=self._say)
            fault_thread = threading.Thread(
                target=self._inject_all, args=(plan, injector, schedule), name="chaos-faults", daemon=True
            )
            fault_thread.start()
            stream.run()
            fault_thread.join()
            stream_s = time.monotonic() - began
            problem = injector.heal(since=time.time())
            if problem:
                self._say(f"after the run: {problem}")
            self._sweep(stream, records)
            wait_for_cleanup(cluster, records, timeout=settings.cleanup_grace_s)
            report = audit(
                cluster, records, faults=self.faults, crashes=injector.crashes, markers=markers, settings=settings
            )
            report.duration_s = round(time.monotonic() - began, 1)
            report.stream_s = round(stream_s, 1)
            return report
        finally:
            schedule.abort()
            if fault_thread is not None:
                fault_thread.join(timeout=60)
            if cluster is not None:
                cluster.stop()
            redis.stop()
            zookeeper.stop()

    def _inject_all(self, plan: list[PlannedFault], injector: FaultInjector, schedule: FaultSchedule) -> None:
        for fault in plan:
            if not schedule.wait_for_trigger(fault):
                return
            time.sleep(fault.delay_s)
            schedule.fault_fired()
            self.faults.append(injector.inject(fault))

    def _sweep(self, stream: JobStream, records: list[JobRecord]) -> None:
        """Give every accepted job without a result one more chance to reach it (it hung, but did it end?)."""
        waiting = [r for r in records if r.accepted_at is not None and r.result is None]
        if waiting:
            self._say(f"{len(waiting)} job(s) without a result; waiting up to {self.settings.final_grace_s:.0f}s more")
        deadline = time.monotonic() + self.settings.final_grace_s
        for record in waiting:
            stream.await_result(record, deadline=deadline)

    def _say(self, line: str) -> None:
        self.echo(f"[chaos {time.strftime('%H:%M:%S')}] {line}")
