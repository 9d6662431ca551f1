"""One watcher per job per triggerer process: the vertex triggers of a job share one poll of the master.

A triggerer runs all its triggers on one asyncio loop in one process. `watch_vertex` gives a
trigger a `VertexWatch` of its vertex: the first watch of a (connection, job) starts a
`JobWatcher`, which asks `GET /jobs/{id}/progress` once per interval for the whole job (the
shortest interval its watches asked for) and reads a subtask's log only when the answer says it
grew; the last watch to leave stops it. Every trigger of one connection shares one client
(`shared_client`): one HTTP session and, with ZooKeeper leader retrieval, one ZooKeeper session
per connection per process. Registries are per event loop (`dag.test()` runs each trigger on a
loop of its own).

While no master answers (a failover), a watcher keeps asking for up to the client's
`failover_timeout`, as the job-level trigger does; a log that cannot be read is skipped until
the next poll, as `JobLogs` does. A watch's events are taken by its own trigger's task, so each
line lands in that trigger's task log.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from sparkdispatch.client import SparkDispatchClient
from sparkdispatch.errors import SparkDispatchError
from sparkdispatch.hooks.sparkdispatch import SparkDispatchHook
from sparkdispatch.model.rest_shapes import AttemptLog, JobProgress, SubtaskLogSize, VertexOutcome
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.client.log_stream import LogFollower

log = logging.getLogger(__name__)


# -- what the master answers (`GET /jobs/{id}/progress`), read in one place ------------------------


@dataclass(frozen=True)
class VertexProgress:
    """One vertex in a progress answer: its outcome as `GET /jobs/{id}/vertices/{vertex}` answers it,
    and its subtasks' log sizes."""

    body: VertexOutcome
    logs: tuple[SubtaskLogSize, ...]

    @property
    def concluded(self) -> bool:
        return vertex_concluded(self.body)


def vertex_concluded(outcome: VertexOutcome) -> bool:
    """Whether a `GET /jobs/{id}/vertices/{vertex}` answer is final: the vertex FINISHED, or its
    job ended (a vertex that failed while the job runs may still be restarted)."""
    return outcome.result.state is ExecutionState.FINISHED or outcome.job_status.is_globally_terminal


def read_progress(answer: JobProgress) -> dict[str, VertexProgress]:
    """A `GET /jobs/{id}/progress` answer, per vertex id."""
    return {v.vertex: VertexProgress(body=answer.outcome(v), logs=v.logs) for v in answer.vertices}


# -- a vertex's watch and its events -----------------------------------------------------------


@dataclass(frozen=True)
class Concluded:
    """The vertex concluded: its body as `GET /jobs/{id}/vertices/{vertex}` answers it."""

    body: VertexOutcome


@dataclass(frozen=True)
class WatchFailed:
    """The master could not be asked (an error no wait fixes, or no master for `failover_timeout`)."""

    message: str


WatchEvent = str | Concluded | WatchFailed  # a str is a log line


@dataclass(eq=False)
class VertexWatch:
    """One trigger's watch of one vertex: its log lines, then its conclusion or failure."""

    vertex_id: str
    parallelism: int
    poll_interval: float
    follower: LogFollower = field(init=False)
    done: bool = field(default=False, init=False)
    _events: asyncio.Queue[WatchEvent] = field(default_factory=asyncio.Queue, init=False)

    def __post_init__(self) -> None:
        self.follower = LogFollower(self.vertex_id, self.parallelism)

    async def events(self) -> AsyncIterator[WatchEvent]:
        """Log lines as they come, then one `Concluded` or `WatchFailed`."""
        while True:
            event = await self._events.get()
            yield event
            if not isinstance(event, str):
                return

    def put(self, event: WatchEvent) -> None:
        """Hand the watch's trigger `event` (nothing after its conclusion or failure)."""
        if not self.done:
            self._events.put_nowait(event)
            self.done = not isinstance(event, str)


