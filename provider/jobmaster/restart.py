"""Restart backoff-time strategies: may a failed job restart, and after how long.

Flink's `RestartBackoffTimeStrategy` family, built from the JobGraph's restart strategy values
(or the `restart-strategy.*` configuration). The JobMaster calls `notify_failure()` once per
failure, then asks `can_restart()` and, if so, waits `backoff_s()` before the restart.
`attempts` counts restarts, as Flink's `restart-strategy.fixed-delay.attempts` does: with
`attempts=3` the fourth failure fails the job. The clock (seconds, monotonic) and the jitter's
random source are injected, so tests run without waiting.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from sparkdispatch.errors import ERROR_TYPES
from sparkdispatch.model.job_result import Failure
from sparkdispatch.model.restart import (
    ExponentialDelayRestart,
    FailureRateRestart,
    FixedDelayRestart,
    NoRestart,
    RestartStrategy,
)

Clock = Callable[[], float]


class RestartBackoffTimeStrategy(Protocol):
    """What the JobMaster asks after each failure."""

    def notify_failure(self, now: float | None = None) -> None:
        """Count one failure, at `now` (seconds on the strategy's clock; default: that clock)."""

    def can_restart(self) -> bool:
        """Whether the failures counted so far still allow a restart."""

    def backoff_s(self) -> float:
        """The pause before the next restart, in seconds."""


class NoRestartStrategy:
    """Every failure fails the job."""

    def notify_failure(self, now: float | None = None) -> None:
        """Nothing to count: `can_restart` is always False."""

    def can_restart(self) -> bool:
        return False

    def backoff_s(self) -> float:
        return 0.0

    def __repr__(self) -> str:
        return "NoRestartStrategy()"


class FixedDelayRestartStrategy:
    """Restart up to `attempts` times, `delay_s` apart."""

    def __init__(self, spec: FixedDelayRestart) -> None:
        self._spec = spec
        self.failures = 0

    def notify_failure(self, now: float | None = None) -> None:
        self.failures += 1

    def can_restart(self) -> bool:
        return self.failures <= self._spec.attempts

    def backoff_s(self) -> float:
        return self._spec.delay_s

    def __repr__(self) -> str:
        return f"FixedDelayRestartStrategy(attempts={self._spec.attempts}, delay_s={self._spec.delay_s})"


class FailureRateRestartStrategy:
    """Restart unless more than `max_failures_per_interval` failures fall within one interval.

    A sliding window of failure times; this allows exactly `max_failures_per_interval` restarts
    per interval (Flink fixed the off-by-one of its first version in FLINK-20752).
    """

    def __init__(self, spec: FailureRateRestart, *, clock: Clock = time.monotonic) -> None:
        self._spec = spec
        self._clock = clock
        self._failures: deque[float] = deque()

    def notify_failure(self, now: float | None = None) -> None:
        now = self._clock() if now is None else now
        self._failures.append(now)
        while self._failures and now - self._failures[0] > self._spec.failure_rate_interval_s:
            self._failures.popleft()

    def can_restart(self) -> bool:
        return len(self._failures) <= self._spec.max_failures_per_interval

    def backoff_s(self) -> float:
        return self._spec.delay_s

    def __repr__(self) -> str:
        spec = self._spec
        return (
            f"FailureRateRestartStrategy(max_failures_per_interval={spec.max_failures_per_interval}, "
            f"failure_rate_interval_s={spec.failure_rate_interval_s}, delay_s={spec.delay_s})"
        )


class ExponentialDelayRestartStrategy:
    """Pauses that grow by `backoff_multiplier` from `initial_backoff_s` up to `max_backoff_s`.

    As Flink's ExponentialDelayRestartBackoffTimeStrategy: a failure that comes more than
    `reset_backoff_threshold_s` after the previous restart (the previous failure plus its pause)
    starts again from the initial backoff and a fresh count of `attempts`; each pause is moved by
    a random share of up to `jitter_factor` either way.
    """

    def __init__(
        self, spec: ExponentialDelayRestart, *, clock: Clock = time.monotonic, rng: random.Random | None = None
    ) -> None:
        self._spec = spec
        self._clock = clock
        self._rng = rng or random.Random()
        self._current_backoff_s = spec.initial_backoff_s
        self._last_failure: float | None = None
        self.failures = 0

    def notify_failure(self, now: float | None = None) -> None:
        now = self._clock() if now is None else now
        spec = self._spec
        if self._last_failure is None or (
            now - self._last_failure >= spec.reset_backoff_threshold_s + self._current_backoff_s
        ):
            self._current_backoff_s = spec.initial_backoff_s
            self.failures = 0
        else:
            grown = self._current_backoff_s * spec.backoff_multiplier
            self._current_backoff_s = max(spec.initial_backoff_s, min(grown, spec.max_backoff_s))
        self._last_failure = now
        self.failures += 1

    def can_restart(self) -> bool:
        return self.failures <= self._spec.attempts

    def backoff_s(self) -> float:
        offset = self._current_backoff_s * self._spec.jitter_factor
        if offset <= 0:
            return self._current_backoff_s
        return max(0.0, self._current_backoff_s + self._rng.uniform(-offset, offset))

    def __repr__(self) -> str:
        spec = self._spec
        return (
            f"ExponentialDelayRestartStrategy(initial_backoff_s={spec.initial_backoff_s}, "
            f"max_backoff_s={spec.max_backoff_s}, backoff_multiplier={spec.backoff_multiplier}, "
            f"reset_backoff_threshold_s={spec.reset_backoff_threshold_s}, "
            f"jitter_factor={spec.jitter_factor}, attempts={spec.attempts})"
        )


def create_restart_strategy(
    spec: RestartStrategy, *, clock: Clock = time.monotonic, rng: random.Random | None = None
) -> RestartBackoffTimeStrategy:
    """The strategy object for a JobGraph's restart strategy value."""
    if isinstance(spec, FixedDelayRestart):
        return FixedDelayRestartStrategy(spec)
    if isinstance(spec, FailureRateRestart):
        return FailureRateRestartStrategy(spec, clock=clock)
    if isinstance(spec, ExponentialDelayRestart):
        return ExponentialDelayRestartStrategy(spec, clock=clock, rng=rng)
    if isinstance(spec, NoRestart):
        return NoRestartStrategy()
    raise TypeError(f"not a restart strategy: {spec!r}")


def restart_refused(strategy: RestartBackoffTimeStrategy, failure: Failure) -> str | None:
    """Why the subtasks that failed with `failure` may not run again, the job then failing; None
    when they may. A failure whose error class is not `restartable` cannot succeed when run again."""
    error_type = ERROR_TYPES.get(failure.cls)
    if error_type is not None and not error_type.restartable:
        return f"{failure.cls} cannot succeed when run again; the job fails: {failure.message}"
    if not strategy.can_restart():
        return f"no restart left under {strategy!r}; the job fails: {failure.cls}: {failure.message}"
    return None
