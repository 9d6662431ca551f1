"""The worker-daemon template: forks Spark's Python worker daemons with pyspark, pandas and pyarrow imported.

`python -P -m sparkdispatch.taskexecutor.worker_daemon_template --socket PATH --parent-pid P`,
started by a TaskExecutor with a local Spark master (`WorkerDaemonTemplate`, worker_daemons.py).
It imports what a Python worker imports for a UDF (`IMPORTS`), then listens on `PATH`. Each
connection is a stub Spark started as a Connect session's daemon (worker_daemon_stub.py): the
template forks a child that takes over the stub's standard streams, environment, working
directory and arguments and runs `pyspark.daemon.manager()`, which forks a worker per task as it
would have. A stub of another interpreter (a job's Python environment) is refused and starts its
daemon anew. No job code runs here: a daemon's workers import it, from their session's files.

Fork without exec is safe for the reasons slot_template.py gives (no thread of ours, the native
threads of the imports have fork handlers); a fork is refused, and the daemon started anew, when
a thread runs here. A daemon and its workers share the template's string-hash seed, as any fork
does (Python's hash of a string matters to the RDD API only, which Connect has not). A daemon is
not tied to the template: it ends when Spark closes its standard input (its server stopped or
died) or its stub passes SIGTERM on, so a template that dies fails no running task. The template
dies with the TaskExecutor (`PR_SET_PDEATHSIG`).

Messages, one JSON object per SOCK_SEQPACKET packet:

    stub → template    {"python", "prefix", "environment", "cwd", "argv"} + its descriptors 0, 1 and 2
    template → stub    {"pid": ...}                 the daemon forked
                       {"refused": "..."}           not forked, and why: the stub starts it anew
                       {"exited": ...}              the daemon ended, with this exit code
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import select
import signal
import socket
import sys
import traceback
from typing import Any

from sparkdispatch.taskexecutor.slot_process import configure_output, tie_to
from sparkdispatch.taskexecutor.slot_template import exit_at_once, fork_unsafe, freeze_imports, name_process, seed_anew
from sparkdispatch.taskexecutor.worker_daemon_stub import MAX_MESSAGE

#: What a Python worker of Spark 4.3 imports for a UDF (its Python UDFs use Arrow).
IMPORTS = ("pyspark.daemon", "pyspark.worker", "pyspark.sql.pandas.serializers", "pandas", "pyarrow")
TEMPLATE_NAME = "daemon-template"
#: The name of a forked daemon and of the workers it forks (/proc/PID/comm).
DAEMON_NAME = "pyspark-daemon"
STREAMS = 3


class DaemonTemplate:
    """The template's loop: forks a daemon per stub, reaps them and tells each stub how its daemon ended."""

    def __init__(self, listener: socket.socket) -> None:
        self._listener = listener
        # A job environment's interpreter is often a link to the same binary: its prefix tells it apart.
        self._python = {"python": sys.executable, "prefix": sys.prefix}
        self._children: dict[int, tuple[int, socket.socket]] = {}  # pidfd → (pid, the stub's channel)
        self._poller = select.poll()
        self._poller.register(listener, select.POLLIN)

    def serve(self) -> int:
        """Serve until this process dies; in a forked daemon, its exit code."""
        while True:
            for fd, _ in self._poller.poll():
                if fd != self._listener.fileno():
                    self._reap(fd)
                    continue
                code = self._accept()
                if code is not None:  # a daemon forked here, which ended
                    return code

    def _accept(self) -> int | None:
        try:
            channel, _ = self._listener.accept()
        except OSError:
            return None
        fds: list[int] = []
        request: Any = None
        try:
            channel.settimeout(5.0)
            body, fds, _, _ = socket.recv_fds(channel, MAX_MESSAGE, STREAMS)
            request = json.loads(body)
            refused = self._refusal(request, fds)
            if refused is not None:
                channel.send(json.dumps({"refused": refused}).encode())
        except (OSError, ValueError):
            refused = "unreadable"
        if refused is not None:
            for fd in fds:
                os.close(fd)
            channel.close()
            return None
        return self._fork(dict(request), fds, channel)

    def _fork(self, request: dict[str, Any], fds: list[int], channel: socket.socket) -> int | None:
        pid = os.fork()
        if pid == 0:
            return self._be_daemon(request, fds)
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)  # before it is reaped: this pidfd is of this child, whatever comes
        self._children[pidfd] = (pid, channel)
        self._poller.register(pidfd, select.POLLIN)
        try:
            channel.send(json.dumps({"pid": pid}).encode())
        except OSError:  # the stub is gone: Spark starts another daemon, this one must not stay
            os.kill(pid, signal.SIGTERM)
        return None

    def _refusal(self, request: Any, fds: list[int]) -> str | None:
        if not isinstance(request, dict) or len(fds) != STREAMS:
            return "a request is a JSON object and the stub's descriptors 0, 1 and 2"
        theirs = {key: request.get(key) for key in self._python}
        if theirs != self._python:
            return f"the stub runs {theirs}, the template {self._python}"
        return fork_unsafe()

    def _be_daemon(self, request: dict[str, Any], fds: list[int]) -> int:
        try:
            self._listener.close()
            for pidfd, (_, channel) in self._children.items():
                os.close(pidfd)
                channel.close()
            self._children.clear()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                if fd >= STREAMS:
                    os.close(fd)
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, signal.SIG_DFL)
            take_over(request)
            name_process(DAEMON_NAME)
            seed_anew()
            from pyspark.daemon import manager

            manager()
            return 0
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 - the child must not return into the template's loop
            traceback.print_exc()
            return 1

    def _reap(self, pidfd: int) -> None:
        pid, channel = self._children.pop(pidfd)
        self._poller.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        try:
            channel.send(json.dumps({"exited": os.waitstatus_to_exitcode(status)}).encode())
        except OSError:
            pass  # the stub is gone
        channel.close()


def take_over(request: dict[str, Any]) -> None:
    """Become the process Spark started as the stub: its environment, directory, arguments and path."""
    environment = {str(k): str(v) for k, v in dict(request["environment"]).items()}
    os.environ.clear()
    os.environ.update(environment)
    cwd = str(request["cwd"])
    os.chdir(cwd)
    sys.argv = [sys.argv[0], *(str(argument) for argument in request["argv"])]
    # as `python -m` would have put them: the directory, then PYTHONPATH, then the installed packages
    entries = [cwd, *(entry for entry in environment.get("PYTHONPATH", "").split(os.pathsep) if entry)]
    sys.path[:0] = [entry for entry in dict.fromkeys(entries) if entry not in sys.path]
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True, write_through=True)  # type: ignore[union-attr]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparkdispatch.taskexecutor.worker_daemon_template")
    parser.add_argument("--socket", required=True, help="where to listen for the stubs (a path)")
    parser.add_argument("--parent-pid", type=int, required=True, help="the TaskExecutor's process id")
    args = parser.parse_args(argv)
    tie_to(args.parent_pid)
    name_process(TEMPLATE_NAME)
    configure_output()
    for module in IMPORTS:
        importlib.import_module(module)
    freeze_imports()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listening = f"{args.socket}.{os.getpid()}"
    listener.bind(listening)
    listener.listen(64)
    os.replace(listening, args.socket)  # stubs find the socket only once it is served
    exit_at_once(DaemonTemplate(listener).serve())


if __name__ == "__main__":
    main()
