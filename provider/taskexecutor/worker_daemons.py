"""The TaskExecutor's side of the worker-daemon template (worker_daemon_template.py).

`WorkerDaemonTemplate.start` puts the stub (worker_daemon_stub.py, as `sparkdispatch_worker_daemon`)
in a private directory and starts the template listening in another, short-named one under the
temporary directory (a socket's path has at most 107 bytes); `server_additions` gives what a
Connect server needs to use them: Spark's daemon module and the server's environment (the stub on
its Python path, the template's socket). Started from the TaskExecutor's main thread, the template
dies with the TaskExecutor. Should it die earlier, the stubs start their daemons anew: slower, not
wrong (the log says so once).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sparkdispatch.taskexecutor import worker_daemon_stub
from sparkdispatch.taskexecutor.job_environment import job_environment
from sparkdispatch.taskexecutor.worker_daemon_stub import STUB_MODULE, TEMPLATE_SOCKET_VARIABLE

log = logging.getLogger(__name__)

TEMPLATE_MODULE = "sparkdispatch.taskexecutor.worker_daemon_template"
DAEMON_MODULE_PROPERTY = "spark.python.daemon.module"
SOCKET_NAME = "template"
SOCKET_DIRECTORY_PREFIX = "sparkdispatch-daemons-"
#: A socket directory this old whose socket nobody serves is a killed TaskExecutor's: removed.
STALE_AFTER_S = 600.0
LOG_NAME = "template.log"


@dataclass(frozen=True)
class ServerAdditions:
    """What a Connect server's start adds to use the template: a Spark property and environment variables."""

    properties: dict[str, str]
    environment: dict[str, str]


class WorkerDaemonTemplate:
    """The template process of one TaskExecutor, with the stub and its log in `directory`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._socket_directory: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._said_dead = False

    @property
    def socket_path(self) -> Path:
        """Where the template listens (once started)."""
        if self._socket_directory is None:
            raise RuntimeError("the worker-daemon template was not started")
        return self._socket_directory / SOCKET_NAME

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start(self) -> None:
        """Copy the stub and start the template (from a thread that lives as long as the TaskExecutor)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o700)  # the stub there runs in every daemon
        remove_stale_socket_directories()
        # 0700, made by mkdtemp: the socket forks processes with the environment it is sent
        self._socket_directory = Path(tempfile.mkdtemp(prefix=SOCKET_DIRECTORY_PREFIX))
        shutil.copyfile(worker_daemon_stub.__file__, self.directory / f"{STUB_MODULE}.py")
        with open(self.directory / LOG_NAME, "ab") as log_file:
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    "-P",
                    "-m",
                    TEMPLATE_MODULE,
                    "--socket",
                    str(self.socket_path),
                    "--parent-pid",
                    str(os.getpid()),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=job_environment(),
            )
        log.info("started the worker-daemon template (pid %d), listening at %s", self._process.pid, self.socket_path)

    def alive(self) -> bool:
        """Whether the template runs (stubs that come before its imports are done start their daemons anew)."""
        if self._process is None or self._process.poll() is not None:
            if self._process is not None and not self._said_dead:
                self._said_dead = True
                log.warning(
                    "the worker-daemon template ended (%s): Spark's Python worker daemons start anew; see %s",
                    self._process.returncode,
                    self.directory / LOG_NAME,
                )
            return False
        return True

    def serving(self) -> bool:
        """Whether the template runs and listens (it listens once its imports are done)."""
        return self.alive() and self.socket_path.exists()

    def server_additions(self, environment: dict[str, str]) -> ServerAdditions:
        """The daemon module and the environment (on top of `environment`) of a server that uses the template."""
        python_path = os.pathsep.join(p for p in (str(self.directory), environment.get("PYTHONPATH", "")) if p)
        return ServerAdditions(
            properties={DAEMON_MODULE_PROPERTY: STUB_MODULE},
            environment={"PYTHONPATH": python_path, TEMPLATE_SOCKET_VARIABLE: str(self.socket_path)},
        )

    def stop(self) -> None:
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.kill()  # it holds nothing; the daemons it forked are not its to end
            self._process.wait()
        self._process = None
        if self._socket_directory is not None:
            shutil.rmtree(self._socket_directory, ignore_errors=True)


def remove_stale_socket_directories(now: float | None = None) -> int:
    """Remove this user's template socket directories left by TaskExecutors killed before they could
    (older than `STALE_AFTER_S`, their socket served by nobody); how many were removed."""
    now = time.time() if now is None else now
    removed = 0
    for directory in Path(tempfile.gettempdir()).glob(f"{SOCKET_DIRECTORY_PREFIX}*"):
        try:
            facts = directory.stat()
        except OSError:
            continue
        if facts.st_uid != os.getuid() or now - facts.st_mtime < STALE_AFTER_S or _served(directory / SOCKET_NAME):
            continue
        shutil.rmtree(directory, ignore_errors=True)
        removed += 1
    return removed


def _served(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True
