"""The options of the configuration docs' section "High availability" (see the package's docstring)."""

from __future__ import annotations

from datetime import timedelta
from typing import Final, Literal, get_args

from sparkdispatch.config.option import ConfigOption, Section
from sparkdispatch.config.units import KiB

HaMode = Literal["none", "zookeeper"]

SECTION: Final = Section("High availability")

HA_MODE: Final[ConfigOption[HaMode]] = SECTION.choice(
    "high-availability.mode",
    get_args(HaMode),
    "none",
    "`none`: one master, always leader, stores on the local filesystem under `storage.dir`. `zookeeper`: leader "
    "election, retrieval and the JobGraph store on ZooKeeper.",
)
HA_CLUSTER_ID: Final = SECTION.string(
    "high-availability.cluster-id",
    "default",
    "Names this cluster; its ZooKeeper nodes and stored files live under it, so several clusters can share one "
    "ensemble and one storage dir.",
)
HA_ZOOKEEPER_QUORUM: Final = SECTION.string(
    "high-availability.zookeeper.quorum", "127.0.0.1:2181", "ZooKeeper ensemble, `host:port,...`."
)
HA_ZOOKEEPER_PATH_ROOT: Final = SECTION.string(
    "high-availability.zookeeper.path.root", "/sparkdispatch", "Root znode of all sparkdispatch clusters."
)
HA_ZOOKEEPER_SESSION_TIMEOUT: Final = SECTION.duration(
    "high-availability.zookeeper.session-timeout",
    timedelta(seconds=20),
    "ZooKeeper session timeout. A killed leader is replaced after about this long. Flink uses 60s; we pick 20s "
    "because batch jobs wait for the takeover, and ZooKeeper caps sessions at 20 ticks (40s with Debian's "
    "tickTime).",
    minimum=timedelta(seconds=1),
)
HA_ZOOKEEPER_CONNECTION_TIMEOUT: Final = SECTION.duration(
    "high-availability.zookeeper.connection-timeout",
    timedelta(seconds=15),
    "How long to wait for the first ZooKeeper connection before giving up (Flink's default).",
    minimum=timedelta(milliseconds=100),
)
HA_ZOOKEEPER_TOLERATE_SUSPENDED_CONNECTIONS: Final = SECTION.boolean(
    "high-availability.zookeeper.tolerate-suspended-connections",
    False,
    "Keep leadership while the ZooKeeper connection is SUSPENDED and revoke only when the session is LOST. Off by "
    "default: a suspended leader may already have been replaced (FLINK-10052 explains the trade-off).",
)
HA_ZOOKEEPER_AUTH: Final = SECTION.string(
    "high-availability.zookeeper.auth",
    "",
    "`user:password`: create every node with a digest ACL for this identity, so other ZooKeeper users can neither "
    "read nor change them. Empty: the `SPARKDISPATCH_ZOOKEEPER_AUTH` environment variable, else none (refused by a "
    "master with tokens unless `high-availability.zookeeper.allow-insecure`).",
)
HA_ZOOKEEPER_ALLOW_INSECURE: Final = SECTION.boolean(
    "high-availability.zookeeper.allow-insecure",
    False,
    "Let a master with tokens (`rest.auth.*`, `cluster.secret`) use ZooKeeper without `high-availability.zookeeper."
    "auth`. Whoever can write its nodes can then publish a leader address of their own and receive the cluster "
    "secret from every TaskExecutor that follows it: only where nobody else reaches ZooKeeper.",
)
HA_ZOOKEEPER_INLINE_LIMIT: Final = SECTION.size(
    "high-availability.zookeeper.inline-limit",
    64 * KiB,
    "JobGraphs up to this size live in their znode; larger ones are written under `storage.dir` and the znode "
    "holds a pointer.",
    minimum=0,
)
