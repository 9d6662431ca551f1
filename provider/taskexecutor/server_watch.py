"""The worker step that keeps the TaskExecutor's Spark Connect server alive, and fresh.

Every few seconds it checks that the current server process runs and answers
(`ConnectServer.is_healthy`, a few milliseconds). A dead server, or one that failed
`UNHEALTHY_CHECKS` checks in a row, is restarted, and the slot processes are replaced, since their
sessions died with it: running attempts fail and their JobMasters restart them; the TaskExecutor
stays registered. Then it does the next step of recycling a server that is due for it
(server_recycling.py), which fails nothing.

The Python worker daemons of the sessions the slot processes released (python_workers.py) are
ended by a step of their own, `WorkerDaemonReaperStep`: a recycling step starts and warms a
successor server, which takes 10-50 s, and jobs that end meanwhile would leave their daemons
until it is done (measured in the soak: up to 42 daemons and 156 Python workers at each
replacement, against 2-8 daemons between).
"""

from __future__ import annotations

import logging
from typing import Any

from sparkdispatch.errors import SparkDispatchError
from sparkdispatch.taskexecutor.connect_url import shown
from sparkdispatch.taskexecutor.periodic_step import PeriodicStep
from sparkdispatch.taskexecutor.python_workers import WorkerDaemonReaper
from sparkdispatch.taskexecutor.server_recycling import ConnectServers, ServerRecycler
from sparkdispatch.taskexecutor.settings import RecyclePolicy
from sparkdispatch.taskexecutor.slot_pool import SlotProcessPool

log = logging.getLogger(__name__)

CHECK_EVERY_S = 5.0
#: How often the daemons of released sessions are looked for: a walk over the servers' children.
REAP_EVERY_S = 2.0
#: A live server that misses this many checks in a row is restarted (one slow answer under load is not enough).
UNHEALTHY_CHECKS = 3


class ConnectServerWatch:
    """The check itself: restart a dead or unresponsive server and reconnect the slot processes."""

    def __init__(self, servers: ConnectServers, pool: SlotProcessPool) -> None:
        self._servers = servers
        self._pool = pool
        self._misses = 0

    def check(self) -> None:
        server = self._servers.current
        if server.is_alive():
            if server.is_healthy():
                self._misses = 0
                return
            self._misses += 1
            if self._misses < UNHEALTHY_CHECKS:
                log.info("the Spark Connect server did not answer (%d of %d checks)", self._misses, UNHEALTHY_CHECKS)
                return
            log.warning("the Spark Connect server has not answered %d checks in a row; restarting it", self._misses)
        else:
            log.warning("the Spark Connect server died (see %s); restarting it", server.log_path)
        self._misses = 0
        server.restart()
        self._pool.reconnect(server.url)
        log.info("the Spark Connect server serves again at %s", shown(server.url))


class ConnectServerWatchStep(PeriodicStep):
    """Worker step: `ConnectServerWatch.check` and `ServerRecycler.check`, every `CHECK_EVERY_S` on
    the step's own thread.

    That thread lives as long as the worker: a server it restarts or starts as a successor dies
    with it, not before (`ConnectServer` ties the server to the thread that started it).
    """

    label = "sparkdispatch-connect-server-watch"

    def __init__(self, w: Any, **kwargs: Any) -> None:
        super().__init__(w, **kwargs)
        self._watch: ConnectServerWatch | None = None
        self._recycler: ServerRecycler | None = None

    def start_ticking(self, w: Any) -> float:
        runtime = self.task_executor(w)
        self._watch = ConnectServerWatch(runtime.servers, runtime.pool)
        self._recycler = ServerRecycler(runtime.servers, runtime.pool, RecyclePolicy.from_config(runtime.config))
        return CHECK_EVERY_S

    def tick(self) -> None:
        assert self._watch is not None and self._recycler is not None
        try:
            self._watch.check()
        except SparkDispatchError:
            log.exception("restarting the Spark Connect server failed; trying again in %gs", CHECK_EVERY_S)
            return
        self._recycler.check()


class WorkerDaemonReaperStep(PeriodicStep):
    """Worker step: `WorkerDaemonReaper.check` every `REAP_EVERY_S`, on a thread of its own."""

    label = "sparkdispatch-worker-daemon-reaper"

    def __init__(self, w: Any, **kwargs: Any) -> None:
        super().__init__(w, **kwargs)
        self._reaper: WorkerDaemonReaper | None = None

    def start_ticking(self, w: Any) -> float:
        runtime = self.task_executor(w)
        self._reaper = WorkerDaemonReaper(runtime.servers.pids, runtime.pool.released_sessions)
        return REAP_EVERY_S

    def tick(self) -> None:
        assert self._reaper is not None
        self._reaper.check()
