"""Several hosts on one machine: each process group in a Linux network namespace of its own.

`HostNetwork` makes a bridge with an address of its own (the test process, the "client", talks
to every host through it) and one namespace per host, joined to the bridge by a veth pair, each
with its own address. `MultiHostCluster` starts on them what docker-compose.yaml starts on its
containers, from the same configuration file (docker/sparkdispatch.yaml, its host names replaced
by the hosts' addresses) and commands: a 3-node ZooKeeper ensemble, Redis, two masters
(`sparkdispatch --config ... -D rest.address=... master`) and TaskExecutors (`... taskexecutor`).
Partitions: `cut(host)` takes a host's link down, `drop(host)` makes its interface drop every
packet it sends (a `blackhole` qdisc), `separate(host, peers)` cuts it off from some hosts only
(blackhole routes both ways, the rest of the network unaffected); `heal(host)` undoes them all.

Needs root (CAP_NET_ADMIN) and `ip` (iproute2). `python -m sparkdispatch.testing.hosts up`
starts the cluster and prints where everything is, until Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import yaml

from sparkdispatch.testing.services import ZOOKEEPER_JARS, ServiceMissing, file_tail, kill_process_group

ZOOKEEPER_PORT = 2181
REDIS_PORT = 6379
REST_PORT = 8081
CLUSTER_TOKEN = "multi-host-token"
ZOOKEEPER_AUTH = "sparkdispatch:multi-host-zk-password"  # the digest ACL identity compose's processes use
REDIS_PASSWORD = "multi-host-redis-password"
COMPOSE_CONFIG = Path(__file__).resolve().parents[2] / "docker" / "sparkdispatch.yaml"
# docker-compose.yaml's services → the hosts that stand in for them
COMPOSE_HOSTS = {
    "zookeeper-1": "zookeeper-1",
    "zookeeper-2": "zookeeper-2",
    "zookeeper-3": "zookeeper-3",
    "redis": "redis",
    "sparkdispatch-master-1": "master-1",
    "sparkdispatch-master-2": "master-2",
    "sparkdispatch-taskexecutor-1": "taskexecutor-1",
    "sparkdispatch-taskexecutor-2": "taskexecutor-2",
}


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def master_command(config_file: Path, address: str) -> list[str]:
    """docker-compose.yaml's master command (`sparkdispatch` run as `python -m sparkdispatch.entrypoint.cli`)."""
    return ["sparkdispatch.entrypoint.cli", "--config", str(config_file), "-D", f"rest.address={address}", "master"]


def task_executor_command(config_file: Path, name: str, address: str, spark_master: str) -> list[str]:
    """docker-compose.yaml's TaskExecutor command."""
    return [
        "sparkdispatch.entrypoint.cli",
        "--config",
        str(config_file),
        "-D",
        f"taskexecutor.id={name}",
        "-D",
        f"spark.master={spark_master}",
        "-D",
        f"spark.driver.host={address}",
        "taskexecutor",
    ]


def available() -> bool:
    """Whether this process may make network namespaces (root and iproute2)."""
    return os.geteuid() == 0 and shutil.which("ip") is not None


