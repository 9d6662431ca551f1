"""Real ZooKeeper and Redis servers as child processes on free loopback ports.

Used by the test fixtures, the benchmarks and local clusters. Each server is started by
`start()` and stopped by `stop()` (also on `with`), which kills the whole process and removes
its data directory; nothing outlives its owner. `pause()`/`resume()` (SIGSTOP/SIGCONT) and
`restart(down_s)` (a crash, then the same port and data) are the faults tests inject.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any
from types import TracebackType

ZOOKEEPER_JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar")


class ServiceMissing(RuntimeError):
    """The program a service needs is not installed on this machine."""


def python_module(module: str, *, log_level: str | None = None) -> list[str]:
    """The command running `python -m module` in this interpreter, with `--log-level` when given."""
    return [sys.executable, "-m", module, *(("--log-level", log_level) if log_level is not None else ())]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def file_tail(path: Path, lines: int) -> str:
    """The last `lines` lines of a log file ("" while it does not exist)."""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


def kill_process_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL a child started with `start_new_session=True` and everything in its group, as a machine dying."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(timeout=30)


def stop_process_group(process: subprocess.Popen[Any], *, grace: float = 15.0) -> None:
    """SIGTERM the process group of `process` (started with start_new_session), SIGKILL after `grace`."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    except ProcessLookupError:
        pass


def wait_for_port(port: int, *, timeout: float, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the process exited with {process.returncode} before it listened on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listened on 127.0.0.1:{port} within {timeout:.0f}s")


class _ChildServer(ABC):
    name = "server"

    start_timeout = 30.0  # seconds until the server must listen

    def __init__(self) -> None:
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.workdir: Path | None = None
        self._argv: list[str] = []
        self._log_name = ""

    def __enter__(self) -> _ChildServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @abstractmethod
    def start(self) -> None:
        """Start the server and wait until it listens."""

    def _spawn(self, argv: list[str], log_name: str) -> None:
        assert self.workdir is not None
        self._argv, self._log_name = argv, log_name
        log = open(self.workdir / log_name, "ab")
        try:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        finally:
            log.close()

    def pause(self) -> None:
        """SIGSTOP the server: clients see it hang, as in a network partition."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def restart(self, down_s: float = 0.0) -> None:
        """Kill the server (a crash), wait `down_s` seconds, start it again on the same port with the
        same data directory, and wait until it listens."""
        assert self.process is not None and self.workdir is not None
        self._kill_process()
        time.sleep(down_s)
        self._spawn(self._argv, self._log_name)
        wait_for_port(self.port, timeout=self.start_timeout, process=self.process)

    def _kill_process(self) -> None:
        """SIGKILL the server's process group (resumed first if paused); its data directory stays."""
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGCONT)
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=10)

    def stop(self) -> None:
        """Kill the server (resuming it first if paused) and remove its data."""
        self._kill_process()
        self.process = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def log_tail(self, lines: int = 30) -> str:
        if self.workdir is None:
            return ""
        return "\n".join(file_tail(log, lines) for log in sorted(self.workdir.glob("*.log")))


class ZooKeeperServer(_ChildServer):
    """A single ZooKeeper server (Debian's `zookeeper` package) with tickTime 1s.

    tickTime 1000 lets clients ask for sessions between 2 and 20 seconds.
    """

    name = "ZooKeeper"

    def __init__(self, *, port: int = 0, java: str = "java") -> None:
        super().__init__()
        self.requested_port = port
        self.java = java

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    @staticmethod
    def available() -> bool:
        return all(os.path.exists(jar) for jar in ZOOKEEPER_JARS) and shutil.which("java") is not None

    def start(self) -> None:
        if not self.available():
            raise ServiceMissing(
                "ZooKeeper needs `java` and Debian's zookeeper package "
                "(apt-get install zookeeper): " + ", ".join(ZOOKEEPER_JARS)
            )
        self.port = self.requested_port or free_port()
        self.workdir = Path(tempfile.mkdtemp(prefix="sparkdispatch-zk-"))
        (self.workdir / "data").mkdir()
        (self.workdir / "zoo.cfg").write_text(
            "tickTime=1000\ninitLimit=10\nsyncLimit=5\n"
            f"dataDir={self.workdir / 'data'}\nclientPort={self.port}\nclientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,stat,mntr,envi\n"
            "maxClientCnxns=500\nminSessionTimeout=2000\nmaxSessionTimeout=60000\n"
        )
        self._spawn(
            [
                self.java,
                "-Xmx256m",
                "-Dzookeeper.admin.enableServer=false",
                "-cp",
                ":".join(ZOOKEEPER_JARS),
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                str(self.workdir / "zoo.cfg"),
            ],
            "zookeeper.log",
        )
        try:
            wait_for_port(self.port, timeout=self.start_timeout, process=self.process)
        except Exception:  # noqa: BLE001 - raised again with the log's tail
            tail = self.log_tail()
            self.stop()
            raise RuntimeError(f"ZooKeeper did not start:\n{tail}") from None


class RedisServer(_ChildServer):
    """A Redis server with no persistence; with `password`, clients must give it (its `url` does)."""

    name = "Redis"
    start_timeout = 15.0

    def __init__(self, *, port: int = 0, executable: str = "redis-server", password: str = "") -> None:
        super().__init__()
        self.requested_port = port
        self.executable = executable
        self.password = password

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def available(self) -> bool:
        return shutil.which(self.executable) is not None

    def start(self) -> None:
        if not self.available():
            raise ServiceMissing("Redis needs `redis-server` (apt-get install redis-server)")
        self.port = self.requested_port or free_port()
        self.workdir = Path(tempfile.mkdtemp(prefix="sparkdispatch-redis-"))
        conf = self.workdir / "redis.conf"  # the password in a file, not on the command line
        conf.write_text(f"requirepass {self.password}\n" if self.password else "")
        conf.chmod(0o600)
        self._spawn(
            [
                self.executable,
                str(conf),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
                "--daemonize",
                "no",
            ],
            "redis.log",
        )
        try:
            wait_for_port(self.port, timeout=self.start_timeout, process=self.process)
        except Exception:  # noqa: BLE001 - raised again with the log's tail
            tail = self.log_tail()
            self.stop()
            raise RuntimeError(f"Redis did not start:\n{tail}") from None
