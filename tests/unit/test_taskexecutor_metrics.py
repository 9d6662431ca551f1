"""A TaskExecutor's metrics endpoint, over real HTTP, fed by small fakes of its parts."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from sparkdispatch.taskexecutor.metrics import TaskExecutorParts, serve_metrics
from sparkdispatch.testing.services import free_port


def test_the_metrics_port_reports_slots_attempts_lost_processes_and_the_connect_server() -> None:
    parts = TaskExecutorParts(
        slots=4,
        busy_slots=lambda: 1,
        ended_attempts=lambda: {"FINISHED": 3, "FAILED": 1},
        slot_processes_lost=lambda: 2,
        connect_server_healthy=lambda timeout: False,
        connect_server_starts=lambda: 2,
        connect_server_recycles=lambda: 3,
    )
    port = free_port()
    server, thread = serve_metrics("te-1", parts, port=port, address="127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    finally:
        server.shutdown()
        thread.join(10)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    te = (("taskexecutor", "te-1"),)
    assert samples[("sparkdispatch_taskexecutor_slots", te)] == 4
    assert samples[("sparkdispatch_taskexecutor_slots_busy", te)] == 1
    assert samples[("sparkdispatch_taskexecutor_attempts_total", (("state", "FAILED"), *te))] == 1
    assert samples[("sparkdispatch_taskexecutor_attempts_total", (("state", "FINISHED"), *te))] == 3
    assert samples[("sparkdispatch_taskexecutor_slot_processes_lost_total", te)] == 2
    assert samples[("sparkdispatch_taskexecutor_connect_server_up", te)] == 0
    assert samples[("sparkdispatch_taskexecutor_connect_server_restarts_total", te)] == 1
    assert samples[("sparkdispatch_taskexecutor_connect_server_recycles_total", te)] == 3
    assert not thread.is_alive()
