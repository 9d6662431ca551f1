"""Spark Connect floors: the same actions as a cluster's tasks, in one warm Connect session of the benchmark."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from harness.processes import cpu_seconds, tree_cpu_seconds

from sparkdispatch.config import Configuration


class ConnectClient:
    """A Spark Connect server with the settings a TaskExecutor of `config` gives its own, started and
    warmed the same way (`ConnectServer.start`), and a warm session of this process on it (`spark`).

    Sessions are made as a slot process makes a job's: `session_conf` is set on each with `conf.set`.
    """

    def __init__(self, config: Configuration, work_dir: Path, *, session_conf: dict[str, Any] | None = None) -> None:
        self.config = config
        self.work_dir = work_dir
        self.session_conf = dict(session_conf or {})
        self.server: Any = None
        self.spark: Any = None

    def start(self) -> None:
        from sparkdispatch.taskexecutor.settings import ConnectServerSettings
        from sparkdispatch.taskexecutor.connect_server import ConnectServer

        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # as bench_env() gives the clusters' processes
        self.server = ConnectServer(
            ConnectServerSettings.from_config(self.config), work_dir=self.work_dir, app_name="bench-floor"
        )
        self.server.start()
        self.spark = self.new_session()

    def new_session(self) -> Any:
        """A new session on the server with `session_conf` set; the caller stops it."""
        from sparkdispatch.taskexecutor.slot_sessions import new_session

        session = new_session(self.server.url)
        for key, value in self.session_conf.items():
            session.conf.set(key, value)
        return session

    def cpu_seconds(self) -> float:
        """CPU seconds of this process (the client) and of the Connect server's JVM."""
        if self.server is None or self.server.pid is None:
            return math.nan
        return cpu_seconds(os.getpid()) + tree_cpu_seconds(self.server.pid)

    def stop(self) -> None:
        if self.spark is not None:
            try:
                self.spark.stop()
            except Exception:  # noqa: BLE001 - the server is stopped next anyway
                pass
            self.spark = None
        if self.server is not None:
            self.server.stop()
            self.server = None
