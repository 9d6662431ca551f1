"""Typed settings of the master's and the TaskExecutor's components, read once from a `Configuration`.

A component receives the values it needs, never the whole Configuration: the master reads
`MasterSettings.from_config(config)` once and hands each part to its component. The options of
`sparkdispatch.config.options` are read here (and by the HA services factory), nowhere else on the
master side.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sparkdispatch.config import Configuration
from sparkdispatch.config.options import (
    BLOB_CLEANUP_INTERVAL, BLOB_MAX_SIZE, BLOB_RETENTION, CLEANUP_INITIAL_BACKOFF, CLEANUP_MAX_BACKOFF, HA_CLUSTER_ID,
    HEARTBEAT_INTERVAL, HEARTBEAT_MISSING_EXECUTION_THRESHOLD, HEARTBEAT_RPC_FAILURE_THRESHOLD, HEARTBEAT_TIMEOUT,
    JOBGRAPH_MAX_SUBTASKS, JOBSTORE_MAX_IN_MEMORY, RESOURCEMANAGER_TASKMANAGER_TIMEOUT,
    RESTART_EXPONENTIAL_DELAY_ATTEMPTS, RESTART_EXPONENTIAL_DELAY_BACKOFF_MULTIPLIER,
    RESTART_EXPONENTIAL_DELAY_INITIAL_BACKOFF, RESTART_EXPONENTIAL_DELAY_JITTER_FACTOR,
    RESTART_EXPONENTIAL_DELAY_MAX_BACKOFF, RESTART_EXPONENTIAL_DELAY_RESET_BACKOFF_THRESHOLD,
    RESTART_FAILURE_RATE_DELAY, RESTART_FAILURE_RATE_FAILURE_RATE_INTERVAL,
    RESTART_FAILURE_RATE_MAX_FAILURES_PER_INTERVAL, RESTART_FIXED_DELAY_ATTEMPTS, RESTART_FIXED_DELAY_DELAY,
    RESTART_TYPE, REST_ADDRESS, REST_ALLOWED_HOSTS, REST_ALLOWED_ORIGINS, REST_AUTH_ALLOW_UNAUTHENTICATED,
    REST_BIND_ADDRESS, REST_BODY_TIMEOUT, REST_EXECUTION_RESULT_LONG_POLL, REST_HEADER_TIMEOUT, REST_IDLE_TIMEOUT,
    REST_LOGIN_FAILURE_WINDOW, REST_LOGIN_MAX_FAILURES, REST_MAX_BODY_SIZE, REST_PORT, RESULTS_RETENTION,
    SLOT_REQUEST_TIMEOUT, SPARK_MASTER, TASKEXECUTOR_CANCELLATION_TIMEOUT, TASKEXECUTOR_CONNECT_DRIVER_MEMORY,
    TASKEXECUTOR_CONNECT_PORT, TASKEXECUTOR_CONNECT_START_TIMEOUT, TASKEXECUTOR_SLOT_PROCESS_SPARES,
)
from sparkdispatch.errors import ConfigurationError, JobTooLarge
from sparkdispatch.model.restart import (
    ExponentialDelayRestart,
    FailureRateRestart,
    FixedDelayRestart,
    NoRestart,
    RestartStrategy,
)
from sparkdispatch.model.job_graph import JobGraph
from sparkdispatch.tls import ClientTls, ServerTls
from sparkdispatch.web_origin import WebOrigin

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeartbeatSettings:
    """`heartbeat.*`: how often TaskExecutors send heartbeats and when a silent one is lost (seconds)."""

    interval: float
    timeout: float
    rpc_failure_threshold: int  # -1: never unreachable by failed calls

    @classmethod
    def from_config(cls, config: Configuration) -> HeartbeatSettings:
        return cls(interval=config.get(HEARTBEAT_INTERVAL), timeout=config.get(HEARTBEAT_TIMEOUT),
                   rpc_failure_threshold=config.get(HEARTBEAT_RPC_FAILURE_THRESHOLD))


@dataclass(frozen=True)
class ResourceManagerSettings:
    """The ResourceManager's heartbeats and its SlotManager's timeouts (seconds)."""

    heartbeat: HeartbeatSettings
    slot_request_timeout: float
    task_executor_idle_timeout: float

    @classmethod
    def from_config(cls, config: Configuration) -> ResourceManagerSettings:
        return cls(heartbeat=HeartbeatSettings.from_config(config),
                   slot_request_timeout=config.get(SLOT_REQUEST_TIMEOUT),
                   task_executor_idle_timeout=config.get(RESOURCEMANAGER_TASKMANAGER_TIMEOUT))


def restart_strategy_from_config(config: Configuration) -> RestartStrategy:
    """The `restart-strategy.*` configuration as a strategy value."""
    kind = config.get(RESTART_TYPE)
    if kind == "fixed-delay":
        return FixedDelayRestart(attempts=config.get(RESTART_FIXED_DELAY_ATTEMPTS),
                                 delay_s=config.get(RESTART_FIXED_DELAY_DELAY))
    if kind == "exponential-delay":
        return ExponentialDelayRestart(
            initial_backoff_s=config.get(RESTART_EXPONENTIAL_DELAY_INITIAL_BACKOFF),
            max_backoff_s=config.get(RESTART_EXPONENTIAL_DELAY_MAX_BACKOFF),
            backoff_multiplier=config.get(RESTART_EXPONENTIAL_DELAY_BACKOFF_MULTIPLIER),
            reset_backoff_threshold_s=config.get(RESTART_EXPONENTIAL_DELAY_RESET_BACKOFF_THRESHOLD),
            jitter_factor=config.get(RESTART_EXPONENTIAL_DELAY_JITTER_FACTOR),
            attempts=config.get(RESTART_EXPONENTIAL_DELAY_ATTEMPTS))
    if kind == "failure-rate":
        return FailureRateRestart(max_failures_per_interval=config.get(RESTART_FAILURE_RATE_MAX_FAILURES_PER_INTERVAL),
                                  failure_rate_interval_s=config.get(RESTART_FAILURE_RATE_FAILURE_RATE_INTERVAL),
                                  delay_s=config.get(RESTART_FAILURE_RATE_DELAY))
    return NoRestart()


@dataclass(frozen=True)
class JobMasterSettings:
    """Where a JobMaster's tasks write results, the restart strategy of jobs that name none, and
    when an execution its TaskExecutor's heartbeats omit fails over."""

    results_dir: str
    restart_strategy: RestartStrategy
    missing_execution_threshold: int = 3  # heartbeats in a row
    deployment_grace: float = 25.0  # seconds a deployment may take to show in its TaskExecutor's heartbeats

    @classmethod
    def from_config(cls, config: Configuration) -> JobMasterSettings:
        return cls(results_dir=config.results_dir, restart_strategy=restart_strategy_from_config(config),
                   missing_execution_threshold=config.get(HEARTBEAT_MISSING_EXECUTION_THRESHOLD),
                   deployment_grace=config.get(HEARTBEAT_TIMEOUT))