@dataclass
class Host:
    """A network namespace with one interface on the bridge."""

    name: str  # the role, e.g. "master-1"
    namespace: str
    address: str
    inner: str  # the interface inside the namespace
    outer: str  # its peer on the bridge

    def popen(self, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Run `argv` on this host (in its namespace), in a process group of its own."""
        with open(log, "ab") as out:
            return subprocess.Popen(
                ["ip", "netns", "exec", self.namespace, *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **(env or {})},
            )


class HostNetwork:
    """A bridge and the namespaces on it; `close()` removes them all."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:4]
        self.prefix = f"sd{tag}"
        self.subnet = f"10.{random.randint(100, 250)}.{random.randint(0, 250)}"
        self.bridge = f"{self.prefix}br"
        self.gateway = f"{self.subnet}.1"
        self.hosts: dict[str, Host] = {}
        self._separated: set[tuple[str, str]] = set()  # (host, peer): host's packets to peer are dropped
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "up")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)

    def add(self, name: str) -> Host:
        index = len(self.hosts) + 10
        host = Host(
            name=name,
            namespace=f"{self.prefix}-{name}",
            address=f"{self.subnet}.{index}",
            inner=f"{self.prefix}i{index}",
            outer=f"{self.prefix}o{index}",
        )
        _ip("netns", "add", host.namespace)
        _ip("link", "add", host.outer, "type", "veth", "peer", "name", host.inner)
        _ip("link", "set", host.inner, "netns", host.namespace)
        _ip("link", "set", host.outer, "master", self.bridge)
        _ip("link", "set", host.outer, "up")
        _ip("netns", "exec", host.namespace, "ip", "addr", "add", f"{host.address}/24", "dev", host.inner)
        _ip("netns", "exec", host.namespace, "ip", "link", "set", host.inner, "up")
        _ip("netns", "exec", host.namespace, "ip", "link", "set", "lo", "up")
        self.hosts[name] = host
        return host

    def cut(self, name: str) -> None:
        """Take the host's link down: nothing gets in or out."""
        _ip("link", "set", self.hosts[name].outer, "down")

    def drop(self, name: str) -> None:
        """The host's interface drops every packet it sends (its link stays up)."""
        host = self.hosts[name]
        subprocess.run(
            ["ip", "netns", "exec", host.namespace, "tc", "qdisc", "replace", "dev", host.inner, "root", "blackhole"],
            check=True,
            capture_output=True,
        )

    def separate(self, name: str, peers: Sequence[str]) -> None:
        """Drop every packet between the host and each of `peers`, both ways; other traffic flows."""
        for peer in peers:
            for source, target in ((name, peer), (peer, name)):
                self._blackhole("replace", source, target)
                self._separated.add((source, target))

    def heal(self, name: str) -> None:
        """Undo every partition of the host: link, dropped packets, separations."""
        host = self.hosts[name]
        subprocess.run(
            ["ip", "netns", "exec", host.namespace, "tc", "qdisc", "del", "dev", host.inner, "root"],
            capture_output=True,
        )
        _ip("link", "set", host.outer, "up")
        for source, target in [pair for pair in self._separated if name in pair]:
            self._blackhole("del", source, target)
            self._separated.discard((source, target))

    def _blackhole(self, action: str, source: str, target: str) -> None:
        """`ip route <action> blackhole <target>/32` inside `source`: its packets to `target` dropped, or not."""
        _ip(
            "netns",
            "exec",
            self.hosts[source].namespace,
            "ip",
            "route",
            action,
            "blackhole",
            f"{self.hosts[target].address}/32",
        )

    def close(self) -> None:
        for host in self.hosts.values():
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True)
            subprocess.run(["ip", "link", "del", host.outer], capture_output=True)
        self.hosts.clear()
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


