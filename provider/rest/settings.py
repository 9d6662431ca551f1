"""The REST endpoint's settings, read once from a `Configuration`: its address, limits, bearer token,
TLS, and what it lets browsers and slow clients do."""

from __future__ import annotations

import ipaddress
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from sparkdispatch.config import Configuration
from sparkdispatch.config.options import (
    BLOB_MAX_SIZE,
    REST_ADDRESS,
    REST_ALLOWED_HOSTS,
    REST_ALLOWED_ORIGINS,
    REST_AUTH_ALLOW_UNAUTHENTICATED,
    REST_AUTH_TOKENS_FILE,
    REST_BIND_ADDRESS,
    REST_BODY_TIMEOUT,
    REST_EXECUTION_RESULT_LONG_POLL,
    REST_HEADER_TIMEOUT,
    REST_IDLE_TIMEOUT,
    REST_LIST_PAGE_SIZE,
    REST_LOGIN_FAILURE_WINDOW,
    REST_LOGIN_MAX_FAILURES,
    REST_MAX_BODY_SIZE,
    REST_PORT,
)
from sparkdispatch.errors import ConfigurationError
from sparkdispatch.rest.access import Authenticator, TokensFile
from sparkdispatch.tls import ClientTls, ServerTls
from sparkdispatch.web_origin import WebOrigin

log = logging.getLogger(__name__)


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
            raise ConfigurationError(
                f"rest.allowed-hosts: {name!r} is not a host name; write names without a "
                "scheme or port, separated by commas (`*` allows any)"
            )
    return names


def allowed_origins(text: str) -> frozenset[WebOrigin]:
    """`rest.allowed-origins`: comma-separated `scheme://host[:port]`; `ConfigurationError` otherwise."""
    origins: set[WebOrigin] = set()
    for entry in (item.strip() for item in text.split(",")):
        if not entry:
            continue
        origin = WebOrigin.parse(entry)
        if origin is None:
            raise ConfigurationError(
                f"rest.allowed-origins: {entry!r} is not a web origin; write each as "
                "http(s)://host[:port], without a path, separated by commas"
            )
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
        return cls(
            header=config.get(REST_HEADER_TIMEOUT),
            body=config.get(REST_BODY_TIMEOUT),
            idle=config.get(REST_IDLE_TIMEOUT),
        )


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
    tokens_file: str = ""  # `rest.auth.tokens-file`: named user tokens with roles
    cluster_secret: str = field(default="", repr=False)  # the TaskExecutors' credential
    list_page_size: int = 1000  # the most entries of one page of GET /jobs or /taskmanagers

    @property
    def users_authenticate(self) -> bool:
        return bool(self.auth_token or self.tokens_file)

    def authenticator(self) -> Authenticator:
        """Who the master knows: `ConfigurationError` for a tokens file it cannot read."""
        tokens = TokensFile(Path(os.path.expanduser(self.tokens_file))) if self.tokens_file else None
        return Authenticator(legacy_token=self.auth_token, tokens_file=tokens, cluster_secret=self.cluster_secret)

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    def check_exposure(self) -> None:
        """`ConfigurationError` when the endpoint would serve a network without a token and that is not
        allowed; a warning when its token would cross a network in clear text."""
        if is_loopback(self.bind_address):
            return
        if self.users_authenticate and self.tls is None:
            log.warning(
                "the master serves %s:%d over plain HTTP: its token crosses the network in clear text; "
                "serve HTTPS (rest.ssl.enabled) where the network is not trusted",
                self.bind_address,
                self.port,
            )
        if self.users_authenticate or self.allow_unauthenticated:
            return
        raise ConfigurationError(
            f"the master would listen on {self.bind_address}:{self.port} without a token, so whoever reaches that "
            "port could run code on the TaskExecutors: set users' tokens (rest.auth.tokens-file) or a token "
            "(rest.auth.token-file, the "
            "SPARKDISPATCH_AUTH_TOKEN environment variable, or rest.auth.token), or bind to loopback "
            "(rest.bind-address: 127.0.0.1), or accept the risk with rest.auth.allow-unauthenticated: true"
        )

    @classmethod
    def from_config(cls, config: Configuration) -> RestSettings:
        address = config.get(REST_ADDRESS)
        return cls(
            address=address,
            bind_address=config.get(REST_BIND_ADDRESS) or address,
            port=config.get(REST_PORT),
            max_body_size=config.get(REST_MAX_BODY_SIZE),
            blob_max_size=config.get(BLOB_MAX_SIZE),
            auth_token=config.auth_token,
            execution_result_long_poll=config.get(REST_EXECUTION_RESULT_LONG_POLL),
            results_dir=config.results_dir,
            allow_unauthenticated=config.get(REST_AUTH_ALLOW_UNAUTHENTICATED),
            tls=ServerTls.from_config(config),
            client_tls=ClientTls.from_config(config),
            allowed_hosts=allowed_host_names(config.get(REST_ALLOWED_HOSTS)),
            allowed_origins=allowed_origins(config.get(REST_ALLOWED_ORIGINS)),
            timeouts=ConnectionTimeouts.from_config(config),
            login_limits=LoginLimits.from_config(config),
            tokens_file=config.get(REST_AUTH_TOKENS_FILE),
            cluster_secret=config.cluster_secret,
            list_page_size=config.get(REST_LIST_PAGE_SIZE),
        )
