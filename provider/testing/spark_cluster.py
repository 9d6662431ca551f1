"""A Spark standalone cluster from the pyspark distribution: a master and workers as child processes.

Started with pyspark's own `bin/spark-class` (`org.apache.spark.deploy.master.Master`,
`...deploy.worker.Worker`) on loopback, each in a process group of its own, so that
`kill_worker(i)` takes a worker down with its executors as a machine dying would. `stop()`
kills everything it started and removes its work directory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from sparkdispatch.testing.services import file_tail, free_port, kill_process_group, wait_for_port


def _spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


class SparkStandaloneCluster:
    """`workers` Spark workers of `cores` cores and `memory` each under one master; `url` is `spark://...`."""

    def __init__(self, *, workers: int = 2, cores: int = 1, memory: str = "1g", start_timeout: float = 90.0) -> None:
        self.worker_count = workers
        self.cores = cores
        self.memory = memory
        self.start_timeout = start_timeout
        self.port = 0
        self.ui_port = 0
        self.workdir: Path | None = None
        self.master: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="sparkdispatch-spark-"))
        self.port, self.ui_port = free_port(), free_port()
        self.master = self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
        )
        try:
            wait_for_port(self.port, timeout=self.start_timeout, process=self.master)
            for index in range(self.worker_count):
                work = self.workdir / f"worker-{index}"
                work.mkdir()
                self.workers.append(
                    self._spawn(
                        f"worker-{index}",
                        "org.apache.spark.deploy.worker.Worker",
                        self.url,
                        "--host",
                        "127.0.0.1",
                        "--cores",
                        str(self.cores),
                        "--memory",
                        self.memory,
                        "--webui-port",
                        "0",
                        "--work-dir",
                        str(work),
                    )
                )
            self.wait_for_workers(self.worker_count)
        except BaseException:
            self.stop()
            raise

    def alive_workers(self) -> int:
        """Workers the master counts as alive (its web UI's JSON)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as answer:
            return int(json.load(answer)["aliveworkers"])

    def wait_for_workers(self, count: int) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            try:
                if self.alive_workers() >= count:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{count} Spark workers did not register within {self.start_timeout:.0f}s:\n"
                    + self.log_tail("master")
                )
            time.sleep(0.3)

    def worker_of_executor(self, executor_id: str) -> int | None:
        """The index of the worker running executor `executor_id` (its JVM is in that worker's process
        group), or None."""
        groups = {process.pid: index for index, process in enumerate(self.workers) if process.poll() is None}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                group = os.getpgid(int(pid))
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except (OSError, ProcessLookupError):
                continue
            if group in groups and b"--executor-id" in argv:
                if argv[argv.index(b"--executor-id") + 1].decode() == executor_id:
                    return groups[group]
        return None

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker `index` and its executors (its process group)."""
        kill_process_group(self.workers[index])

    def log_tail(self, name: str, lines: int = 30) -> str:
        assert self.workdir is not None
        return file_tail(self.workdir / f"{name}.log", lines)

    def stop(self) -> None:
        for process in [*self.workers, self.master]:
            if process is not None:
                kill_process_group(process)
        self.workers.clear()
        self.master = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def _spawn(self, name: str, main_class: str, *args: str) -> subprocess.Popen[bytes]:
        assert self.workdir is not None
        env = {
            **os.environ,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_NO_DAEMONIZE": "1",
            "SPARK_LOG_DIR": str(self.workdir),
            "SPARK_PID_DIR": str(self.workdir),
        }
        with open(self.workdir / f"{name}.log", "wb") as out:
            return subprocess.Popen(
                [str(_spark_class()), main_class, *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )

    def __enter__(self) -> SparkStandaloneCluster:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
