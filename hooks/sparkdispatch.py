"""The Airflow hook of the `sparkdispatch` connection type.

A connection names the masters in one of two ways:

- `host` (and `port`): one REST address, or a comma-separated list of them
  (`master-1:8081,master-2:8081`); any master answers and names the leader;
- extra `zookeeper_quorum` (+ `cluster_id`, `zookeeper_root`): leader retrieval through
  ZooKeeper, as the masters' own `high-availability.*` keys say.

A token for masters with `rest.auth.token` goes in the password, or extra `token`. Masters that
serve HTTPS: schema `https` (the published leader address says it under ZooKeeper), extra `ca_file`
when their certificate is not signed by a CA of the system's trust store, and extras
`client_certificate` and `client_key` when they ask for client certificates. As JSON:
`AIRFLOW_CONN_SPARKDISPATCH_DEFAULT='{"conn_type": "sparkdispatch", "host": "127.0.0.1", "port": 8081}'`.
"""

from __future__ import annotations

import warnings
from typing import Any

from airflow.exceptions import AirflowProviderDeprecationWarning
from asgiref.sync import sync_to_async
from airflow.sdk import Connection

from sparkdispatch.hooks.airflow_compat import BaseHook
from sparkdispatch.client import RetryPolicy, SparkDispatchClient, SyncSparkDispatchClient
from sparkdispatch.client.leader import DEFAULT_PORT, ZooKeeperTarget, parse_addresses
from sparkdispatch.errors import ConfigurationError, SparkDispatchError
from sparkdispatch.tls import ClientTls

CONN_TYPE = "sparkdispatch"


def client_settings(conn: Connection) -> dict[str, Any]:
    """`SparkDispatchClient` keyword arguments from an Airflow Connection.

    Raises `ConfigurationError` naming the connection when it names no master.
    """
    extra = _extra(conn)

    def field(name: str) -> Any:
        # The connection form stores extra fields plain; older UIs prefixed them.
        value = extra.get(name)
        if value in (None, ""):
            value = extra.get(f"extra__{CONN_TYPE}__{name}")
        return None if value in (None, "") else value

    token = conn.password or field("token")
    tls = ClientTls(
        ca_file=str(field("ca_file") or ""),
        certificate=str(field("client_certificate") or ""),
        key=str(field("client_key") or ""),
        labels=("extra ca_file", "extra client_certificate", "extra client_key"),
    )
    quorum = field("zookeeper_quorum")
    if quorum:
        target = ZooKeeperTarget(
            quorum=str(quorum),
            cluster_id=str(field("cluster_id") or "default"),
            root=str(field("zookeeper_root") or "/sparkdispatch"),
        )
        return {"zookeeper": target, "token": token, "tls": tls}
    if not conn.host:
        raise ConfigurationError(
            f"connection {conn.conn_id!r} names no master: set its host to the master's REST address "
            "(or a comma-separated list of them), or its extra zookeeper_quorum"
        )
    scheme = "https" if (conn.schema or "").lower() == "https" else "http"
    addresses = parse_addresses(conn.host, default_port=int(conn.port or DEFAULT_PORT), scheme=scheme)
    return {"addresses": addresses, "token": token, "tls": tls}


def _extra(conn: Connection) -> dict[str, Any]:
    try:
        extra = conn.extra_dejson
    except Exception:  # noqa: BLE001 - Airflow raises several kinds for a malformed extra
        raise ConfigurationError(f"connection {conn.conn_id!r} has an extra that is not a JSON object") from None
    return extra if isinstance(extra, dict) else {}


class SparkDispatchHook(BaseHook):
    """Talks to the sparkdispatch master named by an Airflow connection.

    `get_conn()` gives a blocking client for operators; `aget_client()` an async one for
    triggers (it reads the connection with `await BaseHook.aget_connection`, never the
    blocking call). Both are the same `SparkDispatchClient` core.
    """

    conn_name_attr = "sparkdispatch_conn_id"
    default_conn_name = "sparkdispatch_default"
    conn_type = CONN_TYPE
    hook_name = "sparkdispatch"

    def __init__(
        self,
        sparkdispatch_conn_id: str = default_conn_name,
        *,
        retry: RetryPolicy | None = None,
        request_timeout: float = 30.0,
        conn_id: str | None = None,
    ) -> None:
        super().__init__()
        if conn_id is not None:  # the earlier name (the hook cannot import the operators' helper)
            warnings.warn(
                "SparkDispatchHook(conn_id=...) is deprecated and goes away in the next release: use "
                "sparkdispatch_conn_id=...",
                AirflowProviderDeprecationWarning,
                stacklevel=2,
            )
            sparkdispatch_conn_id = conn_id
        self.sparkdispatch_conn_id = sparkdispatch_conn_id
        self.retry = retry
        self.request_timeout = request_timeout
        self._client: SyncSparkDispatchClient | None = None

    def get_conn(self) -> SyncSparkDispatchClient:
        """The blocking client of this connection (made once per hook; `close()` ends it)."""
        if self._client is None:
            settings = client_settings(self.get_connection(self.sparkdispatch_conn_id))
            self._client = SyncSparkDispatchClient(self._make_client(settings))
        return self._client

    async def aget_client(self) -> SparkDispatchClient:
        """A new async client of this connection; the caller closes it (`async with`)."""
        aget_connection = getattr(self, "aget_connection", None)  # Airflow 3.0 has only the blocking call
        if aget_connection is not None:
            conn = await aget_connection(self.sparkdispatch_conn_id)
        else:
            conn = await sync_to_async(self.get_connection)(self.sparkdispatch_conn_id)
        settings = client_settings(conn)
        return self._make_client(settings)

    def _make_client(self, settings: dict[str, Any]) -> SparkDispatchClient:
        return SparkDispatchClient(**settings, retry=self.retry, request_timeout=self.request_timeout)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def test_connection(self) -> tuple[bool, str]:
        """Reach the leader and report its TaskExecutors and slots (the UI's Test button)."""
        try:
            settings = client_settings(self.get_connection(self.sparkdispatch_conn_id))
        except SparkDispatchError as exc:
            return False, str(exc)
        client = SyncSparkDispatchClient(
            SparkDispatchClient(**settings, retry=RetryPolicy(attempts=2, initial_backoff=0.2), request_timeout=10.0)
        )
        try:
            overview = client.overview()
            leader = client.leader_address
        except SparkDispatchError as exc:
            return False, f"cannot reach the sparkdispatch leader: {exc}"
        finally:
            client.close()
        return True, (
            f"leader {leader}, {overview.taskmanagers} TaskExecutors, "
            f"{overview.slots_total} slots ({overview.slots_available} free)"
        )
