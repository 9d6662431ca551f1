"""Heartbeat monitoring on the receiver side (Flink's HeartbeatManager and HeartbeatMonitor).

TaskExecutors send heartbeats; the master only receives them. A `HeartbeatMonitor` keeps, per
monitored target, the time of its last heartbeat, its last payload and its count of
consecutive failed calls, and tells its listener when a target

- stays silent for `heartbeat.timeout` (`notify_heartbeat_timeout(target_id)`), or
- fails `heartbeat.rpc-failure-threshold` calls in a row while it is also silent for
  `unreachable_silence` (half `heartbeat.timeout`, at least two intervals; `notify_target_unreachable(target_id)`; a
  threshold of -1 turns this off). A target that heartbeats is alive: calls to it that fail then
  fail on the way (the TaskExecutors' broker restarting), and do not make it unreachable.

A target that timed out or became unreachable is no longer monitored when its listener is
called; `monitor()` it again after it registers anew. All methods run on the owner's asyncio
loop; the owner runs `check_timeouts()` on its own timer (the ResourceManager's). Timeouts are
found without scanning every target: targets are kept ordered by their last heartbeat, so a
check looks only at the oldest ones and stops at the first live target.
"""

from __future__ import annotations

import logging
import time
from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from sparkdispatch.resourcemanager.settings import HeartbeatSettings

log = logging.getLogger(__name__)

Clock = Callable[[], float]
"""Seconds on a monotonic scale; `time.monotonic` unless a test injects its own."""

P = TypeVar("P")
"""What a target's heartbeat carries."""


class HeartbeatListener(Protocol):
    """Told about targets that went silent or unreachable; called on the loop, must not block."""

    @abstractmethod
    def notify_heartbeat_timeout(self, target_id: str) -> None: ...

    @abstractmethod
    def notify_target_unreachable(self, target_id: str) -> None: ...


class _Target(Generic[P]):
    __slots__ = ("last_heartbeat", "payload", "rpc_failures")

    def __init__(self, now: float) -> None:
        self.last_heartbeat = now
        self.payload: P | None = None
        self.rpc_failures = 0


