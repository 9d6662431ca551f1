"""Replacing a TaskExecutor's Spark Connect server before what its jobs leave in it adds up.

Spark keeps part of every Connect session until its server stops: the worker factory of a
session that ran a Python UDF, with a thread and open files (SPARK-54055, unfixed in 4.3), and
driver memory. So a server is recycled once its slot processes made `sessions` job sessions on it,
or its JVM holds `thread_growth` threads or `open_file_growth` open files more than after its
warm-up (`RecyclePolicy`, the `taskexecutor.connect.recycle.*` keys):

1. a successor is started and warmed while the old server serves on (a free port: the old one
   holds its own);
2. the slot processes move over (`SlotProcessPool.switch_server`): new attempts run on the
   successor, an idle process releases its session on the old server at once, a busy one after
   its attempt, which ends on the old server as it began;
3. the old server is stopped once no attempt runs on it any more.

No attempt fails for it. A successor that cannot start is tried again `RETRY_AFTER_S` later,
the old server serving meanwhile. `ServerRecycler.check` does one step of this, called
periodically from the thread that lives as long as the TaskExecutor's worker (servers die with
the thread that started them).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from sparkdispatch.errors import ConnectServerError
from sparkdispatch.taskexecutor.connect_server import ConnectServer
from sparkdispatch.taskexecutor.connect_url import shown
from sparkdispatch.taskexecutor.process_usage import ProcessUsage
from sparkdispatch.taskexecutor.settings import RecyclePolicy

log = logging.getLogger(__name__)

#: After a successor failed to start, the next try comes this much later.
RETRY_AFTER_S = 60.0


class ConnectServers:
    """The TaskExecutor's current Spark Connect server, and the one it replaced while that drains.

    `current` may change between two reads: ask for it each time. Thread-safe.
    """

    def __init__(self, first: ConnectServer, *, successor: Callable[[], ConnectServer]) -> None:
        self._lock = threading.Lock()
        self._current = first
        self._draining: tuple[ConnectServer, str] | None = None  # the server and the address it served at
        self._successor = successor
        self._replaced_starts = 0
        #: servers started to replace another
        self.recycles = 0

    @property
    def current(self) -> ConnectServer:
        with self._lock:
            return self._current

    @property
    def draining(self) -> tuple[ConnectServer, str] | None:
        """The replaced server that still runs attempts, and its `sc://` address."""
        with self._lock:
            return self._draining

    @property
    def starts(self) -> int:
        """Starts asked for, successors not counted: 1, plus one per restart of a dead server."""
        with self._lock:
            return self._replaced_starts + self._current.starts - self.recycles

    def is_healthy(self, timeout: float = 2.0) -> bool:
        return self.current.is_healthy(timeout)

    def pids(self) -> list[int]:
        """Process ids of the servers that run: the current one, and the one draining."""
        with self._lock:
            servers = [self._current, *([self._draining[0]] if self._draining else [])]
        return [pid for pid in (server.pid for server in servers) if pid is not None]

    def start_successor(self) -> ConnectServer:
        """A new server, started and warmed (or `ConnectServerError`); the current one serves meanwhile."""
        server = self._successor()
        server.start()
        return server

    def take_over(self, successor: ConnectServer) -> None:
        """`successor` becomes the current server; the former one drains."""
        with self._lock:
            former = self._current
            if self._draining is not None or former.serving_url is None:
                raise ConnectServerError(
                    "the Spark Connect server cannot be replaced while a former one drains or it does not serve",
                    log_file=str(former.log_path),
                )
            self._current, self._draining = successor, (former, former.serving_url)
            self._replaced_starts += former.starts
            self.recycles += 1

    def drained(self) -> None:
        """The draining server runs nothing any more: stop it."""
        with self._lock:
            draining, self._draining = self._draining, None
        if draining is not None:
            draining[0].stop()

    def stop(self) -> None:
        """Stop every server (the TaskExecutor stops)."""
        with self._lock:
            servers = [self._current, *([self._draining[0]] if self._draining else [])]
        for server in servers:
            server.stop()


class SlotProcesses(Protocol):
    """What recycling needs of the `SlotProcessPool`."""

    def switch_server(self, connect_url: str) -> None:
        """New attempts run on the server at `connect_url`; sessions elsewhere are released."""

    def attempts_on(self, connect_url: str) -> int:
        """Attempts running on the server at `connect_url`."""

    def sessions_made(self, connect_url: str) -> int:
        """Job sessions made on the server at `connect_url` since the pool moved to it."""


class ServerRecycler:
    """One step of recycling per `check()`: stop a drained server, or replace a server that is due."""

    def __init__(
        self,
        servers: ConnectServers,
        pool: SlotProcesses,
        policy: RecyclePolicy,
        *,
        clock: Callable[[], float] = time.monotonic,
        usage: Callable[[int], ProcessUsage | None] = ProcessUsage.of,
    ) -> None:
        self._servers = servers
        self._pool = pool
        self._policy = policy
        self._clock = clock
        self._usage = usage
        self._retry_at = 0.0

    def check(self) -> None:
        draining = self._servers.draining
        if draining is not None:
            former, former_url = draining
            if former.is_alive() and self._pool.attempts_on(former_url) > 0:
                return
            log.info("the replaced Spark Connect server (pid %s) runs no attempt any more; stopping it", former.pid)
            self._servers.drained()
            return
        current = self._servers.current
        url = current.serving_url
        if url is None or current.pid is None or not current.is_alive() or self._clock() < self._retry_at:
            return  # a dead server is the watch's to restart
        reason = self._policy.reason(
            sessions=self._pool.sessions_made(url), usage=self._usage(current.pid), warm=current.warm_usage
        )
        if reason is not None:
            self.replace(current, reason)

    def replace(self, current: ConnectServer, reason: str) -> None:
        log.info("replacing the Spark Connect server (pid %s): %s; starting its successor", current.pid, reason)
        started = self._clock()
        try:
            successor = self._servers.start_successor()
        except ConnectServerError as exc:
            self._retry_at = self._clock() + RETRY_AFTER_S
            log.warning(
                "the successor of the Spark Connect server did not start (trying again in %gs; the "
                "current server serves on): %s",
                RETRY_AFTER_S,
                exc,
            )
            return
        self._servers.take_over(successor)
        self._pool.switch_server(successor.url)
        log.info(
            "the Spark Connect server at %s (pid %s) took over in %.1f s; the former one (pid %s) stops once "
            "its attempts ended",
            shown(successor.url),
            successor.pid,
            self._clock() - started,
            current.pid,
        )
