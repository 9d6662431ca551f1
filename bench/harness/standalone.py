"""`sparkdispatch standalone` as a benchmark's child process."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness.processes import child_pids, descendants, kill_pids, stop_process
from harness.rest import Rest
from harness.running import bench_env

from sparkdispatch.testing.services import file_tail, free_port


class Standalone:
    """`sparkdispatch standalone` as a child process: a free REST port, storage and logs under `storage`.

    `overrides` are `-D` keys; `start()` returns when every TaskExecutor registered. `stop()`
    ends the standalone (which stops its TaskExecutors) and then whatever of theirs is left. A wait
    given it (`processes`) ends when the standalone exits.
    """

    def __init__(self, storage: Path, *, slots: int, overrides: dict[str, Any] | None = None,
                 log_level: str = "INFO") -> None:
        self.storage = storage
        self.slots = slots
        self.port = 0
        self.overrides = dict(overrides or {})
        self.log_level = log_level
        self.process: subprocess.Popen[bytes] | None = None
        self.rest = Rest("http://127.0.0.1:0")
        self._task_executors: list[int] = []

    @property
    def log_dir(self) -> Path:
        return self.storage / "log"

    def launch(self) -> None:
        """Start the process and return at once (see `wait_until_ready`)."""
        self.port = free_port()
        self.rest = Rest(f"http://127.0.0.1:{self.port}")
        argv = [sys.executable, "-m", "sparkdispatch.entrypoint.cli", "--log-level", self.log_level,
                "-D", f"rest.port={self.port}"]
        for key, value in self.overrides.items():
            argv += ["-D", f"{key}={value}"]
        argv += ["standalone", "--storage", str(self.storage), "--slots", str(self.slots)]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_dir / "standalone.log", "ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=bench_env(), start_new_session=True)

    def wait_until_ready(self, timeout: float, taskexecutors: int = 1) -> None:
        assert self.process is not None
        self.rest.wait_for_task_executors(taskexecutors, timeout=timeout, processes=[self])
        self._task_executors = self.task_executor_pids()

    def start(self, timeout: float) -> float:
        """Launch and wait until the TaskExecutor registered; the seconds it took."""
        begin = time.monotonic()
        self.launch()
        self.wait_until_ready(timeout)
        return time.monotonic() - begin

    def exited(self) -> str | None:
        if self.process is None or self.process.poll() is None:
            return None
        return (f"the standalone at {self.rest.base_url} exited with {self.process.returncode}:\n"
                f"{file_tail(self.log_dir / 'standalone.log', 40)}")

    def logs(self) -> str:
        return f"logs in {self.log_dir}"

    def task_executor_pids(self) -> list[int]:
        """The TaskExecutor processes: the standalone's children (Celery renames them `celeryd: ...`)."""
        if self.process is None:
            return []
        return child_pids(self.process.pid)

    def stop(self) -> None:
        # the TaskExecutors run in sessions of their own: take every group of their trees down too
        groups = {pid for te in self._task_executors for pid in (te, *descendants(te))}
        if self.process is not None:
            stop_process(self.process, grace=30)
        kill_pids(sorted(groups))
