"""Blocking calls to one master's REST endpoint, for masters not in a LocalCluster."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparkdispatch.testing.http import http_json, upload_artifact


class Rest:
    """Blocking calls to one master's REST endpoint (JSON bodies), for masters not in a LocalCluster."""

    def __init__(self, base_url: str, *, token: str = "") -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token

    def request(self, method: str, path: str, body: Any = None, *, timeout: float = 30.0) -> tuple[int, Any]:
        return http_json(method, self.base_url + path, body, token=self.token, timeout=timeout)

    def submit(self, graph: dict[str, Any]) -> str:
        status, body = self.request("POST", "/jobs", graph)
        if status not in (200, 202):
            raise RuntimeError(f"submission refused with {status}: {body}")
        return str(body["job_id"])

    def wait_for_result(self, job_id: str, *, timeout: float = 300.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, body = self.request("GET", f"/jobs/{job_id}/execution-result", timeout=30)
            if status == 200 and body["status"]["id"] == "COMPLETED":
                return dict(body["job_execution_result"])
            if status != 200:
                raise RuntimeError(f"execution-result of {job_id} answered {status}: {body}")
        raise TimeoutError(f"job {job_id} did not finish within {timeout:.0f}s")

    def run_job(self, graph: dict[str, Any], *, timeout: float) -> tuple[float, float]:
        """Submit `graph` and wait for its result: (seconds from POST to the result, the master's duration of
        the job); RuntimeError unless it FINISHED."""
        begin = time.perf_counter()
        result = self.wait_for_result(self.submit(graph), timeout=timeout)
        wall = time.perf_counter() - begin
        if result["status"] != "FINISHED":
            raise RuntimeError(f"job {graph.get('name')!r} ended {result['status']}: {result.get('failure')}")
        return wall, result["duration_ms"] / 1000.0

    def upload_artifact(self, path: Path) -> str:
        return upload_artifact(self.base_url, path, token=self.token)

    def wait_for_task_executors(self, count: int, *, timeout: float, alive: Callable[[], bool]) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not alive():
                raise RuntimeError(f"the master at {self.base_url} exited")
            try:
                status, body = self.request("GET", "/overview", timeout=3)
                if status == 200 and body.get("taskmanagers", 0) >= count:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{count} TaskExecutor(s) did not register at {self.base_url} within {timeout:.0f}s")
