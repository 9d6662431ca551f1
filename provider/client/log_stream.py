"""Following a job's attempt logs on the master: into an Airflow task's log while it waits, or
to the terminal (`sparkdispatch logs`).

`LogFollower` keeps, per subtask, the attempt it follows and the byte offset read so far, asks
the master (`GET /jobs/{id}/vertices/{vertex}/log`) for what is new in the latest attempt, and
gives back complete lines, each prefixed with `<vertex>[<subtask>] attempt <n>: `. When a
subtask moves on to a new attempt, the rest of the old attempt's log is read first. `JobLogs`
follows every vertex of a job, for the tasks that wait for a whole job.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from sparkdispatch.errors import RouteNotFound, SparkDispatchError
from sparkdispatch.model.rest_shapes import AttemptLog, JobDetails

if TYPE_CHECKING:
    from sparkdispatch.client.rest_client import SparkDispatchClient

log = logging.getLogger(__name__)

#: `(subtask, attempt or None for the latest, offset)` → the master's answer
Fetch = Callable[[int, "int | None", int], AttemptLog]
AsyncFetch = Callable[[int, "int | None", int], Awaitable[AttemptLog]]


class LogFollower:
    """What is new in the logs of one vertex's subtasks, as complete, prefixed lines."""

    def __init__(self, vertex_id: str, parallelism: int) -> None:
        self.vertex_id = vertex_id
        self._followed: dict[int, tuple[int | None, int]] = {s: (None, 0) for s in range(parallelism)}

    def poll(self, fetch: Fetch) -> list[str]:
        """Ask for what is new of every subtask (blocking calls); its lines."""
        lines: list[str] = []
        for subtask in self._followed:
            try:
                lines += self._take(subtask, fetch(subtask, None, self._offset_for_latest(subtask)), fetch)
            except RouteNotFound:
                continue  # no log yet: the subtask has not started
        return lines

    async def apoll(self, fetch: AsyncFetch, subtasks: Collection[int] | None = None) -> list[str]:
        """`poll` with the async client; of `subtasks` only, when given."""
        lines: list[str] = []
        for subtask in self._followed if subtasks is None else [s for s in subtasks if s in self._followed]:
            try:
                piece = await fetch(subtask, None, self._offset_for_latest(subtask))
                attempt, offset = self._followed[subtask]
                if attempt is not None and piece.attempt != attempt:
                    lines += self._lines(subtask, await fetch(subtask, attempt, offset))
                    self._followed[subtask] = (piece.attempt, 0)
                    piece = await fetch(subtask, piece.attempt, 0)
                lines += self._lines(subtask, piece)
            except RouteNotFound:
                continue  # no log yet: the subtask has not started
            except SparkDispatchError as exc:  # read on the next poll: following never fails the wait
                log.debug("%s[%d]: its log could not be read this time: %s", self.vertex_id, subtask, exc)
        return lines

    def behind(self, subtask: int, attempt: int, size: int) -> bool:
        """Whether `subtask`'s log has more than was read: its latest attempt is `attempt` and
        `size` bytes long (`GET /jobs/{id}/progress`)."""
        followed_attempt, offset = self._followed.get(subtask, (None, 0))
        return followed_attempt != attempt or size > offset

    def _offset_for_latest(self, subtask: int) -> int:
        return self._followed[subtask][1]

    def _take(self, subtask: int, piece: AttemptLog, fetch: Fetch) -> list[str]:
        attempt, offset = self._followed[subtask]
        if attempt is None or piece.attempt == attempt:
            return self._lines(subtask, piece)
        # a new attempt: finish the old one's log, then read the new one from its start
        lines = self._lines(subtask, fetch(subtask, attempt, offset))
        self._followed[subtask] = (piece.attempt, 0)
        return lines + self._lines(subtask, fetch(subtask, piece.attempt, 0))

    def _lines(self, subtask: int, piece: AttemptLog) -> list[str]:
        """The complete lines of `piece`; the offset moves past them (a partial last line waits)."""
        text = piece.text
        complete, _, _ = text.rpartition("\n")
        attempt = piece.attempt
        if not complete and not text.endswith("\n"):
            self._followed[subtask] = (attempt, piece.offset)
            return []
        taken = complete + "\n"
        self._followed[subtask] = (attempt, piece.offset + len(taken.encode("utf-8")))
        prefix = f"{self.vertex_id}[{subtask}] attempt {attempt}: "
        return [prefix + line for line in complete.split("\n")]


class JobLogs:
    """The attempt logs of every vertex of one job, for a task that waits for the whole job.

    `vertices` (vertex id → parallelism) is the job's graph; without it, the first poll asks
    `GET /jobs/{id}`. A failure to read logs only skips that poll: streaming never fails the wait.
    """

    def __init__(self, job_id: str, emit: Callable[[str], None], vertices: Mapping[str, int] | None = None) -> None:
        self.job_id = job_id
        self._emit = emit
        self._followers: list[LogFollower] | None = (
            None
            if vertices is None
            else [LogFollower(vertex_id, parallelism) for vertex_id, parallelism in vertices.items()]
        )

    async def apoll(self, client: SparkDispatchClient) -> None:
        """Emit what is new in the job's logs (on the client's loop)."""
        try:
            if self._followers is None:
                self._followers = [
                    LogFollower(vertex_id, parallelism)
                    for vertex_id, parallelism in job_parallelism(await client.job(self.job_id)).items()
                ]
            for follower in self._followers:

                def fetch(
                    subtask: int, attempt: int | None, offset: int, vertex: str = follower.vertex_id
                ) -> Awaitable[AttemptLog]:
                    return client.vertex_log(self.job_id, vertex, subtask=subtask, attempt=attempt, offset=offset)

                for line in await follower.apoll(fetch):
                    self._emit(line)
        except SparkDispatchError as exc:
            log.debug("job %s: its logs could not be read this time: %s", self.job_id, exc)


def job_parallelism(details: JobDetails) -> dict[str, int]:
    """Vertex id → parallelism of a running or ended job (`GET /jobs/{id}`)."""
    return {v.id: v.parallelism or len(v.subtasks) or 1 for v in details.vertices}


def vertex_parallelism(graph: Mapping[str, Any]) -> dict[str, int]:
    """Vertex id → parallelism of a JobGraph (its JSON form)."""
    return {str(v["id"]): int(v.get("parallelism", 1)) for v in graph.get("vertices", [])}
