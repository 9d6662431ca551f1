"""Processes as /proc shows them: children and descendants, CPU seconds, memory, command lines; and
stopping the processes a benchmark starts outside a cluster."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sparkdispatch.testing.local_cluster import process_tree


def child_pids(pid: int) -> list[int]:
    """Direct children of `pid`, from /proc (each of its threads lists the children it started)."""
    children: list[int] = []
    try:
        threads = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return children
    for thread in threads:
        try:
            children += [int(child) for child in (thread / "children").read_text().split()]
        except OSError:
            continue
    return children


def stop_process(process: subprocess.Popen[Any], *, grace: float = 15.0) -> None:
    """SIGTERM the process group of `process` (started with start_new_session), SIGKILL after `grace`."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    except ProcessLookupError:
        pass


def kill_pids(pids: Iterable[int]) -> None:
    """SIGKILL the process groups led by these pids if they still run (stragglers of a killed parent)."""
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by `pid` and its reaped children (from /proc)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rfind(")") + 2:].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(v) for v in fields[11:15]) / ticks  # utime stime cutime cstime


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of `pid` and its live descendants (a TaskExecutor and its Spark JVM)."""
    total = 0.0
    for member, _ in process_tree(pid):
        try:
            total += cpu_seconds(member)
        except OSError:
            continue  # gone meanwhile
    return total


def process_cmdline(pid: int) -> str:
    """The command line of `pid`, arguments joined by spaces ("" when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (children first, then theirs), from /proc."""
    return [member for member, _ in process_tree(pid)[1:]]


def memory_kib(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of `pid` in KiB from /proc (PSS shares each shared page among its users); (0, 0) when gone."""
    rss = pss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
    except OSError:
        return 0, 0
    return rss, pss
