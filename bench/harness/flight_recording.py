"""Java Flight Recordings of a Connect server's JVM, with the CPU of its threads by name from /proc."""

from __future__ import annotations

import os
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

from harness.processes import descendants, process_cmdline


def jvm_of(pid: int) -> int:
    """The Java process at `pid` or under it (a launcher script may exec or fork it)."""
    for member in [pid, *descendants(pid)]:
        if process_cmdline(member).split(" ", 1)[0].endswith("java"):
            return member
    raise RuntimeError(f"no Java process at or under pid {pid}")


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds so far of each live thread of `pid`, summed by thread name with digits dropped."""
    ticks = os.sysconf("SC_CLK_TCK")
    totals: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = re.sub(r"[0-9]+", "#", stat[stat.find("(") + 1 : stat.rfind(")")])
        totals[name] = totals.get(name, 0.0) + _user_and_system_seconds(stat, ticks)
    return totals


class FlightRecording:
    """`jcmd <pid> JFR.start` (the `profile` settings) between each `start()` and `stop()`, one file a window
    (`<output stem>-<n>.jfr`); the CPU of the JVM and of its threads by name, summed over the windows."""

    def __init__(self, pid: int, output: Path, name: str = "bench") -> None:
        self.pid = jvm_of(pid)
        self.output = output
        self.name = name
        self.files: list[Path] = []
        self._threads_before: dict[str, float] = {}
        self._process_before = 0.0
        self.thread_cpu: dict[str, float] = {}
        self.process_cpu = 0.0
        # the JVM's first recording loads the recorder itself: paid here, outside the windows measured
        self._jcmd("JFR.start", f"name={name}-prime")
        self._jcmd("JFR.stop", f"name={name}-prime")

    def start(self) -> None:
        self._jcmd("JFR.start", f"name={self.name}", "settings=profile")
        self._threads_before = thread_cpu_seconds(self.pid)
        self._process_before = _process_cpu(self.pid)

    def stop(self) -> None:
        after = thread_cpu_seconds(self.pid)
        used = _process_cpu(self.pid) - self._process_before
        self.process_cpu += used
        deltas = {name: seconds - self._threads_before.get(name, 0.0) for name, seconds in after.items()}
        # threads that ended meanwhile (a Connect operation's execute thread) are in the process's CPU only
        deltas["(ended threads)"] = used - sum(deltas.values())
        for name, seconds in deltas.items():
            self.thread_cpu[name] = round(self.thread_cpu.get(name, 0.0) + seconds, 2)
        self.files.append(self.output.with_name(f"{self.output.stem}-{len(self.files) + 1}.jfr"))
        self._jcmd("JFR.stop", f"name={self.name}", f"filename={self.files[-1]}")

    def _jcmd(self, *args: str) -> None:
        subprocess.run(["jcmd", str(self.pid), *args], check=True, capture_output=True, timeout=120)

    def top_threads(self, count: int = 15) -> list[tuple[str, float]]:
        return sorted(self.thread_cpu.items(), key=lambda kv: kv[1], reverse=True)[:count]

    def samples(self) -> list[tuple[str, list[str]]]:
        """The recordings' execution samples: (thread name with digits dropped, stack top frame first)."""
        return [sample for file in self.files for sample in execution_samples(file)]


def execution_samples(file: Path) -> list[tuple[str, list[str]]]:
    """The execution samples of a recording file, as `jfr print` shows them."""
    text = subprocess.run(
        ["jfr", "print", "--events", "jdk.ExecutionSample", "--stack-depth", "200", str(file)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    ).stdout
    stacks: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    thread = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("sampledThread = "):
            thread = re.sub(r"[0-9]+", "#", stripped.split('"')[1] if '"' in stripped else stripped)
        elif stripped.startswith("stackTrace = ["):
            current = []
        elif current is not None:
            if stripped == "]" or stripped.startswith("]"):
                stacks.append((thread, current))
                current = None
            elif stripped and stripped != "...":
                current.append(stripped.split("(", 1)[0].split(" line:", 1)[0].strip())
    return stacks


def _process_cpu(pid: int) -> float:
    return _user_and_system_seconds(Path(f"/proc/{pid}/stat").read_text(), os.sysconf("SC_CLK_TCK"))


def _user_and_system_seconds(stat: str, ticks: int) -> float:
    """utime + stime of a /proc stat line, in seconds."""
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / ticks


def package_of(frame: str, depth: int = 5) -> str:
    """`org.apache.spark.sql.catalyst.expressions.Foo.bar` -> `org.apache.spark.sql.catalyst` (its package's
    first `depth` parts)."""
    parts = frame.split(".")
    package = [p for p in parts[:-2] if p and p[0].islower()]
    return ".".join(package[:depth]) or frame


def summary(samples: list[tuple[str, list[str]]], markers: dict[str, str], count: int = 20) -> dict[str, Any]:
    """Samples by thread, top frames by package (self), and the samples whose stack holds each marker."""
    stacks = [s for _, s in samples]
    threads: Counter[str] = Counter(t for t, _ in samples)
    own: Counter[str] = Counter(package_of(s[0]) for s in stacks if s)
    frames: Counter[str] = Counter(s[0] for s in stacks if s)
    hits = {label: sum(1 for s in stacks if any(needle in f for f in s)) for label, needle in markers.items()}
    return {
        "samples": len(stacks),
        "by_thread": threads.most_common(count),
        "self_by_package": own.most_common(count),
        "self_by_frame": frames.most_common(count),
        "stacks_with": hits,
    }
