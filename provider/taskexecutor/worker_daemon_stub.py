"""Spark's Python worker daemon of a Connect session, forked from the worker-daemon template when it
can be (worker_daemon_template.py). Standard library only: any interpreter Spark starts runs it.

A TaskExecutor with a local Spark master copies this file onto its Connect server's Python path as
`sparkdispatch_worker_daemon.py` and names it Spark's daemon module (`spark.python.daemon.module`).
Spark starts a daemon per Connect session, at the session's first Python UDF (SPARK-54055), and a
daemon started anew imports pyspark, pandas and pyarrow before its first worker serves: most of a
job's first UDF. This stub hands its standard streams, environment, working directory and
arguments to the template, which forks a process that has them imported and runs
`pyspark.daemon.manager()` there; the stub stays as the process Spark knows, passes SIGTERM,
SIGINT and SIGHUP on to the daemon and exits with its code.

Where the template cannot serve (none named in the environment, not listening, or another
interpreter: a job's Python environment), the stub runs `pyspark.daemon.manager()` itself, as
Spark would have. Should the template answer nothing after it took the streams, the stub exits
with an error rather than start a second daemon on them; Spark starts the session's daemon again.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys

#: The template's socket, in the Connect server's environment (so in every daemon's Spark starts).
TEMPLATE_SOCKET_VARIABLE = "SPARKDISPATCH_WORKER_DAEMON_TEMPLATE"
#: The name this file is copied under, and the module Spark is told to run.
STUB_MODULE = "sparkdispatch_worker_daemon"
MAX_MESSAGE = 1 << 20
#: How long the daemon's exit code is waited for once the daemon ended.
EXIT_CODE_WAIT_S = 1.0


class TemplateRefused(Exception):
    """The template did not fork a daemon for this stub, before it took anything over."""


def main() -> int:
    path = os.environ.get(TEMPLATE_SOCKET_VARIABLE)
    if path:
        try:
            channel, pid = forked_by_template(path)
        except TemplateRefused as refused:
            print(f"sparkdispatch: the worker daemon starts anew: {refused}", file=sys.stderr, flush=True)
        else:
            return stand_in_for(channel, pid)
    from pyspark.daemon import manager

    manager()
    return 0


def forked_by_template(path: str) -> tuple[socket.socket, int]:
    """Ask the template at `path` to fork this session's daemon: the channel it reports on, and the daemon's pid."""
    channel = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        channel.connect(path)
    except OSError as exc:
        channel.close()
        raise TemplateRefused(f"the template at {path} does not answer ({exc})") from exc
    request = {
        "python": sys.executable,
        "prefix": sys.prefix,
        "environment": dict(os.environ),
        "cwd": os.getcwd(),
        "argv": sys.argv[1:],
    }
    try:
        socket.send_fds(channel, [json.dumps(request).encode()], [0, 1, 2])
        answer = json.loads(channel.recv(MAX_MESSAGE) or b"null")
    except (OSError, ValueError) as exc:
        # It may have forked a daemon on these streams already: a second one must not start on them.
        print(f"sparkdispatch: the worker-daemon template failed: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(1) from exc
    if isinstance(answer, dict) and isinstance(answer.get("pid"), int):
        return channel, answer["pid"]
    channel.close()
    if isinstance(answer, dict) and "refused" in answer:
        raise TemplateRefused(str(answer["refused"]))
    print(f"sparkdispatch: the worker-daemon template answered {answer!r}", file=sys.stderr, flush=True)
    raise SystemExit(1)


def stand_in_for(channel: socket.socket, pid: int) -> int:
    """Stay until daemon `pid` ends, passing signals on; its exit code (128 + N for signal N)."""

    def pass_on(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, pass_on)
    try:
        ended: int | None = os.pidfd_open(pid)
    except OSError:
        ended = None  # already reaped by the template: its report is on the channel
    watched: list[int | socket.socket] = [channel] + ([ended] if ended is not None else [])
    while watched:
        ready, _, _ = select.select(watched, [], [])
        if channel in ready:
            code = _exit_code(channel)
            if code is not None:
                return code
            watched.remove(channel)  # the template is gone; the daemon lives on, reparented
        if ended is not None and ended in ready:
            if channel in watched and select.select([channel], [], [], EXIT_CODE_WAIT_S)[0]:
                code = _exit_code(channel)
                if code is not None:
                    return code
            return 0
    return 0


def _exit_code(channel: socket.socket) -> int | None:
    """The daemon's exit code as the template reported it, or None when the template closed the channel."""
    try:
        message = json.loads(channel.recv(MAX_MESSAGE) or b"null")
    except (OSError, ValueError):
        return None
    if not isinstance(message, dict) or not isinstance(message.get("exited"), int):
        return None
    code = int(message["exited"])
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
