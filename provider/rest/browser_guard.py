"""What a web page in a browser may do with the master: read its own pages, nothing of another site.

A browser sends some cross-origin requests without asking first (a form's POST, a `fetch` of
`text/plain` in `no-cors` mode), and a page whose DNS name is made to resolve to the master's
address (DNS rebinding) is of the master's origin for the browser. So:

- every call's `Host` must name the master: a loopback name (`localhost`, `*.localhost`),
  `rest.address`, `rest.bind-address`, this machine's host name or FQDN, any IP address (a
  rebinding page needs a name of its own), or a name of `rest.allowed-hosts` (`*`: any);
  another is refused with `HostRefused`;
- a call that changes state (any method but GET, HEAD and OPTIONS) that carries an `Origin` must
  come from the master's own origin (same scheme, host and port as its `Host`) or one of
  `rest.allowed-origins`; without an `Origin`, a `Sec-Fetch-Site` of `cross-site` or `same-site`
  is refused too. Calls that send neither (the CLI, TaskExecutors, the Airflow hook, curl) pass;
  refused ones get `OriginRefused`, before anything reads the body;
- every answer carries a Content-Security-Policy the UI's own pages work under (scripts, styles
  and calls from the master only), `X-Frame-Options: DENY` and `X-Content-Type-Options: nosniff`.

The JSON endpoints' `Content-Type` check is the readers' (inputs.py): it needs the body's purpose.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from aiohttp import web

from sparkdispatch.errors import HostRefused, OriginRefused
from sparkdispatch.rest.settings import ANY_HOST, RestSettings
from sparkdispatch.web_origin import WebOrigin

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
#: Fetch metadata a browser sends for a request another site's page made (with no `Origin`).
_OTHER_SITES = frozenset({"cross-site", "same-site"})

SECURITY_HEADERS: Mapping[str, str] = MappingProxyType(
    {
        # the pages load their scripts, stylesheet and data from the master; the favicon is `data:,`
        "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'",
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        # no page of another origin embeds an answer as a script, image or stylesheet
        "Cross-Origin-Resource-Policy": "same-origin",
    }
)


def machine_names() -> frozenset[str]:
    """This machine's host name and FQDN (blocking: the FQDN may ask DNS)."""
    return frozenset(name.lower().rstrip(".") for name in (socket.gethostname(), socket.getfqdn()) if name)


@dataclass(frozen=True)
class BrowserGuard:
    """The master's names and the origins allowed to change state; `check` applies both to a request."""

    host_names: frozenset[str]  # ANY_HOST among them: any Host
    allowed_origins: frozenset[WebOrigin]

    @classmethod
    def for_master(cls, settings: RestSettings, own_names: Iterable[str]) -> BrowserGuard:
        """The guard of a master with `settings`, on a machine called `own_names` (`machine_names()`)."""
        names = {*LOOPBACK_NAMES, *own_names, *settings.allowed_hosts}
        for address in (settings.address, settings.bind_address):
            if address:
                names.add(address.lower().rstrip("."))
        return cls(host_names=frozenset(names), allowed_origins=settings.allowed_origins)

    def check(self, request: web.Request) -> None:
        """`HostRefused` or `OriginRefused` for a request a browser page of another site may have made."""
        host = request.headers.get("Host")
        if host is not None and not self.allows_host(host):
            shown = host if len(host) <= 100 else host[:97] + "..."
            raise HostRefused(
                f"{request.method} {request.path}: the Host {shown!r} is none of this master's names, so the call "
                "may come from a web page that made its own name point at the master (DNS rebinding). If clients "
                "reach the master under that name (a reverse proxy, a DNS alias), add it to rest.allowed-hosts"
            )
        if request.method not in SAFE_METHODS:
            self._check_origin(request, host)

    def allows_host(self, host_header: str) -> bool:
        """Whether a `Host` header names this master (any port)."""
        if ANY_HOST in self.host_names:
            return True
        origin = WebOrigin.of_request("http", host_header)
        if origin is None:
            return False
        name = origin.host
        return origin.is_ip_address or name in self.host_names or name.endswith(".localhost")

    def _check_origin(self, request: web.Request, host: str | None) -> None:
        sent = request.headers.get("Origin")
        if sent is None:
            site = request.headers.get("Sec-Fetch-Site", "").lower()
            if site in _OTHER_SITES:
                raise OriginRefused(
                    f"{request.method} {request.path}: a web page of another site ({site}) may not change anything "
                    "on this master; if that page should, have it send its Origin and list the origin in "
                    "rest.allowed-origins"
                )
            return
        origin = WebOrigin.parse(sent)
        own = WebOrigin.of_request(request.scheme, host) if host is not None else None
        if origin is not None and (origin == own or origin in self.allowed_origins):
            return
        shown = sent if len(sent) <= 100 else sent[:97] + "..."
        own_pages = f"its own pages ({own})" if own is not None else "its own pages"
        raise OriginRefused(
            f"{request.method} {request.path}: a web page of the origin {shown!r} may not change anything on this "
            f"master (only {own_pages} and those of rest.allowed-origins may); if that page should, list its "
            "origin in rest.allowed-origins"
        )


async def add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """`on_response_prepare`: the CSP and framing headers on every answer (`SECURITY_HEADERS`)."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
