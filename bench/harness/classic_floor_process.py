"""A classic floor in a process of its own: one warm classic SparkSession, with a JVM as new as the
cluster it is compared with.

A benchmark that measures several clusters in turn starts one per cluster, so that no floor is
warmer than its cluster because earlier clusters' chains ran in it (the JVM's JIT keeps what they
compiled). The child times its own actions; the parent only asks:

    parent -> child    "run N\\n"      N x `spark.range(10).count()`  -> "<seconds>\\n"
                       "cpu\\n"        -> "<CPU seconds of the child and its JVM>\\n"
                       "stop\\n"       the session stops, the child exits
    child -> parent    "ready <seconds the session took to open>\\n" first

    python bench/harness/classic_floor_process.py MASTER SHUFFLE_PARTITIONS
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import IO

BENCH_DIR = Path(__file__).resolve().parents[1]


class ClassicFloorProcess:
    """The parent's handle on a classic floor process (`start`, `run`, `cpu_seconds`, `stop`)."""

    def __init__(self, master: str, shuffle_partitions: str) -> None:
        self._argv = [sys.executable, str(Path(__file__).resolve()), master, shuffle_partitions]
        self._process: subprocess.Popen[str] | None = None
        self.start_s = 0.0

    def start(self) -> None:
        """Start the child and wait until its session is open (`start_s`: how long that took)."""
        self._process = subprocess.Popen(
            self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=BENCH_DIR
        )
        answer = self._read()
        if not answer.startswith("ready "):
            raise RuntimeError(f"the classic floor process did not start: {answer!r}")
        self.start_s = float(answer.split()[1])

    def run(self, actions: int) -> float:
        """The seconds `actions` actions took in the child's session."""
        return float(self._ask(f"run {actions}"))

    def cpu_seconds(self) -> float:
        """CPU seconds used so far by the child and its Spark JVM."""
        return float(self._ask("cpu"))

    def stop(self) -> None:
        if self._process is None:
            return
        try:
            self._send("stop")
            self._process.wait(60)
        except (OSError, subprocess.TimeoutExpired):
            self._process.kill()
            self._process.wait()
        self._process = None

    def _ask(self, line: str) -> str:
        self._send(line)
        return self._read()

    def _send(self, line: str) -> None:
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.write(line + "\n")
        self._process.stdin.flush()

    def _read(self) -> str:
        assert self._process is not None and self._process.stdout is not None
        answer = self._process.stdout.readline()
        if not answer:
            raise RuntimeError(f"the classic floor process ended (exit code {self._process.poll()})")
        return answer.strip()


def serve(master: str, shuffle_partitions: str, commands: IO[str], answers: IO[str]) -> None:
    """The child's loop (see the module docstring)."""
    sys.path.insert(0, str(BENCH_DIR))
    from harness.classic_floor import classic_session, classic_session_cpu_seconds

    began = time.monotonic()
    spark = classic_session(master, "classic-floor", {"spark.sql.shuffle.partitions": shuffle_partitions})
    print(f"ready {time.monotonic() - began:.3f}", file=answers, flush=True)
    try:
        for line in commands:
            command, *arguments = line.split()
            if command == "run":
                begin = time.perf_counter()
                for _ in range(int(arguments[0])):
                    spark.range(10).count()
                print(f"{time.perf_counter() - begin:.6f}", file=answers, flush=True)
            elif command == "cpu":
                print(f"{classic_session_cpu_seconds(spark):.3f}", file=answers, flush=True)
            else:
                break
    finally:
        spark.stop()


if __name__ == "__main__":
    # answers go to the real stdout; whatever Spark or pyspark prints goes to stderr
    answers = sys.stdout
    sys.stdout = sys.stderr
    serve(sys.argv[1], sys.argv[2], sys.stdin, answers)