class MultiHostCluster:
    """ZooKeeper ×3, Redis, `masters` masters and `task_executors` TaskExecutors, each on a host."""

    def __init__(
        self,
        *,
        masters: int = 2,
        task_executors: int = 2,
        extra: Mapping[str, str] | None = None,
        workdir: Path | None = None,
        spark_master: str = "local[1]",
    ) -> None:
        if not available():
            raise ServiceMissing("the multi-host topology needs root (CAP_NET_ADMIN) and iproute2's `ip`")
        if not all(os.path.exists(jar) for jar in ZOOKEEPER_JARS):
            raise ServiceMissing("the ZooKeeper ensemble needs Debian's zookeeper package")
        if not COMPOSE_CONFIG.is_file():
            raise ServiceMissing(f"the topology is built from {COMPOSE_CONFIG} (a checkout's docker/), not found")
        self.master_count = masters
        self.task_executor_count = task_executors
        self.extra = dict(extra or {})
        self.spark_master = spark_master  # compose's is its spark-master service
        # as compose passes the credentials: in the environment
        self._env = {
            "SPARKDISPATCH_AUTH_TOKEN": CLUSTER_TOKEN,
            "SPARKDISPATCH_ZOOKEEPER_AUTH": ZOOKEEPER_AUTH,
            "SPARKDISPATCH_BROKER_PASSWORD": REDIS_PASSWORD,
        }
        self._config = Path()
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="sparkdispatch-hosts-"))
        self.network: HostNetwork | None = None
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    # -- addresses --------------------------------------------------------------------------

    def host(self, name: str) -> Host:
        assert self.network is not None
        return self.network.hosts[name]

    @property
    def quorum(self) -> str:
        return ",".join(f"{self.host(f'zookeeper-{n}').address}:{ZOOKEEPER_PORT}" for n in (1, 2, 3))

    @property
    def master_addresses(self) -> list[str]:
        return [f"http://{self.host(f'master-{n}').address}:{REST_PORT}" for n in range(1, self.master_count + 1)]

    def config_file(self) -> Path:
        """docker/sparkdispatch.yaml, the compose deployment's configuration, with the compose host
        names replaced by the hosts' addresses and `extra` on top; written into the work dir."""
        text = COMPOSE_CONFIG.read_text()
        for service, host in COMPOSE_HOSTS.items():
            if service in ("redis",) or service.startswith("zookeeper-"):
                text = re.sub(rf"\b{service}(?=:\d)", self.host(host).address, text)  # host:port only
        keys: dict[str, object] = yaml.safe_load(text)
        keys.update({"storage.dir": str(self.workdir / "storage"), **self.extra})
        path = self.workdir / "sparkdispatch.yaml"
        path.write_text(yaml.safe_dump(keys, sort_keys=False))
        return path

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, *, timeout: float = 120.0) -> None:
        self.network = HostNetwork()
        try:
            for name in (
                "zookeeper-1",
                "zookeeper-2",
                "zookeeper-3",
                "redis",
                *(f"master-{n}" for n in range(1, self.master_count + 1)),
                *(f"taskexecutor-{n}" for n in range(1, self.task_executor_count + 1)),
            ):
                self.network.add(name)
            self._config = self.config_file()
            for n in (1, 2, 3):
                self._start_zookeeper(n)
            redis_config = self.workdir / "redis.conf"  # its password in a file, as compose writes it
            redis_config.write_text(f"requirepass {REDIS_PASSWORD}\n")
            redis_config.chmod(0o600)
            self._start(
                "redis",
                [
                    "redis-server",
                    str(redis_config),
                    "--port",
                    str(REDIS_PORT),
                    "--bind",
                    self.host("redis").address,
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--protected-mode",
                    "no",
                    "--dir",
                    str(self.workdir),
                ],
            )
            for n in range(1, self.master_count + 1):
                self.start_master(n)
            for n in range(1, self.task_executor_count + 1):
                self.start_task_executor(n)
        except BaseException:
            self.stop()
            raise

    def _start_zookeeper(self, n: int) -> None:
        data = self.workdir / f"zookeeper-{n}"
        data.mkdir(parents=True, exist_ok=True)
        (data / "myid").write_text(f"{n}\n")
        servers = "".join(f"server.{m}={self.host(f'zookeeper-{m}').address}:2888:3888\n" for m in (1, 2, 3))
        config = data / "zoo.cfg"
        config.write_text(
            # tickTime 500: a dead session expires within half a second of its timeout
            f"tickTime=500\ninitLimit=20\nsyncLimit=10\ndataDir={data}\nclientPort={ZOOKEEPER_PORT}\n"
            f"clientPortAddress={self.host(f'zookeeper-{n}').address}\nadmin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat,mntr\nmaxClientCnxns=500\nminSessionTimeout=2000\n"
            f"maxSessionTimeout=60000\n{servers}"
        )
        self._start(
            f"zookeeper-{n}",
            [
                "java",
                "-Xmx256m",
                "-Dzookeeper.admin.enableServer=false",
                "-cp",
                ":".join(ZOOKEEPER_JARS),
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                str(config),
            ],
        )

    def start_master(self, n: int) -> None:
        host = self.host(f"master-{n}")
        self._start(host.name, [sys.executable, "-m", *master_command(self._config, host.address)], env=self._env)

    def start_task_executor(self, n: int) -> None:
        host = self.host(f"taskexecutor-{n}")
        self._start(
            host.name,
            [sys.executable, "-m", *task_executor_command(self._config, host.name, host.address, self.spark_master)],
            env={**self._env, "SPARK_LOCAL_IP": host.address},
        )

    def _start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        self.processes[name] = self.host(name).popen(argv, self.workdir / f"{name}.log", env=env)

    def kill(self, name: str) -> None:
        """SIGKILL the process (group) of one host."""
        process = self.processes.get(name)
        if process is not None:
            kill_process_group(process)

    def log_lines(self, name: str) -> list[str]:
        """What the host's processes printed so far."""
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace").splitlines() if path.exists() else []

    def log_tail(self, name: str, lines: int = 30) -> str:
        return file_tail(self.workdir / f"{name}.log", lines)

    def stop(self) -> None:
        for process in self.processes.values():
            kill_process_group(process)
        self.processes.clear()
        if self.network is not None:
            self.network.close()
            self.network = None

    def __enter__(self) -> MultiHostCluster:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sparkdispatch.testing.hosts", description="the multi-host test topology on network namespaces"
    )
    parser.add_argument("command", choices=["up"])
    parser.add_argument("--task-executors", type=int, default=2)
    args = parser.parse_args(argv)
    cluster = MultiHostCluster(task_executors=args.task_executors)
    cluster.start()
    try:
        assert cluster.network is not None
        for host in cluster.network.hosts.values():
            print(f"{host.name:<16} {host.address:<16} netns {host.namespace}")
        print(
            f"masters: {', '.join(cluster.master_addresses)} (token {CLUSTER_TOKEN}); "
            f"logs in {cluster.workdir}; Ctrl-C stops everything"
        )
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