@dataclass(frozen=True)
class JobLimits:
    """Limits on a whole job, beyond those of each field of its JobGraph: `jobgraph.max-subtasks`."""

    max_subtasks: int = JOBGRAPH_MAX_SUBTASKS.default

    def check(self, graph: JobGraph) -> JobGraph:
        """`graph` if it is within the limits; `JobTooLarge` naming the limit otherwise."""
        subtasks = graph.subtask_count
        if subtasks > self.max_subtasks:
            raise JobTooLarge(subtasks=subtasks, limit=self.max_subtasks, option=JOBGRAPH_MAX_SUBTASKS.key)
        return graph

    @classmethod
    def from_config(cls, config: Configuration) -> JobLimits:
        return cls(max_subtasks=config.get(JOBGRAPH_MAX_SUBTASKS))


@dataclass(frozen=True)
class CleanupSettings:
    """How the Dispatcher cleans up a finished job: retry backoff (seconds) and its results."""

    initial_backoff: float
    max_backoff: float
    delete_results: bool  # `results.retention: delete`
    results_dir: str
    storage_dir: Path  # named in the warning of a failing cleanup

    @classmethod
    def from_config(cls, config: Configuration) -> CleanupSettings:
        return cls(initial_backoff=config.get(CLEANUP_INITIAL_BACKOFF),
                   max_backoff=config.get(CLEANUP_MAX_BACKOFF),
                   delete_results=config.get(RESULTS_RETENTION) == "delete",
                   results_dir=config.results_dir, storage_dir=config.storage_dir)


