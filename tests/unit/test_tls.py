"""`rest.ssl.*` read into TLS contexts: every unusable setting is an error naming the key and the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkdispatch.config import Configuration
from sparkdispatch.errors import ConfigurationError
from sparkdispatch.entrypoint.master import Master
from sparkdispatch.rest.settings import RestSettings
from sparkdispatch.testing.certificates import IssuedCertificate, TestCertificateAuthority
from sparkdispatch.errors import TlsError
from sparkdispatch.tls import ClientTls, ServerTls


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> TestCertificateAuthority:
    return TestCertificateAuthority(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def server(authority: TestCertificateAuthority) -> IssuedCertificate:
    return authority.issue("master", hosts=("127.0.0.1",))


def config(**keys: str) -> Configuration:
    return Configuration.from_mapping(keys)


def test_without_rest_ssl_enabled_the_master_serves_plain_http() -> None:
    assert ServerTls.from_config(config()) is None
    assert RestSettings.from_config(config()).scheme == "http"
    assert config().rest_url == "http://127.0.0.1:8081"


def test_an_enabled_master_serves_https_and_clients_call_https(
    server: IssuedCertificate, authority: TestCertificateAuthority
) -> None:
    settings = config(
        **{
            "rest.ssl.enabled": "true",
            "rest.ssl.certificate": str(server.certificate),
            "rest.ssl.key": str(server.key),
            "rest.ssl.client-ca": str(authority.ca_file),
        }
    )
    tls = ServerTls.from_config(settings)
    assert tls is not None and tls.client_ca == str(authority.ca_file)
    assert tls.context().verify_mode.name == "CERT_REQUIRED"
    assert RestSettings.from_config(settings).scheme == "https"
    assert settings.rest_url == "https://127.0.0.1:8081"


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"rest.ssl.enabled": "true"}, "rest.ssl.enabled is true but rest.ssl.certificate and rest.ssl.key are empty"),
        ({"rest.ssl.enabled": "true", "rest.ssl.certificate": "CERT"}, "but rest.ssl.key is empty"),
        (
            {"rest.ssl.certificate": "CERT", "rest.ssl.key": "KEY"},
            "rest.ssl.certificate, rest.ssl.key set but rest.ssl.enabled is false",
        ),
        ({"rest.ssl.client-ca": "CA"}, "rest.ssl.client-ca set but rest.ssl.enabled is false"),
    ],
)
def test_incomplete_settings_are_refused_naming_what_is_missing(
    keys: dict[str, str], message: str, server: IssuedCertificate, authority: TestCertificateAuthority
) -> None:
    paths = {"CERT": str(server.certificate), "KEY": str(server.key), "CA": str(authority.ca_file)}
    with pytest.raises(TlsError, match=message):
        ServerTls.from_config(config(**{key: paths.get(value, value) for key, value in keys.items()}))


def test_unusable_files_are_named(
    tmp_path: Path, server: IssuedCertificate, authority: TestCertificateAuthority
) -> None:
    other = authority.issue("other", hosts=("127.0.0.1",))
    with pytest.raises(TlsError, match=r"rest.ssl.key: '.*missing.key' is not a file"):
        ServerTls(str(server.certificate), str(tmp_path / "missing.key")).context()
    with pytest.raises(
        TlsError,
        match=r"rest.ssl.certificate '.*master.crt' and rest.ssl.key '.*other.key' are not "
        r"a PEM certificate and its private key \(KEY_VALUES_MISMATCH\)",
    ):
        ServerTls(str(server.certificate), str(other.key)).context()
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(TlsError, match=r"rest.ssl.client-ca: '.*garbage.pem' holds no PEM CA certificate"):
        ServerTls(str(server.certificate), str(server.key), client_ca=str(garbage)).context()
    with pytest.raises(TlsError, match=r"CA file: '.*nowhere.pem' is not a file"):
        ClientTls(ca_file=str(tmp_path / "nowhere.pem")).context()
    with pytest.raises(TlsError, match="needs both client certificate and client key"):
        ClientTls(certificate=str(server.certificate)).context()
    assert isinstance(TlsError("x"), ConfigurationError)


def test_a_master_with_an_unusable_tls_setting_does_not_start(tmp_path: Path) -> None:
    with pytest.raises(TlsError, match=r"rest.ssl.ca-file: '.*nowhere.pem' is not a file"):
        Master(config(**{"rest.ssl.ca-file": str(tmp_path / "nowhere.pem"), "storage.dir": str(tmp_path)}))
