"""The options of the configuration docs' section "Celery broker" (see the package's docstring)."""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from sparkdispatch.config.option import Section

SECTION: Final = Section("Celery broker")

BROKER_URL: Final = SECTION.string(
    "broker.url",
    "redis://127.0.0.1:6379/0",
    "Celery broker carrying task deployments and remote-control calls: Redis in production, `filesystem://` in "
    "standalone mode. A `redis://` URL without a password takes the `SPARKDISPATCH_BROKER_PASSWORD` environment "
    "variable's, so the password need be in no file or command line.",
)
BROKER_ALLOW_INSECURE: Final = SECTION.boolean(
    "broker.allow-insecure",
    False,
    "Let a master with tokens (`rest.auth.*`, `cluster.secret`) use a Redis broker without a password. Whoever can "
    "write to it can then hand TaskExecutors deployments of their own: only where nobody else reaches Redis.",
)
BROKER_POLLING_INTERVAL: Final = SECTION.duration(
    "broker.polling-interval",
    timedelta(milliseconds=20),
    "Polling interval of polling transports (`filesystem://`). On Linux the folder is watched too (inotify): a "
    "message wakes its consumer at once. Where it cannot be watched, a TaskExecutor polls every 1 ms for a second "
    "after one of its tasks ended, when its slot's next deployment is due.",
    minimum=timedelta(milliseconds=1),
)
BROKER_TIMEOUT: Final = SECTION.duration(
    "broker.timeout",
    timedelta(seconds=5),
    "Timeout of each call to the broker (connecting, sending a deployment or a remote-control call, each socket "
    "read and write), for the master and the TaskExecutors. A deployment that cannot be sent is retried with "
    "backoff.",
    minimum=timedelta(milliseconds=100),
)
