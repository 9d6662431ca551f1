"""The check every call passes before its handler: who is calling, and may they.

Users prove themselves with a bearer token or the web UI's session (ui_auth.py); TaskExecutors and
masters with the cluster secret (access.py). A call with neither, where users need a token, is 401
(a browser's page request goes to the login page); a known caller asking for what its role may not
do is 403 `Forbidden`. Without user tokens, users' calls are open (a loopback master); without a
cluster secret or `rest.auth.token`, so are the TaskExecutor routes.
"""

from __future__ import annotations

from aiohttp import web

from sparkdispatch.errors import Forbidden, Unauthorized
from sparkdispatch.rest.access import CLUSTER, Authenticator, Role, cluster_may_call, required_role
from sparkdispatch.rest.ui_auth import Caller, Credentials, UiSessions, is_public, to_login_page

#: Where the gate leaves the caller for the handlers (request[CALLER_KEY]); absent on open calls.
CALLER_KEY = web.RequestKey("sparkdispatch_caller", Caller)


class Gate:
    """Checks a request's credentials against what its route needs."""

    def __init__(self, users: Authenticator, sessions: UiSessions | None) -> None:
        self._users = users
        self._sessions = sessions

    def check(self, request: web.Request) -> Caller | None:
        """The caller of `request`, None for an open or public call; raises `Unauthorized`,
        `Forbidden`, `CsrfRefused`, or sends a browser to the login page."""
        method, path = request.method, request.path
        needed = required_role(method, path)
        header = request.headers.get("Authorization", "")
        token = header[7:] if header.startswith("Bearer ") else ""
        if needed is Role.CLUSTER:
            return self._cluster_call(token, method, path)
        principal = self._users.principal(token)
        if principal is not None:
            if principal.role is Role.CLUSTER:
                if cluster_may_call(method, path):
                    return Caller(Credentials.BEARER, CLUSTER)
                raise Forbidden(
                    f"{method} {path}: the cluster secret is the TaskExecutors' credential and does not "
                    "reach users' calls; send a user's token"
                )
            return _authorized(Caller(Credentials.BEARER, principal), needed, method, path)
        if not self._users.users_authenticate:
            return None
        caller = self._sessions.check(request) if self._sessions is not None else None
        if caller is not None:
            return _authorized(caller, needed, method, path)
        if is_public(request):
            return None
        if (login := to_login_page(request)) is not None:
            raise login
        raise Unauthorized(
            "missing or wrong bearer token: send `Authorization: Bearer <token>` with a token of "
            "rest.auth.tokens-file or rest.auth.token"
        )

    def _cluster_call(self, token: str, method: str, path: str) -> Caller | None:
        if not self._users.cluster_authenticates:
            return None
        if self._users.principal(token) is CLUSTER or self._users.is_legacy_cluster_token(token):
            return Caller(Credentials.BEARER, CLUSTER)
        raise Unauthorized(
            f"{method} {path} is a TaskExecutor's call: it takes the cluster secret (cluster.secret, "
            "else rest.auth.token), never a user's token"
        )


def _authorized(caller: Caller, needed: Role, method: str, path: str) -> Caller:
    if not caller.principal.role.permits(needed):
        raise Forbidden(
            f"{method} {path} needs the role {needed.value}; {caller.principal.name} is a "
            f"{caller.principal.role.value} (rest.auth.tokens-file)"
        )
    return caller
