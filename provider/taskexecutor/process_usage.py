"""What a process holds that a leak grows, read from /proc (Linux): threads and open files."""

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
