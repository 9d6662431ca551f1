"""Every configuration key, declared once: its type, default, unit and description.

Components read these options (`config.get(HEARTBEAT_INTERVAL)` is a float of seconds), never
keys by string; docs/configuration.md is generated from the sections below, in their order
(`sparkdispatch config-docs > docs/configuration.md`). A constant is named after its key:
upper case, `_` for `.` and `-`, with `high-availability.` as `HA_`, `restart-strategy.` as
`RESTART_` and `cleanup-strategy.` as `CLEANUP_`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Final, Literal, get_args

from sparkdispatch.config.option import AnyOption, ConfigOption, KeyPrefix, Section, index_by_key
from sparkdispatch.config.units import GiB, KiB, MiB

LogFormat = Literal["text", "json"]
HaMode = Literal["none", "zookeeper"]
ResultsRetention = Literal["keep", "delete"]
RestartStrategyType = Literal["none", "fixed-delay", "exponential-delay", "failure-rate"]


def _cpu_count() -> int:
    return os.cpu_count() or 1


_logging = Section("Logging")

LOG_FORMAT: Final[ConfigOption[LogFormat]] = _logging.choice(
    "log.format",
    get_args(LogFormat),
    "text",
    "How master and TaskExecutor processes log to stderr: `text` lines, or `json`, an object per line for log "
    "shippers; both name the job, vertex, subtask and attempt a line is about.",
)

_rest = Section("REST endpoint")

REST_ADDRESS: Final = _rest.string(
    "rest.address",
    "127.0.0.1",
    "Address the master advertises for its REST endpoint and web UI; with `high-availability.mode: none` also "
    "where TaskExecutors and clients find the master.",
)
REST_BIND_ADDRESS: Final = _rest.string(
    "rest.bind-address", "", "Address the REST endpoint binds to; empty means `rest.address`."
)
REST_PORT: Final = _rest.integer(
    "rest.port", 8081, "Port of the REST endpoint and web UI (Flink's default). 0 picks a free port.", minimum=0
)
REST_MAX_BODY_SIZE: Final = _rest.size(
    "rest.max-body-size", 10 * MiB, "Largest request body accepted; larger ones get 413.", minimum=KiB
)
REST_AUTH_TOKEN: Final = _rest.string(
    "rest.auth.token",
    "",
    "When set, every REST call must send `Authorization: Bearer <token>`; TaskExecutors and clients send it. "
    "Empty: the content of `rest.auth.token-file`, else the `SPARKDISPATCH_AUTH_TOKEN` environment variable, else "
    "no authentication.",
)
REST_AUTH_TOKEN_FILE: Final = _rest.string(
    "rest.auth.token-file",
    "",
    "A file holding the token (surrounding whitespace ignored), read when `rest.auth.token` is empty: the token "
    "then appears in no command line.",
)
REST_AUTH_TOKENS_FILE: Final = _rest.string(
    "rest.auth.tokens-file",
    "",
    "A file of named user tokens, each with a role: a line `<name> <role> <token>` (`#` starts a comment), role "
    "`viewer` (reads), `submitter` (also submits, cancels and repairs jobs and uploads artifacts) or `admin` "
    "(everything a user may do). Read again when it changes, so a token is revoked by removing its line; "
    "`rest.auth.token`, when set too, is an `admin` token named `rest-auth-token`.",
)
CLUSTER_SECRET: Final = _rest.string(
    "cluster.secret",
    "",
    "The TaskExecutors' credential: only a caller sending it as its bearer token reaches the TaskExecutor routes "
    "(registration, heartbeats, task states), and it reaches nothing else but artifact downloads. Empty: "
    "`cluster.secret-file`'s content, else the `SPARKDISPATCH_CLUSTER_SECRET` environment variable, else the "
    "TaskExecutors use `rest.auth.token` (users' `rest.auth.tokens-file` tokens never reach those routes). "
    "`sparkdispatch standalone` makes one of its own.",
)
CLUSTER_SECRET_FILE: Final = _rest.string(
    "cluster.secret-file",
    "",
    "A file holding `cluster.secret` (surrounding whitespace ignored), read when `cluster.secret` is empty.",
)
REST_AUTH_ALLOW_UNAUTHENTICATED: Final = _rest.boolean(
    "rest.auth.allow-unauthenticated",
    False,
    "Let a master without a token listen on an address other than loopback. Off, such a master refuses to start: "
    "whoever reaches its port could run code on the TaskExecutors.",
)
REST_SSL_ENABLED: Final = _rest.boolean(
    "rest.ssl.enabled",
    False,
    "Serve the REST endpoint and web UI over HTTPS, and call it over HTTPS (the CLI, TaskExecutors, standbys): the "
    "master then needs `rest.ssl.certificate` and `rest.ssl.key`, its clients verify it against `rest.ssl.ca-file` "
    "or the system's trust store.",
)
REST_SSL_CERTIFICATE: Final = _rest.string("rest.ssl.certificate", "", "The master's PEM certificate (chain) file.")
REST_SSL_KEY: Final = _rest.string("rest.ssl.key", "", "The PEM private key file of `rest.ssl.certificate`.")
REST_SSL_CLIENT_CA: Final = _rest.string(
    "rest.ssl.client-ca",
    "",
    "A PEM CA file: when set, the master accepts only clients presenting a certificate signed by it (mutual TLS).",
)
REST_SSL_CA_FILE: Final = _rest.string(
    "rest.ssl.ca-file",
    "",
    "The PEM CA file clients verify the master's certificate against; empty: the system's trust store.",
)
REST_SSL_CLIENT_CERTIFICATE: Final = _rest.string(
    "rest.ssl.client-certificate",
    "",
    "The PEM certificate a client presents when the master asks for one (`rest.ssl.client-ca`).",
)
REST_SSL_CLIENT_KEY: Final = _rest.string(
    "rest.ssl.client-key", "", "The PEM private key file of `rest.ssl.client-certificate`."
)
REST_EXECUTION_RESULT_LONG_POLL: Final = _rest.duration(
    "rest.execution-result.long-poll",
    timedelta(seconds=1),
    "How long `GET /jobs/{id}/execution-result` waits for a running job to end before it answers IN_PROGRESS.",
    minimum=timedelta(0),
)
REST_ALLOWED_HOSTS: Final = _rest.string(
    "rest.allowed-hosts",
    "",
    "Host names, comma-separated, that calls may name in their `Host` header besides the master's own (loopback "
    "names, `rest.address`, `rest.bind-address`, this machine's host name and FQDN, and any IP address): the names "
    "a reverse proxy or a DNS alias gives the master. Another name is refused with 403 `HostRefused`, so a web "
    "page cannot reach the master through a name of its own that resolves to it (DNS rebinding). `*` accepts any "
    "name.",
)
REST_ALLOWED_ORIGINS: Final = _rest.string(
    "rest.allowed-origins",
    "",
    "Web origins, comma-separated (`https://airflow.example.com:8443`), whose pages may change state on the master "
    "(POST, PUT, PATCH, DELETE) besides the master's own pages. A call from any other page is refused with 403 "
    "`OriginRefused`; calls that send no `Origin` (the CLI, TaskExecutors, Airflow, curl) are not concerned.",
)
REST_HEADER_TIMEOUT: Final = _rest.duration(
    "rest.header-timeout",
    timedelta(seconds=20),
    "How long a client may take to send a request's line and headers, counted from its first byte (or from the "
    "opening of the connection); then the connection is closed.",
    minimum=timedelta(milliseconds=10),
)
REST_BODY_TIMEOUT: Final = _rest.duration(
    "rest.body-timeout",
    timedelta(seconds=30),
    "How long the reading of a request body may wait for the next bytes; then it is refused with 408 "
    "`RequestTimeout` and the connection closed. A body that keeps coming is read whatever its length takes.",
    minimum=timedelta(milliseconds=10),
)
REST_IDLE_TIMEOUT: Final = _rest.duration(
    "rest.idle-timeout",
    timedelta(minutes=1),
    "How long a kept-alive connection may stay without a request before the master closes it.",
    minimum=timedelta(milliseconds=10),
)
REST_LOGIN_MAX_FAILURES: Final = _rest.integer(
    "rest.login.max-failures",
    5,
    "Failed logins at `/ui/login` one client address may make within `rest.login.failure-window`; the next are "
    "refused with 429 `TooManyLoginAttempts` and `Retry-After` until the oldest of them is that old.",
    minimum=1,
)
REST_LOGIN_FAILURE_WINDOW: Final = _rest.duration(
    "rest.login.failure-window",
    timedelta(minutes=5),
    "The window of `rest.login.max-failures`.",
    minimum=timedelta(seconds=1),
)

REST_LIST_PAGE_SIZE: Final = _rest.integer(
    "rest.list.page-size",
    1000,
    "The most entries one answer of `GET /jobs` or `GET /taskmanagers` holds, and their number when the "
    "request asks for none (`?limit=`); its `next` cursor (`?after=`) gives the following page.",
    minimum=1,
)

_jobs = Section("Jobs")

JOBGRAPH_MAX_SUBTASKS: Final = _jobs.integer(
    "jobgraph.max-subtasks",
    100_000,
    "Most subtasks a job may have in all (the sum of its vertices' parallelism). A larger JobGraph is refused at "
    "submission with 400 `JobTooLarge`, and a stored one (accepted under a higher limit) fails at recovery instead "
    "of running; the master builds each subtask's state in memory (per 100,000: about 45 MB, and 0.5-2 s of a "
    "thread on a 2-core machine).",
    minimum=1,
)

_ha = Section("High availability")

HA_MODE: Final[ConfigOption[HaMode]] = _ha.choice(
    "high-availability.mode",
    get_args(HaMode),
    "none",
    "`none`: one master, always leader, stores on the local filesystem under `storage.dir`. `zookeeper`: leader "
    "election, retrieval and the JobGraph store on ZooKeeper.",
)
HA_CLUSTER_ID: Final = _ha.string(
    "high-availability.cluster-id",
    "default",
    "Names this cluster; its ZooKeeper nodes and stored files live under it, so several clusters can share one "
    "ensemble and one storage dir.",
)
HA_ZOOKEEPER_QUORUM: Final = _ha.string(
    "high-availability.zookeeper.quorum", "127.0.0.1:2181", "ZooKeeper ensemble, `host:port,...`."
)
HA_ZOOKEEPER_PATH_ROOT: Final = _ha.string(
    "high-availability.zookeeper.path.root", "/sparkdispatch", "Root znode of all sparkdispatch clusters."
)
HA_ZOOKEEPER_SESSION_TIMEOUT: Final = _ha.duration(
    "high-availability.zookeeper.session-timeout",
    timedelta(seconds=20),
    "ZooKeeper session timeout. A killed leader is replaced after about this long. Flink uses 60s; we pick 20s "
    "because batch jobs wait for the takeover, and ZooKeeper caps sessions at 20 ticks (40s with Debian's "
    "tickTime).",
    minimum=timedelta(seconds=1),
)
HA_ZOOKEEPER_CONNECTION_TIMEOUT: Final = _ha.duration(
    "high-availability.zookeeper.connection-timeout",
    timedelta(seconds=15),
    "How long to wait for the first ZooKeeper connection before giving up (Flink's default).",
    minimum=timedelta(milliseconds=100),
)
HA_ZOOKEEPER_TOLERATE_SUSPENDED_CONNECTIONS: Final = _ha.boolean(
    "high-availability.zookeeper.tolerate-suspended-connections",
    False,
    "Keep leadership while the ZooKeeper connection is SUSPENDED and revoke only when the session is LOST. Off by "
    "default: a suspended leader may already have been replaced (FLINK-10052 explains the trade-off).",
)
HA_ZOOKEEPER_AUTH: Final = _ha.string(
    "high-availability.zookeeper.auth",
    "",
    "`user:password`: create every node with a digest ACL for this identity, so other ZooKeeper users can neither "
    "read nor change them. Empty: the `SPARKDISPATCH_ZOOKEEPER_AUTH` environment variable, else none (refused by a "
    "master with tokens unless `high-availability.zookeeper.allow-insecure`).",
)
HA_ZOOKEEPER_ALLOW_INSECURE: Final = _ha.boolean(
    "high-availability.zookeeper.allow-insecure",
    False,
    "Let a master with tokens (`rest.auth.*`, `cluster.secret`) use ZooKeeper without `high-availability.zookeeper."
    "auth`. Whoever can write its nodes can then publish a leader address of their own and receive the cluster "
    "secret from every TaskExecutor that follows it: only where nobody else reaches ZooKeeper.",
)
HA_ZOOKEEPER_INLINE_LIMIT: Final = _ha.size(
    "high-availability.zookeeper.inline-limit",
    64 * KiB,
    "JobGraphs up to this size live in their znode; larger ones are written under `storage.dir` and the znode "
    "holds a pointer.",
    minimum=0,
)

_storage = Section("Storage")

STORAGE_DIR: Final = _storage.string(
    "storage.dir",
    "~/.sparkdispatch",
    "Directory for the JobResult store, blobs, archived jobs and, with `high-availability.mode: none`, the "
    "JobGraph and progress stores. Shared by all masters in HA.",
)
STORAGE_RESULTS_DIR: Final = _storage.string(
    "storage.results-dir",
    "",
    "Where tasks write result partitions; any path or URI Spark can write (`hdfs://`, `s3a://`). Empty means "
    "`<storage.dir>/results`; TaskExecutors on several hosts need a shared one.",
)
JOB_RESULT_STORE_DELETE_ON_COMMIT: Final = _storage.boolean(
    "job-result-store.delete-on-commit",
    True,
    "Delete a JobResult file once its job is cleaned up; otherwise rename `<id>_DIRTY.json` to `<id>.json` and "
    "keep it (Flink's semantics).",
)
RESULTS_RETENTION: Final[ConfigOption[ResultsRetention]] = _storage.choice(
    "results.retention",
    get_args(ResultsRetention),
    "keep",
    "What happens to a finished job's intermediate results at cleanup: `keep` them, or `delete` them.",
)
JOBSTORE_MAX_IN_MEMORY: Final = _storage.integer(
    "jobstore.max-in-memory",
    200,
    "Finished jobs kept in memory for queries; older ones are read from the archive on disk.",
    minimum=1,
)
JOBSTORE_EXPIRATION_TIME: Final = _storage.duration(
    "jobstore.expiration-time",
    timedelta(days=7),
    "A finished job leaves the archive (in memory and on disk) this long after it ended; it can no longer be "
    "queried or repaired then (Flink's key; its default is 1h). As long as `blob.retention`: an older job's code "
    "may be gone anyway.",
    minimum=timedelta(seconds=1),
)
JOBSTORE_MAX_CAPACITY: Final = _storage.integer(
    "jobstore.max-capacity",
    10_000,
    "The most finished jobs the archive keeps; beyond it the oldest (by end time) leave it first (Flink's key). "
    "Each stays in memory as its overview, about 1 KiB.",
    minimum=1,
)
BLOB_MAX_SIZE: Final = _storage.size("blob.max-size", 100 * MiB, "Largest user-code artifact accepted.", minimum=1)
BLOB_RETENTION: Final = _storage.duration(
    "blob.retention",
    timedelta(days=7),
    "A stored artifact that no stored job names and that was neither uploaded nor named by a submission or repair "
    "for this long is removed; a repair of a job whose code was removed is refused.",
    minimum=timedelta(seconds=1),
)
BLOB_CLEANUP_INTERVAL: Final = _storage.duration(
    "blob.cleanup-interval",
    timedelta(hours=1),
    "How often the leader looks for artifacts to remove.",
    minimum=timedelta(milliseconds=100),
)

_heartbeats = Section("Heartbeats and slots")

HEARTBEAT_INTERVAL: Final = _heartbeats.duration(
    "heartbeat.interval",
    timedelta(seconds=5),
    "How often a TaskExecutor sends its heartbeat. Flink uses 10s; half that finds a lost TaskExecutor sooner for "
    "a small HTTP call per TaskExecutor.",
    minimum=timedelta(milliseconds=50),
)
HEARTBEAT_TIMEOUT: Final = _heartbeats.duration(
    "heartbeat.timeout",
    timedelta(seconds=25),
    "A TaskExecutor silent this long is lost: its slots are removed and its tasks fail over. Flink uses 50s; five "
    "missed heartbeats here.",
    minimum=timedelta(milliseconds=100),
)
HEARTBEAT_RPC_FAILURE_THRESHOLD: Final = _heartbeats.integer(
    "heartbeat.rpc-failure-threshold",
    2,
    "Consecutive failed calls (deployments, cancellations) after which a TaskExecutor counts as unreachable once "
    "it has also sent no heartbeat for half `heartbeat.timeout`, at least two `heartbeat.interval`s (-1: never), "
    "as Flink's key. A TaskExecutor that heartbeats is alive: calls that fail then are the broker's trouble, and "
    "are retried.",
    minimum=-1,
)
HEARTBEAT_MISSING_EXECUTION_THRESHOLD: Final = _heartbeats.integer(
    "heartbeat.missing-execution-threshold",
    3,
    "Consecutive heartbeats of a TaskExecutor that may omit an execution its JobMaster deployed there before the "
    "execution fails over (a deployment lost on the way, a final state report lost). A deployment the TaskExecutor "
    "never listed gets `heartbeat.timeout` to arrive first.",
    minimum=1,
)
SLOT_REQUEST_TIMEOUT: Final = _heartbeats.duration(
    "slot.request.timeout",
    timedelta(minutes=5),
    "A slot request nobody can fulfil fails after this long (Flink's default).",
    minimum=timedelta(milliseconds=10),
)
RESOURCEMANAGER_TASKMANAGER_TIMEOUT: Final = _heartbeats.duration(
    "resourcemanager.taskmanager-timeout",
    timedelta(seconds=30),
    "A TaskExecutor whose slots have all been free this long is reported idle (Flink's default).",
    minimum=timedelta(0),
)

_taskexecutors = Section("TaskExecutors")

TASKEXECUTOR_SLOTS: Final = _taskexecutors.integer(
    "taskexecutor.slots",
    _cpu_count(),
    "Slots per TaskExecutor: tasks it runs at once.",
    minimum=1,
    default_doc="number of CPU cores",
)
TASKEXECUTOR_ID: Final = _taskexecutors.string(
    "taskexecutor.id", "", "Identity of a TaskExecutor; empty means `<hostname>-<random>`."
)
TASKEXECUTOR_POOL: Final = _taskexecutors.string(
    "taskexecutor.pool",
    "default",
    "The pool this TaskExecutor belongs to: it runs subtasks only of jobs whose JobGraph names this pool "
    "(`pool`; a job that names none runs in `default`), so teams that do not trust each other get TaskExecutors "
    "of their own (docs/operations.md, Trust model). 1-64 letters, digits, `_`, `.` or `-`.",
)
TASKEXECUTOR_METRICS_PORT: Final = _taskexecutors.integer(
    "taskexecutor.metrics.port",
    0,
    "Port of a TaskExecutor's own Prometheus metrics (`/metrics`: slots, busy slots, attempts, slot processes "
    "lost, its Spark Connect server's health and restarts); 0 serves none.",
    minimum=0,
)
TASKEXECUTOR_METRICS_BIND_ADDRESS: Final = _taskexecutors.string(
    "taskexecutor.metrics.bind-address", "127.0.0.1", "Address the TaskExecutor's metrics port binds to."
)
TASKEXECUTOR_REGISTRATION_MAX_BACKOFF: Final = _taskexecutors.duration(
    "taskexecutor.registration.max-backoff",
    timedelta(seconds=10),
    "Longest pause between attempts to register with the ResourceManager.",
    minimum=timedelta(milliseconds=10),
)
TASKEXECUTOR_CANCELLATION_TIMEOUT: Final = _taskexecutors.duration(
    "taskexecutor.cancellation.timeout",
    timedelta(seconds=30),
    "How long a cancelled task may run on after its Spark operations were interrupted before its slot process is "
    "killed and replaced (Flink's `task.cancellation.timeout`).",
    minimum=timedelta(milliseconds=100),
)
TASKEXECUTOR_ATTEMPT_LOG_MAX_SIZE: Final = _taskexecutors.size(
    "taskexecutor.attempt-log.max-size",
    4 * MiB,
    "Cap of one attempt's log file (what its task printed or logged, with the Spark driver's lines about it). The "
    "first three quarters are written as they come; of what follows only the last quarter is kept, written when "
    "the attempt ends after a line saying how much was dropped, so a failing task's last lines stay. 4 MiB is "
    "some 50,000 lines, and its tail is one read of the log route (1 MiB); a job of 1,000 subtasks then holds at "
    "most 4 GiB of logs per attempt round beside its results.",
    minimum=4 * KiB,
)
TASKEXECUTOR_ARTIFACT_CACHE_MAX_SIZE: Final = _taskexecutors.size(
    "taskexecutor.artifact-cache.max-size",
    2 * GiB,
    "Most a TaskExecutor's copies of user-code artifacts take on its disk (`<storage.dir>/te-cache/<id>/`); beyond "
    "it the least recently used ones are removed, never one a running task uses, and fetched again from the master "
    "when a task needs them.",
    minimum=1,
)
TASKEXECUTOR_SLOT_PROCESS_SPARES: Final = _taskexecutors.integer(
    "taskexecutor.slot-process.spares",
    1,
    "Slot processes a TaskExecutor keeps started and warm for the next slot that gets a task of other code (each "
    "about 145 MB).",
    minimum=0,
)
TASKEXECUTOR_SLOT_PROCESS_ENVIRONMENT_SPARES: Final = _taskexecutors.integer(
    "taskexecutor.slot-process.environment-spares",
    2,
    "Slot processes a TaskExecutor keeps started and warm in jobs' Python environments, one per environment, for "
    "the ones its tasks used last: a task of a job whose environment has a spare does not wait for a process to "
    "start in it. 0 starts a process for each slot that gets such a task.",
    minimum=0,
)

_python = Section("Jobs' Python environments")

PYTHON_INDEX_URL: Final = _python.string(
    "python.index-url",
    "",
    "Package index a TaskExecutor installs a job's `environment.dependencies` from (uv's `--index-url`); empty "
    "means uv's default, PyPI. Jobs name requirements only: where packages come from is the TaskExecutor's choice.",
)
PYTHON_EXTRA_INDEX_URL: Final = _python.string(
    "python.extra-index-url",
    "",
    "More package indexes, separated by spaces (uv's `--extra-index-url`, one per URL).",
)
PYTHON_FIND_LINKS: Final = _python.string(
    "python.find-links",
    "",
    "Directories or URLs of wheels to install from, separated by spaces (uv's `--find-links`): with "
    "`python.no-index`, an offline mirror.",
)
PYTHON_NO_INDEX: Final = _python.boolean(
    "python.no-index",
    False,
    "Install from `python.find-links` only, asking no package index (uv's `--no-index`).",
)
PYTHON_ENVIRONMENTS_DIR: Final = _python.string(
    "python.environments.dir",
    "",
    "Where a TaskExecutor keeps the jobs' Python environments, one virtual environment per distinct set of "
    "requirements; empty means `<storage.dir>/python-environments`. TaskExecutors of one host may share it (file "
    "locks keep a build single and an environment in use in place); keep it on a local disk.",
)
PYTHON_ENVIRONMENTS_MAX_SIZE: Final = _python.size(
    "python.environments.max-size",
    10 * GiB,
    "Most the jobs' Python environments take in `python.environments.dir` (uv's own download cache, "
    "`uv-cache/` there, not counted); beyond it the least recently used environments no running task uses are "
    "removed, and built again when a job needs them.",
    minimum=1,
)

_broker = Section("Celery broker")

BROKER_URL: Final = _broker.string(
    "broker.url",
    "redis://127.0.0.1:6379/0",
    "Celery broker carrying task deployments and remote-control calls: Redis in production, `filesystem://` in "
    "standalone mode. A `redis://` URL without a password takes the `SPARKDISPATCH_BROKER_PASSWORD` environment "
    "variable's, so the password need be in no file or command line.",
)
BROKER_ALLOW_INSECURE: Final = _broker.boolean(
    "broker.allow-insecure",
    False,
    "Let a master with tokens (`rest.auth.*`, `cluster.secret`) use a Redis broker without a password. Whoever can "
    "write to it can then hand TaskExecutors deployments of their own: only where nobody else reaches Redis.",
)
BROKER_POLLING_INTERVAL: Final = _broker.duration(
    "broker.polling-interval",
    timedelta(milliseconds=20),
    "Polling interval of polling transports (`filesystem://`). For a second after one of its tasks ended, when its "
    "slot's next deployment is due, a TaskExecutor polls every 1 ms.",
    minimum=timedelta(milliseconds=1),
)
BROKER_TIMEOUT: Final = _broker.duration(
    "broker.timeout",
    timedelta(seconds=5),
    "Timeout of each call to the broker (connecting, sending a deployment or a remote-control call, each socket "
    "read and write), for the master and the TaskExecutors. A deployment that cannot be sent is retried with "
    "backoff.",
    minimum=timedelta(milliseconds=100),
)

_spark = Section("Spark")

SPARK_MASTER: Final = _spark.string(
    "spark.master",
    "local[*]",
    "Spark master URL of every TaskExecutor's Spark Connect server (the Spark driver of its slots): `local[*]`, "
    "`spark://host:7077`, `yarn`, `k8s://...`.",
)
TASKEXECUTOR_CONNECT_PORT: Final = _spark.integer(
    "taskexecutor.connect.port",
    0,
    "Port of a TaskExecutor's Spark Connect server, bound on 127.0.0.1 only. 0 picks a free port, so several "
    "TaskExecutors can share a host.",
    minimum=0,
)
TASKEXECUTOR_CONNECT_START_TIMEOUT: Final = _spark.duration(
    "taskexecutor.connect.start-timeout",
    timedelta(minutes=2),
    "How long a TaskExecutor waits for its Spark Connect server to start and warm up before it gives up.",
    minimum=timedelta(seconds=1),
)
TASKEXECUTOR_CONNECT_DRIVER_MEMORY: Final = _spark.size(
    "taskexecutor.connect.driver-memory",
    GiB,
    "Heap of a TaskExecutor's Spark Connect server (the Spark driver of all its slots); a `spark.driver.memory` "
    "property overrides it.",
    minimum=128 * MiB,
)
TASKEXECUTOR_CONNECT_RECYCLE_SESSIONS: Final = _spark.integer(
    "taskexecutor.connect.recycle.sessions",
    200,
    "A TaskExecutor replaces its Spark Connect server by a new one once its slot processes made this many job "
    "sessions on it (each job makes one per slot process it uses): Spark keeps part of every session that ran a "
    "Python UDF until its server stops. The successor starts before the old server stops, which ends once its "
    "running tasks ended; no task fails for it. 0: never for this reason.",
    minimum=0,
)
TASKEXECUTOR_CONNECT_RECYCLE_THREAD_GROWTH: Final = _spark.integer(
    "taskexecutor.connect.recycle.thread-growth",
    1000,
    "The Spark Connect server is also replaced once its JVM has this many threads more than right after its "
    "start. 0: never for this reason.",
    minimum=0,
)
TASKEXECUTOR_CONNECT_RECYCLE_OPEN_FILE_GROWTH: Final = _spark.integer(
    "taskexecutor.connect.recycle.open-file-growth",
    2000,
    "The Spark Connect server is also replaced once its JVM has this many open files (descriptors) more than right "
    "after its start. 0: never for this reason.",
    minimum=0,
)

_restart = Section("Restart strategy")

RESTART_TYPE: Final[ConfigOption[RestartStrategyType]] = _restart.choice(
    "restart-strategy.type",
    get_args(RestartStrategyType),
    "fixed-delay",
    "Restart strategy of jobs that name none. Flink's batch default is `none`; ours restarts, so a lost "
    "TaskExecutor does not fail a job.",
)
RESTART_FIXED_DELAY_ATTEMPTS: Final = _restart.integer(
    "restart-strategy.fixed-delay.attempts", 3, "Restarts before the job fails.", minimum=0
)
RESTART_FIXED_DELAY_DELAY: Final = _restart.duration(
    "restart-strategy.fixed-delay.delay", timedelta(seconds=1), "Pause before each restart.", minimum=timedelta(0)
)
RESTART_EXPONENTIAL_DELAY_INITIAL_BACKOFF: Final = _restart.duration(
    "restart-strategy.exponential-delay.initial-backoff", timedelta(seconds=1), "First pause.", minimum=timedelta(0)
)
RESTART_EXPONENTIAL_DELAY_MAX_BACKOFF: Final = _restart.duration(
    "restart-strategy.exponential-delay.max-backoff", timedelta(minutes=5), "Longest pause.", minimum=timedelta(0)
)
RESTART_EXPONENTIAL_DELAY_BACKOFF_MULTIPLIER: Final = _restart.number(
    "restart-strategy.exponential-delay.backoff-multiplier", 2.0, "Growth of the pause.", minimum=1.0
)
RESTART_EXPONENTIAL_DELAY_RESET_BACKOFF_THRESHOLD: Final = _restart.duration(
    "restart-strategy.exponential-delay.reset-backoff-threshold",
    timedelta(hours=1),
    "A job running this long without failure starts again from the initial backoff.",
    minimum=timedelta(0),
)
RESTART_EXPONENTIAL_DELAY_JITTER_FACTOR: Final = _restart.number(
    "restart-strategy.exponential-delay.jitter-factor",
    0.1,
    "Random share added to or taken from each pause.",
    minimum=0.0,
)
RESTART_EXPONENTIAL_DELAY_ATTEMPTS: Final = _restart.integer(
    "restart-strategy.exponential-delay.attempts", 10, "Restarts before the job fails.", minimum=0
)
RESTART_FAILURE_RATE_MAX_FAILURES_PER_INTERVAL: Final = _restart.integer(
    "restart-strategy.failure-rate.max-failures-per-interval", 1, "Failures allowed per interval.", minimum=1
)
RESTART_FAILURE_RATE_FAILURE_RATE_INTERVAL: Final = _restart.duration(
    "restart-strategy.failure-rate.failure-rate-interval",
    timedelta(minutes=1),
    "The interval.",
    minimum=timedelta(milliseconds=1),
)
RESTART_FAILURE_RATE_DELAY: Final = _restart.duration(
    "restart-strategy.failure-rate.delay", timedelta(seconds=1), "Pause before each restart.", minimum=timedelta(0)
)

_cleanup = Section("Cleanup of finished jobs")

CLEANUP_INITIAL_BACKOFF: Final = _cleanup.duration(
    "cleanup-strategy.initial-backoff",
    timedelta(seconds=1),
    "First pause before a failed cleanup of a finished job is retried (retries never end; FLINK-26652).",
    minimum=timedelta(milliseconds=1),
)
CLEANUP_MAX_BACKOFF: Final = _cleanup.duration(
    "cleanup-strategy.max-backoff",
    timedelta(minutes=1),
    "Longest pause between cleanup retries.",
    minimum=timedelta(milliseconds=1),
)

SPARK_PROPERTIES: Final[KeyPrefix] = _spark.prefix(
    "spark.",
    "Any other `spark.` key is a Spark property of the TaskExecutors' Spark Connect servers, e.g. "
    "`spark.executor.memory: 2g`, `spark.sql.shuffle.partitions: 8`. A job sets its own runtime settings in its "
    "JobGraph's `config`.",
)

SECTIONS: Final[tuple[Section, ...]] = (
    _logging,
    _rest,
    _jobs,
    _ha,
    _storage,
    _heartbeats,
    _taskexecutors,
    _python,
    _broker,
    _spark,
    _restart,
    _cleanup,
)
OPTIONS: Final[tuple[AnyOption, ...]] = tuple(option for section in SECTIONS for option in section.options)
OPTIONS_BY_KEY: Final[Mapping[str, AnyOption]] = index_by_key(OPTIONS)
