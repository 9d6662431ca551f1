"""The ResourceManager: TaskExecutor registration and heartbeats in front of the SlotManager.

One ResourceManager serves one leadership: its fencing token is the leader session id, and
TaskExecutor calls carrying another are refused (`FencingTokenMismatch`). JobMasters are
objects on the same loop and call it directly. A TaskExecutor is lost when its heartbeats stop
for `heartbeat.timeout`, when the JobMasters' calls to it (deployments, cancellations) fail
`heartbeat.rpc-failure-threshold` times in a row (`record_rpc_failure`; a call that goes
through, `record_rpc_success`, starts the count again) and it has sent no heartbeat for two
intervals, when it unregisters (it is stopping), or when it registers anew; its slots then
vanish and every job that held one is told which allocations it lost. A TaskExecutor that keeps
heartbeating is never lost by failed calls: they go through the broker, and a broker that
restarts is no fault of the TaskExecutors (the JobMasters retry their deployments). A
TaskExecutor that registers again continuing its current registration keeps its slots and
their allocations (see the SlotManager).

Slot checks are coalesced: a change schedules one `check_requirements` with `loop.call_soon`,
so listeners are never called from inside the call that caused the change. One timer runs the
time-based checks (`check_timeouts`: silent TaskExecutors, unmet slot requests, pins to
TaskExecutors not registered for `heartbeat.timeout`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from sparkdispatch.errors import FencingTokenMismatch, LeadershipLost, UnknownTaskExecutor
from sparkdispatch.resourcemanager.heartbeat import Clock, HeartbeatMonitor
from sparkdispatch.model.job_graph import DEFAULT_POOL
from sparkdispatch.model.protocol import (
    ExecutionReport,
    RegistrationAck,
    SlotReport,
    TaskExecutorRegistration,
    as_execution_reports,
    as_slot_report,
)
from sparkdispatch.model.rest_shapes import TaskManager, TaskManagerExecution
from sparkdispatch.resourcemanager.messages import ResourceOverview
from sparkdispatch.resourcemanager.slot_manager import SlotManager
from sparkdispatch.resourcemanager.slot_records import SlotListener
from sparkdispatch.resourcemanager.settings import ResourceManagerSettings

log = logging.getLogger(__name__)

COMPONENT = "ResourceManager"


class ResourceManagerGateway(Protocol):
    """What the other components call on the ResourceManager: plain methods, on the master's loop."""

    @abstractmethod
    def register_task_executor(self, session_id: str | None, registration: TaskExecutorRegistration) -> RegistrationAck:
        """A TaskExecutor (re)registers under the leader session `session_id` (fenced)."""

    @abstractmethod
    def heartbeat(
        self,
        session_id: str | None,
        task_executor_id: str,
        slot_report: SlotReport,
        executions: Sequence[ExecutionReport],
    ) -> None:
        """A TaskExecutor's heartbeat (fenced); `UnknownTaskExecutor` tells it to register again."""

    @abstractmethod
    def unregister_task_executor(
        self, task_executor_id: str, reason: str, *, registration_id: str | None = None
    ) -> bool:
        """A TaskExecutor is gone (it stopped, or was found lost); False if it is not registered
        (under `registration_id`, if given)."""

    @abstractmethod
    def declare_requirements(
        self,
        job_id: str,
        slots: int,
        listener: SlotListener,
        *,
        pool: str = DEFAULT_POOL,
        pinned: Mapping[str, int] | None = None,
    ) -> None:
        """A JobMaster needs `slots` slots of TaskExecutors of `pool` in all (0 clears); `listener` hears about them.
        `pinned[te_id] = n`: n of the missing ones must be on that TaskExecutor (0: only watch it),
        and `listener` hears when it goes (see the SlotManager)."""

    @abstractmethod
    def release_slot(self, job_id: str, allocation_id: str) -> bool:
        """A JobMaster lets its slot go; False if the job does not hold it."""

    @abstractmethod
    def record_rpc_failure(self, task_executor_id: str) -> None:
        """A call to the TaskExecutor failed; `heartbeat.rpc-failure-threshold` in a row make it lost
        once it has also sent no heartbeat for half the heartbeat timeout."""

    @abstractmethod
    def record_rpc_success(self, task_executor_id: str) -> None:
        """A call to the TaskExecutor went through: its count of failures in a row starts again."""

    @abstractmethod
    def task_executor_hostname(self, task_executor_id: str) -> str | None:
        """The Celery host name remote-control calls reach the TaskExecutor by; None if it is not registered."""

    @abstractmethod
    def overview(self) -> ResourceOverview:
        """TaskExecutor and slot counts for `GET /overview`."""

    @abstractmethod
    def task_executors(self) -> list[TaskManager]:
        """The `GET /taskmanagers` entries."""


