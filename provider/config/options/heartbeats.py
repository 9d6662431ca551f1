"""The options of the configuration docs' section "Heartbeats and slots" (see the package's docstring)."""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from sparkdispatch.config.option import Section

SECTION: Final = Section("Heartbeats and slots")

HEARTBEAT_INTERVAL: Final = SECTION.duration(
    "heartbeat.interval",
    timedelta(seconds=5),
    "How often a TaskExecutor sends its heartbeat. Flink uses 10s; half that finds a lost TaskExecutor sooner for "
    "a small HTTP call per TaskExecutor.",
    minimum=timedelta(milliseconds=50),
)
HEARTBEAT_TIMEOUT: Final = SECTION.duration(
    "heartbeat.timeout",
    timedelta(seconds=25),
    "A TaskExecutor silent this long is lost: its slots are removed and its tasks fail over. Flink uses 50s; five "
    "missed heartbeats here.",
    minimum=timedelta(milliseconds=100),
)
HEARTBEAT_RPC_FAILURE_THRESHOLD: Final = SECTION.integer(
    "heartbeat.rpc-failure-threshold",
    2,
    "Consecutive failed calls (deployments, cancellations) after which a TaskExecutor counts as unreachable once "
    "it has also sent no heartbeat for half `heartbeat.timeout`, at least two `heartbeat.interval`s (-1: never), "
    "as Flink's key. A TaskExecutor that heartbeats is alive: calls that fail then are the broker's trouble, and "
    "are retried.",
    minimum=-1,
)
HEARTBEAT_MISSING_EXECUTION_THRESHOLD: Final = SECTION.integer(
    "heartbeat.missing-execution-threshold",
    3,
    "Consecutive heartbeats of a TaskExecutor that may omit an execution its JobMaster deployed there before the "
    "execution fails over (a deployment lost on the way, a final state report lost). A deployment the TaskExecutor "
    "never listed gets `heartbeat.timeout` to arrive first.",
    minimum=1,
)
SLOT_REQUEST_TIMEOUT: Final = SECTION.duration(
    "slot.request.timeout",
    timedelta(minutes=5),
    "A slot request nobody can fulfil fails after this long (Flink's default).",
    minimum=timedelta(milliseconds=10),
)
RESOURCEMANAGER_TASKMANAGER_TIMEOUT: Final = SECTION.duration(
    "resourcemanager.taskmanager-timeout",
    timedelta(seconds=30),
    "A TaskExecutor whose slots have all been free this long is reported idle (Flink's default).",
    minimum=timedelta(0),
)