class JobWatcher:
    """Polls one job's progress for its watches, until the last one leaves."""

    def __init__(self, client: SparkDispatchClient, job_id: str) -> None:
        self.client = client
        self.job_id = job_id
        self.watches: list[VertexWatch] = []
        self._task: asyncio.Task[None] | None = None

    def add(self, watch: VertexWatch) -> None:
        self.watches.append(watch)
        if self._task is None or self._task.done():
            # a context of its own: its log lines are no trigger's
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"sparkdispatch-watch-{self.job_id}", context=contextvars.Context()
            )

    def remove(self, watch: VertexWatch) -> bool:
        """Take `watch` out; True when it was the last (then `stop` the poll)."""
        self.watches.remove(watch)
        return not self.watches

    async def stop(self) -> None:
        """Stop the poll. A watcher that has no watches left is stopped, never given new ones: a watch
        added while the poll's cancellation runs would be served by no poll."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        try:
            await self._poll()
        except Exception as exc:  # a bug here must not leave the triggers waiting forever
            log.exception("job %s: its watcher failed", self.job_id)
            for watch in self.watches:
                watch.put(WatchFailed(f"the watcher of job {self.job_id} failed: {exc!r}"))

    async def _poll(self) -> None:
        while live := [w for w in self.watches if not w.done]:
            try:
                progress = read_progress(
                    await self.client.patiently(lambda: self.client.job_progress(self.job_id), f"job {self.job_id}")
                )
            except SparkDispatchError as exc:
                for watch in live:
                    watch.put(WatchFailed(str(exc)))
                return
            for watch in live:
                await self._update(watch, progress.get(watch.vertex_id))
            await asyncio.sleep(min(w.poll_interval for w in live))

    async def _update(self, watch: VertexWatch, vertex: VertexProgress | None) -> None:
        if vertex is None:
            watch.put(WatchFailed(f"job {self.job_id} has no vertex {watch.vertex_id!r}"))
            return
        grown = [s.subtask for s in vertex.logs if watch.follower.behind(s.subtask, s.attempt, s.size)]
        if grown:

            def fetch(subtask: int, attempt: int | None, offset: int) -> Awaitable[AttemptLog]:
                return self.client.vertex_log(
                    self.job_id, watch.vertex_id, subtask=subtask, attempt=attempt, offset=offset
                )

            for line in await watch.follower.apoll(fetch, grown):
                watch.put(line)
        if vertex.concluded:
            watch.put(Concluded(vertex.body))


# -- the per-loop registries -------------------------------------------------------------------


@dataclass
class _SharedClient:
    client: SparkDispatchClient
    users: int = 0


@dataclass
class _Registry:
    clients: dict[str, _SharedClient] = field(default_factory=dict)
    watchers: dict[tuple[str, str], JobWatcher] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


_REGISTRIES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Registry] = weakref.WeakKeyDictionary()


def _registry() -> _Registry:
    loop = asyncio.get_running_loop()
    registry = _REGISTRIES.get(loop)
    if registry is None:
        registry = _REGISTRIES[loop] = _Registry()
    return registry


@asynccontextmanager
async def shared_client(conn_id: str) -> AsyncIterator[SparkDispatchClient]:
    """The client of connection `conn_id` that every trigger on this loop shares; closed (its HTTP
    session and leader retrieval ended) when the last user leaves."""
    registry = _registry()
    async with registry.lock:
        shared = registry.clients.get(conn_id)
        if shared is None:
            shared = registry.clients[conn_id] = _SharedClient(await SparkDispatchHook(conn_id).aget_client())
        shared.users += 1
    try:
        yield shared.client
    finally:
        shared.users -= 1
        if shared.users == 0 and registry.clients.get(conn_id) is shared:
            del registry.clients[conn_id]
            await shared.client.close()


@asynccontextmanager
async def watch_vertex(
    conn_id: str, job_id: str, vertex_id: str, *, parallelism: int, poll_interval: float
) -> AsyncIterator[VertexWatch]:
    """A watch of vertex `vertex_id` of job `job_id`, served by the job's one watcher on this loop."""
    async with shared_client(conn_id) as client:
        registry = _registry()
        key = (conn_id, job_id)
        watcher = registry.watchers.get(key)
        if watcher is None:
            watcher = registry.watchers[key] = JobWatcher(client, job_id)
        watch = VertexWatch(vertex_id, parallelism, poll_interval)
        watcher.add(watch)
        try:
            yield watch
        finally:
            if watcher.remove(watch):
                # out of the registry before the first await, so a watch that joins meanwhile starts a new watcher
                if registry.watchers.get(key) is watcher:
                    del registry.watchers[key]
                await watcher.stop()


async def follow_vertex(
    conn_id: str, job_id: str, vertex_id: str, *, parallelism: int, poll_interval: float, emit: Callable[[str], None]
) -> VertexOutcome:
    """Wait until the vertex concludes, giving `emit` its log lines as they come; its body as
    `GET /jobs/{id}/vertices/{vertex}` answers it. `SparkDispatchError` when the master cannot be asked."""
    async with watch_vertex(conn_id, job_id, vertex_id, parallelism=parallelism, poll_interval=poll_interval) as watch:
        async for event in watch.events():
            if isinstance(event, Concluded):
                return event.body
            if isinstance(event, WatchFailed):
                raise SparkDispatchError(event.message)
            emit(event)
    raise AssertionError("a watch ends with its conclusion or failure")
