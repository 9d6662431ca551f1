"""A job's JobResult, built off the loop once the job is globally terminal and handed to its watcher."""

from __future__ import annotations

import asyncio
import logging

from sparkdispatch.jobmaster.execution_graph import ExecutionGraph
from sparkdispatch.model.job_result import JobResult
from sparkdispatch.storage.results import ResultLayout

log = logging.getLogger(__name__)


async def publish_result(
    graph: ExecutionGraph, results: ResultLayout, future: asyncio.Future[JobResult], *, session_id: str
) -> None:
    """Build `graph`'s JobResult in a thread and resolve `future` with it (or with the error building it raised).

    A large job's JobResult walks every subtask (100,000: 0.3 s and more). Once the job is globally
    terminal its graph no longer changes (every attempt is terminal, reports are refused), so a
    thread may read it while the loop answers other calls.
    """
    try:
        result = await asyncio.to_thread(graph.job_result, results=results)
    except Exception as exc:  # noqa: BLE001 - the job's watcher learns it from the future
        if not future.done():
            future.set_exception(exc)
        return
    log.info("job %s (session %s) %s after %d ms", result.job_id, session_id, result.status.value, result.duration_ms)
    if not future.done():
        future.set_result(result)
