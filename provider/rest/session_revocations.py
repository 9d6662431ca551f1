"""Logged-out web UI sessions, kept where every master of the cluster sees them.

A session cookie is valid on every master with the same tokens (ui_auth.py), so a logout must
end it on every master, and across a restart or a failover. Each revoked session is a file
`<nonce>` in `<storage.dir>/ui-sessions/<cluster-id>/` (the masters' shared storage) holding its
expiry; a master asks for the file when a cookie it has not seen revoked comes, and files of
expired sessions are removed as later logouts pass. Without a directory (a test's master) the
revocations stay in this process.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

#: a session's nonce (`secrets.token_urlsafe(16)`): a safe file name, checked before any file is named after it
NONCE_PATTERN = re.compile(r"[A-Za-z0-9_-]{16,64}")
SWEEP_INTERVAL_S = 60.0


class SessionRevocations:
    """The revoked sessions' nonces, shared through `directory` (None: this process only)."""

    def __init__(self, directory: Path | None, *, clock: Callable[[], float] = time.time) -> None:
        self._directory = directory
        self._clock = clock
        self._known: dict[str, int] = {}  # nonce -> expiry (epoch s), seen revoked by this process
        self._swept = float("-inf")
        if directory is not None:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def revoke(self, nonce: str, expires: int) -> None:
        """End the session `nonce` (valid until `expires`) on every master sharing the directory."""
        if not NONCE_PATTERN.fullmatch(nonce):
            raise ValueError(f"not a session nonce: {nonce[:64]!r}")
        self._known[nonce] = expires
        if self._directory is not None:
            temporary = self._directory / f".{nonce}.tmp"
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w") as out:
                out.write(f"{expires}\n")
            os.replace(temporary, self._directory / nonce)
        self._sweep()

    def is_revoked(self, nonce: str) -> bool:
        """Whether the session `nonce` was logged out (here or on another master)."""
        if nonce in self._known:
            return True
        if self._directory is None or not NONCE_PATTERN.fullmatch(nonce):
            return False
        try:
            expires = int((self._directory / nonce).read_text().strip() or 0)
        except FileNotFoundError:
            return False
        except (OSError, ValueError) as exc:  # unreadable: treat the session as ended, and say why
            log.warning("revoked-session file %s cannot be read (%s): the session counts as ended", nonce, exc)
            return True
        self._known[nonce] = expires
        return True

    def _sweep(self) -> None:
        """Forget sessions that expired anyway, at most once a `SWEEP_INTERVAL_S`."""
        now = self._clock()
        if now - self._swept < SWEEP_INTERVAL_S:
            return
        self._swept = now
        self._known = {nonce: expires for nonce, expires in self._known.items() if expires >= now}
        if self._directory is None:
            return
        for path in self._directory.iterdir():
            try:
                if not path.name.startswith(".") and int(path.read_text().strip() or 0) < now:
                    path.unlink()
            except FileNotFoundError:
                continue  # another master swept it
            except (OSError, ValueError) as exc:
                log.warning("revoked-session file %s cannot be swept: %s", path, exc)
