"""The Spark Connect server's settings, Spark properties, health-check request and errors, without a server."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkdispatch.config import Configuration
from sparkdispatch.errors import ConfigurationError, ConnectServerError
from sparkdispatch.taskexecutor.settings import ConnectServerSettings
from sparkdispatch.storage.private import write_private
from sparkdispatch.taskexecutor import connect_server
from sparkdispatch.taskexecutor.connect_server import ConnectServer, server_properties


def test_settings_default_to_a_free_port_two_minutes_and_a_one_gigabyte_heap() -> None:
    settings = ConnectServerSettings.from_config(Configuration.from_mapping({}))
    assert (settings.spark_master, settings.port, settings.start_timeout, settings.driver_memory) == (
        "local[*]",
        0,
        120.0,
        1 << 30,
    )
    assert dict(settings.spark_properties) == {}


def test_settings_carry_the_configured_values_and_hide_spark_properties_from_repr() -> None:
    settings = ConnectServerSettings.from_config(
        Configuration.from_mapping(
            {
                "spark.master": "spark://m:7077",
                "taskexecutor.connect.port": 15002,
                "taskexecutor.connect.start-timeout": "45s",
                "taskexecutor.connect.driver-memory": "2g",
                "spark.hadoop.fs.s3a.secret.key": "s3cret",
            }
        )
    )
    assert (settings.spark_master, settings.port, settings.start_timeout, settings.driver_memory) == (
        "spark://m:7077",
        15002,
        45.0,
        2 << 30,
    )
    assert settings.spark_properties == {"spark.hadoop.fs.s3a.secret.key": "s3cret"}
    assert "s3cret" not in repr(settings)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("taskexecutor.connect.port", "-1"),
        ("taskexecutor.connect.start-timeout", "10ms"),
        ("taskexecutor.connect.driver-memory", "lots"),
        ("taskexecutor.connect.driver-memory", "64mb"),
    ],
)
def test_bad_values_are_refused_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=key):
        Configuration.from_mapping({key: value})


def test_server_properties_default_then_configured_then_the_loopback_binding(tmp_path: Path) -> None:
    defaults = server_properties(
        ConnectServerSettings.from_config(Configuration.from_mapping({})), work_dir=tmp_path, port=0
    )
    assert defaults == {
        "spark.ui.showConsoleProgress": "false",
        "spark.ui.port": "0",
        "spark.driver.memory": "1024m",
        "spark.scheduler.mode": "FAIR",
        "spark.scheduler.allocation.file": str(tmp_path / "fairscheduler.xml"),
        "spark.local.dir": str(tmp_path / "local"),
        "spark.sql.warehouse.dir": str(tmp_path / "warehouse"),
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": "0",
    }
    configured = server_properties(
        ConnectServerSettings.from_config(
            Configuration.from_mapping(
                {
                    "taskexecutor.connect.driver-memory": "1536mb",
                    "spark.ui.enabled": "false",
                    "spark.local.dir": "/fast/disk",
                    "spark.connect.grpc.binding.address": "0.0.0.0",
                    "spark.connect.grpc.binding.port": "15002",
                }
            )
        ),
        work_dir=tmp_path,
        port=4321,
    )
    assert configured["spark.driver.memory"] == "1536m"
    assert (configured["spark.ui.enabled"], configured["spark.local.dir"]) == ("false", "/fast/disk")
    assert (configured["spark.connect.grpc.binding.address"], configured["spark.connect.grpc.binding.port"]) == (
        "127.0.0.1",
        "4321",
    )
    overridden = server_properties(
        ConnectServerSettings.from_config(Configuration.from_mapping({"spark.driver.memory": "3g"})),
        work_dir=tmp_path,
        port=0,
    )
    assert overridden["spark.driver.memory"] == "3g"


@pytest.mark.parametrize("user_id", ["sparkdispatch-health-check", "u" * 300])
def test_the_hand_written_release_session_request_is_what_pysparks_protos_read(user_id: str) -> None:
    from pyspark.sql.connect.proto import ReleaseSessionRequest

    session_id = "6f1c8e5a-3b2d-4c7e-9a10-2b3c4d5e6f70"
    request = ReleaseSessionRequest.FromString(connect_server._release_session_request(session_id, user_id))
    assert (request.session_id, request.user_context.user_id) == (session_id, user_id)


def test_a_server_never_started_is_not_alive_nor_healthy_and_stops_quietly(tmp_path: Path) -> None:
    server = ConnectServer(ConnectServerSettings.from_config(Configuration.from_mapping({})), work_dir=tmp_path)
    assert (server.is_alive(), server.is_healthy(), server.pid) == (False, False, None)
    with pytest.raises(ConnectServerError, match="not serving") as raised:
        _ = server.url
    assert raised.value.log_file == str(tmp_path / connect_server.LOG_FILE_NAME)
    server.stop()
    server.stop()


def test_a_failure_names_the_log_and_its_last_lines_without_stack_frames(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(
        "line 0\n"
        + "".join(f"line {i}\n" for i in range(1, 30))
        + 'Exception in thread "main" java.lang.IllegalStateException: boom\n'
        "\tat org.apache.spark.X.y(X.scala:1)\n\t... 12 more\n"
    )
    tail = connect_server._tail(log)
    assert len(tail) == 20 and tail[-1].endswith("IllegalStateException: boom") and tail[0] == "line 11"
    assert connect_server._tail(tmp_path / "missing.log") == []


def test_the_properties_file_is_private_from_its_creation_and_escapes_what_java_would_misread(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("an older, world-readable file")
    path.chmod(0o644)
    text = connect_server.properties_text({"spark.a b=c": "x=y\\z\nw ü", "spark.plain": "1"})
    write_private(path, text.encode())
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.read_text() == "spark.a\\ b\\=c=x=y\\\\z\\nw \\u00fc\nspark.plain=1\n"


def test_the_spark_ui_of_a_cluster_master_is_off_unless_configured_and_a_local_one_keeps_to_loopback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)

    def settings(**keys: str) -> ConnectServerSettings:
        return ConnectServerSettings.from_config(Configuration.from_mapping(keys))

    cluster = settings(**{"spark.master": "spark://m:7077"})
    assert server_properties(cluster, work_dir=tmp_path, port=0)["spark.ui.enabled"] == "false"
    assert connect_server.server_environment(cluster) == {}
    asked = settings(**{"spark.master": "yarn", "spark.ui.enabled": "true"})
    assert server_properties(asked, work_dir=tmp_path, port=0)["spark.ui.enabled"] == "true"
    for master in ("local", "local[2]", "local[*]"):
        local = settings(**{"spark.master": master})
        assert "spark.ui.enabled" not in server_properties(local, work_dir=tmp_path, port=0)
        assert connect_server.server_environment(local) == {"SPARK_LOCAL_IP": "127.0.0.1"}
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.0.0.7")  # the operator's choice stands
    assert connect_server.server_environment(settings(**{"spark.master": "local[2]"})) == {}
