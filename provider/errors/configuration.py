"""Errors of setting a component up: a bad configuration or TLS setting, an extra not installed."""

from __future__ import annotations

from sparkdispatch.errors.base import SparkDispatchError


class ConfigurationError(SparkDispatchError):
    http_status = 400


class TlsError(ConfigurationError):
    """A TLS setting cannot be used, or a TLS handshake with the master failed: the fix is in the settings."""


class MissingExtra(SparkDispatchError):
    """A command needs the packages of an extra (`sparkdispatch[master]`, ...) that is not installed."""

    extra: str

    def __init__(self, message: str, *, extra: str) -> None:
        super().__init__(message)
        self.extra = extra
