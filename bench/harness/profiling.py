"""`py-spy record` of a benchmark's process, and where its time went."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from harness.paths import VENV_BIN


class PySpy:
    """`py-spy record` of one process into collapsed stacks; `top()` summarises where time went."""

    def __init__(
        self, pid: int, output: Path, *, rate: int = 200, idle: bool = False, subprocesses: bool = False
    ) -> None:
        self.pid = pid
        self.output = output
        executable = VENV_BIN / "py-spy"
        if not executable.exists():
            raise RuntimeError(f"py-spy is not installed: {VENV_BIN / 'pip'} install py-spy")
        argv = [
            str(executable),
            "record",
            "--pid",
            str(pid),
            "--format",
            "raw",
            "--output",
            str(output),
            "--rate",
            str(rate),
            "--nonblocking",
        ]
        if idle:
            argv.append("--idle")
        if subprocesses:
            argv.append("--subprocesses")
        self.process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True
        )

    def stop(self) -> None:
        """Stop recording (SIGINT makes py-spy write its output)."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGINT)
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
            except ProcessLookupError:
                pass

    def top(self, count: int = 15, *, only: str = "") -> dict[str, Any]:
        """The functions with the most samples: own (self) and inclusive, as shares of all samples.

        `only`: count just the stacks with a frame containing this text (one thread's work).
        """
        own: dict[str, int] = {}
        inclusive: dict[str, int] = {}
        total = 0
        if not self.output.exists():
            return {"samples": 0, "self": [], "inclusive": []}
        for line in self.output.read_text(errors="replace").splitlines():
            stack, _, samples = line.rpartition(" ")
            if not stack or not samples.isdigit():
                continue
            n = int(samples)
            frames = [_short_frame(f) for f in stack.split(";")]
            frames = [f for f in frames if f]
            if not frames or (only and not any(only in f for f in frames)):
                continue
            total += n
            own[frames[-1]] = own.get(frames[-1], 0) + n
            for frame in set(frames):
                inclusive[frame] = inclusive.get(frame, 0) + n

        def ranked(table: dict[str, int]) -> list[dict[str, Any]]:
            best = sorted(table.items(), key=lambda kv: kv[1], reverse=True)[:count]
            return [{"function": name, "share": round(n / total, 3) if total else 0.0} for name, n in best]

        return {"samples": total, "self": ranked(own), "inclusive": ranked(inclusive)}

    def shares(self, needles: dict[str, str], *, only: str = "") -> dict[str, float]:
        """label -> share of the (`only`-filtered) samples whose stack has a frame containing needle."""
        hits = dict.fromkeys(needles, 0)
        total = 0
        if not self.output.exists():
            return {label: 0.0 for label in needles}
        for line in self.output.read_text(errors="replace").splitlines():
            stack, _, samples = line.rpartition(" ")
            if not stack or not samples.isdigit() or (only and only not in stack):
                continue
            total += int(samples)
            for label, needle in needles.items():
                if needle in stack:
                    hits[label] += int(samples)
        return {label: round(n / total, 3) if total else 0.0 for label, n in hits.items()}


def _short_frame(frame: str) -> str:
    """`func (/long/path/site-packages/pkg/mod.py:12)` → `func (pkg/mod.py)`; thread frames dropped."""
    name, _, where = frame.partition(" (")
    if not where:
        return "" if frame.startswith(("process ", "thread ")) else frame
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "sparkdispatch/", "lib/python3.11/"):
        if marker in path:
            path = ("sparkdispatch/" if marker == "sparkdispatch/" else "") + path.split(marker, 1)[1]
            break
    return f"{name} ({path})"
