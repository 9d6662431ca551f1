"""Restart backoff-time strategies: Flink's counting, windows and backoff growth, on a fake clock."""

from __future__ import annotations

import random

import pytest

from sparkdispatch.config import Configuration
from sparkdispatch.jobmaster.settings import restart_strategy_from_config
from sparkdispatch.model.restart import ExponentialDelayRestart, FailureRateRestart, FixedDelayRestart, NoRestart
from sparkdispatch.jobmaster.restart import (
    ExponentialDelayRestartStrategy,
    FailureRateRestartStrategy,
    FixedDelayRestartStrategy,
    NoRestartStrategy,
    create_restart_strategy,
)


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_no_restart_never_restarts() -> None:
    strategy = create_restart_strategy(NoRestart())
    assert isinstance(strategy, NoRestartStrategy)
    strategy.notify_failure()
    assert not strategy.can_restart()


def test_fixed_delay_attempts_count_restarts() -> None:
    strategy = create_restart_strategy(FixedDelayRestart(attempts=3, delay_s=2.5))
    assert isinstance(strategy, FixedDelayRestartStrategy)
    for _ in range(3):
        strategy.notify_failure()
        assert strategy.can_restart()
        assert strategy.backoff_s() == 2.5
    strategy.notify_failure()
    assert not strategy.can_restart()


def test_fixed_delay_with_zero_attempts_fails_at_the_first_failure() -> None:
    strategy = create_restart_strategy(FixedDelayRestart(attempts=0, delay_s=0.0))
    strategy.notify_failure()
    assert not strategy.can_restart()


def test_failure_rate_allows_max_failures_per_interval() -> None:
    clock = FakeClock()
    strategy = create_restart_strategy(
        FailureRateRestart(max_failures_per_interval=2, failure_rate_interval_s=10.0, delay_s=0.5), clock=clock
    )
    assert isinstance(strategy, FailureRateRestartStrategy)
    strategy.notify_failure()
    assert strategy.can_restart()
    clock.now += 4
    strategy.notify_failure()
    assert strategy.can_restart()
    assert strategy.backoff_s() == 0.5
    clock.now += 4  # three failures within 8 s: over the rate
    strategy.notify_failure()
    assert not strategy.can_restart()


def test_failure_rate_forgets_failures_older_than_the_interval() -> None:
    clock = FakeClock()
    strategy = create_restart_strategy(
        FailureRateRestart(max_failures_per_interval=1, failure_rate_interval_s=10.0, delay_s=0.0), clock=clock
    )
    for _ in range(5):
        strategy.notify_failure()
        assert strategy.can_restart()
        clock.now += 10.5
    strategy.notify_failure()
    clock.now += 1
    strategy.notify_failure(now=clock.now)
    assert not strategy.can_restart()


def test_exponential_delay_grows_to_the_cap_without_jitter() -> None:
    clock = FakeClock()
    spec = ExponentialDelayRestart(
        initial_backoff_s=1.0,
        max_backoff_s=5.0,
        backoff_multiplier=2.0,
        reset_backoff_threshold_s=100.0,
        jitter_factor=0.0,
        attempts=10,
    )
    strategy = create_restart_strategy(spec, clock=clock)
    assert isinstance(strategy, ExponentialDelayRestartStrategy)
    pauses = []
    for _ in range(5):
        strategy.notify_failure()
        assert strategy.can_restart()
        pauses.append(strategy.backoff_s())
        clock.now += strategy.backoff_s() + 1
    assert pauses == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_exponential_delay_resets_after_a_quiet_threshold() -> None:
    clock = FakeClock()
    spec = ExponentialDelayRestart(
        initial_backoff_s=1.0,
        max_backoff_s=60.0,
        backoff_multiplier=3.0,
        reset_backoff_threshold_s=30.0,
        jitter_factor=0.0,
        attempts=2,
    )
    strategy = create_restart_strategy(spec, clock=clock)
    strategy.notify_failure()
    clock.now += 2
    strategy.notify_failure()
    assert strategy.backoff_s() == 3.0
    assert strategy.can_restart()
    clock.now += 30 + 3  # quiet for the threshold plus the last pause: back to the start, count reset
    strategy.notify_failure()
    assert strategy.backoff_s() == 1.0
    assert strategy.can_restart()


def test_exponential_delay_attempts_are_exhausted() -> None:
    clock = FakeClock()
    spec = ExponentialDelayRestart(initial_backoff_s=0.1, max_backoff_s=1.0, jitter_factor=0.0, attempts=2)
    strategy = create_restart_strategy(spec, clock=clock)
    for expected in (True, True, False):
        strategy.notify_failure()
        clock.now += 0.5
        assert strategy.can_restart() is expected


def test_exponential_delay_jitter_stays_within_its_factor() -> None:
    clock = FakeClock()
    spec = ExponentialDelayRestart(initial_backoff_s=10.0, max_backoff_s=100.0, jitter_factor=0.2, attempts=5)
    strategy = create_restart_strategy(spec, clock=clock, rng=random.Random(7))
    strategy.notify_failure()
    pauses = {strategy.backoff_s() for _ in range(200)}
    assert all(8.0 <= p <= 12.0 for p in pauses)
    assert len(pauses) > 1


def test_strategy_from_configuration() -> None:
    config = Configuration.from_mapping(
        {"restart-strategy.type": "failure-rate", "restart-strategy.failure-rate.max-failures-per-interval": "3"}
    )
    strategy = create_restart_strategy(restart_strategy_from_config(config))
    assert isinstance(strategy, FailureRateRestartStrategy)
    for _ in range(3):
        strategy.notify_failure()
    assert strategy.can_restart()


def test_unknown_spec_is_refused() -> None:
    with pytest.raises(TypeError, match="not a restart strategy"):
        create_restart_strategy("fixed-delay")  # type: ignore[arg-type]
