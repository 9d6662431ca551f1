"""TLS of the REST endpoint (`rest.ssl.*`): the master's server context and its clients' contexts.

The master serves HTTPS when it has a certificate and key; with a client CA it also asks every
client for a certificate signed by that CA (mutual TLS). Clients (the CLI, TaskExecutors, the
Airflow hook, a standby asking the leader) verify the master against a CA file, or the system's
trust store when they name none, and present a certificate of their own when they have one.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field

import aiohttp

from sparkdispatch.config import Configuration
from sparkdispatch.config.options import (
    REST_SSL_CA_FILE,
    REST_SSL_CERTIFICATE,
    REST_SSL_CLIENT_CA,
    REST_SSL_CLIENT_CERTIFICATE,
    REST_SSL_CLIENT_KEY,
    REST_SSL_ENABLED,
    REST_SSL_KEY,
)
from sparkdispatch.errors import TlsError


def _readable(key: str, path: str) -> str:
    expanded = os.path.expanduser(path)
    if not os.path.isfile(expanded):
        raise TlsError(f"{key}: {path!r} is not a file")
    if not os.access(expanded, os.R_OK):
        raise TlsError(f"{key}: {path!r} cannot be read by this process")
    return expanded


def _load_chain(context: ssl.SSLContext, certificate: tuple[str, str], key: tuple[str, str]) -> None:
    cert_path = _readable(*certificate)
    key_path = _readable(*key)
    try:
        context.load_cert_chain(cert_path, key_path)
    except ssl.SSLError as exc:
        raise TlsError(
            f"{certificate[0]} {certificate[1]!r} and {key[0]} {key[1]!r} are not a PEM certificate "
            f"and its private key ({exc.reason or exc})"
        ) from None


def _load_ca(context: ssl.SSLContext, key: str, path: str) -> None:
    try:
        context.load_verify_locations(cafile=_readable(key, path))
    except ssl.SSLError as exc:
        raise TlsError(f"{key}: {path!r} holds no PEM CA certificate ({exc.reason or exc})") from None


@dataclass(frozen=True)
class ServerTls:
    """The master's certificate and key, and the CA its clients' certificates must be signed by (if any)."""

    certificate: str
    key: str
    client_ca: str = ""  # empty: no client certificate asked for

    def context(self) -> ssl.SSLContext:
        """A server context (TLS 1.2 or later); `TlsError` names the setting whose file is unusable."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        _load_chain(context, ("rest.ssl.certificate", self.certificate), ("rest.ssl.key", self.key))
        if self.client_ca:
            _load_ca(context, "rest.ssl.client-ca", self.client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    @classmethod
    def from_config(cls, config: Configuration) -> ServerTls | None:
        """`rest.ssl.*` of a master; None when it serves plain HTTP (`rest.ssl.enabled: false`)."""
        certificate, key, client_ca = (
            config.get(REST_SSL_CERTIFICATE),
            config.get(REST_SSL_KEY),
            config.get(REST_SSL_CLIENT_CA),
        )
        if not config.get(REST_SSL_ENABLED):
            given = [
                name
                for name, value in (
                    ("rest.ssl.certificate", certificate),
                    ("rest.ssl.key", key),
                    ("rest.ssl.client-ca", client_ca),
                )
                if value
            ]
            if given:
                raise TlsError(
                    f"{', '.join(given)} set but rest.ssl.enabled is false: set rest.ssl.enabled: true "
                    "to serve HTTPS (the master would otherwise serve plain HTTP)"
                )
            return None
        missing = [name for name, value in (("rest.ssl.certificate", certificate), ("rest.ssl.key", key)) if not value]
        if missing:
            raise TlsError(
                f"rest.ssl.enabled is true but {' and '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} empty: HTTPS needs the master's certificate "
                "and its key"
            )
        return cls(certificate=certificate, key=key, client_ca=client_ca)


@dataclass(frozen=True)
class ClientTls:
    """How a client checks the master's certificate, and the certificate it presents when asked."""

    ca_file: str = ""  # empty: the system's trust store
    certificate: str = ""
    key: str = ""
    # where the three came from, as an error names them
    labels: tuple[str, str, str] = field(
        default=("CA file", "client certificate", "client key"), compare=False, repr=False
    )

    def context(self) -> ssl.SSLContext:
        """A client context that verifies the master's certificate and host name."""
        ca_label, certificate_label, key_label = self.labels
        context = ssl.create_default_context()
        if self.ca_file:
            _load_ca(context, ca_label, self.ca_file)
        if self.certificate or self.key:
            if not self.certificate or not self.key:
                raise TlsError(f"a client certificate needs both {certificate_label} and {key_label}")
            _load_chain(context, (certificate_label, self.certificate), (key_label, self.key))
        return context

    @classmethod
    def from_config(cls, config: Configuration) -> ClientTls:
        """`rest.ssl.ca-file`, `rest.ssl.client-certificate` and `rest.ssl.client-key`."""
        return cls(
            ca_file=config.get(REST_SSL_CA_FILE),
            certificate=config.get(REST_SSL_CLIENT_CERTIFICATE),
            key=config.get(REST_SSL_CLIENT_KEY),
            labels=("rest.ssl.ca-file", "rest.ssl.client-certificate", "rest.ssl.client-key"),
        )


def handshake_failure(address: str, exc: BaseException) -> TlsError | None:
    """The `TlsError` a failed connection to `address` means, or None when it is no TLS failure.

    A certificate the client does not trust is fixed in the settings, never by retrying. (A master
    refusing this client's certificate, or the lack of one, cannot be told from a master going
    away: it closes the connection without a word; `refusal_hint` words that case.)
    """
    # aiohttp wraps the ssl module's error (and its wrappers pass isinstance checks of it)
    for attribute in ("certificate_error", "os_error"):
        wrapped = getattr(exc, attribute, None)
        if isinstance(wrapped, BaseException) and wrapped is not exc:
            return handshake_failure(address, wrapped)
    if isinstance(exc, ssl.SSLCertVerificationError):
        return TlsError(
            f"the master at {address} presented a certificate this client does not trust "
            f"({exc.verify_message or exc.reason}): name the CA that signed it (rest.ssl.ca-file, or the "
            "Airflow connection's extra ca_file)"
        )
    if isinstance(exc, ssl.SSLError):
        return TlsError(f"TLS with the master at {address} failed ({exc.reason or exc})")
    cause = exc.__cause__ or exc.__context__
    if cause is not None and cause is not exc:
        return handshake_failure(address, cause)
    return None


def refusal_hint(address: str, exc: BaseException, tls: ClientTls) -> str:
    """What to add to a connection failure with an HTTPS master that may have refused this client's
    certificate or the lack of one (it resets or closes the connection after the handshake); else ""."""
    if not address.startswith("https://"):
        return ""
    reset = isinstance(exc, aiohttp.ServerDisconnectedError) or isinstance(
        getattr(exc, "os_error", None) or exc.__cause__, ConnectionResetError
    )
    if not reset:
        return ""
    if not tls.certificate:
        return (
            "; if that master asks for client certificates (its rest.ssl.client-ca), this client presented "
            "none: set rest.ssl.client-certificate and rest.ssl.client-key (in Airflow, the connection's "
            "extras client_certificate and client_key)"
        )
    return (
        "; if that master asks for client certificates (its rest.ssl.client-ca), it may not accept this "
        f"client's {tls.certificate!r}: it must be signed by that CA"
    )
