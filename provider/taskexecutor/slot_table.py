"""The slots of one TaskExecutor and every execution its heartbeats list (`SlotTable`).

A slot runs one task at a time (`RunningExecution`); the table also lists deployments the worker
took from the broker that have not reached their slot (`ReceivedDeployment`) and terminal reports
the JobMaster has not taken yet (`HeldReport`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkdispatch.errors import IllegalStateTransition
from sparkdispatch.model.protocol import ExecutionStateUpdate, SlotReport, SlotStatus, TaskDeploymentDescriptor
from sparkdispatch.model.states import ExecutionState

log = logging.getLogger(__name__)


@dataclass
class RunningExecution:
    """A task occupying a slot."""

    tdd: TaskDeploymentDescriptor
    session_id: str
    state: ExecutionState = ExecutionState.DEPLOYING
    cancelled: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    #: set once the last report queued in the background for this execution was handled
    reported: threading.Event | None = None
    #: the JobMaster refused a report of this execution: it runs it no more
    stale: bool = False


@dataclass
class ReceivedDeployment:
    """A deployment the worker took from the broker that has not reached its slot yet."""

    job_id: str
    execution_id: str
    session_id: str
    cancelled: bool = False


@dataclass(frozen=True)
class HeldReport:
    """A terminal report the JobMaster has not taken yet (it was unreachable); delivered again later."""

    session_id: str
    update: ExecutionStateUpdate


class SlotTable:
    """The slots of one TaskExecutor and every execution its heartbeats list. Thread-safe.

    A slot runs one task at a time. Besides the tasks in slots, the heartbeats list deployments
    the worker took from the broker that wait for a thread or their slot (DEPLOYING), and ended
    executions whose terminal report waits to be delivered again (`hold_report`): an execution is
    listed from the moment the worker has it until its JobMaster has its end, so the JobMaster
    never mistakes a live one for lost. An execution id runs once: a second delivery of a
    deployment that runs, or ran lately, is dropped.
    """

    RECENT_EXECUTIONS = 1024  # execution ids remembered against a second delivery
    MAX_HELD_REPORTS = 1024  # the oldest held report is dropped beyond this

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError("a TaskExecutor needs at least one slot")
        self.count = count
        self._lock = threading.Lock()
        self._by_slot: dict[int, RunningExecution] = {}
        self._received: dict[str, ReceivedDeployment] = {}
        self._held: OrderedDict[str, HeldReport] = OrderedDict()
        self._recent: OrderedDict[str, None] = OrderedDict()

    def receive(self, job_id: str, execution_id: str, session_id: str) -> None:
        """The worker took this deployment from the broker; it is listed until it occupies its slot."""
        with self._lock:
            if execution_id not in self._recent and self._in_slot(execution_id) is None:
                self._received.setdefault(execution_id, ReceivedDeployment(job_id, execution_id, session_id))

    def forget_received(self, execution_id: str) -> None:
        """The deployment will not occupy a slot (refused, dropped, or its task ended)."""
        with self._lock:
            self._received.pop(execution_id, None)

    def cancel_received(self, execution_id: str) -> bool:
        """Cancel a deployment taken from the broker before it runs: it ends CANCELED, running nothing."""
        with self._lock:
            received = self._received.get(execution_id)
            if received is not None:
                received.cancelled = True
            return received is not None

    def occupy(
        self,
        tdd: TaskDeploymentDescriptor,
        session_id: str,
        *,
        supersede: Callable[[RunningExecution], object] | None = None,
        wait_s: float = 0.0,
    ) -> RunningExecution | None:
        """Take the slot `tdd` names; None if this execution runs or ran here already (a second
        delivery of its deployment), which must not run again.

        The master hands out a slot only once it considers the slot's last attempt over, but
        that attempt may still be stopping here (its cancellation travels apart from this
        deployment). So a busy slot's attempt is superseded (`supersede` stops it) and awaited
        for up to `wait_s` before the deployment is refused.
        """
        deadline = time.monotonic() + wait_s
        while True:
            with self._lock:
                if not 0 <= tdd.slot_index < self.count:
                    raise IllegalStateTransition(
                        f"slot {tdd.slot_index} does not exist on this TaskExecutor (it has {self.count} slots)"
                    )
                if tdd.execution_id in self._recent or self._in_slot(tdd.execution_id) is not None:
                    return None
                busy = self._by_slot.get(tdd.slot_index)
                if busy is None:
                    running = RunningExecution(tdd=tdd, session_id=session_id)
                    received = self._received.pop(tdd.execution_id, None)
                    if received is not None and received.cancelled:
                        running.cancelled.set()
                    self._by_slot[tdd.slot_index] = running
                    return running
            if supersede is not None and not busy.cancelled.is_set():
                supersede(busy)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not busy.done.wait(remaining):
                raise IllegalStateTransition(
                    f"slot {tdd.slot_index} is busy with execution {busy.tdd.execution_id} of job {busy.tdd.job_id}"
                    + (f", which did not stop within {wait_s:g}s" if wait_s else "")
                )

    def release(self, running: RunningExecution) -> None:
        with self._lock:
            if self._by_slot.get(running.tdd.slot_index) is running:
                del self._by_slot[running.tdd.slot_index]
            self._recent[running.tdd.execution_id] = None
            if len(self._recent) > self.RECENT_EXECUTIONS:
                self._recent.popitem(last=False)
        running.done.set()

    def find(self, execution_id: str) -> RunningExecution | None:
        with self._lock:
            return self._in_slot(execution_id)

    def _in_slot(self, execution_id: str) -> RunningExecution | None:
        return next((r for r in self._by_slot.values() if r.tdd.execution_id == execution_id), None)

    def running(self) -> list[RunningExecution]:
        with self._lock:
            return list(self._by_slot.values())

    def received(self) -> list[ReceivedDeployment]:
        with self._lock:
            return list(self._received.values())

    def hold_report(self, session_id: str, update: ExecutionStateUpdate) -> None:
        """Keep a terminal report the JobMaster did not take: listed in the heartbeats, delivered again."""
        with self._lock:
            self._held[update.execution_id] = HeldReport(session_id, update)
            if len(self._held) > self.MAX_HELD_REPORTS:
                _, dropped = self._held.popitem(last=False)
                log.warning(
                    "job %s: dropping the undelivered %s report of execution %s (%d reports held)",
                    dropped.update.job_id,
                    dropped.update.state.value,
                    dropped.update.execution_id,
                    self.MAX_HELD_REPORTS,
                )

    def held_reports(self) -> list[HeldReport]:
        with self._lock:
            return list(self._held.values())

    def report_taken(self, execution_id: str) -> None:
        """The held report of this execution was delivered (or refused): forget it."""
        with self._lock:
            self._held.pop(execution_id, None)

    def slot_report(self, session_id: str | None = None) -> SlotReport:
        """Every slot, free or allocated; with `session_id`, a task another leader session deployed
        (a former leader's, being cancelled) leaves its slot free for this one."""
        with self._lock:
            return SlotReport(
                tuple(
                    SlotStatus(index=i, allocation_id=r.tdd.allocation_id, job_id=r.tdd.job_id)
                    if (r := self._by_slot.get(i)) is not None and session_id in (None, r.session_id)
                    else SlotStatus(index=i)
                    for i in range(self.count)
                )
            )

    def executions(self, session_id: str | None = None) -> list[dict[str, str]]:
        """The heartbeat payload: every execution this TaskExecutor has (of `session_id`, if given):
        in slots, taken from the broker (DEPLOYING), and ended with their reports held."""
        with self._lock:
            listed: dict[str, tuple[str, ExecutionState, str]] = {}
            for r in self._by_slot.values():
                listed[r.tdd.execution_id] = (r.tdd.job_id, r.state, r.session_id)
            for d in self._received.values():
                if not d.cancelled:
                    listed.setdefault(d.execution_id, (d.job_id, ExecutionState.DEPLOYING, d.session_id))
            for h in self._held.values():
                listed.setdefault(h.update.execution_id, (h.update.job_id, h.update.state, h.session_id))
        return [
            {"job_id": job_id, "execution_id": execution_id, "state": state.value}
            for execution_id, (job_id, state, session) in listed.items()
            if session_id in (None, session)
        ]
