"""Nothing survives its parent's SIGKILL: a TaskExecutor killed mid-task takes its Spark Connect
server, Spark's Python workers and its slot processes along, and `sparkdispatch standalone`
killed takes its TaskExecutors and theirs. Every process the test starts carries a marker in its
environment (children inherit it), so a survivor is found by a /proc scan wherever it went."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sparkdispatch.testing.http import http_json, upload_artifact
from sparkdispatch.testing.local_cluster import ProcessId, parent_pid, process_tree, stat_fields
from sparkdispatch.taskexecutor.worker_daemon_template import DAEMON_NAME
from sparkdispatch.testing.process_census import command_line, process_name
from sparkdispatch.testing.standalone_process import StandaloneProcess
from sparkdispatch.testing.waiting import WaitTimedOut, eventually_blocking

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
            fields = stat_fields(int(entry.name))
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fields[0] != "Z":
            found[(int(entry.name), int(fields[19]))] = command
    return found


def described(processes: dict[ProcessId, str]) -> list[str]:
    """Each process as a failure message shows it: its name, state, parent, group, what it waits in
    and its command line, so a survivor says which of the template's forks it is."""
    lines = []
    for (pid, _), command in processes.items():
        try:
            state, parent, group = stat_fields(pid)[:3]
            wchan = Path(f"/proc/{pid}/wchan").read_text()
        except OSError:
            continue
        lines.append(
            f"{pid} {process_name(pid)!r} state {state} parent {parent} ({process_name(int(parent))!r}) "
            f"group {group} in {wchan or '-'}: {command[:160]}"
        )
    return lines


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    eventually_blocking(predicate, what, timeout=timeout, interval=0.3)


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


class Standalone(StandaloneProcess):
    def __init__(self, tmp_path: Path, marker: str) -> None:
        super().__init__(
            tmp_path / "storage",
            slots=1,
            env={**os.environ, MARKER_VARIABLE: marker},
            overrides={
                "heartbeat.interval": "500ms",
                "heartbeat.timeout": "5s",
                "spark.master": "local[1]",
                "spark.ui.enabled": "false",
                "taskexecutor.connect.start-timeout": "6min",
            },
        )
        self.artifact = ""
        self.tasks = tmp_path / "orphan_tasks.py"
        self.tasks.write_text(TASKS)

    def run_a_udf(self) -> None:
        """Submit a job whose task runs a sleeping Python UDF; return once a Python worker runs it."""
        if not self.artifact:
            self.artifact = upload_artifact(self.base_url, self.tasks)
        graph = {
            "name": "orphans",
            "artifacts": [self.artifact],
            "vertices": [{"id": "udf", "entrypoint": "orphan_tasks:udf_sleeps"}],
            "restart_strategy": {"type": "fixed-delay", "attempts": 0, "delay_s": 0},
        }
        status, body = http_json("POST", self.base_url + "/jobs", graph, timeout=30)
        assert status == 202, body
        wait_until(self.a_python_worker_runs, "a Python worker to run the UDF")

    def a_python_worker_runs(self) -> bool:
        """Whether a Python worker runs: forked by a session's daemon, itself forked from the
        TaskExecutor's worker-daemon template (both named `pyspark-daemon`)."""
        for pid, _ in self.tree():
            try:
                parent = parent_pid(pid)
            except (OSError, IndexError, ValueError):
                continue
            if process_name(pid) == DAEMON_NAME and process_name(parent) == DAEMON_NAME:
                return True
        return False

    def registrations(self) -> int:
        """How often a TaskExecutor of this standalone registered (its processes share one log)."""
        log = self.log_dir / "taskexecutor-0.log"
        return log.read_text(errors="replace").count("registered as standalone-0") if log.exists() else 0

    def tree(self, root: int | None = None) -> dict[ProcessId, str]:
        """The processes under `root` (the standalone by default), with their command lines."""
        assert self.process is not None
        return {member: command_line(member[0]) for member in process_tree(root or self.process.pid)}


@pytest.mark.timeout(2 * WAIT_S + 4 * GONE_WITHIN_S)  # two TaskExecutors start, each within WAIT_S
def test_a_killed_taskexecutor_and_a_killed_standalone_leave_no_process_behind(tmp_path: Path, marker: str) -> None:
    standalone = Standalone(tmp_path, marker)
    standalone.launch()
    assert standalone.process is not None
    try:
        standalone.wait_for_task_executors(timeout=WAIT_S)
        standalone.run_a_udf()
        [task_executor] = standalone.task_executor_pids()
        its_tree = standalone.tree(task_executor)
        kinds = " ".join(its_tree.values())
        # slot processes forked from the template (slot_template) or started anew (slot_process)
        assert "SparkConnectServer" in kinds and "slot_" in kinds and "pyspark" in kinds, its_tree

        os.kill(task_executor, signal.SIGKILL)  # the TaskExecutor alone, not its process group

        def its_survivors() -> dict[ProcessId, str]:
            """What is left of its tree, and whatever it or its template forked after the tree was read."""
            tied = f"--parent-pid {task_executor} "
            return {m: c for m, c in marked(marker).items() if m in its_tree or tied in f"{c} "}

        try:
            wait_until(lambda: not its_survivors(), "the killed TaskExecutor's children to end", GONE_WITHIN_S)
        except WaitTimedOut:
            raise AssertionError(f"processes outlived the TaskExecutor: {described(its_survivors())}") from None

        # the standalone starts another, under the same id: wait for its own registration
        wait_until(lambda: standalone.registrations() == 2, "a new TaskExecutor to register")
        standalone.run_a_udf()
        everything = marked(marker)
        assert len(everything) >= 5, everything  # standalone, TaskExecutor, server, slot process, Python worker
        [second] = standalone.task_executor_pids()

        os.kill(standalone.process.pid, signal.SIGKILL)
        standalone.process.wait(10)

        def survivors() -> dict[ProcessId, str]:
            return marked(marker)

        try:
            wait_until(lambda: not survivors(), "the standalone's processes to end", GONE_WITHIN_S)
        except WaitTimedOut:
            raise AssertionError(
                f"processes outlived sparkdispatch standalone (TaskExecutors {task_executor}, then {second}): "
                f"{described(survivors())}"
            ) from None
    finally:
        standalone.stop()
