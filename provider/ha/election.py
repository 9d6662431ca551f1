"""Leader election on ZooKeeper: one kazoo `Lock` contender per master process.

A driver thread contends for the lock under `<cluster>/leader/latch`. Holding it is
leadership: the contender is granted a fresh UUID session id on the master's loop. Losing the
connection (SUSPENDED, unless tolerated, or LOST), the latch node vanishing or `stop()` revokes
at once; the driver then deletes its latch node (once reconnected) and contends again at the
back of the queue, as Curator's LeaderLatch does. Leader info is published only for a
confirmed, current session, by a fenced transaction, and rewritten if anyone deletes or
changes it. `check_on_server` fences writes that are not ZooKeeper's own (JobResult files,
archived jobs): it asks the server whether the latch still exists.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import (
    CancelledError,
    ConnectionClosedError,
    KazooException,
    NoNodeError,
)
from kazoo.protocol.states import EventType, KazooState, WatchedEvent, ZnodeStat
from kazoo.recipe.lock import Lock
from kazoo.retry import KazooRetry

from sparkdispatch.errors import LeadershipLost
from sparkdispatch.ha.leader import LeaderContender, LeaderInfo
from sparkdispatch.ha.zookeeper import ZooKeeperPaths, fence_broken, fenced_commit

log = logging.getLogger(__name__)


class _Latch(Lock):  # type: ignore[misc]  # kazoo's Lock is untyped (Any)
    """kazoo's Lock with a short retry backoff, so a contender notices a reconnect at once."""

    def __init__(self, client: KazooClient, path: str, identifier: str) -> None:
        super().__init__(client, path, identifier)
        # kazoo's default lets the retry pause grow to a minute while ZooKeeper is unreachable.
        self._retry = KazooRetry(
            max_tries=None, delay=0.05, backoff=1.5, max_delay=0.5, sleep_func=client.handler.sleep_func
        )


@dataclass(frozen=True)
class _Leadership:
    session_id: str
    latch: str  # absolute path of the latch node that makes this process leader


