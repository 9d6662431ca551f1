"""A TaskExecutor's own Prometheus metrics, on `taskexecutor.metrics.port` (`/metrics`).

Read from the TaskExecutor's parts when scraped: its slots and how many run an attempt, the
attempts that ended here by state, the slot processes that died or were killed under an
attempt, and its Spark Connect server's health (a gRPC call, as the server watch makes),
restarts and replacements by recycling. Labelled with the TaskExecutor's id, as the master names it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from threading import Thread
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

HEALTH_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class TaskExecutorParts:
    """Where the numbers come from; each a callable read at scrape time, from the scraping thread."""

    slots: int
    busy_slots: Callable[[], int]
    ended_attempts: Callable[[], Mapping[str, int]]
    slot_processes_lost: Callable[[], int]
    connect_server_healthy: Callable[[float], bool]
    connect_server_starts: Callable[[], int]
    connect_server_recycles: Callable[[], int]


class TaskExecutorCollector(Collector):
    """The TaskExecutor's metrics, labelled `taskexecutor=<id>`."""

    def __init__(self, task_executor_id: str, parts: TaskExecutorParts) -> None:
        self._id = task_executor_id
        self._parts = parts

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        parts, labels = self._parts, ["taskexecutor"]

        def gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(f"sparkdispatch_taskexecutor_{name}", text, labels=labels)
            family.add_metric([self._id], value)
            return family

        def counter(name: str, text: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(f"sparkdispatch_taskexecutor_{name}", text, labels=labels)
            family.add_metric([self._id], value)
            return family

        yield gauge("slots", "Slots of this TaskExecutor.", parts.slots)
        yield gauge("slots_busy", "Slots running an attempt.", parts.busy_slots())
        ended = CounterMetricFamily(
            "sparkdispatch_taskexecutor_attempts", "Attempts that ended here, by state.", labels=[*labels, "state"]
        )
        for state, count in sorted(parts.ended_attempts().items()):
            ended.add_metric([self._id, state], count)
        yield ended
        yield counter(
            "slot_processes_lost",
            "Slot processes that died or were killed under an attempt.",
            parts.slot_processes_lost(),
        )
        yield gauge(
            "connect_server_up",
            "1 when the Spark Connect server answers a gRPC call.",
            1 if parts.connect_server_healthy(HEALTH_TIMEOUT_S) else 0,
        )
        yield counter(
            "connect_server_restarts",
            "Restarts of the Spark Connect server.",
            max(0, parts.connect_server_starts() - 1),
        )
        yield counter(
            "connect_server_recycles",
            "Spark Connect servers replaced by a successor once due (taskexecutor.connect.recycle.*).",
            parts.connect_server_recycles(),
        )


def serve_metrics(
    task_executor_id: str, parts: TaskExecutorParts, *, port: int, address: str
) -> tuple[WSGIServer, Thread]:
    """Serve the metrics on `address:port` from a daemon thread; `shutdown()` the server to stop."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(TaskExecutorCollector(task_executor_id, parts))
    server, thread = start_http_server(port, addr=address, registry=registry)
    log.info("TaskExecutor %s: metrics on http://%s:%d/metrics", task_executor_id, address, port)
    return server, thread
