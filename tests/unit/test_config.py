"""Configuration: defaults, YAML files, -D overrides, durations, refusal of bad input, and the
typed settings the master's components get from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkdispatch.config import (
    Configuration,
    format_duration,
    parse_duration,
    parse_size,
)
from sparkdispatch.config.options import HA_MODE, HEARTBEAT_INTERVAL, OPTIONS, REST_PORT, TASKEXECUTOR_SLOTS
from sparkdispatch.errors import ConfigurationError
from sparkdispatch.model.restart import FailureRateRestart
from sparkdispatch.entrypoint.master import MasterSettings


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("4s", 4.0),
        ("1min", 60.0),
        ("2 h", 7200.0),
        ("1d", 86400.0),
        ("250", 0.25),
        (1500, 1.5),
        ("1.5s", 1.5),
    ],
)
def test_durations_are_read_as_flink_writes_them(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["fast", "4 parsecs", "-1s", "", "1e3s"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_duration_formatting_round_trips() -> None:
    for seconds in (0.02, 0.5, 4.0, 60.0, 90.0, 3600.0, 86400.0):
        assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)


def test_sizes() -> None:
    assert parse_size("10mb") == 10 * 1024 * 1024
    assert parse_size("64kb") == 64 * 1024
    assert parse_size("12") == 12
    with pytest.raises(ValueError):
        parse_size("10 parsecs")


def test_defaults_fill_every_key() -> None:
    config = Configuration.from_mapping({})
    for option in OPTIONS:
        assert config.get(option) == option.default
    assert config.get(HA_MODE) == "none"
    assert config.to_flat() == {}


def test_yaml_file_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "sparkdispatch.yaml"
    path.write_text("rest.port: 9000\nheartbeat.interval: 2s\nspark.sql.shuffle.partitions: 8\n")
    config = Configuration.load(path, ["rest.port=9100", "high-availability.mode=zookeeper"])
    assert config.get(REST_PORT) == 9100
    assert config.get(HEARTBEAT_INTERVAL) == 2.0
    assert config.get(HA_MODE) == "zookeeper"
    assert config.spark_properties == {"spark.sql.shuffle.partitions": "8"}


def test_environment_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "conf.yaml"
    path.write_text("taskexecutor.slots: 3\n")
    assert Configuration.load(environ={"SPARKDISPATCH_CONF": str(path)}).get(TASKEXECUTOR_SLOTS) == 3


def test_unknown_key_is_named_with_a_suggestion() -> None:
    with pytest.raises(ConfigurationError) as info:
        Configuration.from_mapping({"heartbeat.intervall": "1s"})
    assert "heartbeat.intervall" in str(info.value)
    assert "heartbeat.interval" in info.value.message


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("rest.port", "eighty", "whole number"),
        ("heartbeat.timeout", "soon", "duration"),
        ("high-availability.mode", "kubernetes", "one of"),
        ("taskexecutor.slots", "0", "minimum"),
        ("job-result-store.delete-on-commit", "maybe", "true or false"),
    ],
)
def test_bad_values_are_named(key: str, value: str, words: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        Configuration.from_mapping({key: value})
    assert key in info.value.message and words in info.value.message


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigurationError) as info:
        Configuration.from_mapping({"nope": 1, "rest.port": "x"})
    assert len(info.value.messages()) == 2


def test_nested_yaml_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "conf.yaml"
    path.write_text("rest:\n  port: 8081\n")
    with pytest.raises(ConfigurationError, match="flat"):
        Configuration.load(path)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read"):
        Configuration.load(tmp_path / "absent.yaml")


def test_bad_override_syntax() -> None:
    with pytest.raises(ConfigurationError, match="key=value"):
        Configuration.load(overrides=["rest.port"])


def test_overrides_rebuild_the_same_configuration() -> None:
    config = Configuration.from_mapping(
        {
            "heartbeat.interval": "250ms",
            "rest.port": 0,
            "spark.x.y": "z",
            "high-availability.zookeeper.tolerate-suspended-connections": True,
        }
    )
    args = config.to_overrides()
    rebuilt = Configuration.load(overrides=[a for a in args if a != "-D"])
    assert rebuilt == config and rebuilt.to_flat() == config.to_flat()


def test_configuration_is_frozen() -> None:
    config = Configuration.from_mapping({})
    with pytest.raises(AttributeError):
        config.port = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        config.spark_properties["spark.x"] = "y"  # type: ignore[index]


def test_master_settings_carry_typed_values(tmp_path: Path) -> None:
    config = Configuration.from_mapping(
        {
            "storage.dir": str(tmp_path),
            "high-availability.cluster-id": "blue",
            "rest.address": "10.0.0.5",
            "rest.auth.token": "s3cret",
            "rest.max-body-size": "2mb",
            "heartbeat.interval": "500ms",
            "heartbeat.timeout": "3s",
            "heartbeat.rpc-failure-threshold": -1,
            "slot.request.timeout": "1min",
            "cleanup-strategy.initial-backoff": "10ms",
            "results.retention": "delete",
            "restart-strategy.type": "failure-rate",
            "jobstore.max-in-memory": 7,
        }
    )
    settings = MasterSettings.from_config(config)
    rest = settings.rest
    assert (rest.address, rest.bind_address, rest.port, rest.max_body_size) == ("10.0.0.5", "10.0.0.5", 8081, 2 << 20)
    assert rest.auth_token == "s3cret" and "s3cret" not in repr(settings)
    heartbeat = settings.resource_manager.heartbeat
    assert (heartbeat.interval, heartbeat.timeout, heartbeat.rpc_failure_threshold) == (0.5, 3.0, -1)
    assert settings.resource_manager.slot_request_timeout == 60.0
    assert settings.job_master.restart_strategy == FailureRateRestart()
    assert settings.job_master.results_dir == settings.cleanup.results_dir == str(tmp_path / "results")
    assert settings.cleanup.delete_results and settings.cleanup.initial_backoff == 0.01
    assert settings.archive.directory == tmp_path / "archive" / "blue" and settings.archive.capacity == 7


# -- the REST token and who may reach a master without one ------------------------------------


def test_the_token_comes_from_the_key_else_its_file_else_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPARKDISPATCH_AUTH_TOKEN", raising=False)
    assert Configuration.from_mapping({}).auth_token == ""
    monkeypatch.setenv("SPARKDISPATCH_AUTH_TOKEN", " from-env\n")
    assert Configuration.from_mapping({}).auth_token == "from-env"
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    assert Configuration.from_mapping({"rest.auth.token-file": str(token_file)}).auth_token == "from-file"
    assert (
        Configuration.from_mapping({"rest.auth.token-file": str(token_file), "rest.auth.token": "from-key"}).auth_token
        == "from-key"
    )
    assert (
        MasterSettings.from_config(
            Configuration.from_mapping({"rest.auth.token-file": str(token_file)})
        ).rest.auth_token
        == "from-file"
    )
    with pytest.raises(ConfigurationError, match=r"rest.auth.token-file '.*missing' cannot be read: No such file"):
        _ = Configuration.from_mapping({"rest.auth.token-file": str(tmp_path / "missing")}).auth_token
    (tmp_path / "empty").write_text("  \n")
    with pytest.raises(ConfigurationError, match="is empty: write the token in it"):
        _ = Configuration.from_mapping({"rest.auth.token-file": str(tmp_path / "empty")}).auth_token


@pytest.mark.parametrize(
    ("bind", "token", "allow", "refused"),
    [
        ("127.0.0.1", "", False, False),
        ("localhost", "", False, False),
        ("::1", "", False, False),
        ("127.0.0.2", "", False, False),
        ("0.0.0.0", "", False, True),
        ("10.0.0.5", "", False, True),
        ("master-1", "", False, True),
        ("0.0.0.0", "s3cret", False, False),
        ("0.0.0.0", "", True, False),
    ],
)
def test_a_master_without_a_token_listens_on_loopback_only_unless_allowed(
    bind: str, token: str, allow: bool, refused: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPARKDISPATCH_AUTH_TOKEN", raising=False)
    rest = MasterSettings.from_config(
        Configuration.from_mapping(
            {"rest.bind-address": bind, "rest.auth.token": token, "rest.auth.allow-unauthenticated": allow}
        )
    ).rest
    if refused:
        with pytest.raises(
            ConfigurationError,
            match=f"would listen on {bind}:8081 without a token.*rest.auth.allow-unauthenticated: true",
        ):
            rest.check_exposure()
    else:
        rest.check_exposure()


def test_d_options_may_follow_the_command_as_flink_users_type_them() -> None:
    from sparkdispatch.entrypoint.cli import _parser

    args = _parser().parse_args(["-D", "rest.port=8082", "master", "-D", "rest.address=m-2", "-D", "a.b=c"])
    assert (args.command, args.overrides, args.late_overrides) == (
        "master",
        ["rest.port=8082"],
        ["rest.address=m-2", "a.b=c"],
    )
    args = _parser().parse_args(["run", "graph.json", "-D", "rest.port=1", "--wait"])
    assert (args.graph, args.wait, args.late_overrides) == ("graph.json", True, ["rest.port=1"])


def test_the_master_command_refuses_a_network_address_without_a_token(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sparkdispatch.entrypoint.cli import main

    monkeypatch.delenv("SPARKDISPATCH_AUTH_TOKEN", raising=False)
    assert main(["master", "-D", "rest.bind-address=0.0.0.0", "-D", "rest.port=0"]) == 2
    assert "sparkdispatch: the master would listen on 0.0.0.0:0 without a token" in capsys.readouterr().err