class HeartbeatMonitor(Generic[P]):
    """Watches the heartbeats of many targets and reports the silent and the unreachable ones;
    each heartbeat may carry a payload of type `P`."""

    def __init__(
        self,
        listener: HeartbeatListener,
        *,
        timeout: float,
        rpc_failure_threshold: int = 2,
        unreachable_silence: float = 0.0,
        clock: Clock | None = None,
        name: str = "heartbeat",
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"heartbeat timeout must be > 0, got {timeout}")
        if rpc_failure_threshold == 0 or rpc_failure_threshold < -1:
            raise ValueError(f"rpc failure threshold must be >= 1 or -1 (off), got {rpc_failure_threshold}")
        if unreachable_silence < 0:
            raise ValueError(f"unreachable silence must be >= 0, got {unreachable_silence}")
        self._listener = listener
        self._timeout = timeout
        self._threshold = rpc_failure_threshold
        self._silence = unreachable_silence
        self._clock: Clock = clock or time.monotonic
        self._epoch_offset = time.time() - self._clock()
        self._name = name
        # Ordered by last heartbeat, oldest first: `report` moves a target to the end.
        self._targets: OrderedDict[str, _Target[P]] = OrderedDict()

    @classmethod
    def from_settings(
        cls,
        settings: HeartbeatSettings,
        listener: HeartbeatListener,
        *,
        clock: Clock | None = None,
        name: str = "heartbeat",
    ) -> HeartbeatMonitor[P]:
        """A monitor with the settings' timeout and rpc failure threshold; a target that failed calls is
        unreachable once it has also been silent for half the timeout (at least two intervals): a
        heartbeat late under load is no silence."""
        return cls(
            listener,
            timeout=settings.timeout,
            rpc_failure_threshold=settings.rpc_failure_threshold,
            unreachable_silence=max(2 * settings.interval, settings.timeout / 2),
            clock=clock,
            name=name,
        )

    @property
    def timeout(self) -> float:
        return self._timeout

    def clear(self) -> None:
        """Forget every target, without telling the listener."""
        self._targets.clear()

    def monitor(self, target_id: str) -> None:
        """Watch `target_id`, as if it had just sent a heartbeat (again, if watched already)."""
        self._targets[target_id] = _Target(self._clock())
        self._targets.move_to_end(target_id)

    def unmonitor(self, target_id: str) -> None:
        self._targets.pop(target_id, None)

    def report(self, target_id: str, payload: P | None = None) -> bool:
        """A heartbeat from `target_id`: restart its timeout. False (ignored) if it is not watched."""
        target = self._targets.get(target_id)
        if target is None:
            return False
        target.last_heartbeat = self._clock()
        target.payload = payload
        self._targets.move_to_end(target_id)
        return True

    def record_rpc_failure(self, target_id: str) -> None:
        """A call to `target_id` failed; after threshold failures in a row, and once it has also been
        silent for `unreachable_silence`, it is unreachable (now or at a later `check_timeouts`)."""
        target = self._targets.get(target_id)
        if target is None:
            return
        target.rpc_failures += 1
        if self._unreachable(target, self._clock()):
            self._notify_unreachable(target_id, target)

    def record_rpc_success(self, target_id: str) -> None:
        """A call to `target_id` went through: the count of failures in a row starts again."""
        target = self._targets.get(target_id)
        if target is not None:
            target.rpc_failures = 0

    def last_heartbeat(self, target_id: str) -> float | None:
        """Clock time of the last heartbeat (or of `monitor`), None if not watched."""
        target = self._targets.get(target_id)
        return None if target is None else target.last_heartbeat

    def last_heartbeat_ms(self, target_id: str) -> int | None:
        """Epoch milliseconds of the last heartbeat, for people and the REST API."""
        last = self.last_heartbeat(target_id)
        return None if last is None else self.to_epoch_ms(last)

    def payload(self, target_id: str) -> P | None:
        """The payload of the last heartbeat, None if none or not watched."""
        target = self._targets.get(target_id)
        return None if target is None else target.payload

    def to_epoch_ms(self, clock_time: float) -> int:
        return int((clock_time + self._epoch_offset) * 1000)

    def check_timeouts(self) -> list[str]:
        """Tell the listener about every target silent for the timeout, and about every unreachable
        one; returns the ids of those that timed out."""
        now = self._clock()
        deadline = now - self._timeout
        silent_since = now - min(self._silence, self._timeout)
        expired: list[str] = []
        unreachable: list[str] = []
        for target_id, target in self._targets.items():
            if target.last_heartbeat > silent_since:
                break
            if target.last_heartbeat <= deadline:
                expired.append(target_id)
            elif self._unreachable(target, now):
                unreachable.append(target_id)
        for target_id in unreachable:
            if (still_watched := self._targets.get(target_id)) is not None:
                self._notify_unreachable(target_id, still_watched)
        for target_id in expired:
            del self._targets[target_id]
        for target_id in expired:
            log.warning("%s: no heartbeat from %s for %.1fs", self._name, target_id, self._timeout)
            try:
                self._listener.notify_heartbeat_timeout(target_id)
            except Exception:
                log.exception("%s: listener failed on the timeout of %s", self._name, target_id)
        return expired

    def _unreachable(self, target: _Target[P], now: float) -> bool:
        return (
            self._threshold != -1
            and target.rpc_failures >= self._threshold
            and now - target.last_heartbeat >= self._silence
        )

    def _notify_unreachable(self, target_id: str, target: _Target[P]) -> None:
        log.warning(
            "%s: target %s unreachable after %d failed calls and %.1fs without a heartbeat",
            self._name,
            target_id,
            target.rpc_failures,
            self._clock() - target.last_heartbeat,
        )
        del self._targets[target_id]
        try:
            self._listener.notify_target_unreachable(target_id)
        except Exception:
            log.exception("%s: listener failed on %s becoming unreachable", self._name, target_id)
