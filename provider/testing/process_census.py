"""Every process of a local cluster, counted by kind: how many, their memory, threads and open files.

`census(root)` reads /proc for `root` (a `sparkdispatch standalone` process, or a TaskExecutor)
and every descendant, and sums them per kind (`KINDS`): the root itself, TaskExecutors (the
root's children when it is a standalone), Spark Connect server JVMs, slot processes (started
anew, or forked from the template: those carry its command line and are named `slot-process`),
the slot-process template, Spark's Python workers (daemons and the workers they fork, also those
forked from the worker-daemon template: they carry its command line and are named
`pyspark-daemon`), the stubs Spark runs as daemons that the worker-daemon template stands in for,
that template, anything else. The soak bench and the soak test use it to see whether a warm
cluster grows.

A Connect server's threads include those of Spark's cached block-manager pools
(`POOLED_THREAD_PREFIXES`): each holds up to 100 threads, started by a burst of block removals (a
released session's broadcasts and shuffles) and ended after a minute idle. They are counted in
`threads` and, apart, in `pooled_threads`: a count taken within a minute of such a burst is up to
200 higher than one taken after, whatever the server's age.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sparkdispatch.taskexecutor.process_usage import child_pids
from sparkdispatch.taskexecutor.slot_protocol import SLOT_PROCESS_NAME
from sparkdispatch.taskexecutor.worker_daemon_stub import STUB_MODULE
from sparkdispatch.taskexecutor.worker_daemon_template import DAEMON_NAME
from sparkdispatch.taskexecutor.worker_daemons import TEMPLATE_MODULE as WORKER_DAEMON_TEMPLATE_MODULE
from sparkdispatch.testing.local_cluster import process_tree

ROOT = "root (master)"
TASK_EXECUTOR = "taskexecutor"
SERVER = "connect server JVM"
SLOT = "slot processes"
TEMPLATE = "slot-process template"
PYTHON_WORKER = "Spark Python workers"
DAEMON_STUB = "Spark Python daemon stubs"
DAEMON_TEMPLATE = "worker-daemon template"
OTHER = "other"
KINDS = (ROOT, TASK_EXECUTOR, SERVER, SLOT, TEMPLATE, PYTHON_WORKER, DAEMON_STUB, DAEMON_TEMPLATE, OTHER)
METRICS = ("processes", "rss_mib", "threads", "pooled_threads", "open_files")
#: Thread names (as /proc shows them: cut to 15 characters) of Spark's cached pools that end idle threads.
POOLED_THREAD_PREFIXES = ("block-manager-s", "block-manager-a")


@dataclass
class KindTotals:
    """One kind of process at one moment: how many, and their RSS (MiB), threads and open files summed."""

    processes: int = 0
    rss_mib: float = 0.0
    threads: int = 0
    pooled_threads: int = 0  # of `threads`, those of Spark's block-manager pools (servers only)
    open_files: int = 0
    commands: list[str] = field(default_factory=list)  # of the `other` kind only, to tell what they are

    def value(self, metric: str) -> float:
        return float(getattr(self, metric))

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "processes": self.processes,
            "rss_mib": round(self.rss_mib, 1),
            "threads": self.threads,
            "pooled_threads": self.pooled_threads,
            "open_files": self.open_files,
        }
        if self.commands:
            out["commands"] = self.commands
        return out


def command_line(pid: int) -> str:
    """The process's command line, arguments joined by spaces ('' when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def process_name(pid: int) -> str:
    """The process's name (/proc/PID/comm; '' when it is gone)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def kind_of(pid: int, *, root: int, task_executors: set[int]) -> str:
    if pid == root:
        return TASK_EXECUTOR if root in task_executors else ROOT
    if pid in task_executors:
        return TASK_EXECUTOR
    command = command_line(pid)
    if "SparkConnectServer" in command:
        return SERVER
    if "sparkdispatch.taskexecutor.slot_process" in command:
        return SLOT
    if "sparkdispatch.taskexecutor.slot_template" in command:
        return SLOT if process_name(pid) == SLOT_PROCESS_NAME else TEMPLATE
    if WORKER_DAEMON_TEMPLATE_MODULE in command:
        return PYTHON_WORKER if process_name(pid) == DAEMON_NAME else DAEMON_TEMPLATE
    if STUB_MODULE in command:
        return DAEMON_STUB
    if "pyspark.daemon" in command or "pyspark.worker" in command:
        return PYTHON_WORKER
    return OTHER


def _status(pid: int) -> tuple[float, int] | None:
    """(RSS in MiB, threads) from /proc/<pid>/status; None when the process is gone or a zombie."""
    rss_kib = threads = None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss_kib = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    except OSError:
        return None
    if rss_kib is None or threads is None:
        return None
    return rss_kib / 1024, threads


def pooled_threads(pid: int) -> int:
    """How many of the process's threads belong to Spark's block-manager pools (0 when it is gone)."""
    count = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                if (task / "comm").read_text().startswith(POOLED_THREAD_PREFIXES):
                    count += 1
            except OSError:
                continue  # the thread ended meanwhile
    except OSError:
        return 0
    return count


def _open_files(pid: int) -> int:
    try:
        return sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return 0


def census(root: int, *, task_executors: set[int] | None = None) -> dict[str, KindTotals]:
    """Every live process of the tree under `root`, summed by kind. `task_executors`: their pids
    (default: `root`'s direct children, as under `sparkdispatch standalone`)."""
    members = [pid for pid, _ in process_tree(root)]
    if task_executors is None:
        task_executors = set(child_pids(root))
    totals = {kind: KindTotals() for kind in KINDS}
    for pid in members:
        status = _status(pid)
        if status is None:
            continue
        kind = kind_of(pid, root=root, task_executors=task_executors)
        entry = totals[kind]
        entry.processes += 1
        entry.rss_mib += status[0]
        entry.threads += status[1]
        entry.open_files += _open_files(pid)
        if kind == SERVER:
            entry.pooled_threads += pooled_threads(pid)
        if kind == OTHER:
            entry.commands.append(command_line(pid)[:120])
    return totals
