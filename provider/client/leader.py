"""Where a client finds the master: REST addresses as users write them, and the leader's address
as ZooKeeper leader retrieval publishes it (`ZooKeeperLeader`, on a read-only connection of its
own, so a client creates no znode in the cluster it follows)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from sparkdispatch.config import Configuration
from sparkdispatch.errors import ConfigurationError, NoLeader
from sparkdispatch.ha import ClosableLeaderRetrieval, LeaderInfo, create_leader_retrieval

DEFAULT_PORT = 8081


@dataclass(frozen=True)
class ZooKeeperTarget:
    """Where the leader is published: an ensemble, a cluster id and the root znode."""

    quorum: str
    cluster_id: str = "default"
    root: str = "/sparkdispatch"


def normalize_address(address: str, *, default_port: int = DEFAULT_PORT, scheme: str = "http") -> str:
    """`host`, `host:port` or `http(s)://host:port[/]` → `http(s)://host:port`."""
    text = address.strip().rstrip("/")
    if not text:
        raise ConfigurationError("an empty master address was given")
    if "://" not in text:
        text = f"{scheme}://{text}"
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(f"{address!r} is not a master REST address (write host:port or http://host:port)")
    try:
        port = parts.port or default_port
    except ValueError:
        raise ConfigurationError(f"{address!r} has a bad port") from None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}:{port}{parts.path.rstrip('/')}"


def parse_addresses(text: str | Sequence[str], *, default_port: int = DEFAULT_PORT, scheme: str = "http") -> list[str]:
    """A comma-separated string or a list of addresses → normalized, de-duplicated base URLs."""
    items = text.split(",") if isinstance(text, str) else list(text)
    addresses: list[str] = []
    for item in items:
        if item.strip():
            address = normalize_address(item, default_port=default_port, scheme=scheme)
            if address not in addresses:
                addresses.append(address)
    return addresses


# --------------------------------------------------------------------------------------------
# Finding the leader


class ZooKeeperLeader:
    """The leader's address as ZooKeeper leader retrieval publishes it."""

    def __init__(self, target: ZooKeeperTarget, config: Configuration | None = None) -> None:
        self.target = target
        self._base_config = config
        self._retrieval: ClosableLeaderRetrieval | None = None
        self._changed: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._starting = asyncio.Lock()

    async def _start(self) -> ClosableLeaderRetrieval:
        keys = {
            "high-availability.mode": "zookeeper",
            "high-availability.zookeeper.quorum": self.target.quorum,
            "high-availability.cluster-id": self.target.cluster_id,
            "high-availability.zookeeper.path.root": self.target.root,
        }
        config = (
            self._base_config.with_overrides(keys)
            if self._base_config is not None
            else Configuration.from_mapping(keys)
        )
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        # Its own read-only connection: a client creates no znode in the cluster it follows.
        retrieval = create_leader_retrieval(config)
        try:
            # start() connects and waits (briefly) for the first read of the leader node: not on our loop.
            await asyncio.to_thread(retrieval.start, self._on_leader)
        except Exception:
            await asyncio.to_thread(retrieval.close)
            raise
        return retrieval

    def _on_leader(self, info: LeaderInfo | None) -> None:
        # Called from kazoo's thread: only hand the news to our loop.
        if self._loop is not None and self._changed is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._changed.set)

    async def leader(self, timeout: float) -> str:
        async with self._starting:
            if self._retrieval is None:
                self._retrieval = await self._start()
        retrieval = self._retrieval
        assert self._changed is not None
        deadline = time.monotonic() + timeout
        while True:
            info = retrieval.current()
            if info is not None and info.address:
                return normalize_address(info.address)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise NoLeader(
                    f"no sparkdispatch master leads cluster {self.target.cluster_id!r} "
                    f"(ZooKeeper {self.target.quorum}, root {self.target.root}) at the moment"
                )
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass

    async def close(self) -> None:
        if self._retrieval is not None:
            retrieval, self._retrieval = self._retrieval, None
            await asyncio.to_thread(retrieval.close)

    def describe(self) -> str:
        return f"ZooKeeper {self.target.quorum} (cluster {self.target.cluster_id!r}, root {self.target.root})"