@dataclass(frozen=True)
class BlobCleanupSettings:
    """When the leader removes unused artifacts: `blob.retention` and `blob.cleanup-interval` (seconds)."""

    retention: float
    interval: float

    @classmethod
    def from_config(cls, config: Configuration) -> BlobCleanupSettings:
        return cls(retention=config.get(BLOB_RETENTION), interval=config.get(BLOB_CLEANUP_INTERVAL))


@dataclass(frozen=True)
class ArchiveSettings:
    """Where archived jobs live (`<storage.dir>/archive/<cluster-id>`) and how many stay in memory."""

    directory: Path
    capacity: int

    @classmethod
    def from_config(cls, config: Configuration) -> ArchiveSettings:
        return cls(directory=config.storage_dir / "archive" / config.get(HA_CLUSTER_ID),
                   capacity=config.get(JOBSTORE_MAX_IN_MEMORY))


def is_loopback(host: str) -> bool:
    """Whether `host` (an IP address or `localhost`) is a loopback address; a name or a wildcard is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


ANY_HOST = "*"
_HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?")


def allowed_host_names(text: str) -> frozenset[str]:
    """`rest.allowed-hosts`: comma-separated host names without ports, or `*`; `ConfigurationError` otherwise."""
    names = frozenset(name.strip().lower().rstrip(".") for name in text.split(",") if name.strip())
    for name in names:
        if name != ANY_HOST and not _HOST_NAME.fullmatch(name):
            raise ConfigurationError(f"rest.allowed-hosts: {name!r} is not a host name; write names without a "
                                     "scheme or port, separated by commas (`*` allows any)")
    return names


def allowed_origins(text: str) -> frozenset[WebOrigin]:
    """`rest.allowed-origins`: comma-separated `scheme://host[:port]`; `ConfigurationError` otherwise."""
    origins: set[WebOrigin] = set()
    for entry in (item.strip() for item in text.split(",")):
        if not entry:
            continue
        origin = WebOrigin.parse(entry)
        if origin is None:
            raise ConfigurationError(f"rest.allowed-origins: {entry!r} is not a web origin; write each as "
                                     "http(s)://host[:port], without a path, separated by commas")
        origins.add(origin)
    return frozenset(origins)


@dataclass(frozen=True)
class ConnectionTimeouts:
    """How long the REST endpoint waits for a client (seconds): `rest.header-timeout`, `rest.body-timeout`
    (a stall between two pieces of a body) and `rest.idle-timeout` (a kept-alive connection between requests)."""

    header: float = 20.0
    body: float = 30.0
    idle: float = 60.0

    @classmethod
    def from_config(cls, config: Configuration) -> ConnectionTimeouts:
        return cls(header=config.get(REST_HEADER_TIMEOUT), body=config.get(REST_BODY_TIMEOUT),
                   idle=config.get(REST_IDLE_TIMEOUT))


@dataclass(frozen=True)
class LoginLimits:
    """`rest.login.*`: failed logins one client address may make within `window` seconds."""

    max_failures: int = 5
    window: float = 300.0

    @classmethod
    def from_config(cls, config: Configuration) -> LoginLimits:
        return cls(max_failures=config.get(REST_LOGIN_MAX_FAILURES), window=config.get(REST_LOGIN_FAILURE_WINDOW))


@dataclass(frozen=True)
class RestSettings:
    """The REST endpoint's address, limits, bearer token, TLS and what it lets browsers and slow clients do."""

    address: str  # advertised
    bind_address: str  # `rest.bind-address`, else `rest.address`
    port: int  # 0 picks a free port
    max_body_size: int  # bytes
    blob_max_size: int  # bytes
    auth_token: str = field(repr=False)  # empty: no authentication
    execution_result_long_poll: float  # seconds
    results_dir: str = ""  # where attempt logs are read from (attempt_logs.py)
    allow_unauthenticated: bool = False  # without a token on a non-loopback address
    tls: ServerTls | None = None  # None: plain HTTP
    client_tls: ClientTls = ClientTls()  # how this master calls another (a standby asks the leader)
    allowed_hosts: frozenset[str] = frozenset()  # Host names besides the master's own; ANY_HOST: any
    allowed_origins: frozenset[WebOrigin] = frozenset()  # pages that may change state besides the master's own
    timeouts: ConnectionTimeouts = ConnectionTimeouts()
    login_limits: LoginLimits = LoginLimits()

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    def check_exposure(self) -> None:
        """`ConfigurationError` when the endpoint would serve a network without a token and that is not
        allowed; a warning when its token would cross a network in clear text."""
        if is_loopback(self.bind_address):
            return
        if self.auth_token and self.tls is None:
            log.warning("the master serves %s:%d over plain HTTP: its token crosses the network in clear text; "
                        "serve HTTPS (rest.ssl.enabled) where the network is not trusted", self.bind_address, self.port)
        if self.auth_token or self.allow_unauthenticated:
            return
        raise ConfigurationError(
            f"the master would listen on {self.bind_address}:{self.port} without a token, so whoever reaches that "
            "port could run code on the TaskExecutors: set a token (rest.auth.token-file, the "
            "SPARKDISPATCH_AUTH_TOKEN environment variable, or rest.auth.token), or bind to loopback "
            "(rest.bind-address: 127.0.0.1), or accept the risk with rest.auth.allow-unauthenticated: true")

    @classmethod
    def from_config(cls, config: Configuration) -> RestSettings:
        address = config.get(REST_ADDRESS)
        return cls(address=address, bind_address=config.get(REST_BIND_ADDRESS) or address,
                   port=config.get(REST_PORT), max_body_size=config.get(REST_MAX_BODY_SIZE),
                   blob_max_size=config.get(BLOB_MAX_SIZE), auth_token=config.auth_token,
                   execution_result_long_poll=config.get(REST_EXECUTION_RESULT_LONG_POLL),
                   results_dir=config.results_dir, allow_unauthenticated=config.get(REST_AUTH_ALLOW_UNAUTHENTICATED),
                   tls=ServerTls.from_config(config), client_tls=ClientTls.from_config(config),
                   allowed_hosts=allowed_host_names(config.get(REST_ALLOWED_HOSTS)),
                   allowed_origins=allowed_origins(config.get(REST_ALLOWED_ORIGINS)),
                   timeouts=ConnectionTimeouts.from_config(config), login_limits=LoginLimits.from_config(config))