class ZooKeeperLeaderElection:
    """One election per master process; see the module docstring for the protocol."""

    def __init__(
        self, client: KazooClient, paths: ZooKeeperPaths, *, identifier: str, tolerate_suspended: bool
    ) -> None:
        self._client = client
        self._paths = paths
        self._identifier = identifier
        self._tolerate_suspended = tolerate_suspended
        self._loop: asyncio.AbstractEventLoop | None = None
        self._contender: LeaderContender | None = None
        # Loop-owned state.
        self._leadership: _Leadership | None = None
        self._confirmed: LeaderInfo | None = None
        # Shared with kazoo's threads and the driver, guarded by _cond. Every SUSPENDED/LOST,
        # latch deletion or stop bumps _epoch; a grant is valid only for the epoch it was made in.
        self._cond = threading.Condition()
        self._epoch = 0
        self._connected = False
        self._stopping = False
        self._latch: _Latch | None = None
        self._driver: threading.Thread | None = None
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sparkdispatch-leader-info")

    # ------------------------------------------------------------------ public, on the loop

    def start(self, contender: LeaderContender) -> None:
        """Contend for leadership; `contender` is called on the running loop from now on."""
        if self._contender is not None:
            raise RuntimeError("this election already has a contender")
        self._loop = asyncio.get_running_loop()
        self._contender = contender
        self._client.add_listener(self._on_connection_state)
        with self._cond:
            self._connected = self._client.state == KazooState.CONNECTED
        # DataWatch reads at once and retries while disconnected: never on the loop.
        self._client.handler.spawn(self._client.DataWatch, self._paths.connection_info, self._on_leader_info_changed)
        self._driver = threading.Thread(target=self._drive, name="sparkdispatch-election", daemon=True)
        self._driver.start()

    def stop(self) -> None:
        """Stop contending: revoke if leading and let the driver delete the latch node."""
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            self._epoch += 1
            if self._latch is not None:
                self._latch.cancel()
            self._cond.notify_all()
        self._revoke("election stopped")

    def join(self, timeout: float) -> None:
        """Block until the driver released the latch (call after `stop()`, off the loop)."""
        if self._driver is not None:
            self._driver.join(timeout)
        self._client.remove_listener(self._on_connection_state)
        self._writer.shutdown(wait=True)

    def confirm_leadership(self, session_id: str, address: str) -> bool:
        """Publish `address` for `session_id` if it is still the current leadership."""
        leadership = self._leadership
        if leadership is None or leadership.session_id != session_id:
            log.info("ignoring confirmation of stale leader session %s", session_id)
            return False
        self._confirmed = LeaderInfo(address, session_id)
        log.info("leadership confirmed (session %s) at %s", session_id, address)
        self._publish(leadership, self._confirmed)
        return True

    def has_leadership(self, session_id: str) -> bool:
        leadership = self._leadership
        return leadership is not None and leadership.session_id == session_id

    def fence(self, session_id: str, component: str) -> str:
        """The latch node a store write must check; `LeadershipLost` unless `session_id` leads."""
        leadership = self._leadership
        if leadership is None or leadership.session_id != session_id:
            raise LeadershipLost(component)
        return leadership.latch

    async def check_on_server(self, session_id: str, component: str, *, timeout: float) -> None:
        """`LeadershipLost` unless `session_id` leads and its latch node exists on the server now.

        The check is a transaction of one `check` operation: ZooKeeper orders it like a write, so
        it sees the latch as it is, not as this process last heard (a leader paused past its
        session still believes it leads). `StoreError` if ZooKeeper does not answer in `timeout` s.
        """
        latch = self.fence(session_id, component)
        await fenced_commit(
            self._client, latch, lambda transaction: None, component=component, deadline=time.monotonic() + timeout
        )

    @property
    def confirmed(self) -> LeaderInfo | None:
        return self._confirmed

    # ------------------------------------------------------------------ loop side

    def _grant(self, session_id: str, latch: str, epoch: int) -> None:
        with self._cond:
            valid = epoch == self._epoch and not self._stopping
        if not valid or self._contender is None:
            return  # the driver sees the epoch change and releases the latch
        if self._leadership is not None:
            self._revoke("superseded by a new grant")
        self._leadership = _Leadership(session_id, latch)
        log.info("leadership granted (session %s, latch %s)", session_id, latch)
        self._contender.grant_leadership(session_id)

    def _revoke(self, reason: str) -> None:
        leadership, self._leadership = self._leadership, None
        self._confirmed = None
        if leadership is None or self._contender is None:
            return
        log.warning("leadership revoked (session %s): %s", leadership.session_id, reason)
        self._contender.revoke_leadership()

    def _heal(self, info: LeaderInfo | None, owner: int | None) -> None:
        leadership, confirmed = self._leadership, self._confirmed
        if leadership is None or confirmed is None or leadership.session_id != confirmed.session_id:
            return
        if info == confirmed and owner == self._client.client_id[0]:
            return
        log.warning(
            "leader info of session %s was %s; rewriting it",
            confirmed.session_id,
            "deleted" if info is None else f"changed to {info}",
        )
        self._publish(leadership, confirmed)

    def _publish(self, leadership: _Leadership, info: LeaderInfo) -> None:
        try:
            self._writer.submit(self._write_leader_info, leadership, info)
        except RuntimeError:
            pass  # the writer is shut down: the election is closing

    # ------------------------------------------------------------------ kazoo threads

    def _on_connection_state(self, state: str) -> None:
        lost = False
        with self._cond:
            if state == KazooState.CONNECTED:
                self._connected = True
            else:
                self._connected = False
                if state == KazooState.LOST or not self._tolerate_suspended:
                    self._epoch += 1
                    lost = True
            self._cond.notify_all()
        if lost:
            self._call_on_loop(self._revoke, f"ZooKeeper connection {state}")

    def _on_latch_event(self, epoch: int, event: WatchedEvent) -> None:
        if event.type != EventType.DELETED:
            return
        with self._cond:
            if epoch != self._epoch:
                return
            self._epoch += 1
            self._cond.notify_all()
        self._call_on_loop(self._revoke, "latch node deleted")

    def _on_leader_info_changed(
        self, data: bytes | None, stat: ZnodeStat | None, event: WatchedEvent | None = None
    ) -> bool:
        owner = stat.ephemeralOwner if stat is not None else None
        return self._call_on_loop(self._heal, LeaderInfo.from_bytes(data), owner)

    def _call_on_loop(self, callback: Callable[..., None], *args: object) -> bool:
        """Hand `callback(*args)` to the master's loop; False once the loop is gone."""
        if self._loop is None or self._loop.is_closed():
            return False
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the loop closed meanwhile
            return False
        return True

    # ------------------------------------------------------------------ driver thread

    def _drive(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._connected or self._stopping)
                if self._stopping:
                    return
                latch = _Latch(self._client, self._paths.latch, self._identifier)
                self._latch = latch
            try:
                acquired = latch.acquire()
            except CancelledError:
                acquired = False
            except ConnectionClosedError:
                return  # the client was stopped
            except KazooException:
                log.exception("contending for leadership failed; trying again")
                time.sleep(0.5)
                acquired = False
            node = f"{self._paths.latch}/{latch.node}" if latch.node else None
            if acquired and node is not None:
                self._lead(node)
            if node is not None:
                self._release(node)

    def _lead(self, node: str) -> None:
        with self._cond:
            if not self._connected or self._stopping:
                return
            epoch = self._epoch
        session_id = str(uuid.uuid4())
        try:
            if self._client.exists(node, watch=functools.partial(self._on_latch_event, epoch)) is None:
                return
        except KazooException:
            return
        self._call_on_loop(self._grant, session_id, node, epoch)
        with self._cond:
            self._cond.wait_for(lambda: self._epoch != epoch or self._stopping)

    def _release(self, node: str) -> None:
        """Delete our latch node, and the leader info our ZooKeeper session still owns."""
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._connected or self._stopping, timeout=0.5)
                if not self._connected:
                    if self._stopping:
                        return  # closing the client ends the session and its ephemeral nodes
                    continue
            try:
                self._client.delete(node)
            except NoNodeError:
                pass
            except ConnectionClosedError:
                return
            except KazooException:
                if self._stopping:
                    return
                time.sleep(0.1)
                continue
            self._delete_own_leader_info()
            return

    def _delete_own_leader_info(self) -> None:
        # A former leader's info would send TaskExecutors to a stale session until the next
        # leader overwrites it. Only a node this very ZooKeeper session created is deleted.
        try:
            stat = self._client.exists(self._paths.connection_info)
            if stat is not None and stat.ephemeralOwner == self._client.client_id[0]:
                self._client.delete(self._paths.connection_info, version=stat.version)
        except KazooException:
            pass

    # ------------------------------------------------------------------ writer thread

    def _write_leader_info(self, leadership: _Leadership, info: LeaderInfo) -> None:
        path = self._paths.connection_info
        payload = info.to_bytes()
        for _ in range(10):
            if self._leadership != leadership:
                return
            try:
                stat = self._client.exists(path)
                transaction = self._client.transaction()
                transaction.check(leadership.latch, 0)
                if stat is None:
                    transaction.create(path, payload, ephemeral=True)
                elif stat.ephemeralOwner == self._client.client_id[0]:
                    transaction.set_data(path, payload, version=stat.version)
                else:
                    transaction.delete(path, version=stat.version)
                    transaction.create(path, payload, ephemeral=True)
                results = transaction.commit()
            except ConnectionClosedError:
                return
            except KazooException as exc:
                log.warning("writing leader info of session %s failed (%s); retrying", info.session_id, exc)
                time.sleep(0.2)
                continue
            if fence_broken(results):
                log.info("not publishing leader info of session %s: its latch is gone", info.session_id)
                return
            if not any(isinstance(result, Exception) for result in results):
                log.info("published leader info of session %s", info.session_id)
                return
            time.sleep(0.05)  # raced with another writer; read again
        log.error("could not publish leader info of session %s", info.session_id)
