"""An attempt's start deadline, as its slot process checks it before each function of the attempt starts.

A run carries `start_before` (`time.monotonic()`): the TaskExecutor's last answered heartbeat plus
the heartbeat timeout, less one interval. Past it, the process asks the TaskExecutor for a fresh
one (`may-start`); without one, the master may have declared the TaskExecutor lost and run the
attempt elsewhere, so no further function of it starts (`StaleExecution`).
"""

from __future__ import annotations

import queue
import time

from sparkdispatch.model.job_result import Failure
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.taskexecutor.slot_protocol import (
    MAY_START,
    MAY_START_WAIT_S,
    START_DEADLINE,
    AttemptState,
    ControlChannel,
    Message,
)

NOT_STARTED_LATE = (
    "not started: the TaskExecutor had not heard from the master for a heartbeat timeout, so the "
    "master may have declared it lost and run this attempt elsewhere"
)


class StartedLate(Exception):
    """A function of the attempt was about to start past the start deadline, with no fresh one."""


def not_started_late() -> AttemptState:
    """How an attempt that must not start (any further function) ends."""
    return AttemptState(ExecutionState.FAILED, failure=Failure("StaleExecution", NOT_STARTED_LATE))


class StartDeadline:
    """One attempt's deadline; asks for a fresh one over `channel`, whose other messages wait in `requests`."""

    def __init__(
        self, channel: ControlChannel, requests: queue.SimpleQueue[Message], start_before: float | None
    ) -> None:
        self._channel = channel
        self._requests = requests
        self._start_before = start_before

    def may_start(self) -> bool:
        """Whether a function may start: before the run's deadline, or before the fresh one the
        TaskExecutor gives when asked (it has one while the master answers its heartbeats)."""
        if self._start_before is None or time.monotonic() <= self._start_before:
            return True
        self._channel.send({"type": MAY_START})
        deadline = time.monotonic() + MAY_START_WAIT_S
        others: list[Message] = []  # not the answer: for the serving loop, after this attempt
        try:
            while (remaining := deadline - time.monotonic()) > 0:
                try:
                    message = self._requests.get(timeout=remaining)
                except queue.Empty:
                    break
                if message["type"] == START_DEADLINE:
                    fresh = message.get("start_before")
                    return fresh is not None and time.monotonic() <= float(fresh)
                others.append(message)
            return False
        finally:
            for message in others:
                self._requests.put(message)

    def check(self) -> None:
        """`StartedLate` unless a function may start now."""
        if not self.may_start():
            raise StartedLate
