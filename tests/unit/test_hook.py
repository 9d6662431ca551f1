"""SparkDispatchHook: connection parsing, the async client for triggers, test_connection, and the
master's own error classes through both clients (against an in-process master)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sparkdispatch.client import RetryPolicy, SparkDispatchClient
from sparkdispatch.client.leader import ZooKeeperTarget
from sparkdispatch.errors import ConfigurationError, DuplicateJobSubmission, InvalidJobGraph, UnknownJob
from sparkdispatch.hooks import SparkDispatchHook
from sparkdispatch.hooks.sparkdispatch import client_settings
from sparkdispatch.testing.master import InProcessMaster
from sparkdispatch.testing.services import free_port
from sparkdispatch.tls import ClientTls
from sparkdispatch.testing.waiting import eventually

JOB = "0123456789abcdef0123456789abcdef"
OTHER = "fedcba9876543210fedcba9876543210"


def set_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, value: dict[str, Any] | str) -> None:
    text = value if isinstance(value, str) else json.dumps(value)
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", text)


def settings(conn_id: str = "sparkdispatch_default") -> dict[str, Any]:
    return client_settings(SparkDispatchHook.get_connection(conn_id))


def test_the_json_connection_of_the_issue_works(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(
        monkeypatch, "sparkdispatch_default", {"conn_type": "sparkdispatch", "host": "127.0.0.1", "port": 8081}
    )
    assert settings() == {"addresses": ["http://127.0.0.1:8081"], "token": None, "tls": ClientTls()}
    assert SparkDispatchHook().sparkdispatch_conn_id == "sparkdispatch_default"


def test_a_uri_connection_with_a_token_in_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, "sd_uri", "sparkdispatch://:s3cret@master.example:9000")
    assert settings("sd_uri") == {"addresses": ["http://master.example:9000"], "token": "s3cret", "tls": ClientTls()}


def test_a_list_of_addresses_in_host(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(
        monkeypatch,
        "sd_list",
        {
            "conn_type": "sparkdispatch",
            "host": "m1:8081, m2:8082,m3",
            "port": 9999,
            "schema": "https",
            "extra": {
                "token": "t",
                "ca_file": "/etc/ca.pem",
                "extra__sparkdispatch__client_certificate": "/etc/a.crt",
                "client_key": "/etc/a.key",
            },
        },
    )
    assert settings("sd_list") == {
        "addresses": ["https://m1:8081", "https://m2:8082", "https://m3:9999"],
        "token": "t",
        "tls": ClientTls("/etc/ca.pem", "/etc/a.crt", "/etc/a.key"),
    }


def test_zookeeper_retrieval_from_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(
        monkeypatch,
        "sd_zk",
        {
            "conn_type": "sparkdispatch",
            "extra": {"zookeeper_quorum": "zk1:2181,zk2:2181", "extra__sparkdispatch__cluster_id": "prod"},
        },
    )
    assert settings("sd_zk") == {
        "zookeeper": ZooKeeperTarget("zk1:2181,zk2:2181", "prod", "/sparkdispatch"),
        "token": None,
        "tls": ClientTls(),
    }


def test_a_connection_naming_no_master_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, "sd_empty", {"conn_type": "sparkdispatch"})
    with pytest.raises(ConfigurationError, match="'sd_empty' names no master"):
        settings("sd_empty")
    ok, message = SparkDispatchHook("sd_empty").test_connection()
    assert not ok and "names no master" in message


async def test_the_async_client_reads_the_connection_without_blocking_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, "sparkdispatch_default", {"conn_type": "sparkdispatch", "host": "10.0.0.7"})

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("a trigger must not call the blocking get_connection")

    monkeypatch.setattr(SparkDispatchHook, "get_connection", classmethod(forbidden))
    async with await SparkDispatchHook().aget_client() as client:
        assert client.addresses == ["http://10.0.0.7:8081"]


@pytest.fixture
async def live_master() -> AsyncIterator[InProcessMaster]:
    """A real master with two TaskExecutors of two slots each, one slot taken by a running job."""
    async with InProcessMaster() as master:
        await master.add_task_executor("te-1", slots=2)
        await master.add_task_executor("te-2", slots=2)
        async with SparkDispatchClient(addresses=[master.url]) as client:
            await client.submit({"job_id": JOB, "name": "held", "vertices": [{"id": "a", "entrypoint": "m:f"}]})
        # the task runs until the test ends
        await eventually(lambda: master.gateway.of_job(JOB), "the job's task deployed")
        yield master


async def test_test_connection_reports_the_leader_and_its_slots(
    monkeypatch: pytest.MonkeyPatch, live_master: InProcessMaster
) -> None:
    set_connection(
        monkeypatch, "sd_live", {"conn_type": "sparkdispatch", "host": "127.0.0.1", "port": live_master.port}
    )
    ok, message = await asyncio.to_thread(SparkDispatchHook("sd_live").test_connection)
    assert ok, message
    assert message == f"leader {live_master.url}, 2 TaskExecutors, 4 slots (3 free)"


async def test_the_hooks_clients_raise_the_masters_own_error_classes(
    monkeypatch: pytest.MonkeyPatch, live_master: InProcessMaster
) -> None:
    set_connection(
        monkeypatch, "sd_live", {"conn_type": "sparkdispatch", "host": "127.0.0.1", "port": live_master.port}
    )
    hook = SparkDispatchHook("sd_live", retry=RetryPolicy(attempts=1))
    try:
        client = await asyncio.to_thread(hook.get_conn)
        with pytest.raises(UnknownJob) as unknown:
            await asyncio.to_thread(client.job, OTHER)
        assert unknown.value.job_id == OTHER
        with pytest.raises(DuplicateJobSubmission) as duplicate:
            await asyncio.to_thread(
                client.submit, {"job_id": JOB, "name": "other", "vertices": [{"id": "b", "entrypoint": "m:g"}]}
            )
        assert duplicate.value.job_id == JOB
    finally:
        await asyncio.to_thread(hook.close)
    async with await hook.aget_client() as async_client:
        with pytest.raises(InvalidJobGraph) as invalid:
            await async_client.submit({"name": "x", "vertices": []})
        assert "vertices" in invalid.value.field_errors


def test_test_connection_to_a_dead_cluster_says_what_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    set_connection(monkeypatch, "sd_dead", {"conn_type": "sparkdispatch", "host": "127.0.0.1", "port": port})
    ok, message = SparkDispatchHook("sd_dead").test_connection()
    assert not ok
    assert f"127.0.0.1:{port}" in message and "no sparkdispatch master answers" in message
