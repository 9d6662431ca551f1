"""A JobMaster's settings, read once from a `Configuration`: where its tasks write results, the restart
strategy of jobs that name none (`restart-strategy.*`), and when an execution its TaskExecutor's heartbeats omit
fails over."""

from __future__ import annotations

from dataclasses import dataclass

from sparkdispatch.config import Configuration
from sparkdispatch.config.options import (
    HEARTBEAT_MISSING_EXECUTION_THRESHOLD,
    HEARTBEAT_TIMEOUT,
    RESTART_EXPONENTIAL_DELAY_ATTEMPTS,
    RESTART_EXPONENTIAL_DELAY_BACKOFF_MULTIPLIER,
    RESTART_EXPONENTIAL_DELAY_INITIAL_BACKOFF,
    RESTART_EXPONENTIAL_DELAY_JITTER_FACTOR,
    RESTART_EXPONENTIAL_DELAY_MAX_BACKOFF,
    RESTART_EXPONENTIAL_DELAY_RESET_BACKOFF_THRESHOLD,
    RESTART_FAILURE_RATE_DELAY,
    RESTART_FAILURE_RATE_FAILURE_RATE_INTERVAL,
    RESTART_FAILURE_RATE_MAX_FAILURES_PER_INTERVAL,
    RESTART_FIXED_DELAY_ATTEMPTS,
    RESTART_FIXED_DELAY_DELAY,
    RESTART_TYPE,
)
from sparkdispatch.model.restart import (
    ExponentialDelayRestart,
    FailureRateRestart,
    FixedDelayRestart,
    NoRestart,
    RestartStrategy,
)


def restart_strategy_from_config(config: Configuration) -> RestartStrategy:
    """The `restart-strategy.*` configuration as a strategy value."""
    kind = config.get(RESTART_TYPE)
    if kind == "fixed-delay":
        return FixedDelayRestart(
            attempts=config.get(RESTART_FIXED_DELAY_ATTEMPTS), delay_s=config.get(RESTART_FIXED_DELAY_DELAY)
        )
    if kind == "exponential-delay":
        return ExponentialDelayRestart(
            initial_backoff_s=config.get(RESTART_EXPONENTIAL_DELAY_INITIAL_BACKOFF),
            max_backoff_s=config.get(RESTART_EXPONENTIAL_DELAY_MAX_BACKOFF),
            backoff_multiplier=config.get(RESTART_EXPONENTIAL_DELAY_BACKOFF_MULTIPLIER),
            reset_backoff_threshold_s=config.get(RESTART_EXPONENTIAL_DELAY_RESET_BACKOFF_THRESHOLD),
            jitter_factor=config.get(RESTART_EXPONENTIAL_DELAY_JITTER_FACTOR),
            attempts=config.get(RESTART_EXPONENTIAL_DELAY_ATTEMPTS),
        )
    if kind == "failure-rate":
        return FailureRateRestart(
            max_failures_per_interval=config.get(RESTART_FAILURE_RATE_MAX_FAILURES_PER_INTERVAL),
            failure_rate_interval_s=config.get(RESTART_FAILURE_RATE_FAILURE_RATE_INTERVAL),
            delay_s=config.get(RESTART_FAILURE_RATE_DELAY),
        )
    return NoRestart()


@dataclass(frozen=True)
class JobMasterSettings:
    """Where a JobMaster's tasks write results, the restart strategy of jobs that name none, and
    when an execution its TaskExecutor's heartbeats omit fails over."""

    results_dir: str
    restart_strategy: RestartStrategy
    missing_execution_threshold: int = 3  # heartbeats in a row
    deployment_grace: float = 25.0  # seconds a deployment may take to show in its TaskExecutor's heartbeats

    @classmethod
    def from_config(cls, config: Configuration) -> JobMasterSettings:
        return cls(
            results_dir=config.results_dir,
            restart_strategy=restart_strategy_from_config(config),
            missing_execution_threshold=config.get(HEARTBEAT_MISSING_EXECUTION_THRESHOLD),
            deployment_grace=config.get(HEARTBEAT_TIMEOUT),
        )
