"""The options of the configuration docs' section "Restart strategy" (see the package's docstring)."""

from __future__ import annotations

from datetime import timedelta
from typing import Final, Literal, get_args

from sparkdispatch.config.option import ConfigOption, Section

RestartStrategyType = Literal["none", "fixed-delay", "exponential-delay", "failure-rate"]

SECTION: Final = Section("Restart strategy")

RESTART_TYPE: Final[ConfigOption[RestartStrategyType]] = SECTION.choice(
    "restart-strategy.type",
    get_args(RestartStrategyType),
    "fixed-delay",
    "Restart strategy of jobs that name none. Flink's batch default is `none`; ours restarts, so a lost "
    "TaskExecutor does not fail a job.",
)
RESTART_FIXED_DELAY_ATTEMPTS: Final = SECTION.integer(
    "restart-strategy.fixed-delay.attempts", 3, "Restarts before the job fails.", minimum=0
)
RESTART_FIXED_DELAY_DELAY: Final = SECTION.duration(
    "restart-strategy.fixed-delay.delay", timedelta(seconds=1), "Pause before each restart.", minimum=timedelta(0)
)
RESTART_EXPONENTIAL_DELAY_INITIAL_BACKOFF: Final = SECTION.duration(
    "restart-strategy.exponential-delay.initial-backoff", timedelta(seconds=1), "First pause.", minimum=timedelta(0)
)
RESTART_EXPONENTIAL_DELAY_MAX_BACKOFF: Final = SECTION.duration(
    "restart-strategy.exponential-delay.max-backoff", timedelta(minutes=5), "Longest pause.", minimum=timedelta(0)
)
RESTART_EXPONENTIAL_DELAY_BACKOFF_MULTIPLIER: Final = SECTION.number(
    "restart-strategy.exponential-delay.backoff-multiplier", 2.0, "Growth of the pause.", minimum=1.0
)
RESTART_EXPONENTIAL_DELAY_RESET_BACKOFF_THRESHOLD: Final = SECTION.duration(
    "restart-strategy.exponential-delay.reset-backoff-threshold",
    timedelta(hours=1),
    "A job running this long without failure starts again from the initial backoff.",
    minimum=timedelta(0),
)
RESTART_EXPONENTIAL_DELAY_JITTER_FACTOR: Final = SECTION.number(
    "restart-strategy.exponential-delay.jitter-factor",
    0.1,
    "Random share added to or taken from each pause.",
    minimum=0.0,
)
RESTART_EXPONENTIAL_DELAY_ATTEMPTS: Final = SECTION.integer(
    "restart-strategy.exponential-delay.attempts", 10, "Restarts before the job fails.", minimum=0
)
RESTART_FAILURE_RATE_MAX_FAILURES_PER_INTERVAL: Final = SECTION.integer(
    "restart-strategy.failure-rate.max-failures-per-interval", 1, "Failures allowed per interval.", minimum=1
)
RESTART_FAILURE_RATE_FAILURE_RATE_INTERVAL: Final = SECTION.duration(
    "restart-strategy.failure-rate.failure-rate-interval",
    timedelta(minutes=1),
    "The interval.",
    minimum=timedelta(milliseconds=1),
)
RESTART_FAILURE_RATE_DELAY: Final = SECTION.duration(
    "restart-strategy.failure-rate.delay", timedelta(seconds=1), "Pause before each restart.", minimum=timedelta(0)
)
