"""The slot-process template ("zygote"): forks slot processes that start with pyspark imported.

`python -P -m sparkdispatch.taskexecutor.slot_template --control-fd N --parent-pid P`, started by
a TaskExecutor's `SlotTemplate` (slot_forking.py). It imports what every slot process imports
(pyspark's Connect client with pandas, pyarrow and grpc, and the slot process's own modules) and
says `ready`; then, for each `fork`, it forks a child that is a slot process from there on
(slot_process.py: it says `ready` and is warmed and run as one started anew), serving the control
socket the `fork` carried. A job's code never runs here: it is imported by the child.

Fork without exec is safe because the template makes no gRPC object (channel, session) and starts
no thread: gRPC's core starts its threads and file descriptors with the first channel, which a
fork would not carry over (grpc's doc/fork_support.md: objects made only after fork need no fork
support), and a fork copies only the forking thread. A `fork` is refused, and the TaskExecutor
starts the process anew, if a Python thread or a gRPC thread runs here. The native threads the
imports start have their own fork handlers: numpy's OpenBLAS stops its pool before a fork and
starts it again when used, pyarrow's jemalloc disables its background thread in the child. The
child seeds its random state anew (Python's `random` does so itself after a fork, numpy's global
generator is seeded here); it shares the template's string-hash seed, as any fork does.

Lifelines: the template dies with the TaskExecutor (`PR_SET_PDEATHSIG`) and each child with the
template, so the kernel ends them all when the TaskExecutor is killed, even by SIGKILL; a
template that dies takes its children along, and the TaskExecutor starts another on the next
fork. A forked process is named `slot-process` (its command line is the template's, which is
named `slot-template`). The children are the template's, not the TaskExecutor's: the template reaps them and says
how each ended; the TaskExecutor watches and kills them through a pidfd each (Linux 5.3).

Messages, one JSON object per SOCK_SEQPACKET packet:

    TaskExecutor → template    {"type": "fork"} + the child's control socket (SCM_RIGHTS)
    template → TaskExecutor    {"type": "ready", "pid": ...}            once, the imports done
                               {"type": "forked", "pid": ...} + a pidfd of the child
                               {"type": "forked", "error": "..."}       not forked, and why
                               {"type": "exited", "pid": ..., "returncode": ...}

The template exits when the TaskExecutor closes its socket.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import select
import socket
import sys
import threading
import traceback
from pathlib import Path
from typing import NoReturn

from sparkdispatch.taskexecutor.slot_process import configure_output, import_connect_client, serve_slot, tie_to
from sparkdispatch.taskexecutor.slot_protocol import (
    EXITED,
    FORK,
    FORKED,
    READY,
    SLOT_PROCESS_NAME,
    TEMPLATE_NAME,
    receive_packet,
    send_packet,
)

log = logging.getLogger(__name__)

PR_SET_NAME = 15


def fork_unsafe() -> str | None:
    """Why forking now would be unsafe (a thread a fork would not carry over), or None."""
    if threading.active_count() != 1:
        return f"Python threads run in the template: {[t.name for t in threading.enumerate()]}"
    tasks = Path("/proc/self/task")
    names = [(tasks / tid / "comm").read_text().strip() for tid in os.listdir(tasks)]
    grpc_threads = [name for name in names if name.startswith("grpc")]
    if grpc_threads:
        return f"gRPC threads run in the template: {grpc_threads}"
    return None


class Template:
    """The template's loop: forks on request, reaps its children and says how they ended."""

    def __init__(self, channel: socket.socket) -> None:
        self._channel = channel
        self._children: dict[int, int] = {}  # pidfd → pid
        self._poller = select.poll()
        self._poller.register(channel, select.POLLIN)

    def serve(self) -> int:
        """Serve until the TaskExecutor closes the channel; returns the exit code (in a child, its own)."""
        send_packet(self._channel, {"type": READY, "pid": os.getpid()})
        while True:
            for fd, _ in self._poller.poll():
                if fd != self._channel.fileno():
                    self._reap(fd)
                    continue
                try:
                    message, fds = receive_packet(self._channel)
                except OSError:
                    return 0
                if message is None:
                    return 0
                if message["type"] != FORK or len(fds) != 1:
                    log.warning("the slot-process template ignores %r with %d descriptors", message, len(fds))
                    for extra in fds:
                        os.close(extra)
                    continue
                code = self._fork(fds[0])
                if code is not None:  # the child, whose slot process ended
                    return code

    def _fork(self, control_fd: int) -> int | None:
        """Fork a slot process serving `control_fd`; in the child, serve it and return its exit code."""
        unsafe = fork_unsafe()
        if unsafe is not None:
            os.close(control_fd)
            send_packet(self._channel, {"type": FORKED, "error": unsafe})
            return None
        template_pid = os.getpid()
        pid = os.fork()
        if pid == 0:
            return self._be_slot_process(control_fd, template_pid)
        os.close(control_fd)
        pidfd = os.pidfd_open(pid)  # before it is reaped: this pidfd is of this child, whatever comes
        self._children[pidfd] = pid
        self._poller.register(pidfd, select.POLLIN)
        send_packet(self._channel, {"type": FORKED, "pid": pid}, [pidfd])
        return None

    def _be_slot_process(self, control_fd: int, template_pid: int) -> int:
        try:
            self._channel.close()
            for pidfd in self._children:
                os.close(pidfd)
            self._children.clear()
            tie_to(template_pid)
            name_process(SLOT_PROCESS_NAME)
            seed_anew()
            return serve_slot(control_fd)
        except BaseException:  # noqa: BLE001 - the child must not return into the template's loop
            traceback.print_exc()
            return 1

    def _reap(self, pidfd: int) -> None:
        pid = self._children.pop(pidfd)
        self._poller.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        try:
            send_packet(self._channel, {"type": EXITED, "pid": pid, "returncode": os.waitstatus_to_exitcode(status)})
        except OSError:
            pass  # the TaskExecutor is gone; this process follows when it reads the channel


def name_process(name: str) -> None:
    """Name this process in `ps` and /proc/PID/comm (its command line stays the template's)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def freeze_imports() -> None:
    """Move the imports' objects to the collector's permanent generation: a child's collections then
    skip them instead of writing to (and so copying) every page they share with the template."""
    gc.collect()
    gc.freeze()


def exit_at_once(code: int) -> NoReturn:
    """Flush and exit without the exit handlers (a forked child too: the template's are not its)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def seed_anew() -> None:
    """The child draws other random numbers than the template and its siblings (`random` reseeds
    itself after a fork)."""
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparkdispatch.taskexecutor.slot_template")
    parser.add_argument("--control-fd", type=int, required=True, help="this end of the control socketpair")
    parser.add_argument("--parent-pid", type=int, required=True, help="the TaskExecutor's process id")
    args = parser.parse_args(argv)
    tie_to(args.parent_pid)
    name_process(TEMPLATE_NAME)
    configure_output()
    import_connect_client()
    freeze_imports()
    channel = socket.socket(fileno=args.control_fd)
    exit_at_once(Template(channel).serve())


if __name__ == "__main__":
    main()
