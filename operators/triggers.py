"""The triggers deferred tasks wait on: one event when a job ends, or when a vertex concludes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from sparkdispatch.errors import JobAlreadyTerminated, SparkDispatchError
from sparkdispatch.hooks.sparkdispatch import SparkDispatchHook
from sparkdispatch.model.rest_shapes import AttemptLog, VertexOutcome
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.client.log_stream import JobLogs, LogFollower

log = logging.getLogger(__name__)


class JobResultTrigger(BaseTrigger):
    """Waits in the triggerer until job `job_id` is FINISHED, FAILED or CANCELED.

    Meanwhile the job's attempt logs go to the trigger's log, which Airflow shows in the task's
    log. Yields exactly one event: `{"status": "terminal", "job_id", "result": JobResult}`, or
    `{"status": "error", "job_id", "message"}` when the master cannot be asked. A master
    failover does not end the wait: the client finds the new leader. With `cancel_on_kill`,
    a user who marks the deferred task failed or clears it cancels the job too.
    """

    def __init__(self, *, job_id: str, conn_id: str = SparkDispatchHook.default_conn_name,
                 poll_interval: float = 5.0, cancel_on_kill: bool = True,
                 vertices: Mapping[str, int] | None = None) -> None:
        # untyped_calls_exclude covers Airflow's untyped BaseTrigger.__init__, but not through super() (mypy #16653)
        super().__init__()  # type: ignore[no-untyped-call]
        self.job_id = job_id
        self.conn_id = conn_id
        self.poll_interval = poll_interval
        self.cancel_on_kill = cancel_on_kill
        self.vertices = dict(vertices) if vertices is not None else None  # vertex id → parallelism

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "job_id": self.job_id,
            "conn_id": self.conn_id,
            "poll_interval": self.poll_interval,
            "cancel_on_kill": self.cancel_on_kill,
            "vertices": self.vertices,
        })

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            async with await SparkDispatchHook(self.conn_id).aget_client() as client:
                logs = JobLogs(self.job_id, lambda line: self.log.info("%s", line), self.vertices)
                result = await client.wait_for_result(self.job_id, poll_interval=self.poll_interval,
                                                      on_poll=lambda: logs.apoll(client))
        except SparkDispatchError as exc:
            yield TriggerEvent({"status": "error", "job_id": self.job_id, "message": str(exc)})
            return
        yield TriggerEvent({"status": "terminal", "job_id": self.job_id, "result": result.to_dict()})

    async def on_kill(self) -> None:
        if self.cancel_on_kill:
            await cancel_quietly(self.conn_id, self.job_id)


async def cancel_quietly(conn_id: str, job_id: str) -> None:
    """Cancel a job whose deferred task was killed; a job that ended already, or a master that
    cannot be asked, is only logged."""
    try:
        async with await SparkDispatchHook(conn_id).aget_client() as client:
            await asyncio.wait_for(client.cancel(job_id), timeout=30)
        log.info("job %s: cancelled because its deferred task was killed", job_id)
    except JobAlreadyTerminated:
        log.info("job %s had ended already; nothing to cancel", job_id)
    except (SparkDispatchError, TimeoutError) as exc:
        log.warning("job %s: could not cancel it: %s", job_id, exc)


def vertex_concluded(outcome: VertexOutcome) -> bool:
    """Whether a `GET /jobs/{id}/vertices/{vertex}` answer is final: the vertex FINISHED, or its
    job ended (a vertex that failed while the job runs may still be restarted)."""
    return outcome.result.state is ExecutionState.FINISHED or outcome.job_status.is_globally_terminal


class VertexTrigger(BaseTrigger):
    """Waits in the triggerer until vertex `vertex_id` of job `job_id` concludes (`vertex_concluded`).

    Meanwhile its subtasks' attempt logs go to the trigger's log, which Airflow shows in the
    task's log. Yields one event: `{"status": "concluded", "job_id", "body": <the master's
    answer>}`, or `{"status": "error", "job_id", "message"}`. With `cancel_on_kill`, killing the
    deferred vertex task cancels the job.
    """

    def __init__(self, *, job_id: str, vertex_id: str, parallelism: int = 1,
                 conn_id: str = SparkDispatchHook.default_conn_name, poll_interval: float = 5.0,
                 cancel_on_kill: bool = True) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.job_id = job_id
        self.vertex_id = vertex_id
        self.parallelism = parallelism
        self.conn_id = conn_id
        self.poll_interval = poll_interval
        self.cancel_on_kill = cancel_on_kill

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "job_id": self.job_id, "vertex_id": self.vertex_id, "parallelism": self.parallelism,
            "conn_id": self.conn_id,
            "poll_interval": self.poll_interval, "cancel_on_kill": self.cancel_on_kill})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            async with await SparkDispatchHook(self.conn_id).aget_client() as client:
                follower = LogFollower(self.vertex_id, self.parallelism)

                def fetch(subtask: int, attempt: int | None, offset: int) -> Awaitable[AttemptLog]:
                    return client.vertex_log(self.job_id, self.vertex_id, subtask=subtask, attempt=attempt,
                                             offset=offset)

                while not vertex_concluded(body := await client.vertex(self.job_id, self.vertex_id)):
                    for line in await follower.apoll(fetch):
                        self.log.info("%s", line)
                    await asyncio.sleep(self.poll_interval)
                for line in await follower.apoll(fetch):
                    self.log.info("%s", line)
        except SparkDispatchError as exc:
            yield TriggerEvent({"status": "error", "job_id": self.job_id, "message": str(exc)})
            return
        yield TriggerEvent({"status": "concluded", "job_id": self.job_id, "body": body.to_dict()})

    async def on_kill(self) -> None:
        if self.cancel_on_kill:
            await cancel_quietly(self.conn_id, self.job_id)