@dataclass(frozen=True)
class ConnectServerSettings:
    """A TaskExecutor's Spark Connect server: its Spark master, loopback port, start timeout and heap."""

    spark_master: str
    port: int  # 0 picks a free port
    start_timeout: float  # seconds, warm-up included
    driver_memory: int  # bytes
    spark_properties: Mapping[str, str] = field(repr=False)  # the other `spark.*` keys; may hold secrets

    @classmethod
    def from_config(cls, config: Configuration) -> ConnectServerSettings:
        return cls(spark_master=config.get(SPARK_MASTER), port=config.get(TASKEXECUTOR_CONNECT_PORT),
                   start_timeout=config.get(TASKEXECUTOR_CONNECT_START_TIMEOUT),
                   driver_memory=config.get(TASKEXECUTOR_CONNECT_DRIVER_MEMORY),
                   spark_properties=config.spark_properties)


@dataclass(frozen=True)
class SlotPoolSettings:
    """A TaskExecutor's slot processes: warm spares, cancellation timeout, start and stop bounds (seconds)."""

    spares: int = 1
    cancellation_timeout: float = 30.0
    start_timeout: float = 120.0  # a new slot process's imports and first action
    stop_grace: float = 10.0  # a retired slot process's session release, before it is killed

    @classmethod
    def from_config(cls, config: Configuration) -> SlotPoolSettings:
        return cls(spares=config.get(TASKEXECUTOR_SLOT_PROCESS_SPARES),
                   cancellation_timeout=config.get(TASKEXECUTOR_CANCELLATION_TIMEOUT))


@dataclass(frozen=True)
class MasterSettings:
    """Every master component's settings, read from one Configuration."""

    rest: RestSettings
    resource_manager: ResourceManagerSettings
    job_master: JobMasterSettings
    cleanup: CleanupSettings
    archive: ArchiveSettings
    blob_cleanup: BlobCleanupSettings
    job_limits: JobLimits

    @classmethod
    def from_config(cls, config: Configuration) -> MasterSettings:
        return cls(rest=RestSettings.from_config(config), job_limits=JobLimits.from_config(config),
                   resource_manager=ResourceManagerSettings.from_config(config),
                   job_master=JobMasterSettings.from_config(config), cleanup=CleanupSettings.from_config(config),
                   archive=ArchiveSettings.from_config(config),
                   blob_cleanup=BlobCleanupSettings.from_config(config))
