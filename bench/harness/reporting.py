"""A benchmark's figures: statistics, the machine and its load, the printed table, bench/results/*.json."""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from harness.paths import RESULTS_DIR


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), nearest rank."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def machine_info() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    versions: dict[str, str | None] = {}
    for package in ("pyspark", "celery", "kombu", "kazoo", "aiohttp"):
        try:
            from importlib.metadata import version

            versions[package] = version(package)
        except Exception:  # noqa: BLE001 - a missing version is not worth failing a benchmark over
            versions[package] = None
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "memory_gib": memory_gib,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": versions,
    }


def write_results(name: str, report: dict[str, Any]) -> Path:
    """bench/results/<name>.json with the machine and the date added."""
    report = {
        "benchmark": name,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        **report,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def save_results(name: str, report: dict[str, Any], *, quick: bool = False) -> None:
    """`write_results` under `name` (`name.quick` for a smoke run, which leaves the real results alone);
    prints where."""
    print(f"wrote {write_results(name + ('.quick' if quick else ''), report)}")


def save_labelled_run(name: str, label: str, entry: dict[str, Any], *, quick: bool = False) -> Path:
    """Keep every label's last run in `bench/results/<name>[.quick].json`: `before` and `after` side by side."""
    path = RESULTS_DIR / f"{name}{'.quick' if quick else ''}.json"
    try:
        runs = json.loads(path.read_text())["runs"]
    except (OSError, ValueError, KeyError):
        runs = {}
    runs[label] = {**entry, "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    path.write_text(json.dumps({"machine": machine_info(), "runs": runs}, indent=2) + "\n")
    print(f"wrote {path} ({label})")
    return path


def load_change(report: dict[str, Any]) -> str:
    """`load average <at start> -> <at end> on N cores`, from the report's `load_average_at_*`."""
    return (
        f"load average {report['load_average_at_start']} -> {report['load_average_at_end']} on {os.cpu_count()} cores"
    )


def latency_ms(seconds: Sequence[float]) -> dict[str, float | None]:
    """Median, p99 and max of latencies in seconds, in ms (`latency_ms_median`, `_p99`, `_max`; None without any)."""
    if not seconds:
        return {"latency_ms_median": None, "latency_ms_p99": None, "latency_ms_max": None}
    return {
        "latency_ms_median": round(median(seconds) * 1000, 2),
        "latency_ms_p99": round(percentile(seconds, 99) * 1000, 2),
        "latency_ms_max": round(max(seconds) * 1000, 2),
    }


def spread_ms(seconds: Sequence[float]) -> dict[str, float]:
    """Median (`p50`), p90, min and max of durations in seconds, in ms."""
    return {
        "p50": median(seconds) * 1000,
        "p90": percentile(seconds, 90) * 1000,
        "min": min(seconds) * 1000,
        "max": max(seconds) * 1000,
    }


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    rows = [[str(cell) for cell in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)))


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]
