"""Nothing survives its parent's SIGKILL: a TaskExecutor killed mid-task takes its Spark Connect
server, Spark's Python workers and its slot processes along, and `sparkdispatch standalone`
killed takes its TaskExecutors and theirs. Every process the test starts carries a marker in its
environment (children inherit it), so a survivor is found by a /proc scan wherever it went."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkdispatch.testing.http import http_json, upload_artifact
from sparkdispatch.testing.local_cluster import ProcessId, process_tree
from sparkdispatch.testing.services import free_port

pytestmark = pytest.mark.slow

MARKER_VARIABLE = "SPARKDISPATCH_TEST_PARENT_DEATH"
#: A TaskExecutor's start (its server's start and warm-up) took over 2 minutes on a loaded 2-core machine.
WAIT_S = 420.0
#: How long the killed processes' children may take to go: the server's JVM gets SIGTERM and stops
#: Spark first (seconds; Hadoop's shutdown hooks give up after 30 s).
GONE_WITHIN_S = 60.0

TASKS = '''
import time


def udf_sleeps(ctx):
    """A Python UDF that sleeps: a slot process, the server and one of its Python workers are busy."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    def slowly(value):
        time.sleep(600)
        return value

    ctx.spark.range(1).select(F.udf(slowly, LongType())("id")).collect()
'''


def marked(marker: str) -> dict[ProcessId, str]:
    """Live processes (not zombies) whose environment holds the marker: (pid, start time) → command line."""
    found = {}
    needle = f"{MARKER_VARIABLE}={marker}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if fields[0] != "Z":
            found[(int(entry.name), int(fields[19]))] = command[:160]
    return found


def wait_until(predicate: object, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def kill_all(processes: dict[ProcessId, str]) -> None:
    for pid, _ in processes:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def marker() -> Iterator[str]:
    marker = uuid.uuid4().hex
    try:
        yield marker
    finally:
        kill_all(marked(marker))  # whatever a failed test left


class Standalone:
    def __init__(self, tmp_path: Path, marker: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, MARKER_VARIABLE: marker}
        argv = [sys.executable, "-m", "sparkdispatch.cli", "-D", f"rest.port={self.port}",
                "-D", "heartbeat.interval=500ms", "-D", "heartbeat.timeout=5s", "-D", "spark.master=local[1]",
                "-D", "spark.ui.enabled=false", "-D", "taskexecutor.connect.start-timeout=6min", "standalone", "--storage", str(tmp_path / "storage"), "--slots", "1"]
        with open(tmp_path / "standalone.log", "wb") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=env, start_new_session=True)
        self.artifact = ""
        self.tasks = tmp_path / "orphan_tasks.py"
        self.tasks.write_text(TASKS)

    def task_executors(self) -> int:
        status, body = http_json("GET", self.base + "/overview", timeout=5)
        return int(body["taskmanagers"]) if status == 200 else 0

    def wait_for_task_executor(self) -> None:
        def registered() -> bool:
            assert self.process.poll() is None, "sparkdispatch standalone exited"
            try:
                return self.task_executors() == 1
            except OSError:
                return False

        wait_until(registered, "a TaskExecutor to register")

    def task_executor(self) -> int:
        """The TaskExecutor process: the standalone's one child."""
        [pid] = [int(child) for thread in Path(f"/proc/{self.process.pid}/task").iterdir()
                 for child in (thread / "children").read_text().split()]
        return pid

    def run_a_udf(self) -> None:
        """Submit a job whose task runs a sleeping Python UDF; return once a Python worker runs it."""
        if not self.artifact:
            self.artifact = upload_artifact(self.base, self.tasks)
        graph = {"name": "orphans", "artifacts": [self.artifact],
                 "vertices": [{"id": "udf", "entrypoint": "orphan_tasks:udf_sleeps"}],
                 "restart_strategy": {"type": "fixed-delay", "attempts": 0, "delay_s": 0}}
        status, body = http_json("POST", self.base + "/jobs", graph, timeout=30)
        assert status == 202, body
        wait_until(lambda: any("pyspark.worker" in command or "pyspark/worker" in command
                               for command in self.tree().values()), "a Python worker to run the UDF")

    def tree(self, root: int | None = None) -> dict[ProcessId, str]:
        """The processes under `root` (the standalone by default), with their command lines."""
        found = {}
        for pid, started in process_tree(root or self.process.pid):
            try:
                found[(pid, started)] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
        return found


def test_a_killed_taskexecutor_and_a_killed_standalone_leave_no_process_behind(tmp_path: Path,
                                                                               marker: str) -> None:
    standalone = Standalone(tmp_path, marker)
    try:
        standalone.wait_for_task_executor()
        standalone.run_a_udf()
        task_executor = standalone.task_executor()
        its_tree = standalone.tree(task_executor)
        kinds = " ".join(its_tree.values())
        assert "SparkConnectServer" in kinds and "slot_process" in kinds and "pyspark" in kinds, its_tree

        os.kill(task_executor, signal.SIGKILL)  # the TaskExecutor alone, not its process group

        wait_until(lambda: not set(its_tree) & set(marked(marker)), "the killed TaskExecutor's children to end",
                   GONE_WITHIN_S)

        standalone.wait_for_task_executor()  # the standalone starts another
        standalone.run_a_udf()
        everything = marked(marker)
        assert len(everything) >= 5, everything  # standalone, TaskExecutor, server, slot process, Python worker

        os.kill(standalone.process.pid, signal.SIGKILL)
        standalone.process.wait(10)

        def survivors() -> dict[ProcessId, str]:
            return marked(marker)

        deadline = time.monotonic() + GONE_WITHIN_S
        while survivors() and time.monotonic() < deadline:
            time.sleep(0.3)
        assert survivors() == {}, f"processes outlived sparkdispatch standalone: {survivors()}"
    finally:
        if standalone.process.poll() is None:
            standalone.process.kill()
            standalone.process.wait(10)
