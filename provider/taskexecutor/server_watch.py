"""The worker step that keeps the TaskExecutor's Spark Connect server alive.

Every few seconds it checks that the server process runs and answers (`ConnectServer.is_healthy`,
a few milliseconds). A dead server, or one that failed `UNHEALTHY_CHECKS` checks in a row, is
restarted, and the slot processes are replaced, since their sessions died with it: running
attempts fail and their JobMasters restart them; the TaskExecutor stays registered.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from celery import bootsteps
from celery.utils.timer2 import Entry

from sparkdispatch.errors import SparkDispatchError
from sparkdispatch.taskexecutor.connect_server import ConnectServer
from sparkdispatch.taskexecutor.slot_pool import SlotProcessPool

log = logging.getLogger(__name__)

CHECK_EVERY_S = 5.0
#: A live server that misses this many checks in a row is restarted (one slow answer under load is not enough).
UNHEALTHY_CHECKS = 3


class ConnectServerWatch:
    """The check itself: restart a dead or unresponsive server and reconnect the slot processes."""

    def __init__(self, server: ConnectServer, pool: SlotProcessPool) -> None:
        self._server = server
        self._pool = pool
        self._misses = 0

    def check(self) -> None:
        if self._server.is_alive():
            if self._server.is_healthy():
                self._misses = 0
                return
            self._misses += 1
            if self._misses < UNHEALTHY_CHECKS:
                log.info("the Spark Connect server did not answer (%d of %d checks)", self._misses, UNHEALTHY_CHECKS)
                return
            log.warning("the Spark Connect server has not answered %d checks in a row; restarting it", self._misses)
        else:
            log.warning("the Spark Connect server died (see %s); restarting it", self._server.log_path)
        self._misses = 0
        self._server.restart()
        self._pool.reconnect(self._server.url)
        log.info("the Spark Connect server serves again at %s", self._server.url)


class ConnectServerWatchStep(bootsteps.StartStopStep):
    """Worker step: `ConnectServerWatch.check` on the worker's timer, in a thread of its own.

    The thread lives as long as the worker: a server it restarts dies with that thread
    (`ConnectServer` ties the server to the thread that started it).
    """

    requires = ("celery.worker.components:Timer",)
    label = "sparkdispatch-connect-server-watch"

    def __init__(self, w: Any, **kwargs: Any) -> None:
        super().__init__(w, **kwargs)
        self._watch: ConnectServerWatch | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._in_flight: Future[None] | None = None
        self._timer_entry: Entry | None = None

    def start(self, w: Any) -> None:
        runtime = w.app.task_executor
        if runtime is None:
            raise RuntimeError("ConnectServerWatchStep needs a TaskExecutor app")
        self._watch = ConnectServerWatch(runtime.server, runtime.pool)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sparkdispatch-connect-watch")
        self._timer_entry = w.timer.call_repeatedly(CHECK_EVERY_S, self._kick)

    def _kick(self) -> None:
        if self._executor is None or (self._in_flight is not None and not self._in_flight.done()):
            return
        self._in_flight = self._executor.submit(self._check)

    def _check(self) -> None:
        assert self._watch is not None
        try:
            self._watch.check()
        except SparkDispatchError:
            log.exception("restarting the Spark Connect server failed; trying again in %gs", CHECK_EVERY_S)
        except Exception:  # noqa: BLE001 - the timer must survive any one failure
            log.exception("checking the Spark Connect server failed")

    def stop(self, w: Any) -> None:
        if self._timer_entry is not None:
            self._timer_entry.cancel()
            self._timer_entry = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    shutdown = stop
