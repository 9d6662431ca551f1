"""Results a TaskExecutor keeps on its local disk for the tasks placed beside it (`"result": "kept"`).

An attempt of a kept vertex writes its result to
`<storage.dir>/te-work/<id>/kept-results/<job_id>/<vertex_id>/<subtask>-<execution_id>` instead of
the results directory (its log stays there), and reports that path; its JobMaster places every
reader on this TaskExecutor. The JobMaster releases a vertex's results once its readers have all
finished, and the whole job's at its end (`sparkdispatch_release_results`). A TaskExecutor that
starts empties the directory: what a former process kept went with it, and its JobMasters run the
producers again.
"""

from __future__ import annotations

import logging
import shutil
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


def clear(directory: Path) -> None:
    """Empty the directory at the TaskExecutor's start: a former process's results are lost."""
    if directory.exists():
        shutil.rmtree(directory, ignore_errors=True)
        log.info("kept results of a former process in %s deleted", directory)
    directory.mkdir(parents=True, exist_ok=True)
