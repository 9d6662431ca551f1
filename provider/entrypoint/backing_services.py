"""A master with tokens refuses backing services that anyone could write to.

The REST tokens and the cluster secret keep strangers off the master's port, but ZooKeeper and
Redis are doors of their own: whoever writes the leader znode is the master TaskExecutors follow
(and send the cluster secret to), and whoever writes to the broker hands TaskExecutors
deployments. So a master that authenticates its callers starts only with ZooKeeper's digest ACLs
(`high-availability.zookeeper.auth`) and a Redis password, unless told that nobody else reaches
them (`high-availability.zookeeper.allow-insecure`, `broker.allow-insecure`).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from sparkdispatch.config import Configuration
from sparkdispatch.config.options import (
    BROKER_ALLOW_INSECURE,
    HA_MODE,
    HA_ZOOKEEPER_ALLOW_INSECURE,
    REST_AUTH_TOKENS_FILE,
)
from sparkdispatch.errors import ConfigurationError


def check_backing_services(config: Configuration) -> None:
    """`ConfigurationError` naming the open service and the settings that close it, for a master
    with tokens on a ZooKeeper without ACLs or a Redis without a password."""
    if not (config.auth_token or config.get(REST_AUTH_TOKENS_FILE) or config.cluster_secret):
        return  # nothing to protect: such a master listens on loopback (RestSettings.check_exposure)
    problems: list[str] = []
    if config.get(HA_MODE) == "zookeeper" and not config.zookeeper_auth and not config.get(HA_ZOOKEEPER_ALLOW_INSECURE):
        problems.append(
            "ZooKeeper without high-availability.zookeeper.auth: whoever reaches it can publish a leader of "
            "their own and receive the cluster secret from every TaskExecutor. Set high-availability.zookeeper."
            "auth: user:password (or SPARKDISPATCH_ZOOKEEPER_AUTH) on every master and TaskExecutor, or "
            "high-availability.zookeeper.allow-insecure: true where nobody else reaches ZooKeeper"
        )
    broker = urlsplit(config.broker_url)
    if broker.scheme in ("redis", "rediss") and not broker.password and not config.get(BROKER_ALLOW_INSECURE):
        problems.append(
            "a Redis broker without a password: whoever reaches it can hand TaskExecutors deployments. Give "
            "Redis a password (requirepass) and broker.url one (redis://:password@host:port/0, or "
            "SPARKDISPATCH_BROKER_PASSWORD), or set broker.allow-insecure: true where nobody else reaches Redis"
        )
    if problems:
        raise ConfigurationError("the master has tokens but would use " + "; and ".join(problems))
