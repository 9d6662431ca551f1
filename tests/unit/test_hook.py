"""SparkDispatchHook: connection parsing, the async client for triggers, test_connection."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from sparkdispatch.client import ZooKeeperTarget
from sparkdispatch.errors import ConfigurationError
from sparkdispatch.hooks import SparkDispatchHook
from sparkdispatch.hooks.sparkdispatch import client_settings
from sparkdispatch.testing.services import free_port


def set_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, value: dict | str) -> None:
    text = value if isinstance(value, str) else json.dumps(value)
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", text)


def settings(conn_id: str = "sparkdispatch_default") -> dict:
    return client_settings(SparkDispatchHook.get_connection(conn_id))


def test_the_json_connection_of_the_issue_works(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, "sparkdispatch_default",
                   {"conn_type": "sparkdispatch", "host": "127.0.0.1", "port": 8081})
    assert settings() == {"addresses": ["http://127.0.0.1:8081"], "token": None}
    assert SparkDispatchHook().conn_id == "sparkdispatch_default"


def test_a_uri_connection_with_a_token_in_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, "sd_uri", "sparkdispatch://:s3cret@master.example:9000")
    assert settings("sd_uri") == {"addresses": ["http://master.example:9000"], "token": "s3cret"}


def test_a_list_of_addresses_in_host(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, "sd_list", {"conn_type": "sparkdispatch", "host": "m1:8081, m2:8082,m3",
                                            "port": 9999, "schema": "https", "extra": {"token": "t"}})
    assert settings("sd_list") == {"addresses": ["https://m1:8081", "https://m2:8082", "https://m3:9999"],
                                   "token": "t"}


def test_zookeeper_retrieval_from_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, "sd_zk", {"conn_type": "sparkdispatch",
                                          "extra": {"zookeeper_quorum": "zk1:2181,zk2:2181",
                                                    "extra__sparkdispatch__cluster_id": "prod"}})
    assert settings("sd_zk") == {"zookeeper": ZooKeeperTarget("zk1:2181,zk2:2181", "prod", "/sparkdispatch"),
                                 "token": None}


def test_a_connection_naming_no_master_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, "sd_empty", {"conn_type": "sparkdispatch"})
    with pytest.raises(ConfigurationError, match="'sd_empty' names no master"):
        settings("sd_empty")
    ok, message = SparkDispatchHook("sd_empty").test_connection()
    assert not ok and "names no master" in message


async def test_the_async_client_reads_the_connection_without_blocking_calls(
        monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, "sparkdispatch_default", {"conn_type": "sparkdispatch", "host": "10.0.0.7"})

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("a trigger must not call the blocking get_connection")

    monkeypatch.setattr(SparkDispatchHook, "get_connection", classmethod(forbidden))
    async with await SparkDispatchHook().aget_client() as client:
        assert client.addresses == ["http://10.0.0.7:8081"]


@pytest.fixture
async def live_master() -> AsyncIterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    async def overview(request: web.Request) -> web.Response:
        return web.json_response({"is_leader": True, "leader": url, "taskmanagers": 2, "slots_total": 4,
                                  "slots_available": 3, "jobs_running": 1, "jobs_finished": 0,
                                  "jobs_failed": 0, "jobs_cancelled": 0})

    app = web.Application()
    app.router.add_get("/overview", overview)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield url
    finally:
        await runner.cleanup()


async def test_test_connection_reports_the_leader_and_its_slots(monkeypatch: pytest.MonkeyPatch,
                                                                live_master: str) -> None:
    port = int(live_master.rsplit(":", 1)[1])
    set_connection(monkeypatch, "sd_live", {"conn_type": "sparkdispatch", "host": "127.0.0.1", "port": port})
    ok, message = await asyncio.to_thread(SparkDispatchHook("sd_live").test_connection)
    assert ok, message
    assert message == f"leader {live_master}, 2 TaskExecutors, 4 slots (3 free)"


def test_test_connection_to_a_dead_cluster_says_what_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    set_connection(monkeypatch, "sd_dead", {"conn_type": "sparkdispatch", "host": "127.0.0.1", "port": port})
    ok, message = SparkDispatchHook("sd_dead").test_connection()
    assert not ok
    assert f"127.0.0.1:{port}" in message and "no sparkdispatch master answers" in message
