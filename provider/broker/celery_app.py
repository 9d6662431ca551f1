"""The Celery app settings shared by TaskExecutors (workers) and the master (producer).

JSON only, never pickle. Deployments go to each TaskExecutor's own queue
(`sparkdispatch.te.<id>`); the master reaches one worker by the remote-control commands
`sparkdispatch_cancel` and `sparkdispatch_release_results`. Acknowledged early: a task whose
TaskExecutor dies is not redelivered anywhere, its JobMaster restarts it.

The broker is Redis in production and kombu's `filesystem://` transport in standalone mode,
its folders under `<storage.dir>/broker`. That transport keeps no TTL: a killed worker's pidbox
binding stays and every later broadcast leaves a message file for it, so
`remove_stale_pidbox_messages` deletes such files once they are old.

Every broker call ends within `broker.timeout`-bounded steps, so a hung Redis (SIGSTOP, a
half-open connection) cannot hold the master's threads: socket connect, read and write timeouts,
no publish retries inside kombu (the JobMaster retries deployments itself), and connections
(`BoundedConnection`) whose `ensure` gives up where kombu would retry remote-control calls forever.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from celery import Celery
from celery.app.amqp import AMQP
from kombu import Connection

from sparkdispatch.broker.filesystem_transport import TRANSPORT as ATOMIC_FILESYSTEM_TRANSPORT
from sparkdispatch.config import Configuration
from sparkdispatch.config.options import BROKER_POLLING_INTERVAL, BROKER_TIMEOUT

log = logging.getLogger(__name__)

APP_NAME = "sparkdispatch"
DEPLOY_TASK = "sparkdispatch.deploy_task"
CANCEL_COMMAND = "sparkdispatch_cancel"
RELEASE_RESULTS_COMMAND = "sparkdispatch_release_results"
QUEUE_PREFIX = "sparkdispatch.te."
PIDBOX_SUFFIX = ".celery.pidbox.msg"
#: Remote-control messages older than this are of no use to anyone (replies time out in seconds).
PIDBOX_MESSAGE_MAX_AGE_S = 60.0
#: The longest pause between a lost broker connection's reconnection attempts.
RECONNECT_MAX_INTERVAL_S = 1.0
#: How often the Redis transport checks its long-lived connections (kombu's `health_check_interval`).
REDIS_HEALTH_CHECK_S = 2


def queue_name(task_executor_id: str) -> str:
    """The Celery queue a TaskExecutor consumes its deployments from."""
    return QUEUE_PREFIX + task_executor_id


def broker_folders(config: Configuration) -> dict[str, Path]:
    """The `filesystem://` transport's folders under `<storage.dir>/broker`."""
    root = config.storage_dir / "broker"
    return {"queue": root / "queue", "processed": root / "processed", "control": root / "control"}


class BoundedConnection(Connection):
    """A kombu Connection whose `ensure` retries only as often as its caller says, never forever.

    kombu's remote-control publish (`Mailbox._publish`, used by `control.broadcast` and by a
    worker's replies) asks for retries without a limit: against a broker that is down or hung it
    would block its thread until the broker returns. Without a limit, one reconnection is tried.
    """

    def ensure(
        self, obj: Any, fun: Any, errback: Any = None, max_retries: int | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        return super().ensure(obj, fun, errback, 1 if max_retries is None else max_retries, *args, **kwargs)

    def ensure_connection(self, *args: Any, **kwargs: Any) -> BoundedConnection:
        """kombu's, retrying every `RECONNECT_MAX_INTERVAL_S` at most (kombu's default grows to 30 s): a
        worker's consumer is back within a second of its broker, not up to 30 s later, while its
        TaskExecutor, registered again over HTTP, is sent deployments."""
        kwargs.setdefault("interval_start", RECONNECT_MAX_INTERVAL_S / 4)
        kwargs.setdefault("interval_step", RECONNECT_MAX_INTERVAL_S / 4)
        kwargs.setdefault("interval_max", RECONNECT_MAX_INTERVAL_S)
        super().ensure_connection(*args, **kwargs)
        return self


class BoundedAMQP(AMQP):
    """Celery's AMQP helper with `BoundedConnection`s."""

    Connection = BoundedConnection


def configure_celery_app(app: Celery, config: Configuration) -> None:
    """Point `app` (created with `APP_NAME`, not used yet) at the configured broker with the settings
    both sides share."""
    url = config.broker_url
    timeout = config.get(BROKER_TIMEOUT)
    app.amqp_cls = f"{__name__}:BoundedAMQP"  # read when the app first connects
    app.conf.update(
        broker_url=url,
        accept_content=["json"],
        task_serializer="json",
        result_serializer="json",
        event_serializer="json",
        task_ignore_result=True,
        result_backend=None,
        worker_prefetch_multiplier=1,
        task_acks_late=False,
        task_create_missing_queues=True,
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=timeout,
        task_publish_retry=False,  # a deployment the broker does not take is the JobMaster's to retry
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        worker_send_task_events=False,
        broker_transport_options=_transport_options(config),
    )
    if url.startswith("filesystem://"):
        app.conf.broker_transport = ATOMIC_FILESYSTEM_TRANSPORT
        for folder in broker_folders(config).values():
            folder.mkdir(parents=True, exist_ok=True)


def _transport_options(config: Configuration) -> dict[str, Any]:
    url = config.broker_url
    if url.startswith("filesystem://"):
        folders = broker_folders(config)
        return {
            "data_folder_in": str(folders["queue"]),
            "data_folder_out": str(folders["queue"]),
            "processed_folder": str(folders["processed"]),
            "store_processed": False,
            "control_folder": str(folders["control"]),
            "polling_interval": config.get(BROKER_POLLING_INTERVAL),
        }
    if url.startswith(("redis://", "rediss://", "redis+socket://")):
        # Deployments are acknowledged early, so the visibility timeout only matters for
        # messages prefetched by a worker that died before starting them. Every socket operation
        # ends within `broker.timeout` (redis-py waits forever otherwise). A consumer's BRPOP
        # left without a reply (its packets were lost in a network partition, and TCP's
        # retransmissions have backed off to seconds apart) is given up a few seconds late, not 51.
        timeout = config.get(BROKER_TIMEOUT)
        return {
            "visibility_timeout": 3600,
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "socket_keepalive": True,
            "health_check_interval": REDIS_HEALTH_CHECK_S,
        }
    return {}


def remove_stale_pidbox_messages(
    config: Configuration, *, max_age_s: float = PIDBOX_MESSAGE_MAX_AGE_S, now: float | None = None
) -> int:
    """Delete old remote-control message files of the `filesystem://` broker; returns how many."""
    if not config.broker_url.startswith("filesystem://"):
        return 0
    folder = broker_folders(config)["queue"]
    limit = (time.time() if now is None else now) - max_age_s
    removed = 0
    try:
        names = [entry for entry in folder.iterdir() if entry.name.endswith(PIDBOX_SUFFIX)]
    except FileNotFoundError:
        return 0
    for path in names:
        try:
            if path.stat().st_mtime < limit:
                path.unlink()
                removed += 1
        except FileNotFoundError:
            continue  # consumed or removed meanwhile
    if removed:
        log.info("removed %d stale remote-control message files from %s", removed, folder)
    return removed
