"""The kazoo client of one master process, the znode layout of a cluster, and fenced writes.

Layout under `<path.root>/<cluster-id>`::

    leader/latch/<uuid>__lock__<seq>     one kazoo Lock contender per master process (ephemeral)
    leader/connection_info               {"address", "session_id"} of the confirmed leader (ephemeral)
    jobgraphs/<job-id>                   a JobGraph, or a pointer to its file under storage.dir
    progress/<job-id>/<vertex-id>#<n>    one finished subtask: {"result_path", "rows"[, "result_schema",
                                         "input_files", "kept_on"]}

Every write of a leader is a ZooKeeper transaction that starts with a `check` of the leader's
own latch node: once the node is gone (session expired, leadership released) the write fails.
The stores on the master's loop await kazoo's asynchronous calls (`kazoo_future`,
`fenced_commit`) instead of blocking a thread per call.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import (
    ConnectionLoss,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.interfaces import IAsyncResult
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from sparkdispatch.config import Configuration
from sparkdispatch.config.options import (
    HA_CLUSTER_ID,
    HA_ZOOKEEPER_CONNECTION_TIMEOUT,
    HA_ZOOKEEPER_PATH_ROOT,
    HA_ZOOKEEPER_QUORUM,
    HA_ZOOKEEPER_SESSION_TIMEOUT,
)
from sparkdispatch.errors import ConfigurationError, LeadershipLost, ServiceUnavailable, StoreError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ZooKeeperPaths:
    """Absolute znode paths of one cluster."""

    root: str
    cluster: str

    @classmethod
    def from_config(cls, config: Configuration) -> ZooKeeperPaths:
        root = "/" + config.get(HA_ZOOKEEPER_PATH_ROOT).strip("/")
        if root == "/":
            raise ConfigurationError(
                "high-availability.zookeeper.path.root must name a znode below '/', e.g. /sparkdispatch"
            )
        return cls(root=root, cluster=f"{root}/{config.get(HA_CLUSTER_ID)}")

    @property
    def leader(self) -> str:
        return f"{self.cluster}/leader"

    @property
    def latch(self) -> str:
        return f"{self.cluster}/leader/latch"

    @property
    def connection_info(self) -> str:
        return f"{self.cluster}/leader/connection_info"

    @property
    def jobgraphs(self) -> str:
        return f"{self.cluster}/jobgraphs"

    @property
    def progress(self) -> str:
        return f"{self.cluster}/progress"


def parse_auth(auth: str) -> tuple[str, str] | None:
    """`user:password` from `high-availability.zookeeper.auth`; None when empty."""
    if not auth:
        return None
    user, sep, password = auth.partition(":")
    if not sep or not user or not password:
        raise ConfigurationError("high-availability.zookeeper.auth must be 'user:password' with both parts non-empty")
    return user, password


def create_client(config: Configuration) -> KazooClient:
    """A kazoo client for the configured ensemble; not started.

    With `high-availability.zookeeper.auth` (or `$SPARKDISPATCH_ZOOKEEPER_AUTH`) it authenticates by
    digest and creates every node with a digest ACL for that identity only.
    """
    auth = parse_auth(config.zookeeper_auth)
    kwargs: dict[str, Any] = {}
    if auth is not None:
        user, password = auth
        kwargs["auth_data"] = [("digest", f"{user}:{password}")]
        kwargs["default_acl"] = [make_digest_acl(user, password, all=True)]
    return KazooClient(
        hosts=config.get(HA_ZOOKEEPER_QUORUM),
        timeout=config.get(HA_ZOOKEEPER_SESSION_TIMEOUT),
        # Reconnect quickly: kazoo's default backoff grows to an hour.
        connection_retry={"max_tries": -1, "delay": 0.05, "backoff": 1.5, "max_delay": 0.5},
        command_retry={"max_tries": 3, "delay": 0.05, "backoff": 2, "max_delay": 0.5},
        **kwargs,
    )


def start_client(client: KazooClient, config: Configuration) -> None:
    """Connect `client` (blocking), within `high-availability.zookeeper.connection-timeout`;
    `ServiceUnavailable` (and the client stopped) if ZooKeeper does not answer in time."""
    timeout = config.get(HA_ZOOKEEPER_CONNECTION_TIMEOUT)
    try:
        client.start(timeout)
    except KazooTimeoutError:
        client.stop()
        raise ServiceUnavailable(
            f"cannot connect to ZooKeeper at {config.get(HA_ZOOKEEPER_QUORUM)} "
            f"within {timeout:g}s; check high-availability.zookeeper.quorum and that "
            "ZooKeeper runs"
        ) from None


def ensure_cluster_paths(client: KazooClient, paths: ZooKeeperPaths) -> None:
    """Create the cluster's parent znodes; the shared root stays open so other clusters fit below it."""
    client.ensure_path(paths.root, acl=OPEN_ACL_UNSAFE)
    for path in (paths.cluster, paths.leader, paths.latch, paths.jobgraphs, paths.progress):
        client.ensure_path(path)


def fence_broken(results: list[Any]) -> bool:
    """Whether a transaction starting with `check(latch)` failed at that check.

    When any operation fails, the ones before it report RolledBackError and the failing one
    its own error; so only another error at index 0 means the latch is gone.
    """
    return isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError)


def kazoo_future(result: IAsyncResult) -> asyncio.Future[Any]:
    """An asyncio future of the running loop that settles like kazoo's `result` (value or exception).

    kazoo settles its results on its own threads; the outcome is handed to the loop with
    `call_soon_threadsafe`, so awaiting it blocks no thread.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settled(_: IAsyncResult) -> None:
        try:
            loop.call_soon_threadsafe(_settle, future, result)
        except RuntimeError:  # the loop is closed: nobody awaits the outcome any more
            pass

    result.rawlink(settled)
    return future


def _settle(future: asyncio.Future[Any], result: IAsyncResult) -> None:
    if future.done():  # the awaiting task was cancelled
        return
    if result.successful():
        future.set_result(result.value)
    else:
        future.set_exception(result.exception)


async def fenced_commit(
    client: KazooClient, latch: str, build: Callable[[TransactionRequest], None], *, component: str, deadline: float
) -> list[Any]:
    """Commit `check(latch)` + the operations `build` adds; the results of those operations.

    Raises `LeadershipLost` when the latch node is gone. A lost connection is retried until
    `deadline` (a `time.monotonic()` value); the operations must be safe to apply twice in the
    sense that the caller inspects the per-operation results. Awaited on the loop, no thread.
    """
    delay = 0.05
    while True:
        transaction = client.transaction()
        transaction.check(latch, 0)
        build(transaction)
        try:
            results = await kazoo_future(transaction.commit_async())
        except SessionExpiredError:
            raise LeadershipLost(component) from None
        except (ConnectionLoss, OperationTimeoutError):
            if time.monotonic() + delay > deadline:
                raise StoreError(f"the {component} could not reach ZooKeeper; the write may be retried") from None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
            continue
        if fence_broken(results):
            log.warning("%s write refused: latch node %s is gone", component, latch)
            raise LeadershipLost(component)
        return list(results[1:])
