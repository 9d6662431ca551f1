"""The triggers deferred tasks wait on: one event when a job ends, or when a vertex concludes.

Every trigger of one connection in a triggerer process shares one client (`job_watch.shared_client`),
and the vertex triggers of one job share one watcher of it (`job_watch.watch_vertex`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent
from asgiref.sync import sync_to_async

from sparkdispatch.errors import JobAlreadyTerminated, SparkDispatchError
from sparkdispatch.hooks.sparkdispatch import SparkDispatchHook
from sparkdispatch.client.log_stream import JobLogs
from sparkdispatch.operators.deprecation import renamed_argument, warn_renamed
from sparkdispatch.operators.job_watch import follow_vertex, shared_client, vertex_concluded
from sparkdispatch.operators.run_state import TaskInstanceRef, stopped_by_run_timeout

log = logging.getLogger(__name__)

__all__ = [
    "JobResultTrigger",
    "SparkDispatchJobTrigger",
    "SparkDispatchVertexTrigger",
    "VertexTrigger",
    "cancel_quietly",
    "vertex_concluded",
]

#: How long a trigger's `on_kill` waits for the master to take a cancel.
CANCEL_TIMEOUT_S = 30.0


def _classpath(trigger: BaseTrigger) -> str:
    return f"{type(trigger).__module__}.{type(trigger).__qualname__}"


class SparkDispatchJobTrigger(BaseTrigger):
    """Waits in the triggerer until job `job_id` is FINISHED, FAILED or CANCELED.

    Meanwhile the job's attempt logs go to the trigger's log, which Airflow shows in the task's
    log. Yields exactly one event: `{"status": "terminal", "job_id", "result": JobResult}`, or
    `{"status": "error", "job_id", "message"}` when the master cannot be asked. A master
    failover does not end the wait: the client finds the new leader. With `cancel_on_kill`,
    a user who marks the deferred task failed or clears it cancels the job too.
    """

    def __init__(
        self,
        *,
        job_id: str,
        sparkdispatch_conn_id: str = SparkDispatchHook.default_conn_name,
        poll_interval: float = 5.0,
        cancel_on_kill: bool = True,
        vertices: Mapping[str, int] | None = None,
        conn_id: str | None = None,
    ) -> None:
        # untyped_calls_exclude covers Airflow's untyped BaseTrigger.__init__, but not through super() (mypy #16653)
        super().__init__()  # type: ignore[no-untyped-call]
        self.job_id = job_id
        self.sparkdispatch_conn_id = renamed_argument(
            type(self).__name__, "conn_id", "sparkdispatch_conn_id", sparkdispatch_conn_id, conn_id
        )
        self.poll_interval = poll_interval
        self.cancel_on_kill = cancel_on_kill
        self.vertices = dict(vertices) if vertices is not None else None  # vertex id → parallelism

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            _classpath(self),
            {
                "job_id": self.job_id,
                "sparkdispatch_conn_id": self.sparkdispatch_conn_id,
                "poll_interval": self.poll_interval,
                "cancel_on_kill": self.cancel_on_kill,
                "vertices": self.vertices,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            async with shared_client(self.sparkdispatch_conn_id) as client:
                logs = JobLogs(self.job_id, lambda line: self.log.info("%s", line), self.vertices)
                result = await client.wait_for_result(
                    self.job_id, poll_interval=self.poll_interval, on_poll=lambda: logs.apoll(client)
                )
        except SparkDispatchError as exc:
            yield TriggerEvent({"status": "error", "job_id": self.job_id, "message": str(exc)})
            return
        yield TriggerEvent({"status": "terminal", "job_id": self.job_id, "result": result.to_dict()})

    async def on_kill(self) -> None:
        if self.cancel_on_kill:
            await cancel_quietly(self.sparkdispatch_conn_id, self.job_id, "its deferred task was killed")


async def cancel_quietly(conn_id: str, job_id: str, why: str) -> None:
    """Cancel a job (`why` says why, for the log); a job that ended already, or a master that
    cannot be asked, is only logged."""
    try:
        async with shared_client(conn_id) as client:
            await asyncio.wait_for(client.cancel(job_id), timeout=CANCEL_TIMEOUT_S)
        log.info("job %s: cancelled because %s", job_id, why)
    except JobAlreadyTerminated:
        log.info("job %s had ended already; nothing to cancel", job_id)
    except (SparkDispatchError, TimeoutError) as exc:
        log.warning("job %s: could not cancel it: %s", job_id, exc)


class SparkDispatchVertexTrigger(BaseTrigger):
    """Waits in the triggerer until vertex `vertex_id` of job `job_id` concludes (`vertex_concluded`).

    Meanwhile its subtasks' attempt logs go to the trigger's log, which Airflow shows in the
    task's log. The vertex triggers of one job in a triggerer share one watcher of it
    (`job_watch`), which waits out a master failover for the client's `failover_timeout`, as
    the job trigger does. Yields one event: `{"status": "concluded", "job_id", "body": <the
    master's answer for the vertex>}`, or `{"status": "error", "job_id", "message"}`.

    `on_kill` (a clear, a mark success or failed of the deferred task) leaves the job running:
    the other vertex tasks still wait for it. It cancels the job only when the task's DAG run
    timed out (`run_state.stopped_by_run_timeout`), or with `cancel_on_kill`.
    """

    def __init__(
        self,
        *,
        job_id: str,
        vertex_id: str,
        parallelism: int = 1,
        sparkdispatch_conn_id: str = SparkDispatchHook.default_conn_name,
        poll_interval: float = 5.0,
        cancel_on_kill: bool = False,
        conn_id: str | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.job_id = job_id
        self.vertex_id = vertex_id
        self.parallelism = parallelism
        self.sparkdispatch_conn_id = renamed_argument(
            type(self).__name__, "conn_id", "sparkdispatch_conn_id", sparkdispatch_conn_id, conn_id
        )
        self.poll_interval = poll_interval
        self.cancel_on_kill = cancel_on_kill

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            _classpath(self),
            {
                "job_id": self.job_id,
                "vertex_id": self.vertex_id,
                "parallelism": self.parallelism,
                "sparkdispatch_conn_id": self.sparkdispatch_conn_id,
                "poll_interval": self.poll_interval,
                "cancel_on_kill": self.cancel_on_kill,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            body = await follow_vertex(
                self.sparkdispatch_conn_id,
                self.job_id,
                self.vertex_id,
                parallelism=self.parallelism,
                poll_interval=self.poll_interval,
                emit=lambda line: self.log.info("%s", line),
            )
        except SparkDispatchError as exc:
            yield TriggerEvent({"status": "error", "job_id": self.job_id, "message": str(exc)})
            return
        yield TriggerEvent({"status": "concluded", "job_id": self.job_id, "body": body.to_dict()})

    async def on_kill(self) -> None:
        if self.cancel_on_kill:
            await cancel_quietly(
                self.sparkdispatch_conn_id, self.job_id, f"vertex task {self.vertex_id} was killed (cancel_on_kill)"
            )
            return
        ti = self.task_instance
        if ti is not None and await sync_to_async(stopped_by_run_timeout)(
            TaskInstanceRef(ti.dag_id, ti.run_id, ti.task_id, ti.map_index if ti.map_index is not None else -1)
        ):
            await cancel_quietly(self.sparkdispatch_conn_id, self.job_id, "its DAG run timed out")
            return
        self.log.info(
            "job %s: vertex task %s was stopped (a clear, or marked success or failed); the job runs on",
            self.job_id,
            self.vertex_id,
        )


class JobResultTrigger(SparkDispatchJobTrigger):
    """Deprecated: the earlier name of `SparkDispatchJobTrigger` (triggers stored under it still load)."""

    def __init__(self, **kwargs: Any) -> None:
        warn_renamed("JobResultTrigger", "SparkDispatchJobTrigger")
        super().__init__(**kwargs)


class VertexTrigger(SparkDispatchVertexTrigger):
    """Deprecated: the earlier name of `SparkDispatchVertexTrigger` (triggers stored under it still load)."""

    def __init__(self, **kwargs: Any) -> None:
        warn_renamed("VertexTrigger", "SparkDispatchVertexTrigger")
        super().__init__(**kwargs)
