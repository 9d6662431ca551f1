"""Attempt logs: what a task function printed or logged, one file per attempt, kept with the job's results.

A slot process points its stdout and stderr at the attempt's file while the attempt runs, so
prints, Python logging and warnings of the task function land there, line by line:

    <results_dir>/<job_id>/<vertex_id>/_logs/<subtask_index>-<attempt>-<execution_id>.log

beside the attempt's partition (`ResultLayout.attempt_path`). Spark's readers skip names that
start with `_`, so reading a vertex's directory still reads only its partitions. Each file is
capped at `taskexecutor.attempt-log.max-size`: past three quarters of it the rest is held back,
and its last quarter written after a line saying how much was dropped (capped_log.py). The files live
and go with the job's results (`results.retention`); the master serves them
(`GET /jobs/{job_id}/vertices/{vertex_id}/log`). Only a local (or `file://`) results directory
holds logs; with a remote one, tasks' output goes to the TaskExecutor's own stdout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

LOG_DIR = "_logs"
#: The most a single read returns.
MAX_READ_BYTES = 1 << 20

_NAME = re.compile(r"^(\d+)-(\d+)-([0-9A-Za-z_-]+)\.log$")


def _local(path: str) -> Path | None:
    if "://" in path and not path.startswith("file://"):
        return None
    return Path(path.removeprefix("file://"))


def attempt_log_path(result_path: str, attempt: int) -> Path | None:
    """The log file of the attempt that writes `result_path` (`<vertex_dir>/<subtask>-<execution>`);
    None when the results directory is remote."""
    partition = _local(result_path.rstrip("/"))
    if partition is None:
        return None
    subtask, _, execution = partition.name.partition("-")
    return partition.parent / LOG_DIR / f"{subtask}-{attempt}-{execution}.log"


def chained_log_path(result_path: str, vertex_id: str, subtask_index: int, attempt: int) -> Path | None:
    """The log file of subtask `subtask_index` of `vertex_id`, chained into the attempt that writes
    `result_path`: in its own vertex's `_logs`, named by the chain's attempt and execution, so it is
    served as that vertex's log. None when the results directory is remote."""
    partition = _local(result_path.rstrip("/"))
    if partition is None:
        return None
    execution = partition.name.partition("-")[2]
    return partition.parent.parent / vertex_id / LOG_DIR / f"{subtask_index}-{attempt}-{execution}.log"


@dataclass(frozen=True)
class LogPiece:
    """A piece of one attempt's log: the bytes from `offset` to `next_offset`, as text."""

    subtask: int
    attempt: int
    offset: int
    next_offset: int
    text: str


def read_attempt_log(
    results_dir: str,
    job_id: str,
    vertex_id: str,
    subtask: int,
    attempt: int | None,
    offset: int = 0,
    limit: int = MAX_READ_BYTES,
) -> LogPiece | None:
    """The log of `subtask`'s `attempt` (its latest attempt when None) from byte `offset`; None
    when there is none (yet, or the results directory is remote). Blocking.

    Two executions of one attempt (a deployment delivered twice) would each have a file; the
    first by name is read.
    """
    directory = _log_dir(results_dir, job_id, vertex_id)
    if directory is None:
        return None
    names = _log_files(directory)
    found = [m for m in names if int(m.group(1)) == subtask and (attempt is None or int(m.group(2)) == attempt)]
    if not found:
        return None
    match = max(found, key=lambda m: int(m.group(2))) if attempt is None else found[0]
    with open(directory / match.group(0), "rb") as file:
        file.seek(offset)
        data = file.read(min(limit, MAX_READ_BYTES))
    return LogPiece(
        subtask=subtask,
        attempt=int(match.group(2)),
        offset=offset,
        next_offset=offset + len(data),
        text=data.decode("utf-8", errors="replace"),
    )


@dataclass(frozen=True)
class LogSize:
    """How long one subtask's latest attempt log is, in bytes."""

    subtask: int
    attempt: int
    size: int


def latest_log_sizes(results_dir: str, job_id: str, vertex_id: str) -> list[LogSize]:
    """Per subtask that has a log, the size of its latest attempt's, by subtask; one directory
    listing and a `stat` per subtask (what a follower asks before it reads). Blocking."""
    directory = _log_dir(results_dir, job_id, vertex_id)
    if directory is None:
        return []
    latest: dict[int, tuple[int, str]] = {}
    for match in _log_files(directory):
        subtask, attempt = int(match.group(1)), int(match.group(2))
        if subtask not in latest or attempt > latest[subtask][0]:
            latest[subtask] = (attempt, match.group(0))
    sizes = []
    for subtask, (attempt, name) in sorted(latest.items()):
        try:
            sizes.append(LogSize(subtask, attempt, (directory / name).stat().st_size))
        except FileNotFoundError:  # removed with the job's results meanwhile
            continue
    return sizes


def _log_dir(results_dir: str, job_id: str, vertex_id: str) -> Path | None:
    root = _local(results_dir.rstrip("/"))
    return None if root is None else root / job_id / vertex_id / LOG_DIR


def _log_files(directory: Path) -> list[re.Match[str]]:
    """The attempt log files in `directory`, by name; none when it does not exist."""
    try:
        return [m for name in sorted(p.name for p in directory.iterdir()) if (m := _NAME.fullmatch(name))]
    except FileNotFoundError:
        return []
