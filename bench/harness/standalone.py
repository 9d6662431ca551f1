"""`sparkdispatch standalone` as a benchmark's child process."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from harness.rest import Rest
from harness.running import bench_env

from sparkdispatch.testing.standalone_process import StandaloneProcess


class Standalone(StandaloneProcess):
    """`sparkdispatch standalone` as a child process with the benchmarks' environment (`bench_env`), and
    its REST endpoint as `rest`: storage and logs under `storage`, `overrides` its `-D` keys.

    `start()` returns when every TaskExecutor registered. `stop()` ends the standalone (which stops
    its TaskExecutors) and then whatever of theirs is left. A wait given it (`processes`) ends when
    the standalone exits.
    """

    def __init__(
        self, storage: Path, *, slots: int, overrides: dict[str, Any] | None = None, log_level: str = "INFO"
    ) -> None:
        super().__init__(storage, slots=slots, overrides=overrides, env=bench_env(), log_level=log_level)
        self.rest = Rest("http://127.0.0.1:0")

    def launch(self) -> None:
        """Start the process and return at once (see `wait_until_ready`)."""
        super().launch()
        self.rest = Rest(self.base_url)

    def wait_until_ready(self, timeout: float, taskexecutors: int = 1) -> None:
        self.wait_for_task_executors(taskexecutors, timeout=timeout)

    def start(self, timeout: float) -> float:
        """Launch and wait until the TaskExecutor registered; the seconds it took."""
        begin = time.monotonic()
        self.launch()
        self.wait_until_ready(timeout)
        return time.monotonic() - begin
