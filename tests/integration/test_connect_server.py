"""A TaskExecutor's Spark Connect server, for real: it serves Connect sessions, answers health checks,
and leaves no process behind, whether it stops, dies or never starts.

One server serves the module (a start costs 10-30 s on a busy machine); the test that stops it
comes last.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc  # type: ignore[import-untyped]  # grpcio ships no type stubs
import psutil
import pytest

from sparkdispatch.config import Configuration
from sparkdispatch.errors import ConnectServerError
from sparkdispatch.taskexecutor.settings import ConnectServerSettings
from sparkdispatch.taskexecutor.connect_server import LOG_FILE_NAME, PROPERTIES_FILE_NAME, ConnectServer
from sparkdispatch.taskexecutor.connect_url import grpc_target, server_url, shown, token_of
from sparkdispatch.testing.waiting import eventually_blocking

pytestmark = pytest.mark.slow

RELEASE_SESSION = "/spark.connect.SparkConnectService/ReleaseSession"

#: A `spark.*` secret of the configuration: it reaches the JVM by a file, never its command line.
SECRET = "s3cret-" + "9f2c41d7e0"
#: A value a properties file must escape to keep (Spark trims only its outer spaces).
ODD_VALUE = "a=b:c #d !e \\f\tg \u00fc\U0001f600 h"


def settings(**keys: str) -> ConnectServerSettings:
    return ConnectServerSettings.from_config(
        Configuration.from_mapping(
            {
                "spark.master": "local[2]",
                "spark.sql.shuffle.partitions": "3",
                "taskexecutor.connect.driver-memory": "512mb",
                **keys,
            }
        )
    )


def processes_of_group(pgid: int) -> list[psutil.Process]:
    """The living processes of a process group (spark-class leaves a zombie that init reaps later)."""
    found = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return found


def processes_mentioning(path: Path) -> list[psutil.Process]:
    """Processes whose command line names `path` (the server's java names its work dir)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if any(str(path) in arg for arg in process.info["cmdline"] or ()):
            found.append(process)
    return found


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, service_missing: Callable[[str], None]) -> Iterator[ConnectServer]:
    if shutil.which("java") is None:
        service_missing("Spark needs java on PATH")
    server = ConnectServer(
        settings(**{"spark.hadoop.fs.s3a.secret.key": SECRET, "spark.sparkdispatch.test.odd key": ODD_VALUE}),
        work_dir=tmp_path_factory.mktemp("connect"),
        app_name="sparkdispatch-test",
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_connect_session_runs_queries_with_the_configured_properties(
    server: ConnectServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    # creating a Connect session sets this for the whole process; undone after the test, so the
    # session-wide classic `spark` fixture of later tests still builds a classic session
    monkeypatch.delenv("SPARK_CONNECT_MODE_ENABLED", raising=False)

    assert server.url.startswith("sc://localhost:") and server.is_alive()
    spark = SparkSession.builder.remote(server.url).create()
    try:
        rows = spark.range(100).groupBy((F.col("id") % 3).alias("k")).count().orderBy("k").collect()
        assert [(row["k"], row["count"]) for row in rows] == [(0, 34), (1, 33), (2, 33)]
        assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
        assert spark.conf.get("spark.scheduler.mode") == "FAIR"
        assert spark.conf.get("spark.sparkdispatch.test.odd key") == ODD_VALUE
    finally:
        spark.stop()


def test_a_slot_sessions_calls_start_no_thread_carry_the_token_and_can_be_interrupted(
    server: ConnectServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark.errors import PySparkException

    from sparkdispatch.taskexecutor.slot_sessions import new_session

    monkeypatch.delenv("SPARK_CONNECT_MODE_ENABLED", raising=False)  # as above: set by a Connect session
    session = new_session(server.url)
    try:
        assert session.range(10).count() == 10  # the session's first calls
        started: list[str] = []
        start = threading.Thread.start

        def counted(thread: threading.Thread) -> None:
            started.append(thread.name)
            start(thread)

        with monkeypatch.context() as patched:
            patched.setattr(threading.Thread, "start", counted)
            assert session.range(10).count() == 10
            assert session.range(5).collect()[-1]["id"] == 4
            assert session.conf.get("spark.sql.shuffle.partitions") == "3"
        assert started == []  # pyspark's channel starts two threads for each of those actions

        threading.Timer(1.0, session.interruptAll).start()
        begun = time.monotonic()
        with pytest.raises(Exception, match="OPERATION_CANCELED"):
            session.range(10**13).selectExpr("sum(id % 7)").collect()
        assert time.monotonic() - begun < 30
    finally:
        session.stop()
    port = int(grpc_target(server.url).rpartition(":")[2])
    refused = new_session(server_url(port, "0" * 64))  # the token still goes with each call
    try:
        with pytest.raises(PySparkException, match="(?i)unauthenticated|authentication token"):
            refused.range(3).collect()
    finally:
        refused.client.close()


def test_the_server_and_its_ui_listen_on_loopback_only_and_answer_health_checks_quickly(server: ConnectServer) -> None:
    assert server.pid is not None
    port = int(grpc_target(server.url).rpartition(":")[2])
    listening = [
        c.laddr
        for c in psutil.Process(server.pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    ]
    assert listening and all(address.ip in ("127.0.0.1", "::ffff:127.0.0.1") for address in listening)
    assert server.ui_port is not None and server.ui_port not in (0, 4040, port)  # a free port of its own
    # so does the Spark UI of a local master (Spark 4 binds it by SPARK_LOCAL_IP only; else on every interface)
    ui = [
        c.laddr
        for c in psutil.Process(server.pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == server.ui_port
    ]
    assert ui and all(address.ip in ("127.0.0.1", "::ffff:127.0.0.1") for address in ui)
    started = time.monotonic()
    assert server.is_healthy()
    assert time.monotonic() - started < 1.0
    assert server.log_path.name == LOG_FILE_NAME and "Spark Connect server started at" in server.log_path.read_text()


def test_the_servers_spark_properties_are_on_no_command_line_and_their_file_is_gone_once_it_serves(
    server: ConnectServer,
) -> None:
    assert server.pid is not None and server.is_healthy()
    token = token_of(server.url)
    assert token is not None and len(token) == 64
    assert [p.pid for p in psutil.process_iter() if _mentions(p, SECRET) or _mentions(p, token)] == []
    assert not (server.work_dir / PROPERTIES_FILE_NAME).exists()


def _mentions(process: psutil.Process, text: str) -> bool:
    try:
        return any(text in arg for arg in process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def test_a_client_without_the_servers_token_or_with_a_wrong_one_is_refused(
    server: ConnectServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    monkeypatch.delenv("SPARK_CONNECT_MODE_ENABLED", raising=False)
    monkeypatch.delenv("SPARK_CONNECT_AUTHENTICATE_TOKEN", raising=False)
    target = grpc_target(server.url)
    # what any process of the host could try on the loopback port: a raw call, then pyspark's client
    for metadata in [(), (("authorization", "Bearer " + "0" * 64),), (("authorization", "Bearer"),)]:
        with grpc.insecure_channel(target) as channel, pytest.raises(grpc.RpcError) as refused:
            channel.unary_unary(RELEASE_SESSION)(b"", timeout=10, metadata=metadata)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    for url in [shown(server.url), server_url(int(target.rpartition(":")[2]), "0" * 64)]:
        with pytest.raises(PySparkException, match="(?i)unauthenticated|authentication token"):
            spark = SparkSession.builder.remote(url).create()
            try:
                spark.range(3).collect()
            finally:
                spark.client.close()
    assert server.is_healthy()  # with its token the server answers


def test_a_dead_server_is_unhealthy_and_a_restart_brings_it_back_on_its_port_with_a_new_token(
    server: ConnectServer,
) -> None:
    assert server.pid is not None
    url = server.url
    os.kill(server.pid, signal.SIGKILL)  # the JVM dies (out of memory, a crash)
    eventually_blocking(lambda: not server.is_alive(), "the server to be dead", timeout=10)
    assert not server.is_healthy()
    server.restart()
    assert shown(server.url) == shown(url) and token_of(server.url) != token_of(url) and server.is_healthy()
    assert (server.log_path.parent / (LOG_FILE_NAME + ".1")).exists()  # the dead server's log is kept


def test_stop_ends_the_whole_process_group_and_is_idempotent(server: ConnectServer) -> None:
    """Runs last: it stops the module's server."""
    pgid = server.pid
    assert pgid is not None and processes_of_group(pgid)
    server.stop()
    assert not server.is_alive() and not server.is_healthy() and server.pid is None
    assert processes_of_group(pgid) == []
    assert processes_mentioning(server.work_dir) == []
    server.stop()
    with pytest.raises(ConnectServerError):
        _ = server.url


def test_a_bad_spark_master_fails_the_start_naming_the_log(tmp_path: Path) -> None:
    server = ConnectServer(settings(**{"spark.master": "nosuch://nowhere"}), work_dir=tmp_path)
    with pytest.raises(ConnectServerError) as raised:
        server.start(timeout=60)
    error = raised.value
    assert str(server.log_path) in str(error) and error.log_file == str(server.log_path)
    assert "(master nosuch://nowhere) exited with code" in error.message
    assert any("Master must either be yarn or start with" in line for line in error.details), error.details
    assert not any(line.lstrip().startswith("at ") for line in error.details)  # no Java stack frames
    assert not server.is_alive() and processes_mentioning(tmp_path) == []


def test_a_start_that_times_out_leaves_no_process(tmp_path: Path) -> None:
    server = ConnectServer(settings(), work_dir=tmp_path)
    with pytest.raises(ConnectServerError, match=r"did not start within 0.5 s; its log is "):
        server.start(timeout=0.5)
    assert not server.is_alive() and processes_mentioning(tmp_path) == []
