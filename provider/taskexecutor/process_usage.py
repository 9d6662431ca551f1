"""What a process holds that a leak grows, and its children, read from /proc (Linux)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcessUsage:
    """A process's threads and open file descriptors at one moment."""

    threads: int
    open_files: int

    @classmethod
    def of(cls, pid: int) -> ProcessUsage | None:
        """None when the process is gone or /proc cannot tell."""
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            threads = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("Threads:"))
            open_files = sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir())
        except (OSError, StopIteration, ValueError):
            return None
        return cls(threads=threads, open_files=open_files)


def child_pids(pid: int) -> list[int]:
    """Direct children of `pid` (each of its threads lists the children it started); [] when it is gone."""
    found: list[int] = []
    try:
        threads = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for thread in threads:
        try:
            found += [int(child) for child in (thread / "children").read_text().split()]
        except OSError:
            continue
    return found
