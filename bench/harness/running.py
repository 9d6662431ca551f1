"""Running a benchmark: its command line, its child processes' environment, its scratch directory.

Every process a benchmark starts is stopped on exit, on errors, on Ctrl-C and on SIGTERM:
`bench_main` turns SIGTERM into KeyboardInterrupt so the benchmarks' `finally` blocks run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness.paths import VENV_BIN


def bench_main(run: Callable[[], int]) -> None:
    """Run `run()` with SIGTERM mapped to KeyboardInterrupt; exit with its code (130 on Ctrl-C)."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
    try:
        code = run()
    except KeyboardInterrupt:
        print("interrupted; every process started was stopped", file=sys.stderr)
        code = 130
    sys.exit(code)


def add_run_options(parser: argparse.ArgumentParser, *, quick: str) -> None:
    """`--work-dir`, and `--quick`: a smoke run (`quick` says what it cuts) whose results go to `<name>.quick.json`."""
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="keep storage and logs here (default: a temporary directory, removed at the end)",
    )
    parser.add_argument("--quick", action="store_true", help=f"smoke run: {quick}")


def add_pipeline_options(parser: argparse.ArgumentParser) -> None:
    """`--slots` of a standalone's TaskExecutor and `--rows` of the sales pipeline (`sales_graph`)."""
    parser.add_argument("--slots", type=int, default=2, help="slots of the standalone's TaskExecutor")
    parser.add_argument("--rows", type=int, default=100_000, help="orders the pipeline generates")


def bench_env() -> dict[str, str]:
    """The environment for child processes: the venv's bin on PATH (spark-submit finds SPARK_HOME
    through `python3`), Spark bound to loopback."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    return env


@contextlib.contextmanager
def scratch_dir(keep: Path | None, prefix: str) -> Iterator[str]:
    """`keep` (created, left in place) or a temporary directory removed at the end."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield str(keep.resolve())
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
        yield scratch
