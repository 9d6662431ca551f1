"""Who is calling and what they may do: named user tokens with roles, and the cluster's own credential.

- A user token carries a role: `viewer` reads, `submitter` also submits, cancels and repairs jobs
  and uploads artifacts, `admin` does everything a user may (today what a submitter may, and it
  sees the running executions' ids in `GET /taskmanagers`). Tokens come from
  `rest.auth.tokens-file` (`<name> <role> <token> [pools=<pool>,...]` a line), read again when the
  file changes, and `rest.auth.token`, an `admin` token named `rest-auth-token`. A token limited to
  pools submits, cancels and repairs only jobs of those TaskExecutor pools (the JobGraph's `pool`).
- The cluster secret (`cluster.secret`) is the TaskExecutors' and the masters' credential: it alone
  reaches the TaskExecutor routes, and besides them only artifact downloads and `GET /overview` (a
  standby's question to the leader). Without a cluster secret, `rest.auth.token` plays its part;
  a token of the tokens file never does.

`required_role(method, path)` says what a route needs; `Role.permits` orders the user roles.
"""

from __future__ import annotations

import hmac
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from sparkdispatch.dispatcher.gateway import PoolAccess
from sparkdispatch.errors import ConfigurationError
from sparkdispatch.model.job_graph import POOL_PATTERN, POOL_RULE

log = logging.getLogger(__name__)

#: How often a request may make the master look at the tokens file again.
TOKENS_FILE_CHECK_S = 1.0
LEGACY_TOKEN_NAME = "rest-auth-token"
CLUSTER_NAME = "cluster"
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_TASK_EXECUTOR_ROUTE = re.compile(r"(?:/v1)?(?:/taskexecutors(?:/.*)?|/jobs/[^/]+/executions/[^/]+/state)")
_ARTIFACT_DOWNLOAD = re.compile(r"(?:/v1)?/artifacts/[^/]+")
_CLUSTER_READS = re.compile(r"(?:/v1)?/overview")
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class Role(Enum):
    VIEWER = "viewer"
    SUBMITTER = "submitter"
    ADMIN = "admin"
    CLUSTER = "cluster"  # TaskExecutors and masters

    def permits(self, required: Role) -> bool:
        """Whether a caller of this role may do what `required` is needed for."""
        if self is Role.CLUSTER or required is Role.CLUSTER:
            return self is required
        return _USER_RANK[self] >= _USER_RANK[required]


_USER_RANK = {Role.VIEWER: 0, Role.SUBMITTER: 1, Role.ADMIN: 2}
USER_ROLES = (Role.VIEWER, Role.SUBMITTER, Role.ADMIN)


@dataclass(frozen=True)
class Principal:
    """A caller the master knows: the token's name, its role, and the pools it may act in (None: any)."""

    name: str
    role: Role
    pools: frozenset[str] | None = None

    def pool_access(self) -> PoolAccess:
        """Which jobs this caller may submit, cancel and repair: those of its pools (the Dispatcher checks)."""
        return PoolAccess(self.name, self.pools)


CLUSTER = Principal(CLUSTER_NAME, Role.CLUSTER)


def required_role(method: str, path: str) -> Role:
    """The least role a call needs; the cluster's calls need `Role.CLUSTER` (see `cluster_may_call`)."""
    if _TASK_EXECUTOR_ROUTE.fullmatch(path):
        return Role.CLUSTER
    return Role.VIEWER if method in _SAFE_METHODS else Role.SUBMITTER


def cluster_may_call(method: str, path: str) -> bool:
    """Whether the cluster secret reaches this call: its own routes, artifact downloads and `/overview`."""
    if _TASK_EXECUTOR_ROUTE.fullmatch(path):
        return True
    return method in ("GET", "HEAD") and bool(_ARTIFACT_DOWNLOAD.fullmatch(path) or _CLUSTER_READS.fullmatch(path))


@dataclass(frozen=True)
class NamedToken:
    name: str
    role: Role
    token: str
    pools: frozenset[str] | None = None  # None: every pool

    @property
    def principal(self) -> Principal:
        return Principal(self.name, self.role, self.pools)


def parse_tokens(text: str, source: str) -> tuple[NamedToken, ...]:
    """The tokens of a tokens file's text; `ConfigurationError` naming the line that is wrong."""
    tokens: list[NamedToken] = []
    names: set[str] = set()
    roles = ", ".join(role.value for role in USER_ROLES)
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        where = f"{source} line {number}"
        if len(words) not in (3, 4):
            raise ConfigurationError(
                f"{where}: write `<name> <role> <token>` or `<name> <role> <token> pools=<pool>,...` "
                f"({len(words)} words found)"
            )
        name, role_name, token = words[:3]
        if not _NAME.fullmatch(name):
            raise ConfigurationError(f"{where}: the name {name!r} is not 1-64 letters, digits, `_` or `-`")
        if name in names or name in (CLUSTER_NAME, LEGACY_TOKEN_NAME):
            raise ConfigurationError(f"{where}: the name {name!r} is taken")
        role = next((r for r in USER_ROLES if r.value == role_name), None)
        if role is None:
            raise ConfigurationError(f"{where}: the role {role_name!r} is none of {roles}")
        if len(token) < 16:
            raise ConfigurationError(f"{where}: the token of {name!r} is shorter than 16 characters")
        names.add(name)
        tokens.append(NamedToken(name, role, token, _pools(words[3], where) if len(words) == 4 else None))
    return tuple(tokens)


