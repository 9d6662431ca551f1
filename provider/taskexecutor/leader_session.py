"""The leader a TaskExecutor of `high-availability.mode: none` follows: the configured address,
under the session the master tells (`GET /taskexecutors/leader-session`).

With ZooKeeper the leader publishes its session beside its address; a master of mode `none`
publishes nothing and draws a new session at each start, so the TaskExecutor asks it once, and
again after the master refused the session it had (a restarted master). Until the master
answers, no leader is known.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from sparkdispatch.errors import SparkDispatchError
from sparkdispatch.ha.leader import LeaderInfo, LeaderRetrieval

log = logging.getLogger(__name__)


class SessionSource(Protocol):
    def leader_session(self, address: str) -> str:
        """The session the master at `address` leads under; a `SparkDispatchError` if it does not answer."""


class AskedLeaderSession:
    """`current()` for `MasterConnection`: the retrieval's address with the session its master tells."""

    def __init__(self, retrieval: LeaderRetrieval, client: SessionSource) -> None:
        self._retrieval = retrieval
        self._client = client
        self._lock = threading.Lock()
        self._known: LeaderInfo | None = None

    def current(self) -> LeaderInfo | None:
        """The leader with its session, asking the master when it is not known; None while it does not answer."""
        configured = self._retrieval.current()
        if configured is None:
            return None
        with self._lock:
            known = self._known
        if known is not None and known.address == configured.address:
            return known
        try:
            session_id = self._client.leader_session(configured.address)
        except SparkDispatchError as exc:
            log.info("the master at %s did not tell its leader session: %s", configured.address, exc)
            return None
        leader = LeaderInfo(configured.address, session_id)
        with self._lock:
            self._known = leader
        return leader

    def forget(self) -> None:
        """The master refused the session: ask it again at the next `current()`."""
        with self._lock:
            self._known = None
