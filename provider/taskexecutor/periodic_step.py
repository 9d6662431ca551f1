"""`PeriodicStep`: a Celery worker step whose periodic work runs in a thread of its own.

With an event-loop transport (Redis) the worker's timer runs on the consumer's loop, so a step
only hands its blocking work to its own thread, and a run still going when the next one is due
is not started twice. The thread lives as long as the worker, which matters to work that starts
processes tied to the thread that started them (the Spark Connect server).
"""

from __future__ import annotations

import logging
from abc import ABCMeta, abstractmethod
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from celery import bootsteps
from celery.utils.timer2 import Entry

log = logging.getLogger(__name__)


class _AbstractStepType(bootsteps.StepType, ABCMeta):
    """Celery's step metaclass, with abstract methods enforced."""


class PeriodicStep(bootsteps.StartStopStep, metaclass=_AbstractStepType):
    """Runs `tick()` every `start_ticking(w)` seconds, once at the start, on the step's own thread."""

    requires = ("celery.worker.components:Timer",)

    def __init__(self, w: Any, **kwargs: Any) -> None:
        super().__init__(w, **kwargs)
        self._executor: ThreadPoolExecutor | None = None
        self._in_flight: Future[None] | None = None
        self._timer_entry: Entry | None = None

    def start(self, w: Any) -> None:
        interval = self.start_ticking(w)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.label or type(self).__name__)
        self._kick()
        self._timer_entry = w.timer.call_repeatedly(interval, self._kick)

    @abstractmethod
    def start_ticking(self, w: Any) -> float:
        """Take what `tick` needs from the worker; the interval in seconds."""

    @abstractmethod
    def tick(self) -> None:
        """The periodic work (blocking is fine: it runs on the step's thread)."""

    def _kick(self) -> None:
        if self._executor is None or (self._in_flight is not None and not self._in_flight.done()):
            return
        self._in_flight = self._executor.submit(self._tick)

    def _tick(self) -> None:
        try:
            self.tick()
        except Exception:  # noqa: BLE001 - the timer must survive any one failure
            log.exception("%s: periodic work failed", self.label)

    def stop(self, w: Any) -> None:
        if self._timer_entry is not None:
            self._timer_entry.cancel()
            self._timer_entry = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    shutdown = stop
