"""Restarts waiting out their backoff: their subtasks are held back from scheduling until it passes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from sparkdispatch.jobmaster.execution import SubtaskId


class RestartBackoffs:
    """One timer per restart; when it fires, that restart's subtasks are released and its `then()`
    runs (the JobMaster schedules). Used on the master's loop. Holds no callback but a pending
    timer's, so its owner is in no reference cycle through it."""

    def __init__(self) -> None:
        #: each subtask waiting out a backoff -> its restart
        self.held_back: dict[SubtaskId, object] = {}
        self._timers: set[asyncio.Task[None]] = set()

    def hold(self, subtasks: Iterable[SubtaskId], backoff_s: float, then: Callable[[], None]) -> None:
        """Hold `subtasks` back for `backoff_s` seconds, as one restart; then call `then()`."""
        restart = object()
        for subtask_id in subtasks:
            self.held_back[subtask_id] = restart
        timer = asyncio.get_running_loop().create_task(self._release_after(backoff_s, restart, then))
        self._timers.add(timer)
        timer.add_done_callback(self._timers.discard)

    def clear(self) -> None:
        """Hold nothing back any more (the job ended)."""
        self.held_back.clear()

    def stop(self) -> None:
        """Cancel every pending restart."""
        for timer in list(self._timers):
            timer.cancel()
        self.held_back.clear()

    async def _release_after(self, delay_s: float, restart: object, then: Callable[[], None]) -> None:
        await asyncio.sleep(delay_s)
        for subtask_id in [s for s, r in self.held_back.items() if r is restart]:
            del self.held_back[subtask_id]
        then()
