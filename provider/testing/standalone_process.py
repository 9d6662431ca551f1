"""`sparkdispatch standalone` as a child process: a free REST port, its storage and logs in one directory.

`launch()` starts it and returns at once, `wait_for_task_executors()` until they registered (a
wait that fails at once, with its log's tail, if it exits: it is a `Watched` process), `stop()`
ends it (SIGTERM to its process group, SIGKILL after a grace) and then whatever of its
TaskExecutors' trees is left (they run in sessions of their own).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path

from sparkdispatch.taskexecutor.process_usage import child_pids
from sparkdispatch.testing.http import http_json
from sparkdispatch.testing.local_cluster import process_tree
from sparkdispatch.testing.services import file_tail, free_port, python_module, stop_process_group
from sparkdispatch.testing.waiting import eventually_blocking

STOP_GRACE_S = 30.0


class StandaloneProcess:
    """One `sparkdispatch standalone`; `overrides` are its `-D` keys, `env` its environment."""

    def __init__(
        self,
        storage: Path,
        *,
        slots: int,
        overrides: Mapping[str, object] | None = None,
        env: Mapping[str, str] | None = None,
        log_level: str = "INFO",
    ) -> None:
        self.storage = storage
        self.slots = slots
        self.overrides = dict(overrides or {})
        self.env = dict(env if env is not None else os.environ)
        self.log_level = log_level
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._task_executors: set[int] = set()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.storage / "log"

    def launch(self) -> None:
        self.port = free_port()
        argv = [
            *python_module("sparkdispatch.entrypoint.cli", log_level=self.log_level),
            "-D",
            f"rest.port={self.port}",
        ]
        for key, value in self.overrides.items():
            argv += ["-D", f"{key}={value}"]
        argv += ["standalone", "--storage", str(self.storage), "--slots", str(self.slots)]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_dir / "standalone.log", "ab") as out:
            self.process = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )

    def task_executors_registered(self) -> int:
        """TaskExecutors the master counts (0 while it does not answer)."""
        try:
            status, body = http_json("GET", self.base_url + "/overview", timeout=5)
        except OSError:
            return 0
        return int(body.get("taskmanagers", 0)) if status == 200 else 0

    def wait_for_task_executors(self, count: int = 1, *, timeout: float) -> None:
        eventually_blocking(
            lambda: self.task_executors_registered() >= count,
            f"{count} TaskExecutor(s) registered at {self.base_url}",
            timeout=timeout,
            interval=0.3,
            processes=[self],
        )
        self._task_executors.update(self.task_executor_pids())

    def exited(self) -> str | None:
        """Why the standalone is gone, with its log's tail; None while it runs."""
        if self.process is None or self.process.poll() is None:
            return None
        return (
            f"sparkdispatch standalone at {self.base_url} exited with {self.process.returncode}:\n"
            f"{file_tail(self.log_dir / 'standalone.log', 40)}"
        )

    def logs(self) -> str:
        return f"logs in {self.log_dir}"

    def task_executor_pids(self) -> list[int]:
        """The TaskExecutor processes: the standalone's children (Celery renames them `celeryd: ...`)."""
        return child_pids(self.process.pid) if self.process is not None else []

    def stop(self) -> None:
        trees = {pid for te in self._task_executors | set(self.task_executor_pids()) for pid, _ in process_tree(te)}
        if self.process is not None:
            stop_process_group(self.process, grace=STOP_GRACE_S)
        for pid in sorted(trees):
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
