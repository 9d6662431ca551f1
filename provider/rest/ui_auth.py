"""The web UI's browser sessions, with CSRF checks, and the login and logout pages.

When users need a token (`rest.auth.tokens-file` or `rest.auth.token`; gate.py checks every call),
a browser proves itself with the session cookie the login page gives it:

- `GET /ui/login` shows a form; `POST /ui/login` (field `token`, a user's token) sets
  `sparkdispatch_session` = `<expires>.<nonce>.<user>.<signature>` (HMAC-SHA256 under a key
  derived from that user's token; HttpOnly, SameSite=Strict, Secure over https), then sends the
  browser on to `next`, a path under `/ui/`. Every master with the same tokens accepts the
  cookie, so a failover keeps the browser logged in; changing or removing the user's token logs
  its browsers out. The session has the user's role; the pages name the user.
- A call the cookie authenticates that changes state (any method but GET, HEAD and OPTIONS)
  must also send `X-CSRF-Token`, the session's CSRF token, which each page carries (`<meta
  name="csrf-token">`); without it: 403 `CsrfRefused`.
- `GET /ui/logout` clears the cookie, revokes its session on this master (the same cookie sent
  again is no session), and shows the login page again. Revocations live in the master's memory
  until the session would have expired: another master, or this one restarted, still accepts a
  revoked cookie until then (changing the user's token revokes its sessions everywhere).
- `POST /ui/login` reads at most `LOGIN_MAX_BODY` bytes of a form (`application/x-www-form-urlencoded`);
  a client address that failed `rest.login.max-failures` times within `rest.login.failure-window` is
  refused with 429 `TooManyLoginAttempts` and `Retry-After`, its guess unheard (login_throttle.py).
"""

from __future__ import annotations

import hashlib
import hmac
import html
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from urllib.parse import parse_qs, quote

from aiohttp import web

from sparkdispatch.errors import CsrfRefused, TooManyLoginAttempts, UnsupportedMediaType
from sparkdispatch.rest.access import Authenticator, Principal, Role
from sparkdispatch.rest.inputs import read_body
from sparkdispatch.rest.login_throttle import LoginThrottle

SESSION_COOKIE = "sparkdispatch_session"
CSRF_HEADER = "X-CSRF-Token"
#: Where the middleware leaves the session's CSRF token for the page handlers (request[CSRF_KEY]).
CSRF_KEY = web.RequestKey("sparkdispatch_csrf", str)
SESSION_LIFETIME_S = 12 * 3600
LOGIN_PATH = "/ui/login"
LOGOUT_PATH = "/ui/logout"
#: The largest login form read: a token and a path back fit many times over.
LOGIN_MAX_BODY = 4096
FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_PUBLIC_PREFIXES = (LOGIN_PATH, "/ui/static/")


class Credentials(Enum):
    BEARER = "bearer"
    SESSION = "session"


@dataclass(frozen=True)
class Caller:
    """How a request proved itself and who made it; `csrf` is its session's CSRF token (empty for a
    bearer token)."""

    credentials: Credentials
    principal: Principal
    csrf: str = ""


class UiSessions:
    """Issues and checks the web UI's session cookies and their CSRF tokens.

    A cookie is `<expires>.<nonce>.<name>.<signature>`, signed under a key derived from the named
    user's token: every master with the same tokens accepts it, and removing or changing a token
    (in `rest.auth.tokens-file`) ends its sessions."""

    def __init__(
        self, users: Authenticator, *, lifetime_s: float = SESSION_LIFETIME_S, clock: Callable[[], float] = time.time
    ) -> None:
        self._users = users
        self._lifetime_s = lifetime_s
        self._clock = clock
        self._revoked: dict[str, int] = {}  # nonce of a logged-out session -> its expiry

    def user_of_token(self, offered: str) -> Principal | None:
        """The user whose token `offered` is; None for a wrong one and for the cluster secret."""
        principal = self._users.principal(offered)
        return principal if principal is not None and principal.role is not Role.CLUSTER else None

    def issue(self, user: Principal) -> str:
        """A new session cookie's value for `user`."""
        claim = f"{int(self._clock() + self._lifetime_s)}.{secrets.token_urlsafe(16)}.{user.name}"
        token = self._users.token_of(user.name)
        assert token is not None, f"{user.name} has no token"
        return f"{claim}.{_sign(token, 'session', claim)}"

    def csrf_of(self, cookie: str) -> str | None:
        """The CSRF token of a valid, unexpired, unrevoked session cookie; None for any other value."""
        session = self._session_of(cookie)
        return None if session is None else session.csrf

    def revoke(self, cookie: str) -> bool:
        """End the session of `cookie` on this master; whether it was a live session."""
        session = self._session_of(cookie)
        if session is None:
            return False
        now = self._clock()
        self._revoked = {nonce: expires for nonce, expires in self._revoked.items() if expires >= now}
        self._revoked[session.nonce] = session.expires
        return True

    def _session_of(self, cookie: str) -> _Session | None:
        """The session of a well-signed, unexpired, unrevoked cookie whose user still has its token."""
        claim, _, signature = cookie.rpartition(".")
        expires, _, rest = claim.partition(".")
        nonce, _, name = rest.partition(".")
        if not (expires.isascii() and expires.isdigit() and nonce and name) or nonce in self._revoked:
            return None
        token, principal = self._users.token_of(name), self._users.principal_of(name)
        if token is None or principal is None or not hmac.compare_digest(signature, _sign(token, "session", claim)):
            return None
        if int(expires) < self._clock():
            return None
        return _Session(int(expires), nonce, principal, _sign(token, "csrf", nonce))

    # -- the middleware's check --------------------------------------------------------------

    def check(self, request: web.Request) -> Caller | None:
        """The user who made `request` by its session cookie; None without one (public paths, and
        bearer tokens, are the middleware's). Raises `CsrfRefused`."""
        session = self._session_of(request.cookies.get(SESSION_COOKIE, ""))
        if session is None:
            return None
        if request.method not in _SAFE_METHODS and not hmac.compare_digest(
            request.headers.get(CSRF_HEADER, ""), session.csrf
        ):
            raise CsrfRefused(
                f"{request.method} {request.path} with the web UI's session needs its "
                f"{CSRF_HEADER} header (the page's csrf-token)"
            )
        return Caller(Credentials.SESSION, session.user, session.csrf)


