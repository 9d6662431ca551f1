"""HA for processes that are not masters: where the leader is; nothing more.

TaskExecutors and the REST client (CLI, Airflow hook) build these instead of the masters'
`HighAvailabilityServices`, which joins the election and creates the cluster's znodes. With
`high-availability.mode: zookeeper` a follower connects to ZooKeeper only to read and watch the
leader node (which need not exist yet); with `none` the leader is `rest.address:rest.port`.
TaskExecutors get blobs from the leader (`GET /artifacts/{key}`), not from the masters' storage.
"""

from __future__ import annotations

import re
from pathlib import Path

from sparkdispatch.config import Configuration
from sparkdispatch.config.options import HA_CLUSTER_ID, HA_MODE
from sparkdispatch.errors import ConfigurationError
from sparkdispatch.ha.leader import ClosableLeaderRetrieval, StandaloneLeaderRetrieval
from sparkdispatch.ha.retrieval import OwnClientLeaderRetrieval

CLUSTER_ID_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def cluster_id(config: Configuration) -> str:
    """`high-availability.cluster-id`, checked to be one safe path segment (znode and directory)."""
    value: str = config.get(HA_CLUSTER_ID)
    if not CLUSTER_ID_PATTERN.fullmatch(value):
        raise ConfigurationError(
            f"high-availability.cluster-id {value!r} must be 1-128 letters, digits, "
            "'_', '.' or '-', not starting with '.' or '-'"
        )
    return value


def cluster_dir(config: Configuration, kind: str) -> Path:
    """`<storage.dir>/<kind>/<cluster-id>`: where the cluster keeps files of one kind."""
    return config.storage_dir / kind / cluster_id(config)


def create_leader_retrieval(config: Configuration) -> ClosableLeaderRetrieval:
    """Leader retrieval of the configured mode; `start()` it (this connects to ZooKeeper, and
    raises `ServiceUnavailable` if it cannot), `close()` it at the end."""
    if config.get(HA_MODE) == "zookeeper":
        cluster_id(config)
        return OwnClientLeaderRetrieval(config)
    return StandaloneLeaderRetrieval(config.rest_url)
