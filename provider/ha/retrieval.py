"""Leader retrieval on ZooKeeper: follow `<cluster>/leader/connection_info` by watch.

`ZooKeeperLeaderRetrieval` runs on a kazoo client it is given (a master's); processes that are
not masters use `OwnClientLeaderRetrieval`, which brings its own client and only reads.

The listener gets `LeaderInfo` or None ("no leader") from kazoo's threads, only when the value
changes. A SUSPENDED connection means "no leader" (unless
`high-availability.zookeeper.tolerate-suspended-connections`): the leader may be gone by then.
Every (re)connection starts a fresh DataWatch, whose first read is always delivered, so the
same leader is announced again after a reconnect.
"""

from __future__ import annotations

import logging
import threading
import time

from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState, WatchedEvent, ZnodeStat

from sparkdispatch.config import Configuration
from sparkdispatch.config.options import HA_ZOOKEEPER_TOLERATE_SUSPENDED_CONNECTIONS
from sparkdispatch.errors import NoLeader
from sparkdispatch.ha.leader import LeaderInfo, LeaderListener
from sparkdispatch.ha.zookeeper import ZooKeeperPaths, create_client, start_client

log = logging.getLogger(__name__)


class ZooKeeperLeaderRetrieval:
    def __init__(self, client: KazooClient, path: str, *, tolerate_suspended: bool) -> None:
        self._client = client
        self._path = path
        self._tolerate_suspended = tolerate_suspended
        self._listener: LeaderListener | None = None
        # Reentrant: the listener is called under it, so listeners see changes in order.
        self._cond = threading.Condition(threading.RLock())
        self._info: LeaderInfo | None = None
        self._generation = 0  # bumped per (re)connection; older DataWatches retire themselves
        self._read_generation = 0  # newest generation that delivered its first read
        self._started = False

    def start(self, listener: LeaderListener | None = None, *, first_read_timeout: float = 1.0) -> None:
        """Follow the leader; waits up to `first_read_timeout` for the first read, so `current()` is useful."""
        self._listener = listener
        with self._cond:
            self._started = True
        self._client.add_listener(self._on_connection_state)
        if self._client.state == KazooState.CONNECTED:
            generation = self._watch_again()
            with self._cond:
                self._cond.wait_for(lambda: self._read_generation >= generation, timeout=first_read_timeout)

    def current(self) -> LeaderInfo | None:
        return self._info

    def wait_for_leader(self, timeout: float) -> LeaderInfo:
        """Block until a leader is known; `NoLeader` after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._info is None:
                left = deadline - time.monotonic()
                if left <= 0 or not self._started:
                    raise NoLeader(f"no sparkdispatch master leads at {self._path} (waited {timeout:.1f}s)")
                self._cond.wait(left)
            return self._info

    def stop(self) -> None:
        with self._cond:
            self._started = False
            self._generation += 1
            self._cond.notify_all()
        self._client.remove_listener(self._on_connection_state)

    # kazoo threads

    def _watch_again(self) -> int:
        with self._cond:
            self._generation += 1
            generation = self._generation

        def on_data(data: bytes | None, stat: ZnodeStat | None, event: WatchedEvent | None = None) -> bool:
            with self._cond:
                if generation != self._generation:
                    return False
                self._read_generation = max(self._read_generation, generation)
            self._set(LeaderInfo.from_bytes(data))
            return True

        self._client.handler.spawn(self._client.DataWatch, self._path, on_data)
        return generation

    def _on_connection_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._watch_again()
        elif state == KazooState.LOST or not self._tolerate_suspended:
            with self._cond:
                self._generation += 1  # ignore reads until the next connection
            self._set(None)

    def _set(self, info: LeaderInfo | None) -> None:
        with self._cond:
            if info == self._info or not self._started:
                return
            self._info = info
            self._cond.notify_all()
            log.info("leader is now %s", info if info is not None else "unknown")
            if self._listener is not None:
                try:
                    self._listener(info)
                except Exception:
                    log.exception("leader listener failed")


class OwnClientLeaderRetrieval:
    """Leader retrieval on a kazoo client of its own that only reads: `start` connects and
    watches the leader node (which need not exist yet), `close` disconnects. It creates no znode,
    so a TaskExecutor or a client never changes the cluster's tree."""

    def __init__(self, config: Configuration) -> None:
        self._config = config
        self._client = create_client(config)
        self._retrieval = ZooKeeperLeaderRetrieval(
            self._client,
            ZooKeeperPaths.from_config(config).connection_info,
            tolerate_suspended=config.get(HA_ZOOKEEPER_TOLERATE_SUSPENDED_CONNECTIONS),
        )

    def start(self, listener: LeaderListener | None = None) -> None:
        """Connect (`ServiceUnavailable` if ZooKeeper does not answer in time) and follow the leader."""
        start_client(self._client, self._config)
        self._retrieval.start(listener)

    def current(self) -> LeaderInfo | None:
        return self._retrieval.current()

    def wait_for_leader(self, timeout: float) -> LeaderInfo:
        return self._retrieval.wait_for_leader(timeout)

    def stop(self) -> None:
        self._retrieval.stop()

    def close(self) -> None:
        self._retrieval.stop()
        self._client.stop()
        self._client.close()
