"""A master with tokens starts only on a ZooKeeper with digest ACLs and a Redis with a password,
unless told that nobody else reaches them (entrypoint/backing_services.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkdispatch.config import Configuration
from sparkdispatch.entrypoint.backing_services import check_backing_services
from sparkdispatch.entrypoint.master import Master
from sparkdispatch.errors import ConfigurationError

TOKEN = "admin-token-0123456789"
ZOOKEEPER = {"high-availability.mode": "zookeeper", "broker.url": "filesystem://"}
REDIS = {"broker.url": "redis://127.0.0.1:6379/0"}


@pytest.fixture(autouse=True)
def no_secrets_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "SPARKDISPATCH_AUTH_TOKEN",
        "SPARKDISPATCH_CLUSTER_SECRET",
        "SPARKDISPATCH_ZOOKEEPER_AUTH",
        "SPARKDISPATCH_BROKER_PASSWORD",
    ):
        monkeypatch.delenv(name, raising=False)


def config(**keys: str) -> Configuration:
    return Configuration.from_mapping(keys)


@pytest.mark.parametrize("services", [ZOOKEEPER, REDIS])
def test_a_master_without_tokens_may_use_open_services(services: dict[str, str]) -> None:
    check_backing_services(config(**services))


@pytest.mark.parametrize(
    "credential", [{"rest.auth.token": TOKEN}, {"cluster.secret": TOKEN}, {"rest.auth.tokens-file": "/etc/tokens"}]
)
def test_a_master_with_tokens_refuses_zookeeper_without_acls(credential: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError) as refused:
        check_backing_services(config(**ZOOKEEPER, **credential))
    message = str(refused.value)
    assert "ZooKeeper without high-availability.zookeeper.auth" in message
    assert "high-availability.zookeeper.allow-insecure: true" in message
    assert "Redis" not in message


def test_zookeeper_with_acls_or_declared_private_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    check_backing_services(
        config(**ZOOKEEPER, **{"rest.auth.token": TOKEN, "high-availability.zookeeper.auth": "sd:pw"})
    )
    check_backing_services(
        config(**ZOOKEEPER, **{"rest.auth.token": TOKEN, "high-availability.zookeeper.allow-insecure": "true"})
    )
    monkeypatch.setenv("SPARKDISPATCH_ZOOKEEPER_AUTH", "sd:pw")
    with_env = config(**ZOOKEEPER, **{"rest.auth.token": TOKEN})
    assert with_env.zookeeper_auth == "sd:pw"
    check_backing_services(with_env)


def test_a_master_with_tokens_refuses_redis_without_a_password() -> None:
    with pytest.raises(ConfigurationError, match="a Redis broker without a password.*broker.allow-insecure: true"):
        check_backing_services(config(**REDIS, **{"rest.auth.token": TOKEN}))


def test_redis_with_a_password_or_declared_private_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    check_backing_services(config(**{"rest.auth.token": TOKEN, "broker.url": "redis://:pw@127.0.0.1:6379/0"}))
    check_backing_services(config(**REDIS, **{"rest.auth.token": TOKEN, "broker.allow-insecure": "true"}))
    monkeypatch.setenv("SPARKDISPATCH_BROKER_PASSWORD", "p@ss/word")
    with_env = config(**REDIS, **{"rest.auth.token": TOKEN})
    assert with_env.broker_url == "redis://:p%40ss%2Fword@127.0.0.1:6379/0"  # from the environment, quoted
    check_backing_services(with_env)
    # a URL that names its own password keeps it
    named = config(**{"rest.auth.token": TOKEN, "broker.url": "redis://user:own@redis:6379/1"})
    assert named.broker_url == "redis://user:own@redis:6379/1"


def test_a_master_with_tokens_on_open_services_does_not_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="ZooKeeper without .* and a Redis broker without a password"):
        Master(
            config(
                **{
                    "high-availability.mode": "zookeeper",
                    "broker.url": "redis://127.0.0.1:6379/0",
                    "rest.auth.token": TOKEN,
                    "storage.dir": str(tmp_path),
                }
            )
        )
