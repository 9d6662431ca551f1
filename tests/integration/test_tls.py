"""The REST endpoint over HTTPS with a CA made in the test: a real master (in the test process),
real HTTPS clients (the async client, the CLI, the Airflow hook, a standby asking the leader) and,
in the slow test, a real TaskExecutor that registers and runs a job over mutual TLS.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any
from pathlib import Path

import aiohttp
import pytest

from sparkdispatch.entrypoint.cli import main as cli_main
from sparkdispatch.client import RetryPolicy, SparkDispatchClient
from sparkdispatch.config import Configuration
from sparkdispatch.errors import ServiceUnavailable
from sparkdispatch.entrypoint.master import Master
from sparkdispatch.testing.certificates import IssuedCertificate, TestCertificateAuthority
from sparkdispatch.testing.local_cluster import TaskExecutorProcess, task_executors_registered
from sparkdispatch.testing.services import RedisServer, free_port
from sparkdispatch.errors import TlsError
from sparkdispatch.tls import ClientTls
from sparkdispatch.testing.waiting import eventually

TASKS = Path(__file__).with_name("job_tasks.py")
WAIT_S = 120.0


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> TestCertificateAuthority:
    return TestCertificateAuthority(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def server_cert(authority: TestCertificateAuthority) -> IssuedCertificate:
    return authority.issue("master", hosts=("127.0.0.1", "localhost"))


@pytest.fixture(scope="module")
def client_cert(authority: TestCertificateAuthority) -> IssuedCertificate:
    return authority.issue("client", client=True)


def tls_config(
    tmp_path: Path,
    server: IssuedCertificate,
    authority: TestCertificateAuthority,
    *,
    mutual: bool = False,
    client: IssuedCertificate | None = None,
    **extra: str,
) -> Configuration:
    keys = {
        "rest.port": str(free_port()),
        "storage.dir": str(tmp_path / "storage"),
        "rest.ssl.enabled": "true",
        "rest.ssl.certificate": str(server.certificate),
        "rest.ssl.key": str(server.key),
        "rest.ssl.ca-file": str(authority.ca_file),
        **extra,
    }
    if mutual:
        keys["rest.ssl.client-ca"] = str(authority.ca_file)
    if client is not None:
        keys["rest.ssl.client-certificate"] = str(client.certificate)
        keys["rest.ssl.client-key"] = str(client.key)
    return Configuration.from_mapping(keys)


@pytest.fixture
async def https_master(
    tmp_path: Path, server_cert: IssuedCertificate, authority: TestCertificateAuthority
) -> AsyncIterator[Master]:
    master = Master(tls_config(tmp_path, server_cert, authority))
    await master.start()
    try:
        yield master
    finally:
        await master.stop()


async def test_a_client_trusting_the_ca_talks_https_and_one_that_does_not_is_told_why_at_once(
    https_master: Master, authority: TestCertificateAuthority
) -> None:
    assert https_master.address.startswith("https://127.0.0.1:")
    async with SparkDispatchClient(
        addresses=[https_master.address], tls=ClientTls(ca_file=str(authority.ca_file))
    ) as client:
        assert (await client.overview()).is_leader is True
    # the system's trust store does not know the test CA: a clear error, not 8 retries
    started = time.monotonic()
    async with SparkDispatchClient(addresses=[https_master.address]) as untrusting:
        with pytest.raises(TlsError, match="presented a certificate this client does not trust .*ca_file"):
            await untrusting.overview()
    assert time.monotonic() - started < 5.0
    # plain HTTP to an HTTPS port gets no answer it could mistake for one
    plain = https_master.address.replace("https://", "http://")
    async with SparkDispatchClient(addresses=[plain], retry=RetryPolicy(attempts=1)) as confused:
        with pytest.raises(ServiceUnavailable, match="no sparkdispatch master answers"):
            await confused.overview()


async def test_a_master_asking_for_client_certificates_refuses_clients_without_one(
    tmp_path: Path, server_cert: IssuedCertificate, client_cert: IssuedCertificate, authority: TestCertificateAuthority
) -> None:
    master = Master(tls_config(tmp_path, server_cert, authority, mutual=True))
    await master.start()
    try:
        ca = str(authority.ca_file)
        once = RetryPolicy(attempts=1)
        # the master closes the connection without a word: the error says what may be wrong
        async with SparkDispatchClient(addresses=[master.address], tls=ClientTls(ca_file=ca), retry=once) as anonymous:
            with pytest.raises(ServiceUnavailable, match="this client presented none: set rest.ssl.client-certificate"):
                await anonymous.overview()
        # a certificate of another CA is refused too
        stranger = TestCertificateAuthority(tmp_path / "other-ca").issue("stranger", client=True)
        async with SparkDispatchClient(
            addresses=[master.address],
            retry=once,
            tls=ClientTls(ca_file=ca, certificate=str(stranger.certificate), key=str(stranger.key)),
        ) as strange:
            with pytest.raises(ServiceUnavailable, match="may not accept this client's .*stranger.crt"):
                await strange.overview()
        async with SparkDispatchClient(
            addresses=[master.address],
            tls=ClientTls(ca_file=ca, certificate=str(client_cert.certificate), key=str(client_cert.key)),
        ) as client:
            assert (await client.overview()).is_leader is True
    finally:
        await master.stop()


async def test_the_cli_and_the_airflow_hook_verify_the_master_against_the_configured_ca(
    https_master: Master,
    authority: TestCertificateAuthority,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    port = https_master.address.rsplit(":", 1)[1]
    overrides = ["-D", "rest.ssl.enabled=true", "-D", f"rest.port={port}"]
    code = await asyncio.to_thread(cli_main, ["overview", *overrides, "-D", f"rest.ssl.ca-file={authority.ca_file}"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["leader"] == https_master.address
    code = await asyncio.to_thread(cli_main, ["overview", *overrides])
    out, err = capsys.readouterr()
    assert code != 0 and "does not trust" in err

    from sparkdispatch.hooks.sparkdispatch import SparkDispatchHook

    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARKDISPATCH_TLS",
        json.dumps(
            {
                "conn_type": "sparkdispatch",
                "host": "127.0.0.1",
                "port": int(port),
                "schema": "https",
                "extra": {"ca_file": str(authority.ca_file)},
            }
        ),
    )
    hook = SparkDispatchHook("sparkdispatch_tls")
    try:
        overview = await asyncio.to_thread(lambda: hook.get_conn().overview())
        assert overview.leader == https_master.address
    finally:
        hook.close()


async def test_ui_session_cookies_of_an_https_master_are_secure(
    tmp_path: Path, server_cert: IssuedCertificate, authority: TestCertificateAuthority
) -> None:
    master = Master(
        tls_config(tmp_path, server_cert, authority).with_overrides(
            {"rest.auth.token": "t0ken", "broker.url": "memory://"}
        )
    )
    await master.start()
    try:
        connector = aiohttp.TCPConnector(ssl=ClientTls(ca_file=str(authority.ca_file)).context())
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.post(
                f"{master.address}/ui/login", data={"token": "t0ken"}, allow_redirects=False
            ) as answer:
                assert answer.status == 303
                cookie = answer.headers["Set-Cookie"]
        assert "Secure" in cookie and "HttpOnly" in cookie
    finally:
        await master.stop()


async def test_a_standby_reads_the_leaders_overview_over_https(
    tmp_path: Path,
    server_cert: IssuedCertificate,
    client_cert: IssuedCertificate,
    authority: TestCertificateAuthority,
    zk_config: Configuration,
) -> None:
    shared = {key: zk_config.to_flat()[key] for key in zk_config.to_flat() if key.startswith("high-availability")}
    masters = [
        Master(tls_config(tmp_path, server_cert, authority, mutual=True, client=client_cert, **shared))
        for index in range(2)
    ]
    for master in masters:
        await master.start()
    try:
        tls = ClientTls(
            ca_file=str(authority.ca_file), certificate=str(client_cert.certificate), key=str(client_cert.key)
        )
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls.context())) as session:

            async def one_leader() -> list[Any] | None:
                overviews = []
                for master in masters:
                    async with session.get(f"{master.address}/overview") as answer:
                        overviews.append(await answer.json())
                leaders = [master for master, overview in zip(masters, overviews, strict=True) if overview["is_leader"]]
                return leaders if len(leaders) == 1 else None

            [leader] = await eventually(one_leader, "one master leading", interval=0.2)
            [standby] = [master for master in masters if master is not leader]
            async with SparkDispatchClient(addresses=[leader.address], tls=tls) as client:
                # no TaskExecutor: the job waits for slots, running
                await client.submit(
                    {"name": "waits", "vertices": [{"id": "a", "entrypoint": "nowhere:nothing", "parallelism": 1}]}
                )
            async with session.get(f"{standby.address}/overview") as answer:
                body = await answer.json()
        # the standby asked the leader (over mutual TLS) for its counts; a failed call leaves them 0
        assert body["is_leader"] is False and body["leader"] == leader.address
        assert body["jobs_running"] == 1
    finally:
        for master in masters:
            await master.stop()


@pytest.mark.slow
async def test_a_task_executor_registers_and_runs_a_job_over_mutual_tls(
    tmp_path: Path, server_cert: IssuedCertificate, client_cert: IssuedCertificate, authority: TestCertificateAuthority
) -> None:
    redis = RedisServer()
    redis.start()
    config = tls_config(
        tmp_path,
        server_cert,
        authority,
        mutual=True,
        client=client_cert,
        **{
            "broker.url": redis.url,
            "taskexecutor.slots": "1",
            "spark.master": "local[1]",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "1",
            "rest.execution-result.long-poll": "200ms",
            "taskexecutor.registration.max-backoff": "500ms",
        },
    )
    master = Master(config)
    await master.start()
    te = TaskExecutorProcess(config, tmp_path)
    try:
        async with SparkDispatchClient.from_config(config) as client:
            await task_executors_registered(client, 1, processes=[te], timeout=WAIT_S)
            key = await client.upload_artifact(TASKS)
            job_id = (
                await client.submit(
                    {
                        "name": "over-tls",
                        "artifacts": [key],
                        "vertices": [
                            {
                                "id": "numbers",
                                "entrypoint": "job_tasks:numbers",
                                "parallelism": 1,
                                "params": {"log_dir": str(tmp_path), "rows": 10, "sleep_s": 0},
                            }
                        ],
                    }
                )
            ).job_id
            result = await asyncio.wait_for(client.wait_for_result(job_id, poll_interval=0.2), WAIT_S)
        assert result.status == "FINISHED", result.failure
        assert result.vertices["numbers"].rows == 10
    finally:
        te.kill()
        await master.stop()
        redis.stop()
