"""Registration and heartbeats of a TaskExecutor, as a Celery worker step.

`MasterConnection` is the state machine (Flink's TaskExecutor ↔ ResourceManager connection):
find the leader, register under its session id with exponential backoff, heartbeat with the
slot report and running executions, register again on a 404 or when the leader changes. While
no ResourceManager answers, the running tasks go on: their slots stay with their JobMasters.
Registering again names the registration held so far, so a ResourceManager that still has it
keeps the slots' allocations. It also fences deployments (`admits`, as Flink's TaskExecutor
refuses a task for a slot not allocated to its job): one runs only while this TaskExecutor is
registered under the deploying leader's session and the registration its slot was allocated
under, so a deployment of a former leader, or queued in the broker before this process
registered, never runs; after a long silence (the process was frozen, or cut off) a deployment
first waits for a heartbeat to be answered, so one the master gave to another TaskExecutor
meanwhile is refused. A TaskExecutor that stops unregisters at once (`unregister`).

Heartbeats list every execution the JobMasters must not lose (`SlotTable.executions`), and each
heartbeat that goes through delivers the terminal reports held since the master missed them.
Registering with a new leader session leaves the former leader's tasks out of the slot report,
so the new leader gets their slots at once, and `MasterConnectionStep` cancels those tasks.

`MasterConnectionStep` drives it from the worker's timer, on a thread of its own
(`PeriodicStep`); it also tells the `SlotTable` which deployments the worker took from the
broker before they start (Celery's `task_received`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from celery.signals import task_postrun, task_received, worker_ready, worker_shutting_down

from sparkdispatch.broker.celery_app import DEPLOY_TASK, remove_stale_pidbox_messages
from sparkdispatch.broker.filesystem_transport import expect_message
from sparkdispatch.config import Configuration
from sparkdispatch.config.options import HEARTBEAT_INTERVAL, HEARTBEAT_TIMEOUT, TASKEXECUTOR_REGISTRATION_MAX_BACKOFF
from sparkdispatch.errors import (
    FencingTokenMismatch,
    ServiceUnavailable,
    SparkDispatchError,
    UnknownJob,
    UnknownTaskExecutor,
)
from sparkdispatch.ha.leader import LeaderInfo
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.job_result import Failure
from sparkdispatch.model.protocol import ExecutionStateUpdate, TaskDeploymentDescriptor, TaskExecutorRegistration
from sparkdispatch.taskexecutor.kept_results import kept_jobs, release_ended
from sparkdispatch.taskexecutor.master_client import MasterClient
from sparkdispatch.taskexecutor.periodic_step import PeriodicStep
from sparkdispatch.taskexecutor.runner import TaskRunner
from sparkdispatch.taskexecutor.slot_table import SlotTable
from sparkdispatch.taskexecutor.state_reports import discard_result
from sparkdispatch.model.job_graph import DEFAULT_POOL

log = logging.getLogger(__name__)

INITIAL_REGISTRATION_BACKOFF_S = 0.1
PIDBOX_CLEANUP_EVERY_S = 30.0
#: A worker registers once its consumer is ready (Celery's `worker_ready`), so the master's first
#: remote-control calls (cancellations are broadcasts, lost while no queue is bound) reach it;
#: it registers anyway after this long.
CONSUMER_READY_TIMEOUT_S = 60.0
#: How long a deployment that arrives while this TaskExecutor is not registered (starting, or
#: registering again) waits for the registration before it is refused.
REGISTRATION_WAIT_S = 5.0
#: How long a stopping TaskExecutor tries to unregister; after that it stops anyway and the
#: ResourceManager finds it gone by its heartbeats.
UNREGISTER_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class TaskExecutorIdentity:
    """What a TaskExecutor registers as."""

    task_executor_id: str
    hostname: str  # the Celery nodename, `<id>@<host>`: the destination of remote-control calls
    queue: str
    spark_master: str
    pool: str = DEFAULT_POOL


class MasterConnection:
    """Registration and heartbeats towards whichever master leads; also delivers state reports.

    `tick()` does the due work and is called periodically from one thread; `report()`,
    `admits()` and `refuse()` are called from task threads.
    """

    def __init__(
        self,
        config: Configuration,
        *,
        identity: TaskExecutorIdentity,
        slots: SlotTable,
        client: MasterClient,
        current_leader: Callable[[], LeaderInfo | None],
        session_refused: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        kept_results_dir: Path | None = None,
    ) -> None:
        self._config = config
        self._kept_results_dir = kept_results_dir  # its jobs' ended ones are released on heartbeats
        self._identity = identity
        self._slots = slots
        self._client = client
        self._current_leader = current_leader
        self._session_refused = session_refused  # the master refused the leader's session: find it anew
        self._clock = clock
        self._lock = threading.Lock()
        self._registration_changed = threading.Condition(self._lock)
        self._registered: LeaderInfo | None = None
        self._registering = False
        self._stopped = False
        self._registration_id: str | None = None
        # the registrations whose allocations are valid: the current one and those it continued
        self._admitted: frozenset[str] = frozenset()
        self._interval: float = config.get(HEARTBEAT_INTERVAL)
        self._timeout: float = config.get(HEARTBEAT_TIMEOUT)
        self._max_backoff: float = config.get(TASKEXECUTOR_REGISTRATION_MAX_BACKOFF)
        self._backoff = INITIAL_REGISTRATION_BACKOFF_S
        self._next_registration = 0.0
        self._last_heartbeat_sent = 0.0
        self._last_heartbeat_ok = 0.0

    @property
    def tick_interval(self) -> float:
        return min(max(self._interval / 2.0, 0.05), 1.0)

    @property
    def registered_session(self) -> str | None:
        """The leader session this TaskExecutor is registered under; None while it is not."""
        with self._lock:
            return None if self._registered is None else self._registered.session_id

    def tick(self) -> None:
        leader = self._current_leader()
        now = self._clock()
        with self._lock:
            if self._stopped:
                return
            registered = self._registered
        if leader is None:
            if registered is not None:
                log.info("no leading master known any more; tasks keep running")
                self._forget()
            return
        if registered != leader:
            if registered is not None:
                log.info(
                    "the leading master changed to %s (session %s); registering with it",
                    leader.address,
                    leader.session_id,
                )
                self._forget()
            if now >= self._next_registration:
                self._register(leader, now)
            return
        if now - self._last_heartbeat_sent >= self._interval:
            self._heartbeat(leader, now)

    def _register(self, leader: LeaderInfo, now: float) -> None:
        with self._lock:
            self._registering = True
            previous = self._registration_id
        try:
            registration = TaskExecutorRegistration(
                task_executor_id=self._identity.task_executor_id,
                hostname=self._identity.hostname,
                queue=self._identity.queue,
                slots=self._slots.count,
                slot_report=self._slots.slot_report(leader.session_id),
                spark_master=self._identity.spark_master,
                previous_registration_id=previous,
                pool=self._identity.pool,
            )
            ack = self._client.register(leader.address, leader.session_id, registration)
        except SparkDispatchError as exc:
            if isinstance(exc, FencingTokenMismatch):
                self._session_refused()
            log.warning(
                "registration with the master at %s (session %s) failed, next try in %.2fs: %s",
                leader.address,
                leader.session_id,
                self._backoff,
                exc,
            )
            self._next_registration = now + self._backoff
            self._backoff = min(self._backoff * 2.0, self._max_backoff)
            with self._registration_changed:
                self._registering = False
                self._registration_changed.notify_all()
            return
        with self._registration_changed:
            self._registering = False
            self._registration_changed.notify_all()
            if self._stopped:  # unregistered meanwhile: the ResourceManager drops it by its heartbeats
                return
            self._registered = leader
            self._registration_id = ack.registration_id
            self._admitted = (self._admitted if ack.resumed else frozenset()) | {ack.registration_id}
            self._last_heartbeat_sent = self._last_heartbeat_ok = now
        self._backoff = INITIAL_REGISTRATION_BACKOFF_S
        if ack.heartbeat_interval_s > 0:
            self._interval = ack.heartbeat_interval_s
        if ack.heartbeat_timeout_s > 0:
            self._timeout = ack.heartbeat_timeout_s
        log.info(
            "registered as %s with the ResourceManager %s at %s (session %s, registration %s%s)",
            self._identity.task_executor_id,
            ack.resource_manager_id,
            leader.address,
            leader.session_id,
            ack.registration_id,
            f", continuing {previous}" if ack.resumed else "",
        )

    def _heartbeat(self, leader: LeaderInfo, now: float) -> None:
        self._last_heartbeat_sent = now
        kept = self._kept_jobs()
        try:
            answer = self._client.heartbeat(
                leader.address,
                leader.session_id,
                self._identity.task_executor_id,
                slot_report=self._slots.slot_report(leader.session_id),
                executions=self._slots.executions(leader.session_id),
                kept_jobs=kept,
            )
        except UnknownTaskExecutor:
            log.info("the ResourceManager at %s does not know this TaskExecutor; registering again", leader.address)
            self._forget()
        except FencingTokenMismatch as exc:
            log.info(
                "the master at %s refused session %s; registering again: %s", leader.address, leader.session_id, exc
            )
            self._session_refused()
            self._forget()
        except SparkDispatchError as exc:
            silent = now - self._last_heartbeat_ok
            if silent >= self._timeout:
                log.warning(
                    "the ResourceManager at %s has not answered for %.1fs; tasks keep running, registering again: %s",
                    leader.address,
                    silent,
                    exc,
                )
                self._forget()
            else:
                log.debug("heartbeat to %s failed: %s", leader.address, exc)
        else:
            with self._registration_changed:
                self._last_heartbeat_ok = now
                self._registration_changed.notify_all()
            self._deliver_held_reports(leader)
            if self._kept_results_dir is not None:
                release_ended(self._kept_results_dir, set(answer.release_kept) & set(kept))

    def _kept_jobs(self) -> list[str]:
        """The jobs whose results this TaskExecutor keeps and of which it runs no execution."""
        if self._kept_results_dir is None:
            return []
        return kept_jobs(self._kept_results_dir, {e["job_id"] for e in self._slots.executions()})

    def start_deadline(self, registration_id: str = "") -> float | None:
        """Until when (`time.monotonic()`) an attempt admitted under `registration_id` may start its
        function: a heartbeat timeout, less one interval, after the master last answered a
        heartbeat. Later, the master may have declared this TaskExecutor lost (it was frozen, or cut
        off) and run the attempt elsewhere. 0 (long past) once this TaskExecutor registered afresh
        since (the master had given it up: a heartbeat answered now does not make the attempt its
        own again); None before the first answer (registration fences then)."""
        with self._lock:
            last_ok = self._last_heartbeat_ok
            if registration_id and registration_id not in self._admitted:
                return 0.0
        return last_ok + max(self._timeout - self._interval, self._interval) if last_ok else None

    def _silence_limit(self) -> float:
        """Silence after which a deployment waits for a fresh heartbeat: as the master's own rule for
        an unreachable TaskExecutor, half the heartbeat timeout, at least two intervals."""
        return max(2.0 * self._interval, self._timeout / 2.0)

    def _deliver_held_reports(self, leader: LeaderInfo) -> None:
        """Deliver the terminal reports the master missed; a refused one (its JobMaster is gone) is dropped."""
        for held in self._slots.held_reports():
            update = held.update
            try:
                if held.session_id != leader.session_id:
                    raise FencingTokenMismatch("JobMaster", leader.session_id, held.session_id)
                self._client.report_state(leader.address, held.session_id, update)
            except (FencingTokenMismatch, UnknownJob) as exc:
                log.info(
                    "job %s: the held %s report of execution %s is refused; dropped: %s",
                    update.job_id,
                    update.state.value,
                    update.execution_id,
                    exc,
                )
                discard_result(update)
            except SparkDispatchError as exc:
                log.info(
                    "job %s: the held %s report of execution %s is still not delivered: %s",
                    update.job_id,
                    update.state.value,
                    update.execution_id,
                    exc,
                )
                return
            else:
                log.info(
                    "job %s: the held %s report of execution %s was delivered",
                    update.job_id,
                    update.state.value,
                    update.execution_id,
                )
            self._slots.report_taken(update.execution_id)

    def _forget(self) -> None:
        with self._lock:
            self._registered = None
        self._next_registration = 0.0

    def admits(
        self, tdd: TaskDeploymentDescriptor, session_id: str, *, wait_s: float = REGISTRATION_WAIT_S
    ) -> str | None:
        """Why this deployment must not run here (None: it may): it runs only while this
        TaskExecutor is registered under the deploying leader's session `session_id` and the
        registration its slot was allocated under. Waits up to `wait_s` for a registration
        that is under way or due (a deployment may overtake the answer to its registration)."""
        asked = self._clock()
        deadline = asked + wait_s
        with self._registration_changed:
            # Silent for long (frozen, cut off): the master may have given this TaskExecutor up and
            # its tasks to others. A heartbeat answered after now, or a new registration, tells.
            confirm = asked - self._last_heartbeat_ok > self._silence_limit()
            while not self._stopped and (
                self._registered is None or self._registering or (confirm and self._last_heartbeat_ok < asked)
            ):
                remaining = deadline - self._clock()
                if remaining <= 0:
                    break
                self._registration_changed.wait(remaining)
            registered, admitted, current = self._registered, self._admitted, self._registration_id
            unconfirmed = confirm and self._last_heartbeat_ok < asked
        if registered is None:
            return "this TaskExecutor is not registered with a ResourceManager"
        if unconfirmed:
            return (
                f"this TaskExecutor had not heard from the master for over {self._silence_limit():g}s "
                f"and could not confirm its registration within {wait_s:g}s"
            )
        if session_id != registered.session_id:
            return (
                f"it comes from leader session {session_id}, but this TaskExecutor is registered under "
                f"session {registered.session_id}"
            )
        if tdd.registration_id not in admitted:
            return (
                f"its slot was allocated to registration {tdd.registration_id or '(none)'} of this "
                f"TaskExecutor, not to the current one, {current} (it was sent before this "
                "TaskExecutor started or registered again)"
            )
        return None

    def refuse(self, tdd: TaskDeploymentDescriptor, session_id: str, reason: str) -> None:
        """Report a deployment that `admits` refused FAILED to its JobMaster, which fails it over
        (held for the next heartbeats if the master does not answer); a JobMaster of a former
        leader does not take the report, and needs none."""
        log.warning(
            "job %s: refusing execution %s of %s[%d]: %s",
            tdd.job_id,
            tdd.execution_id,
            tdd.vertex_id,
            tdd.subtask_index,
            reason,
        )
        update = ExecutionStateUpdate(
            job_id=tdd.job_id,
            job_master_id=tdd.job_master_id,
            execution_id=tdd.execution_id,
            state=ExecutionState.FAILED,
            task_executor_id=self._identity.task_executor_id,
            failure=Failure(
                "DeploymentRefused", f"TaskExecutor {self._identity.task_executor_id} refused the deployment: {reason}"
            ),
        )
        leader = self._current_leader()
        try:
            if leader is None:
                raise ServiceUnavailable("no leading master known")
            self._client.report_state(leader.address, session_id, update)
        except (FencingTokenMismatch, UnknownJob) as exc:
            log.info("job %s: the refusal of execution %s was not taken: %s", tdd.job_id, tdd.execution_id, exc)
        except SparkDispatchError as exc:
            log.info(
                "job %s: the refusal of execution %s was not delivered, held for the next heartbeats: %s",
                tdd.job_id,
                tdd.execution_id,
                exc,
            )
            self._slots.hold_report(session_id, update)
        finally:
            self._slots.forget_received(tdd.execution_id)

    def unregister(self, *, timeout: float = UNREGISTER_TIMEOUT_S) -> None:
        """Leave the ResourceManager now (this TaskExecutor is stopping), best effort: its
        JobMasters fail its tasks over at once. Registers no more afterwards."""
        with self._registration_changed:
            self._stopped = True
            registered, registration_id = self._registered, self._registration_id
            self._registered = None
            self._registration_changed.notify_all()
        if registered is None or registration_id is None:
            return
        try:
            self._client.unregister(
                registered.address,
                registered.session_id,
                self._identity.task_executor_id,
                registration_id=registration_id,
                timeout=timeout,
            )
        except SparkDispatchError as exc:
            log.warning(
                "could not unregister from the master at %s; it finds this TaskExecutor gone by its heartbeats: %s",
                registered.address,
                exc,
            )
        else:
            log.info("unregistered from the master at %s", registered.address)

    def report(self, session_id: str, update: ExecutionStateUpdate) -> None:
        """A StateReporter: deliver to the current leader, retrying while it is unreachable.

        Terminal states are retried for up to the heartbeat timeout, others briefly, so a
        master that is away does not hold a task up.
        """
        patience = self._timeout if update.state.is_terminal else self._interval
        deadline = self._clock() + patience
        if update.state.is_terminal:
            expect_message()  # the slot's next deployment follows this report at once
        pause = 0.05
        while True:
            leader = self._current_leader()
            try:
                if leader is None:
                    raise ServiceUnavailable("no leading master known")
                self._client.report_state(leader.address, session_id, update)
                return
            except ServiceUnavailable:
                if self._clock() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 1.0)


class MasterConnectionStep(PeriodicStep):
    """Worker step: registration, heartbeats and broker upkeep on the worker's timer."""

    label = "sparkdispatch-master-connection"

    def __init__(self, w: Any, **kwargs: Any) -> None:
        super().__init__(w, **kwargs)
        self._connection: MasterConnection | None = None
        self._runner: TaskRunner | None = None
        self._config: Configuration | None = None
        self._last_cleanup = 0.0
        self._hostname: str | None = None
        self._session: str | None = None  # the leader session of the last registration
        self._consumer_ready = threading.Event()
        self._ready_deadline = 0.0

    def start_ticking(self, w: Any) -> float:
        runtime = self.task_executor(w)
        self._connection = runtime.connection
        self._runner = runtime.runner
        self._config = runtime.config
        self._hostname = w.hostname
        self._ready_deadline = time.monotonic() + CONSUMER_READY_TIMEOUT_S
        worker_ready.connect(self._worker_ready, weak=False)
        worker_shutting_down.connect(self._shutting_down, weak=False)
        task_received.connect(self._received, weak=False)
        task_postrun.connect(self._ran, weak=False)
        return self._connection.tick_interval

    def _received(self, request: Any = None, **_: Any) -> None:
        # On the consumer's thread, as the worker takes a deployment from the broker (it may
        # then wait for a thread, or for its slot): listed in the heartbeats from now on.
        if self._runner is None or getattr(request, "name", None) != DEPLOY_TASK:
            return
        try:
            tdd, session_id = request.args
            self._runner.slots.receive(str(tdd["job_id"]), str(tdd["execution_id"]), str(session_id))
        except (TypeError, ValueError, KeyError):
            log.warning("a deployment without a readable job and execution id was received")

    def _ran(self, sender: Any = None, args: Any = None, **_: Any) -> None:
        # On the task's thread, when the deployment task returned (or raised): whatever it did,
        # it waits for its slot no more.
        if self._runner is None or getattr(sender, "name", None) != DEPLOY_TASK:
            return
        try:
            self._runner.slots.forget_received(str(args[0]["execution_id"]))
        except (TypeError, IndexError, KeyError):
            pass

    def _shutting_down(self, sender: str | None = None, **_: Any) -> None:
        # Sent from the SIGTERM/SIGINT handler, seconds before the worker's loop notices and
        # closes the steps: unregister now, from a thread of its own (the handler interrupted
        # the main thread wherever it was).
        if sender == self._hostname and self._connection is not None:
            threading.Thread(target=self._connection.unregister, name="sparkdispatch-unregister").start()

    def _worker_ready(self, sender: Any = None, **_: Any) -> None:
        # sent with the consumer, once its steps (the remote-control queue among them) started
        if getattr(sender, "hostname", self._hostname) == self._hostname:
            self._consumer_ready.set()

    def tick(self) -> None:
        assert self._connection is not None and self._runner is not None and self._config is not None
        if not self._consumer_ready.is_set() and time.monotonic() < self._ready_deadline:
            return  # not registering before the worker can take remote-control calls
        self._connection.tick()
        session = self._connection.registered_session
        if session is not None and session != self._session:
            if self._session is not None:  # a new leader: the former one's tasks are nobody's now
                self._runner.cancel_other_sessions(session)
            self._session = session
        now = time.monotonic()
        if now - self._last_cleanup >= PIDBOX_CLEANUP_EVERY_S:
            self._last_cleanup = now
            remove_stale_pidbox_messages(self._config)

    def close(self, w: Any) -> None:
        """The worker begins to stop (if no signal told it before): leave the ResourceManager
        before the steps stop one by one, so the JobMasters fail the tasks over now."""
        if self._connection is not None:
            self._connection.unregister()

    def stop(self, w: Any) -> None:
        worker_ready.disconnect(self._worker_ready)
        worker_shutting_down.disconnect(self._shutting_down)
        task_received.disconnect(self._received)
        task_postrun.disconnect(self._ran)
        super().stop(w)
        if self._connection is not None:
            self._connection.unregister()

    shutdown = stop
