"""`PeriodicStep`: a Celery worker step whose periodic work runs on a thread of its own.

The step keeps its own clock rather than the worker's timer: with an event-loop transport
(Redis) that timer belongs to the consumer's loop, and Celery 5.6 clears it when the
broker connection is lost, which would stop a TaskExecutor's heartbeats for good after a Redis
restart. One thread runs `tick()` after `tick()`, so a run still going when the next is due is
never started twice. The thread lives as long as the worker, which matters to work that starts
processes tied to the thread that started them (the Spark Connect server).
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABCMeta, abstractmethod
from typing import Any

from celery import bootsteps

log = logging.getLogger(__name__)


class _AbstractStepType(bootsteps.StepType, ABCMeta):
    """Celery's step metaclass, with abstract methods enforced."""


class PeriodicStep(bootsteps.StartStopStep, metaclass=_AbstractStepType):
    """Runs `tick()` every `start_ticking(w)` seconds, once at the start, on the step's own thread."""

    def __init__(self, w: Any, **kwargs: Any) -> None:
        super().__init__(w, **kwargs)
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, w: Any) -> None:
        interval = self.start_ticking(w)
        self._stopped.clear()
        self._thread = threading.Thread(
            target=self._run, args=(interval,), daemon=True, name=self.label or type(self).__name__
        )
        self._thread.start()

    def task_executor(self, w: Any) -> Any:
        """The TaskExecutor runtime of worker `w`'s app (`RuntimeError` on an app without one)."""
        runtime = w.app.task_executor
        if runtime is None:
            raise RuntimeError(f"{type(self).__name__} needs a TaskExecutor app")
        return runtime

    @abstractmethod
    def start_ticking(self, w: Any) -> float:
        """Take what `tick` needs from the worker; the interval in seconds."""

    @abstractmethod
    def tick(self) -> None:
        """The periodic work (blocking is fine: it runs on the step's thread)."""

    def _run(self, interval: float) -> None:
        due = time.monotonic()
        while not self._stopped.is_set():
            try:
                self.tick()
            except Exception:  # the ticking must survive any one failure
                log.exception("%s: periodic work failed", self.label)
            # a tick that overran its interval is followed at once, never by a burst of catch-ups
            due = max(due + interval, time.monotonic())
            self._stopped.wait(due - time.monotonic())

    def stop(self, w: Any) -> None:
        self._stopped.set()  # a tick in progress ends on its own; no new one starts

    shutdown = stop