def _pools(word: str, where: str) -> frozenset[str]:
    key, _, value = word.partition("=")
    pools = value.split(",")
    if key != "pools" or not all(POOL_PATTERN.fullmatch(pool) for pool in pools):
        raise ConfigurationError(f"{where}: the fourth word must be `pools=<pool>,...`, each pool {POOL_RULE}")
    return frozenset(pools)


class TokensFile:
    """`rest.auth.tokens-file`, read again when its size or modification time changed (looked at
    no more than once a second). A file that can no longer be read, or is malformed, keeps no
    token: the master refuses them all, logs why, and takes the file again once it is fixed."""

    def __init__(self, path: Path, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._clock = clock
        self._checked = float("-inf")
        self._stamp: tuple[int, int] | None = None
        self._tokens: tuple[NamedToken, ...] = ()
        self._load(strict=True)

    def tokens(self) -> tuple[NamedToken, ...]:
        now = self._clock()
        if now - self._checked >= TOKENS_FILE_CHECK_S:
            self._checked = now
            self._load(strict=False)
        return self._tokens

    def _load(self, *, strict: bool) -> None:
        try:
            stat = os.stat(self.path)
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp == self._stamp:
                return
            tokens = parse_tokens(self.path.read_text(), str(self.path))
        except (OSError, ConfigurationError) as exc:
            message = (
                f"rest.auth.tokens-file {self.path}: {exc.strerror or exc}" if isinstance(exc, OSError) else str(exc)
            )
            if strict:
                raise ConfigurationError(message) from None
            if self._tokens or self._stamp is not None:
                log.error("%s; refusing every token of the file until it is fixed", message)
            self._tokens, self._stamp = (), None
            return
        if self._stamp is not None:
            log.info("rest.auth.tokens-file %s read again: %d token(s)", self.path, len(tokens))
        self._tokens, self._stamp = tokens, stamp


class Authenticator:
    """Finds the principal of a bearer token: the cluster secret, `rest.auth.token`, or a named token."""

    def __init__(
        self, *, legacy_token: str = "", tokens_file: TokensFile | None = None, cluster_secret: str = ""
    ) -> None:
        self._legacy = legacy_token
        self._file = tokens_file
        self._cluster = cluster_secret
        if cluster_secret and cluster_secret == legacy_token:
            raise ConfigurationError(
                "cluster.secret must differ from rest.auth.token: users would act as TaskExecutors"
            )

    @property
    def users_authenticate(self) -> bool:
        """Whether users need a token at all (else every user call is open, as on a loopback master)."""
        return bool(self._legacy or self._file is not None)

    @property
    def cluster_authenticates(self) -> bool:
        return bool(self._cluster or self._legacy)

    def principal(self, token: str) -> Principal | None:
        if not token:
            return None
        found: Principal | None = None
        # every candidate is compared, so the time taken does not tell which one was near
        if self._cluster and _same(token, self._cluster):
            found = CLUSTER
        if self._legacy and _same(token, self._legacy):
            found = found or Principal(LEGACY_TOKEN_NAME, Role.ADMIN)
        for named in self._file.tokens() if self._file is not None else ():
            if _same(token, named.token):
                found = found or named.principal
        return found

    def is_legacy_cluster_token(self, token: str) -> bool:
        """Whether `token` is `rest.auth.token` standing in for a cluster secret that is not set."""
        return not self._cluster and bool(self._legacy) and _same(token, self._legacy)

    def token_of(self, name: str) -> str | None:
        """The current token of the named user (`rest-auth-token` for `rest.auth.token`); None when it is gone."""
        user = self._user(name)
        return user.token if user is not None else None

    def principal_of(self, name: str) -> Principal | None:
        """The named user as a caller (role and pools); None when its token is gone."""
        user = self._user(name)
        return user.principal if user is not None else None

    def _user(self, name: str) -> NamedToken | None:
        if name == LEGACY_TOKEN_NAME and self._legacy:
            return NamedToken(LEGACY_TOKEN_NAME, Role.ADMIN, self._legacy)
        return next(
            (named for named in (self._file.tokens() if self._file is not None else ()) if named.name == name), None
        )


def _same(offered: str, expected: str) -> bool:
    return hmac.compare_digest(offered.encode(), expected.encode())
