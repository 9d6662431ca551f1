"""Blocking calls to one master's REST endpoint, for masters not in a LocalCluster."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sparkdispatch.model.job_result import JobResult
from sparkdispatch.model.rest_shapes import Overview, Submitted
from sparkdispatch.model.states import JobStatus
from sparkdispatch.testing.http import http_json, upload_artifact
from sparkdispatch.testing.job_result import wait_for_result
from sparkdispatch.testing.waiting import Watched, eventually_blocking


class Rest:
    """Blocking calls to one master's REST endpoint (JSON bodies)."""

    def __init__(self, base_url: str, *, token: str = "") -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token

    def request(self, method: str, path: str, body: Any = None, *, timeout: float = 30.0) -> tuple[int, Any]:
        return http_json(method, self.base_url + path, body, token=self.token, timeout=timeout)

    def submit(self, graph: dict[str, Any]) -> str:
        status, body = self.request("POST", "/jobs", graph)
        if status not in (200, 202):
            raise RuntimeError(f"submission refused with {status}: {body}")
        return Submitted.from_dict(body).job_id

    def wait_for_result(self, job_id: str, *, timeout: float = 300.0) -> JobResult:
        """The job's JobResult; an answer other than 200 is a RuntimeError at once."""
        return wait_for_result(
            lambda: [self.base_url], job_id, token=self.token, timeout=timeout, strict=True, request_timeout=30.0
        )

    def run_job(self, graph: dict[str, Any], *, timeout: float) -> tuple[float, float]:
        """Submit `graph` and wait for its result: (seconds from POST to the result, the master's duration of
        the job); RuntimeError unless it FINISHED."""
        begin = time.perf_counter()
        result = self.wait_for_result(self.submit(graph), timeout=timeout)
        wall = time.perf_counter() - begin
        if result.status is not JobStatus.FINISHED:
            raise RuntimeError(f"job {graph.get('name')!r} ended {result.status.value}: {result.failure}")
        return wall, result.duration_ms / 1000.0

    def upload_artifact(self, path: Path) -> str:
        return upload_artifact(self.base_url, path, token=self.token)

    def overview(self) -> Overview | None:
        """The master's `GET /overview`; None without an answer."""
        try:
            status, body = self.request("GET", "/overview", timeout=3)
        except OSError:
            return None
        return Overview.from_dict(body) if status == 200 else None

    def wait_for_task_executors(self, count: int, *, timeout: float, processes: Sequence[Watched]) -> None:
        """Until the master lists `count` TaskExecutors; a wait that fails at once if one of `processes` ends."""
        eventually_blocking(
            lambda: (overview := self.overview()) is not None and overview.taskmanagers >= count,
            f"{count} TaskExecutor(s) registered at {self.base_url}",
            timeout=timeout,
            interval=0.2,
            processes=processes,
        )
