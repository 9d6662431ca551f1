"""Leader election and retrieval: the contracts, the published leader info, and mode `none`.

With `high-availability.mode: none` the one master is always leader, under a session id drawn
at random each time it is granted (a master start), so that what was sent under an earlier run's
session is refused after a restart; clients find it at the configured REST address, and a
TaskExecutor asks the master for the session (`GET /taskexecutors/leader-session`, with the
cluster secret).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from sparkdispatch.errors import LeadershipLost, NoLeader

log = logging.getLogger(__name__)

#: The session mode `none`'s leader retrieval names: not the leader's own, which only the master
#: knows (a TaskExecutor asks it); the address is what clients need.
STANDALONE_SESSION_ID = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True)
class LeaderInfo:
    """Where the leader serves (`http://host:port`) and the session id it leads under."""

    address: str
    session_id: str

    def to_bytes(self) -> bytes:
        return json.dumps({"address": self.address, "session_id": self.session_id}, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes | None) -> LeaderInfo | None:
        """The info in a `connection_info` node; None for a missing, empty or unreadable one."""
        if not data:
            return None
        try:
            raw = json.loads(data)
            return cls(address=str(raw["address"]), session_id=str(raw["session_id"]))
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring unreadable leader info %r", data[:200])
            return None


class LeaderContender(Protocol):
    """What an election drives; both calls come on the master's loop and must not block."""

    @abstractmethod
    def grant_leadership(self, session_id: str) -> None: ...

    @abstractmethod
    def revoke_leadership(self) -> None: ...


LeaderListener = Callable[[LeaderInfo | None], None]


class LeaderElection(Protocol):
    @abstractmethod
    def start(self, contender: LeaderContender) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...

    @abstractmethod
    def confirm_leadership(self, session_id: str, address: str) -> bool: ...

    @abstractmethod
    def has_leadership(self, session_id: str) -> bool: ...

    @abstractmethod
    def fence(self, session_id: str, component: str) -> str: ...


class LeaderRetrieval(Protocol):
    @abstractmethod
    def start(self, listener: LeaderListener | None = None) -> None: ...

    @abstractmethod
    def current(self) -> LeaderInfo | None: ...

    @abstractmethod
    def wait_for_leader(self, timeout: float) -> LeaderInfo: ...

    @abstractmethod
    def stop(self) -> None: ...


class ClosableLeaderRetrieval(LeaderRetrieval, Protocol):
    """A leader retrieval that owns its connection (`sparkdispatch.ha.access.create_leader_retrieval`)."""

    @abstractmethod
    def close(self) -> None:
        """Stop following the leader and let the connection go."""


class StandaloneLeaderElection:
    """Mode `none`: the contender is granted at once, under a random session id."""

    def __init__(self) -> None:
        self._contender: LeaderContender | None = None
        self._leading = False
        self._session_id = ""
        self.confirmed: LeaderInfo | None = None

    def start(self, contender: LeaderContender) -> None:
        """Register the contender; it is granted on the running loop right after this returns."""
        if self._contender is not None:
            raise RuntimeError("this election already has a contender")
        self._contender = contender
        asyncio.get_running_loop().call_soon(self._grant)

    def _grant(self) -> None:
        if self._contender is None or self._leading:
            return
        self._leading = True
        self._session_id = str(uuid.uuid4())
        log.info("leadership granted (session %s, HA mode none)", self._session_id)
        self._contender.grant_leadership(self._session_id)

    def stop(self) -> None:
        contender, self._contender = self._contender, None
        if self._leading and contender is not None:
            self._leading = False
            self.confirmed = None
            contender.revoke_leadership()

    def confirm_leadership(self, session_id: str, address: str) -> bool:
        if not self.has_leadership(session_id):
            log.info("ignoring confirmation of stale session %s", session_id)
            return False
        self.confirmed = LeaderInfo(address, session_id)
        return True

    def has_leadership(self, session_id: str) -> bool:
        return self._leading and session_id == self._session_id

    def fence(self, session_id: str, component: str) -> str:
        """Raise `LeadershipLost` unless `session_id` leads now; the token stores fence with."""
        if not self.has_leadership(session_id):
            raise LeadershipLost(component)
        return session_id


class StandaloneLeaderRetrieval:
    """Mode `none`: the leader is always the configured REST address."""

    def __init__(self, address: str) -> None:
        self._info = LeaderInfo(address, STANDALONE_SESSION_ID)
        self._started = False

    def start(self, listener: LeaderListener | None = None) -> None:
        self._started = True
        if listener is not None:
            listener(self._info)

    def current(self) -> LeaderInfo | None:
        return self._info if self._started else None

    def wait_for_leader(self, timeout: float) -> LeaderInfo:
        if not self._started:
            raise NoLeader("leader retrieval is not started")
        return self._info

    def stop(self) -> None:
        self._started = False

    def close(self) -> None:
        """The same as `stop()`: nothing is connected."""
        self.stop()