class ResourceManager:
    """TaskExecutors, their slots and heartbeats, and the slot requirements of JobMasters."""

    def __init__(self, settings: ResourceManagerSettings, session_id: str, *, clock: Clock | None = None) -> None:
        self.session_id = session_id
        self.resource_manager_id = uuid.uuid4().hex
        self._settings = settings
        self._heartbeats: HeartbeatMonitor[tuple[ExecutionReport, ...]] = HeartbeatMonitor.from_settings(
            settings.heartbeat, self, clock=clock, name="TaskExecutor heartbeat"
        )
        self._slots = SlotManager(
            slot_request_timeout=settings.slot_request_timeout,
            task_executor_idle_timeout=settings.task_executor_idle_timeout,
            # as long as a TaskExecutor that was registered may stay silent before it is lost
            unregistered_pin_timeout=settings.heartbeat.timeout,
            clock=clock,
            on_change=self._schedule_check,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._check_handle: asyncio.Handle | None = None
        self._timeout_task: asyncio.Task[None] | None = None
        self._stopped = False

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start the timer of the heartbeat and slot request timeout checks on the running loop."""
        self._loop = asyncio.get_running_loop()
        if self._timeout_task is None:
            self._timeout_task = self._loop.create_task(
                self._check_timeouts_periodically(), name="resource-manager-timeouts"
            )
        log.info("ResourceManager %s started for leader session %s", self.resource_manager_id, self.session_id)

    def stop(self) -> None:
        """Unregister every TaskExecutor, drop every requirement and cancel the timers, telling
        no one: this is the end of the leadership (Flink's `SlotManager.suspend`), and the
        JobMasters are suspended alongside. Later calls get `LeadershipLost`."""
        if self._stopped:
            return
        self._stopped = True
        self._heartbeats.clear()
        if self._timeout_task is not None:
            self._timeout_task.cancel()
            self._timeout_task = None
        if self._check_handle is not None:
            self._check_handle.cancel()
            self._check_handle = None
        self._slots.clear()
        log.info("ResourceManager %s stopped for leader session %s", self.resource_manager_id, self.session_id)

    # ---------------------------------------------------------------- TaskExecutor calls (fenced)

    def register_task_executor(
        self, session_id: str | None, registration: TaskExecutorRegistration | Mapping[str, Any]
    ) -> RegistrationAck:
        """Register (or register again) a TaskExecutor under this leader session."""
        self._check_fencing(session_id)
        if not isinstance(registration, TaskExecutorRegistration):
            registration = TaskExecutorRegistration.from_dict(registration)
        task_executor_id = registration.task_executor_id
        self._heartbeats.unmonitor(task_executor_id)
        registered = self._slots.register_task_executor(registration)
        self._heartbeats.monitor(task_executor_id)
        return RegistrationAck(
            resource_manager_id=self.resource_manager_id,
            heartbeat_interval_ms=round(self._settings.heartbeat.interval * 1000),
            heartbeat_timeout_ms=round(self._settings.heartbeat.timeout * 1000),
            registration_id=registered.registration_id,
            resumed=registered.resumed,
        )

    def heartbeat(
        self,
        session_id: str | None,
        task_executor_id: str,
        slot_report: SlotReport | Mapping[str, Any],
        executions: Sequence[ExecutionReport | Mapping[str, Any]] | None = (),
    ) -> None:
        """A TaskExecutor's heartbeat with its slot report and running executions.

        `UnknownTaskExecutor` tells it to register again."""
        self._check_fencing(session_id)
        report = as_slot_report(slot_report)
        reports = as_execution_reports(executions)
        if not self._heartbeats.report(task_executor_id, reports):
            raise UnknownTaskExecutor(
                f"TaskExecutor {task_executor_id} is not registered with this ResourceManager; register again"
            )
        self._slots.report_slot_status(task_executor_id, report)
        self._forward_executions(task_executor_id, reports)

    def unregister_task_executor(
        self, task_executor_id: str, reason: str, *, registration_id: str | None = None
    ) -> bool:
        """Remove a TaskExecutor (only under `registration_id`, if given); its slots vanish and
        their jobs are told. False if it is not registered (so)."""
        removed = self._slots.unregister_task_executor(task_executor_id, reason, registration_id=registration_id)
        if removed or registration_id is None:
            self._heartbeats.unmonitor(task_executor_id)
        return removed

    # ---------------------------------------------------------------- JobMaster calls (in process)

    def declare_requirements(
        self,
        job_id: str,
        slots: int,
        listener: SlotListener,
        *,
        pool: str = DEFAULT_POOL,
        pinned: Mapping[str, int] | None = None,
    ) -> None:
        """Job `job_id` needs `slots` slots of TaskExecutors of `pool` in all (0 clears), `pinned[te_id]`
        of the missing ones on that TaskExecutor (0: only watch it); `listener` hears of them."""
        self._check_running()
        self._slots.declare_requirements(job_id, slots, listener, pool=pool, pinned=pinned)

    def release_slot(self, job_id: str, allocation_id: str) -> bool:
        """The job's slot is free again; False if the job does not hold that allocation."""
        self._check_running()
        return self._slots.release_slot(job_id, allocation_id)

    def record_rpc_failure(self, task_executor_id: str) -> None:
        """A JobMaster's call to the TaskExecutor (a deployment, a cancellation) failed;
        `heartbeat.rpc-failure-threshold` failures in a row make it lost once it has also sent no
        heartbeat for half the heartbeat timeout. Ignored for a TaskExecutor that is not registered (or after
        the leadership ended)."""
        self._heartbeats.record_rpc_failure(task_executor_id)

    def record_rpc_success(self, task_executor_id: str) -> None:
        """A JobMaster's call to the TaskExecutor went through: its failures in a row start again."""
        self._heartbeats.record_rpc_success(task_executor_id)

    # ---------------------------------------------------------------- queries

    def task_executor_hostname(self, task_executor_id: str) -> str | None:
        return self._slots.hostname_of(task_executor_id)

    def overview(self) -> ResourceOverview:
        return ResourceOverview(
            taskmanagers=self._slots.task_executor_count,
            slots_total=self._slots.slots_total,
            slots_available=self._slots.slots_free,
        )

    def task_executors(self) -> list[TaskManager]:
        """The `GET /taskmanagers` entries: slots, allocations, idleness, last heartbeat (epoch ms)
        and the executions of the last heartbeat."""
        return [
            dataclasses.replace(
                entry,
                last_heartbeat=self._heartbeats.last_heartbeat_ms(entry.id),
                executions=tuple(
                    TaskManagerExecution.of(report) for report in self._heartbeats.payload(entry.id) or ()
                ),
            )
            for entry in self._slots.describe_all()
        ]

    # ---------------------------------------------------------------- HeartbeatListener

    def notify_heartbeat_timeout(self, target_id: str) -> None:
        timeout = self._heartbeats.timeout
        self.unregister_task_executor(target_id, f"no heartbeat for {timeout:g}s")

    def notify_target_unreachable(self, target_id: str) -> None:
        heartbeat = self._settings.heartbeat
        self.unregister_task_executor(
            target_id,
            f"unreachable after {heartbeat.rpc_failure_threshold} failed calls "
            f"and no heartbeat for {2 * heartbeat.interval:g}s",
        )

    # ---------------------------------------------------------------- internals

    def check_requirements(self) -> int:
        """Hand free slots to waiting jobs now; returns how many were handed out."""
        self._check_handle = None
        return self._slots.check_requirements()

    def check_timeouts(self) -> None:
        """Run every time-based check now (heartbeats, slot requests); the timer calls this."""
        self._heartbeats.check_timeouts()
        self._slots.check_timeouts()

    def _schedule_check(self) -> None:
        if self._check_handle is not None or self._stopped:
            return
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif loop is not self._loop:  # Flink's validateRunsInMainThread
            raise RuntimeError("the ResourceManager was called from outside its event loop")
        self._check_handle = loop.call_soon(self.check_requirements)

    async def _check_timeouts_periodically(self) -> None:
        # Every half heartbeat interval, and at least four times per timeout: a silent TaskExecutor
        # is found within 1.25 x heartbeat.timeout, an unmet request within 1.25 x slot.request.timeout.
        heartbeat = self._settings.heartbeat
        interval = min(heartbeat.interval / 2, heartbeat.timeout / 4, self._settings.slot_request_timeout / 4)
        while True:
            await asyncio.sleep(interval)
            self.check_timeouts()

    def _forward_executions(self, task_executor_id: str, reports: tuple[ExecutionReport, ...]) -> None:
        by_job: dict[str, list[ExecutionReport]] = {job_id: [] for job_id in self._slots.jobs_on(task_executor_id)}
        for report in reports:
            by_job.setdefault(report.job_id, []).append(report)
        for job_id, job_reports in by_job.items():
            listener = self._slots.listener_of(job_id)
            if listener is None:
                continue
            try:
                listener.task_executor_heartbeat(task_executor_id, job_reports)
            except Exception:
                log.exception("slot listener of job %s failed on a heartbeat of %s", job_id, task_executor_id)

    def _check_fencing(self, session_id: str | None) -> None:
        self._check_running()
        if session_id != self.session_id:
            raise FencingTokenMismatch(COMPONENT, self.session_id, session_id)

    def _check_running(self) -> None:
        if self._stopped:
            raise LeadershipLost(COMPONENT)
