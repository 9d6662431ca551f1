"""The options of the configuration docs' section "REST endpoint" (see the package's docstring)."""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from sparkdispatch.config.option import Section
from sparkdispatch.config.units import KiB, MiB

SECTION: Final = Section("REST endpoint")

REST_ADDRESS: Final = SECTION.string(
    "rest.address",
    "127.0.0.1",
    "Address the master advertises for its REST endpoint and web UI; with `high-availability.mode: none` also "
    "where TaskExecutors and clients find the master.",
)
REST_BIND_ADDRESS: Final = SECTION.string(
    "rest.bind-address", "", "Address the REST endpoint binds to; empty means `rest.address`."
)
REST_PORT: Final = SECTION.integer(
    "rest.port", 8081, "Port of the REST endpoint and web UI (Flink's default). 0 picks a free port.", minimum=0
)
REST_MAX_BODY_SIZE: Final = SECTION.size(
    "rest.max-body-size", 10 * MiB, "Largest request body accepted; larger ones get 413.", minimum=KiB
)
REST_AUTH_TOKEN: Final = SECTION.string(
    "rest.auth.token",
    "",
    "When set, every REST call must send `Authorization: Bearer <token>`; TaskExecutors and clients send it. "
    "Empty: the content of `rest.auth.token-file`, else the `SPARKDISPATCH_AUTH_TOKEN` environment variable, else "
    "no authentication.",
)
REST_AUTH_TOKEN_FILE: Final = SECTION.string(
    "rest.auth.token-file",
    "",
    "A file holding the token (surrounding whitespace ignored), read when `rest.auth.token` is empty: the token "
    "then appears in no command line.",
)
REST_AUTH_TOKENS_FILE: Final = SECTION.string(
    "rest.auth.tokens-file",
    "",
    "A file of named user tokens, each with a role: a line `<name> <role> <token>` (`#` starts a comment), role "
    "`viewer` (reads), `submitter` (also submits, cancels and repairs jobs and uploads artifacts) or `admin` "
    "(everything a user may do). Read again when it changes, so a token is revoked by removing its line; "
    "`rest.auth.token`, when set too, is an `admin` token named `rest-auth-token`.",
)
CLUSTER_SECRET: Final = SECTION.string(
    "cluster.secret",
    "",
    "The TaskExecutors' credential: only a caller sending it as its bearer token reaches the TaskExecutor routes "
    "(registration, heartbeats, task states), and it reaches nothing else but artifact downloads. Empty: "
    "`cluster.secret-file`'s content, else the `SPARKDISPATCH_CLUSTER_SECRET` environment variable, else the "
    "TaskExecutors use `rest.auth.token` (users' `rest.auth.tokens-file` tokens never reach those routes). "
    "`sparkdispatch standalone` makes one of its own.",
)
CLUSTER_SECRET_FILE: Final = SECTION.string(
    "cluster.secret-file",
    "",
    "A file holding `cluster.secret` (surrounding whitespace ignored), read when `cluster.secret` is empty.",
)
REST_AUTH_ALLOW_UNAUTHENTICATED: Final = SECTION.boolean(
    "rest.auth.allow-unauthenticated",
    False,
    "Let a master without a token listen on an address other than loopback. Off, such a master refuses to start: "
    "whoever reaches its port could run code on the TaskExecutors.",
)
REST_SSL_ENABLED: Final = SECTION.boolean(
    "rest.ssl.enabled",
    False,
    "Serve the REST endpoint and web UI over HTTPS, and call it over HTTPS (the CLI, TaskExecutors, standbys): the "
    "master then needs `rest.ssl.certificate` and `rest.ssl.key`, its clients verify it against `rest.ssl.ca-file` "
    "or the system's trust store.",
)
REST_SSL_CERTIFICATE: Final = SECTION.string("rest.ssl.certificate", "", "The master's PEM certificate (chain) file.")
REST_SSL_KEY: Final = SECTION.string("rest.ssl.key", "", "The PEM private key file of `rest.ssl.certificate`.")
REST_SSL_CLIENT_CA: Final = SECTION.string(
    "rest.ssl.client-ca",
    "",
    "A PEM CA file: when set, the master accepts only clients presenting a certificate signed by it (mutual TLS).",
)
REST_SSL_CA_FILE: Final = SECTION.string(
    "rest.ssl.ca-file",
    "",
    "The PEM CA file clients verify the master's certificate against; empty: the system's trust store.",
)
REST_SSL_CLIENT_CERTIFICATE: Final = SECTION.string(
    "rest.ssl.client-certificate",
    "",
    "The PEM certificate a client presents when the master asks for one (`rest.ssl.client-ca`).",
)
REST_SSL_CLIENT_KEY: Final = SECTION.string(
    "rest.ssl.client-key", "", "The PEM private key file of `rest.ssl.client-certificate`."
)
REST_EXECUTION_RESULT_LONG_POLL: Final = SECTION.duration(
    "rest.execution-result.long-poll",
    timedelta(seconds=1),
    "How long `GET /jobs/{id}/execution-result` waits for a running job to end before it answers IN_PROGRESS.",
    minimum=timedelta(0),
)
REST_ALLOWED_HOSTS: Final = SECTION.string(
    "rest.allowed-hosts",
    "",
    "Host names, comma-separated, that calls may name in their `Host` header besides the master's own (loopback "
    "names, `rest.address`, `rest.bind-address`, this machine's host name and FQDN, and any IP address): the names "
    "a reverse proxy or a DNS alias gives the master. Another name is refused with 403 `HostRefused`, so a web "
    "page cannot reach the master through a name of its own that resolves to it (DNS rebinding). `*` accepts any "
    "name.",
)
REST_ALLOWED_ORIGINS: Final = SECTION.string(
    "rest.allowed-origins",
    "",
    "Web origins, comma-separated (`https://airflow.example.com:8443`), whose pages may change state on the master "
    "(POST, PUT, PATCH, DELETE) besides the master's own pages. A call from any other page is refused with 403 "
    "`OriginRefused`; calls that send no `Origin` (the CLI, TaskExecutors, Airflow, curl) are not concerned.",
)
REST_HEADER_TIMEOUT: Final = SECTION.duration(
    "rest.header-timeout",
    timedelta(seconds=20),
    "How long a client may take to send a request's line and headers, counted from its first byte (or from the "
    "opening of the connection); then the connection is closed.",
    minimum=timedelta(milliseconds=10),
)
REST_BODY_TIMEOUT: Final = SECTION.duration(
    "rest.body-timeout",
    timedelta(seconds=30),
    "How long the reading of a request body may wait for the next bytes; then it is refused with 408 "
    "`RequestTimeout` and the connection closed. A body that keeps coming is read whatever its length takes.",
    minimum=timedelta(milliseconds=10),
)
REST_IDLE_TIMEOUT: Final = SECTION.duration(
    "rest.idle-timeout",
    timedelta(minutes=1),
    "How long a kept-alive connection may stay without a request before the master closes it.",
    minimum=timedelta(milliseconds=10),
)
REST_LOGIN_MAX_FAILURES: Final = SECTION.integer(
    "rest.login.max-failures",
    5,
    "Failed logins at `/ui/login` one client address may make within `rest.login.failure-window`; the next are "
    "refused with 429 `TooManyLoginAttempts` and `Retry-After` until the oldest of them is that old.",
    minimum=1,
)
REST_LOGIN_FAILURE_WINDOW: Final = SECTION.duration(
    "rest.login.failure-window",
    timedelta(minutes=5),
    "The window of `rest.login.max-failures`.",
    minimum=timedelta(seconds=1),
)

REST_LIST_PAGE_SIZE: Final = SECTION.integer(
    "rest.list.page-size",
    1000,
    "The most entries one answer of `GET /jobs` or `GET /taskmanagers` holds, and their number when the "
    "request asks for none (`?limit=`); its `next` cursor (`?after=`) gives the following page.",
    minimum=1,
)
