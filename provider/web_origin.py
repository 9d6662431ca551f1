"""A web origin (scheme, host, port), as browsers send it in `Origin` and as a `Host` header names one.

Both forms are parsed to the same normalised value, so `http://LOCALHOST` and the `Host`
`localhost:80` of a plain HTTP request are one origin. Anything else than an http(s) origin
without a path (`null`, `file://`, a URL with a path or user info) is no origin: `parse` gives None.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class WebOrigin:
    """`scheme://host:port`; `host` lower-case, without brackets or a trailing dot."""

    scheme: str
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> WebOrigin | None:
        """The origin `text` names (`https://example.com:8443`); None if it names none."""
        try:
            parts = urlsplit(text.strip())
            port = parts.port
        except ValueError:  # a port that is not a number, or out of range
            return None
        scheme = parts.scheme.lower()
        host = (parts.hostname or "").rstrip(".")
        if (
            scheme not in DEFAULT_PORTS
            or not host
            or parts.path not in ("", "/")
            or parts.query
            or parts.fragment
            or parts.username is not None
            or "@" in parts.netloc
        ):
            return None
        return cls(scheme, host, port or DEFAULT_PORTS[scheme])

    @classmethod
    def of_request(cls, scheme: str, host_header: str) -> WebOrigin | None:
        """The origin a request of `scheme` with that `Host` header was sent to; None for a malformed Host."""
        if not host_header or any(c in host_header for c in "/?#@\\ "):
            return None
        return cls.parse(f"{scheme}://{host_header}")

    @property
    def is_ip_address(self) -> bool:
        """Whether the host is an IP address literal (which no DNS answer can rebind)."""
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            return False
        return True

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"
