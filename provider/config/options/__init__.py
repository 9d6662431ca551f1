"""Every configuration key, declared once: its type, default, unit and description.

Components read these options (`config.get(HEARTBEAT_INTERVAL)` is a float of seconds), never
keys by string; docs/configuration.md is generated from the sections in `SECTIONS`' order, each
section's options in the order they are declared (`sparkdispatch config-docs >
docs/configuration.md`). A constant is named after its key: upper case, `_` for `.` and `-`, with
`high-availability.` as `HA_`, `restart-strategy.` as `RESTART_` and `cleanup-strategy.` as
`CLEANUP_`.

The options stand in one module per section of the docs (`rest`, `high_availability`,
`taskexecutor`, `python`, ...), each with its `SECTION`; this package re-exports every one, so
`from sparkdispatch.config.options import REST_PORT` is the way to name an option.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from sparkdispatch.config.option import AnyOption, Section, index_by_key
from sparkdispatch.config.options import logs as _logs
from sparkdispatch.config.options import rest as _rest
from sparkdispatch.config.options import jobs as _jobs
from sparkdispatch.config.options import high_availability as _high_availability
from sparkdispatch.config.options import storage as _storage
from sparkdispatch.config.options import heartbeats as _heartbeats
from sparkdispatch.config.options import taskexecutor as _taskexecutor
from sparkdispatch.config.options import python as _python
from sparkdispatch.config.options import broker as _broker
from sparkdispatch.config.options import spark as _spark
from sparkdispatch.config.options import restart as _restart
from sparkdispatch.config.options import cleanup as _cleanup
from sparkdispatch.config.options.logs import (
    LogFormat,
    LOG_FORMAT,
)
from sparkdispatch.config.options.rest import (
    REST_ADDRESS,
    REST_BIND_ADDRESS,
    REST_PORT,
    REST_MAX_BODY_SIZE,
    REST_AUTH_TOKEN,
    REST_AUTH_TOKEN_FILE,
    REST_AUTH_TOKENS_FILE,
    CLUSTER_SECRET,
    CLUSTER_SECRET_FILE,
    REST_AUTH_ALLOW_UNAUTHENTICATED,
    REST_SSL_ENABLED,
    REST_SSL_CERTIFICATE,
    REST_SSL_KEY,
    REST_SSL_CLIENT_CA,
    REST_SSL_CA_FILE,
    REST_SSL_CLIENT_CERTIFICATE,
    REST_SSL_CLIENT_KEY,
    REST_EXECUTION_RESULT_LONG_POLL,
    REST_ALLOWED_HOSTS,
    REST_ALLOWED_ORIGINS,
    REST_HEADER_TIMEOUT,
    REST_BODY_TIMEOUT,
    REST_IDLE_TIMEOUT,
    REST_LOGIN_MAX_FAILURES,
    REST_LOGIN_FAILURE_WINDOW,
    REST_LIST_PAGE_SIZE,
)
from sparkdispatch.config.options.jobs import (
    JOBGRAPH_MAX_SUBTASKS,
)
from sparkdispatch.config.options.high_availability import (
    HaMode,
    HA_MODE,
    HA_CLUSTER_ID,
    HA_ZOOKEEPER_QUORUM,
    HA_ZOOKEEPER_PATH_ROOT,
    HA_ZOOKEEPER_SESSION_TIMEOUT,
    HA_ZOOKEEPER_CONNECTION_TIMEOUT,
    HA_ZOOKEEPER_TOLERATE_SUSPENDED_CONNECTIONS,
    HA_ZOOKEEPER_AUTH,
    HA_ZOOKEEPER_ALLOW_INSECURE,
    HA_ZOOKEEPER_INLINE_LIMIT,
)
from sparkdispatch.config.options.storage import (
    ResultsRetention,
    STORAGE_DIR,
    STORAGE_RESULTS_DIR,
    JOB_RESULT_STORE_DELETE_ON_COMMIT,
    RESULTS_RETENTION,
    JOBSTORE_MAX_IN_MEMORY,
    JOBSTORE_EXPIRATION_TIME,
    JOBSTORE_MAX_CAPACITY,
    BLOB_MAX_SIZE,
    BLOB_RETENTION,
    BLOB_CLEANUP_INTERVAL,
)
from sparkdispatch.config.options.heartbeats import (
    HEARTBEAT_INTERVAL,
    HEARTBEAT_TIMEOUT,
    HEARTBEAT_RPC_FAILURE_THRESHOLD,
    HEARTBEAT_MISSING_EXECUTION_THRESHOLD,
    SLOT_REQUEST_TIMEOUT,
    RESOURCEMANAGER_TASKMANAGER_TIMEOUT,
)
from sparkdispatch.config.options.taskexecutor import (
    TASKEXECUTOR_SLOTS,
    TASKEXECUTOR_ID,
    TASKEXECUTOR_POOL,
    TASKEXECUTOR_METRICS_PORT,
    TASKEXECUTOR_METRICS_BIND_ADDRESS,
    TASKEXECUTOR_REGISTRATION_MAX_BACKOFF,
    TASKEXECUTOR_CANCELLATION_TIMEOUT,
    TASKEXECUTOR_ATTEMPT_LOG_MAX_SIZE,
    TASKEXECUTOR_ARTIFACT_CACHE_MAX_SIZE,
    TASKEXECUTOR_SLOT_PROCESS_SPARES,
    TASKEXECUTOR_SLOT_PROCESS_ENVIRONMENT_SPARES,
    TASKEXECUTOR_SLOT_PROCESS_PYTHON_WORKERS,
    TASKEXECUTOR_SLOT_PROCESS_TEMPLATE,
    TASKEXECUTOR_PYTHON_WORKERS_TEMPLATE,
)
from sparkdispatch.config.options.python import (
    PYTHON_INDEX_URL,
    PYTHON_EXTRA_INDEX_URL,
    PYTHON_FIND_LINKS,
    PYTHON_NO_INDEX,
    PYTHON_ENVIRONMENTS_DIR,
    PYTHON_ENVIRONMENTS_MAX_SIZE,
)
from sparkdispatch.config.options.broker import (
    BROKER_URL,
    BROKER_ALLOW_INSECURE,
    BROKER_POLLING_INTERVAL,
    BROKER_TIMEOUT,
)
from sparkdispatch.config.options.spark import (
    SPARK_MASTER,
    TASKEXECUTOR_CONNECT_PORT,
    TASKEXECUTOR_CONNECT_START_TIMEOUT,
    TASKEXECUTOR_CONNECT_DRIVER_MEMORY,
    TASKEXECUTOR_CONNECT_RECYCLE_SESSIONS,
    TASKEXECUTOR_CONNECT_RECYCLE_THREAD_GROWTH,
    TASKEXECUTOR_CONNECT_RECYCLE_OPEN_FILE_GROWTH,
    SPARK_PROPERTIES,
)
from sparkdispatch.config.options.restart import (
    RestartStrategyType,
    RESTART_TYPE,
    RESTART_FIXED_DELAY_ATTEMPTS,
    RESTART_FIXED_DELAY_DELAY,
    RESTART_EXPONENTIAL_DELAY_INITIAL_BACKOFF,
    RESTART_EXPONENTIAL_DELAY_MAX_BACKOFF,
    RESTART_EXPONENTIAL_DELAY_BACKOFF_MULTIPLIER,
    RESTART_EXPONENTIAL_DELAY_RESET_BACKOFF_THRESHOLD,
    RESTART_EXPONENTIAL_DELAY_JITTER_FACTOR,
    RESTART_EXPONENTIAL_DELAY_ATTEMPTS,
    RESTART_FAILURE_RATE_MAX_FAILURES_PER_INTERVAL,
    RESTART_FAILURE_RATE_FAILURE_RATE_INTERVAL,
    RESTART_FAILURE_RATE_DELAY,
)
from sparkdispatch.config.options.cleanup import (
    CLEANUP_INITIAL_BACKOFF,
    CLEANUP_MAX_BACKOFF,
)

SECTIONS: Final[tuple[Section, ...]] = (
    _logs.SECTION,
    _rest.SECTION,
    _jobs.SECTION,
    _high_availability.SECTION,
    _storage.SECTION,
    _heartbeats.SECTION,
    _taskexecutor.SECTION,
    _python.SECTION,
    _broker.SECTION,
    _spark.SECTION,
    _restart.SECTION,
    _cleanup.SECTION,
)
OPTIONS: Final[tuple[AnyOption, ...]] = tuple(option for section in SECTIONS for option in section.options)
OPTIONS_BY_KEY: Final[Mapping[str, AnyOption]] = index_by_key(OPTIONS)

__all__ = [
    "BLOB_CLEANUP_INTERVAL",
    "BLOB_MAX_SIZE",
    "BLOB_RETENTION",
    "BROKER_ALLOW_INSECURE",
    "BROKER_POLLING_INTERVAL",
    "BROKER_TIMEOUT",
    "BROKER_URL",
    "CLEANUP_INITIAL_BACKOFF",
    "CLEANUP_MAX_BACKOFF",
    "CLUSTER_SECRET",
    "CLUSTER_SECRET_FILE",
    "HA_CLUSTER_ID",
    "HA_MODE",
    "HA_ZOOKEEPER_ALLOW_INSECURE",
    "HA_ZOOKEEPER_AUTH",
    "HA_ZOOKEEPER_CONNECTION_TIMEOUT",
    "HA_ZOOKEEPER_INLINE_LIMIT",
    "HA_ZOOKEEPER_PATH_ROOT",
    "HA_ZOOKEEPER_QUORUM",
    "HA_ZOOKEEPER_SESSION_TIMEOUT",
    "HA_ZOOKEEPER_TOLERATE_SUSPENDED_CONNECTIONS",
    "HEARTBEAT_INTERVAL",
    "HEARTBEAT_MISSING_EXECUTION_THRESHOLD",
    "HEARTBEAT_RPC_FAILURE_THRESHOLD",
    "HEARTBEAT_TIMEOUT",
    "HaMode",
    "JOBGRAPH_MAX_SUBTASKS",
    "JOBSTORE_EXPIRATION_TIME",
    "JOBSTORE_MAX_CAPACITY",
    "JOBSTORE_MAX_IN_MEMORY",
    "JOB_RESULT_STORE_DELETE_ON_COMMIT",
    "LOG_FORMAT",
    "LogFormat",
    "OPTIONS",
    "OPTIONS_BY_KEY",
    "PYTHON_ENVIRONMENTS_DIR",
    "PYTHON_ENVIRONMENTS_MAX_SIZE",
    "PYTHON_EXTRA_INDEX_URL",
    "PYTHON_FIND_LINKS",
    "PYTHON_INDEX_URL",
    "PYTHON_NO_INDEX",
    "RESOURCEMANAGER_TASKMANAGER_TIMEOUT",
    "RESTART_EXPONENTIAL_DELAY_ATTEMPTS",
    "RESTART_EXPONENTIAL_DELAY_BACKOFF_MULTIPLIER",
    "RESTART_EXPONENTIAL_DELAY_INITIAL_BACKOFF",
    "RESTART_EXPONENTIAL_DELAY_JITTER_FACTOR",
    "RESTART_EXPONENTIAL_DELAY_MAX_BACKOFF",
    "RESTART_EXPONENTIAL_DELAY_RESET_BACKOFF_THRESHOLD",
    "RESTART_FAILURE_RATE_DELAY",
    "RESTART_FAILURE_RATE_FAILURE_RATE_INTERVAL",
    "RESTART_FAILURE_RATE_MAX_FAILURES_PER_INTERVAL",
    "RESTART_FIXED_DELAY_ATTEMPTS",
    "RESTART_FIXED_DELAY_DELAY",
    "RESTART_TYPE",
    "REST_ADDRESS",
    "REST_ALLOWED_HOSTS",
    "REST_ALLOWED_ORIGINS",
    "REST_AUTH_ALLOW_UNAUTHENTICATED",
    "REST_AUTH_TOKEN",
    "REST_AUTH_TOKENS_FILE",
    "REST_AUTH_TOKEN_FILE",
    "REST_BIND_ADDRESS",
    "REST_BODY_TIMEOUT",
    "REST_EXECUTION_RESULT_LONG_POLL",
    "REST_HEADER_TIMEOUT",
    "REST_IDLE_TIMEOUT",
    "REST_LIST_PAGE_SIZE",
    "REST_LOGIN_FAILURE_WINDOW",
    "REST_LOGIN_MAX_FAILURES",
    "REST_MAX_BODY_SIZE",
    "REST_PORT",
    "REST_SSL_CA_FILE",
    "REST_SSL_CERTIFICATE",
    "REST_SSL_CLIENT_CA",
    "REST_SSL_CLIENT_CERTIFICATE",
    "REST_SSL_CLIENT_KEY",
    "REST_SSL_ENABLED",
    "REST_SSL_KEY",
    "RESULTS_RETENTION",
    "RestartStrategyType",
    "ResultsRetention",
    "SECTIONS",
    "SLOT_REQUEST_TIMEOUT",
    "SPARK_MASTER",
    "SPARK_PROPERTIES",
    "STORAGE_DIR",
    "STORAGE_RESULTS_DIR",
    "TASKEXECUTOR_ARTIFACT_CACHE_MAX_SIZE",
    "TASKEXECUTOR_ATTEMPT_LOG_MAX_SIZE",
    "TASKEXECUTOR_CANCELLATION_TIMEOUT",
    "TASKEXECUTOR_CONNECT_DRIVER_MEMORY",
    "TASKEXECUTOR_CONNECT_PORT",
    "TASKEXECUTOR_CONNECT_RECYCLE_OPEN_FILE_GROWTH",
    "TASKEXECUTOR_CONNECT_RECYCLE_SESSIONS",
    "TASKEXECUTOR_CONNECT_RECYCLE_THREAD_GROWTH",
    "TASKEXECUTOR_CONNECT_START_TIMEOUT",
    "TASKEXECUTOR_ID",
    "TASKEXECUTOR_METRICS_BIND_ADDRESS",
    "TASKEXECUTOR_METRICS_PORT",
    "TASKEXECUTOR_POOL",
    "TASKEXECUTOR_REGISTRATION_MAX_BACKOFF",
    "TASKEXECUTOR_SLOTS",
    "TASKEXECUTOR_SLOT_PROCESS_ENVIRONMENT_SPARES",
    "TASKEXECUTOR_SLOT_PROCESS_SPARES",
    "TASKEXECUTOR_SLOT_PROCESS_PYTHON_WORKERS",
    "TASKEXECUTOR_SLOT_PROCESS_TEMPLATE",
    "TASKEXECUTOR_PYTHON_WORKERS_TEMPLATE",
]
