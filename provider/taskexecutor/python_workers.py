"""Ending the Python worker daemons of Connect sessions that were released.

Spark starts a `pyspark.daemon` per Connect session that runs a Python UDF (its worker factory is
keyed by the session), and keeps it until the server stops (SPARK-54055, unfixed in 4.3): about
50 MB per session. The slot pool knows which sessions it released (`ReleasedSessions`: their
server-side ids, which Spark hands their daemons as `SPARK_JOB_ARTIFACT_UUID`), and
`WorkerDaemonReaper.check` sends SIGTERM to the daemons of those sessions under the TaskExecutor's
servers; a daemon ends its workers with it. A released session runs nothing any more, so no task
can lose a worker by it. (Should a daemon of a live session end, Spark starts it again.)
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from sparkdispatch.taskexecutor.process_usage import child_pids
from sparkdispatch.taskexecutor.worker_daemon_stub import STUB_MODULE

log = logging.getLogger(__name__)

#: what Spark runs as a session's daemon: its own module, or the stub of the worker-daemon template
#: (worker_daemon_stub.py), which passes the SIGTERM on to the daemon it stands in for
DAEMON_MODULES = (b"pyspark.daemon", STUB_MODULE.encode())
SESSION_VARIABLE = b"SPARK_JOB_ARTIFACT_UUID"
#: A released session's id is kept this long: its daemon, if it has one, is found well before.
KEEP_RELEASED_S = 600.0
MAX_RELEASED = 10_000


class ReleasedSessions:
    """Server-side ids of the Connect sessions the slot processes released lately. Thread-safe."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._released: OrderedDict[str, float] = OrderedDict()

    def add(self, server_session_id: str | None) -> None:
        if not server_session_id:
            return
        with self._lock:
            self._released[server_session_id] = self._clock()
            self._released.move_to_end(server_session_id)
            self._prune()

    def add_all(self, server_session_ids: Iterable[str]) -> None:
        for server_session_id in server_session_ids:
            self.add(server_session_id)

    def recent(self) -> set[str]:
        with self._lock:
            self._prune()
            return set(self._released)

    def _prune(self) -> None:
        oldest = self._clock() - KEEP_RELEASED_S
        while self._released and (len(self._released) > MAX_RELEASED or next(iter(self._released.values())) < oldest):
            self._released.popitem(last=False)


class WorkerDaemonReaper:
    """Ends the worker daemons of released sessions among the children of the servers `server_pids()` names."""

    def __init__(self, server_pids: Callable[[], list[int]], released: ReleasedSessions) -> None:
        self._server_pids = server_pids
        self._released = released
        #: daemons ended, for the log and the tests
        self.ended = 0

    def check(self) -> int:
        """Send SIGTERM to each daemon of a released session; the number of daemons signalled."""
        released = self._released.recent()
        if not released:
            return 0
        signalled = 0
        for server in self._server_pids():
            for pid, session in worker_daemons(server):
                if session in released and _terminate(pid):
                    signalled += 1
                    log.debug("ended Spark's Python worker daemon %d of released session %s", pid, session)
        self.ended += signalled
        return signalled


def worker_daemons(server: int) -> Iterator[tuple[int, str]]:
    """The worker daemons Spark started as children of the server process, with the session each serves."""
    for pid in child_pids(server):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
            if not any(module in command for module in DAEMON_MODULES):
                continue
            environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for entry in environment:
            name, _, value = entry.partition(b"=")
            if name == SESSION_VARIABLE:
                yield pid, value.decode(errors="replace")


def _terminate(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    return True
