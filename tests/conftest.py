"""Fixtures shared by every test: real ZooKeeper, Redis and Spark, each started once per session.

Under CI (`CI=true`) a missing service fails the test; elsewhere it skips with the reason.
Every fixture stops what it started.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from kazoo.client import KazooClient

from sparkdispatch.config import Configuration
from sparkdispatch.ha import create_ha_services
from sparkdispatch.ha.services import ZooKeeperHaServices
from sparkdispatch.testing.services import RedisServer, ServiceMissing, ZooKeeperServer

UNDER_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
REPO = Path(__file__).resolve().parents[1]

# Airflow reads its home once, at import: give the suite its own, never the user's ~/airflow, and
# set it before any test module imports Airflow.
AIRFLOW_HOME = tempfile.mkdtemp(prefix="sparkdispatch-tests-airflow-")
os.environ["AIRFLOW_HOME"] = AIRFLOW_HOME
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)


os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# py4j logs from __del__ at interpreter exit, after pytest closed the streams
logging.getLogger("py4j").setLevel(logging.WARNING)


def service_missing(reason: str) -> NoReturn:
    """Skip locally; fail under CI, where every service must be installed."""
    if UNDER_CI:
        pytest.fail(f"required service missing under CI: {reason}")
    pytest.skip(reason)  # only outside CI: under CI the line above failed the test


@pytest.fixture(name="service_missing", scope="session")
def service_missing_fixture() -> Any:
    """`service_missing(reason)` for tests that check for a tool themselves."""
    return service_missing


def _running(server: ZooKeeperServer | RedisServer) -> Iterator[Any]:
    try:
        server.start()
    except ServiceMissing as exc:
        service_missing(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def zookeeper_server() -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper server for the whole session (tickTime 1s: sessions of 2-20s)."""
    yield from _running(ZooKeeperServer())


@pytest.fixture
def zk_root() -> str:
    """A fresh ZooKeeper root path per test, so tests never see each other's nodes."""
    return f"/test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def zk_config(zookeeper_server: ZooKeeperServer, zk_root: str, tmp_path: Path) -> Configuration:
    """A ZooKeeper-HA configuration on the session's server, under this test's own root."""
    return Configuration.from_mapping(
        {
            "high-availability.mode": "zookeeper",
            "high-availability.zookeeper.quorum": zookeeper_server.hosts,
            "high-availability.zookeeper.path.root": zk_root,
            "high-availability.zookeeper.session-timeout": "4s",
            "high-availability.zookeeper.connection-timeout": "5s",
            "storage.dir": str(tmp_path / "storage"),
        }
    )


@pytest.fixture
async def zk_masters(zk_config: Configuration) -> AsyncIterator[list[ZooKeeperHaServices]]:
    """Two masters' HA services on `zk_config` (this test's ZooKeeper root), started; closed in order."""
    masters: list[ZooKeeperHaServices] = []
    for _ in range(2):
        services = create_ha_services(zk_config)
        assert isinstance(services, ZooKeeperHaServices)
        await services.start()
        masters.append(services)
    yield masters
    for services in masters:
        await services.close()


@pytest.fixture
def zk_admin(zookeeper_server: ZooKeeperServer) -> Iterator[KazooClient]:
    """A plain ZooKeeper client of the test's own, e.g. to delete a latch node as a session expiry would."""
    client = KazooClient(hosts=zookeeper_server.hosts, timeout=4.0)
    client.start()
    yield client
    client.stop()
    client.close()


@pytest.fixture
def standalone_config(tmp_path: Path) -> Configuration:
    """An HA-mode `none` configuration with its storage in this test's temp dir."""
    return Configuration.from_mapping({"storage.dir": str(tmp_path / "storage")})


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real Redis server for the whole session."""
    yield from _running(RedisServer())


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession for every test that needs Spark in-process."""
    import shutil

    if shutil.which("java") is None:
        service_missing("Spark needs java on PATH")
    from pyspark.sql import SparkSession

    os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)  # a Connect session made earlier in this process set it
    session = (
        SparkSession.builder.master("local[2]")
        .appName("sparkdispatch-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.scheduler.mode", "FAIR")
        .getOrCreate()
    )
    try:
        yield session
    finally:
        session.stop()
