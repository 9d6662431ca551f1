"""Processes as /proc shows them: children and descendants, CPU seconds, memory, command lines; and
stopping the processes a benchmark starts outside a cluster."""

from __future__ import annotations

import os
from pathlib import Path

from sparkdispatch.testing.local_cluster import process_tree, stat_fields
from sparkdispatch.testing.process_census import command_line
from sparkdispatch.testing.services import stop_process_group

stop_process = stop_process_group  # the benchmarks' name for it
process_cmdline = command_line


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by `pid` and its reaped children (from /proc)."""
    fields = stat_fields(pid)
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
