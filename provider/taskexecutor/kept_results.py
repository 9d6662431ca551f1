"""Results a TaskExecutor keeps on its local disk for the tasks placed beside it (`"result": "kept"`).

An attempt of a kept vertex writes its result to
`<storage.dir>/te-work/<id>/kept-results/<job_id>/<vertex_id>/<subtask>-<execution_id>` instead of
the results directory (its log stays there), and reports that path; its JobMaster places every
reader on this TaskExecutor. The JobMaster releases a vertex's results once its readers have all
finished, and the whole job's at its end (`sparkdispatch_release_results`). A TaskExecutor that
starts empties the directory: what a former process kept went with it, and its JobMasters run the
producers again. A release lost with a leadership change at the job's end is made up by the
heartbeats: they name the jobs whose results are kept here (`kept_jobs`), and the master answers
which of them ended (`release_ended`).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Collection
from pathlib import Path

from sparkdispatch.model.job_graph import JOB_ID_PATTERN, VERTEX_ID_PATTERN
from sparkdispatch.model.protocol import TaskDeploymentDescriptor

log = logging.getLogger(__name__)


def kept_results_dir(storage_dir: Path, task_executor_id: str) -> Path:
    """Where the TaskExecutor `task_executor_id` keeps results."""
    return storage_dir / "te-work" / task_executor_id / "kept-results"


def job_dir(directory: Path, job_id: str) -> Path:
    """Where the TaskExecutor whose directory is `directory` keeps a job's results."""
    return directory / job_id


def kept_path(directory: Path, tdd: TaskDeploymentDescriptor) -> str:
    """Where the attempt `tdd` (of a kept vertex) writes its result."""
    return str(job_dir(directory, tdd.job_id) / tdd.vertex_id / f"{tdd.subtask_index}-{tdd.execution_id}")


def release(directory: Path, job_id: str, vertex_id: str | None) -> bool:
    """Delete the results kept of a job's vertex (None: of the whole job); False, deleting nothing,
    when an id is not one (a job id is 32 hex digits, a vertex id has no '/')."""
    if not JOB_ID_PATTERN.fullmatch(job_id) or (vertex_id is not None and not VERTEX_ID_PATTERN.fullmatch(vertex_id)):
        log.warning("release of kept results with job id %r, vertex id %r refused: not ids", job_id, vertex_id)
        return False
    job = job_dir(directory, job_id)
    shutil.rmtree(job if vertex_id is None else job / vertex_id, ignore_errors=True)
    if vertex_id is not None:
        try:
            job.rmdir()  # the job's last kept vertex: no empty directory stays
        except OSError:
            pass
    log.info("kept results of job %s%s released", job_id, "" if vertex_id is None else f", vertex {vertex_id}")
    return True


def kept_jobs(directory: Path, running: Collection[str] = ()) -> list[str]:
    """The jobs whose results are kept in `directory`, those in `running` (jobs with an execution
    here) left out: what a heartbeat asks the master about."""
    try:
        entries = list(os.scandir(directory))
    except OSError:  # none kept yet
        return []
    return sorted(
        entry.name
        for entry in entries
        if entry.name not in running and JOB_ID_PATTERN.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False)
    )


#: jobs whose ended results a thread deletes: the next heartbeats name them again meanwhile
_releasing: set[str] = set()
_releasing_lock = threading.Lock()


def release_ended(directory: Path, job_ids: Collection[str]) -> None:
    """Delete the results kept of `job_ids`, which ended, in a thread of its own (one per job at a
    time): the master named them in a heartbeat's answer, since their JobMasters' releases did not arrive."""
    with _releasing_lock:
        starting = sorted(set(job_ids) - _releasing)
        _releasing.update(starting)
    if not starting:
        return
    log.info("the master says jobs %s ended: releasing the results kept of them", ", ".join(starting))

    def release_all() -> None:
        for job_id in starting:
            try:
                release(directory, job_id, None)
            finally:
                with _releasing_lock:
                    _releasing.discard(job_id)

    threading.Thread(target=release_all, daemon=True, name="release-ended").start()


def clear(directory: Path) -> None:
    """Empty the directory at the TaskExecutor's start: a former process's results are lost."""
    if directory.exists():
        shutil.rmtree(directory, ignore_errors=True)
        log.info("kept results of a former process in %s deleted", directory)
    directory.mkdir(parents=True, exist_ok=True)