@dataclass(frozen=True)
class _Session:
    expires: int
    nonce: str
    user: Principal
    csrf: str


def _sign(token: str, purpose: str, value: str) -> str:
    key = hmac.new(token.encode(), b"sparkdispatch web UI session", hashlib.sha256).digest()
    return hmac.new(key, f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()


def is_public(request: web.Request) -> bool:
    """The login page and the static files need no credentials."""
    return request.path.startswith(_PUBLIC_PREFIXES)


def to_login_page(request: web.Request) -> web.HTTPSeeOther | None:
    """Where a browser's page request without credentials goes: the login page; None for other calls."""
    if request.method == "GET" and (request.path == "/ui" or request.path.startswith("/ui/")):
        return web.HTTPSeeOther(f"{LOGIN_PATH}?next={quote(request.path_qs, safe='')}")
    return None


def add_login_routes(app: web.Application, sessions: UiSessions | None, throttle: LoginThrottle) -> None:
    """`/ui/login` and `/ui/logout`; without a token (`sessions` None) both lead to the UI."""

    async def login_page(request: web.Request) -> web.Response:
        if sessions is None:
            raise web.HTTPSeeOther("/ui/")
        return _login_response(_next_path(request.query.get("next")), error="")

    async def login(request: web.Request) -> web.Response:
        if sessions is None:
            raise web.HTTPSeeOther("/ui/")
        client = request.remote or "unknown"
        if (wait := throttle.retry_after_seconds(client)) is not None:
            raise TooManyLoginAttempts(
                f"{throttle.max_failures} failed logins from {client} within {throttle.window:g} s "
                f"(rest.login.max-failures, rest.login.failure-window): try again in {wait} s",
                retry_after=wait,
            )
        form = await _login_form(request)
        target = _next_path(form.get("next", ""))
        user = sessions.user_of_token(form.get("token", ""))
        if user is None:
            throttle.failed(client)
            return _login_response(target, error="That is no token of this master's users.", status=401)
        throttle.succeeded(client)
        response = web.HTTPSeeOther(target)
        response.set_cookie(
            SESSION_COOKIE,
            sessions.issue(user),
            max_age=SESSION_LIFETIME_S,
            path="/",
            httponly=True,
            samesite="Strict",
            secure=request.secure,
        )
        raise response

    async def logout(request: web.Request) -> web.Response:
        if sessions is not None:
            sessions.revoke(request.cookies.get(SESSION_COOKIE, ""))
        response = web.HTTPSeeOther(LOGIN_PATH)
        response.del_cookie(SESSION_COOKIE, path="/")
        raise response

    app.router.add_get(LOGIN_PATH, login_page)
    app.router.add_post(LOGIN_PATH, login)
    app.router.add_get(LOGOUT_PATH, logout)


async def _login_form(request: web.Request) -> dict[str, str]:
    """The login form's fields (the first value of each), from a body of at most `LOGIN_MAX_BODY` bytes."""
    if request.content_type != FORM_CONTENT_TYPE:
        raise UnsupportedMediaType(
            f"POST {LOGIN_PATH} takes the login page's form ({FORM_CONTENT_TYPE}), not {request.content_type}"
        )
    body = await read_body(request, limit=LOGIN_MAX_BODY, what="login form", limit_name="the login page")
    try:
        fields = parse_qs(body.decode(request.charset or "utf-8"), max_num_fields=10)
    except (UnicodeDecodeError, LookupError, ValueError):
        fields = {}
    return {name: values[0] for name, values in fields.items()}


def _next_path(asked: str | None) -> str:
    """Where to go after logging in: a path under /ui/ of this master, never another site."""
    return asked if asked and asked.startswith("/ui/") and not asked.startswith("//") else "/ui/"


def _login_response(target: str, *, error: str, status: int = 200) -> web.Response:
    message = f'<p class="error" role="alert">{html.escape(error)}</p>' if error else ""
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Log in · sparkdispatch</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/ui/static/ui.css">
</head>
<body data-page="login">
<header class="topbar"><span class="brand">sparkdispatch</span></header>
<main>
<section class="panel login">
<h1>Log in</h1>
<p>This master asks for a user's token (<code>rest.auth.tokens-file</code> or <code>rest.auth.token</code>).</p>
{message}
<form method="post" action="{LOGIN_PATH}">
<input type="hidden" name="next" value="{html.escape(target)}">
<label for="token">Token</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
<button type="submit">Log in</button>
</form>
</section>
</main>
</body>
</html>
"""
    return web.Response(text=page, status=status, content_type="text/html", charset="utf-8")
