"""The master's Prometheus metrics (`GET /metrics`), in a registry of its own per master.

The Dispatcher and the JobMasters count what happens (`metric_events`); the gauges are
read from the leader's components when scraped (`MasterMetrics.exposition`). Counters start at
zero in each master process and count what happened while it led, as Prometheus expects of a
restarted process. A standby reports `sparkdispatch_is_leader 0` and no leader gauges.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

#: The buckets of `sparkdispatch_task_duration_seconds`: warm tasks take 50 ms to minutes.
TASK_DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
#: How often the event loop's lag is measured.
LAG_PROBE_INTERVAL_S = 1.0
CONTENT_TYPE = CONTENT_TYPE_LATEST


@dataclass(frozen=True)
class LeaderGauges:
    """The leader's state when scraped; each field is the gauge `sparkdispatch_<field>`."""

    jobs_running: int
    slots_total: int
    slots_available: int
    taskexecutors: int


_LEADER_HELP = {
    "jobs_running": "Jobs not yet globally terminal",
    "slots_total": "Slots of the registered TaskExecutors",
    "slots_available": "Free slots",
    "taskexecutors": "Registered TaskExecutors",
}


class _LeaderCollector(Collector):
    """The leader's gauges, as last set; nothing on a standby."""

    def __init__(self) -> None:
        self.values: LeaderGauges | None = None

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        values = self.values
        if values is None:
            return
        for field in fields(values):
            yield GaugeMetricFamily(
                f"sparkdispatch_{field.name}",
                f"{_LEADER_HELP[field.name]} (leader only).",
                value=getattr(values, field.name),
            )


class MasterMetrics:
    """One master's metrics; implements `JobEvents` and `TaskEvents`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._submitted = Counter("sparkdispatch_jobs_submitted", "Jobs accepted (new job ids).", registry=r)
        self._finished = Counter(
            "sparkdispatch_jobs_finished", "Jobs that reached a globally terminal status.", ["status"], registry=r
        )
        self._result_write_failures = Counter(
            "sparkdispatch_job_result_write_failures",
            "Failed tries to write a terminated job's JobResult (a full or failing disk under storage.dir); each is "
            "retried, and the job's cleanup waits for it.",
            registry=r,
        )
        self._deployments = Counter("sparkdispatch_task_deployments", "Task attempts deployed to a slot.", registry=r)
        self._failures = Counter("sparkdispatch_task_failures", "Task attempts that ended FAILED.", registry=r)
        self._durations = Histogram(
            "sparkdispatch_task_duration_seconds",
            "From deployment to the attempt's terminal state, by that state.",
            ["state"],
            buckets=TASK_DURATION_BUCKETS,
            registry=r,
        )
        self._leader_changes = Counter(
            "sparkdispatch_leader_changes", "Leaderships this master was granted.", registry=r
        )
        self._is_leader = Gauge("sparkdispatch_is_leader", "1 while this master leads.", registry=r)
        self._lag = Gauge(
            "sparkdispatch_event_loop_lag_seconds",
            "How late the master's event loop ran a timer, at the last probe.",
            registry=r,
        )
        self._leader = _LeaderCollector()
        r.register(self._leader)

    # -- JobEvents, TaskEvents ---------------------------------------------------------------

    def job_submitted(self) -> None:
        self._submitted.inc()

    def job_finished(self, status: str) -> None:
        self._finished.labels(status=status).inc()

    def job_result_write_failed(self) -> None:
        self._result_write_failures.inc()

    def task_deployed(self) -> None:
        self._deployments.inc()

    def task_ended(self, state: str, seconds: float | None) -> None:
        if state == "FAILED":
            self._failures.inc()
        if seconds is not None:
            self._durations.labels(state=state).observe(max(0.0, seconds))

    def leader_granted(self) -> None:
        self._leader_changes.inc()

    # -- scraping ------------------------------------------------------------------------------

    def exposition(self, leader: LeaderGauges | None) -> bytes:
        """The text format: the leader's gauges set from `leader`; none of them on a standby."""
        self._is_leader.set(1 if leader is not None else 0)
        self._leader.values = leader
        return generate_latest(self.registry)

    async def probe_loop_lag(self) -> None:
        """Until cancelled: every `LAG_PROBE_INTERVAL_S`, how much later than asked the loop woke up."""
        while True:
            asked = time.monotonic()
            await asyncio.sleep(LAG_PROBE_INTERVAL_S)
            self._lag.set(max(0.0, time.monotonic() - asked - LAG_PROBE_INTERVAL_S))
