"""Where the benchmarks find the repository, their task code, their results and the venv."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO / "bench" / "results"
TASKS_DIR = REPO / "bench" / "tasks"
BENCH_TASKS = TASKS_DIR / "bench_tasks.py"
VENV_BIN = Path(sys.executable).parent
DAGS_DIR = REPO / "dags"
