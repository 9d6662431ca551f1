"""The TaskExecutor's side of the slot-process template (slot_template.py): `SlotTemplate` starts
the template, has it fork slot processes, and starts another when it died; `ForkedProcess` is a
forked slot process as the pool sees it, with the subset of `subprocess.Popen` the pool uses.

A forked process is the template's child, not this process's: it is watched and killed through
the pidfd the template sends with it (never another process that got its pid since), and its
return code is the one the template says when it reaps it. The template is started, and asked to
fork, from the pool's spawner thread (`PR_SET_PDEATHSIG` fires when that thread ends).
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

from sparkdispatch.errors import SlotProcessLost
from sparkdispatch.taskexecutor.job_environment import job_environment
from sparkdispatch.taskexecutor.slot_protocol import EXITED, FORK, FORKED, READY, Message, receive_packet, send_packet

log = logging.getLogger(__name__)

TEMPLATE_MODULE = "sparkdispatch.taskexecutor.slot_template"
#: How long a forked process's return code is waited for once it ended, before it is taken for
#: a SIGKILL (the template died, and the kernel killed its children with it).
EXIT_REPORT_WAIT_S = 5.0


def start_python_module(
    module: str,
    *,
    what: str,
    python: str | None = None,
    arguments: tuple[str, ...] = (),
    kind: socket.SocketKind = socket.SOCK_STREAM,
) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """`python -P -m module --control-fd N --parent-pid P *arguments` in a job's environment (the
    TaskExecutor's interpreter by default), and this end of its control socketpair (of `kind`)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, kind)
    try:
        process = subprocess.Popen(
            [
                python or sys.executable,
                "-P",
                "-m",
                module,
                "--control-fd",
                str(theirs.fileno()),
                "--parent-pid",
                str(os.getpid()),
                *arguments,
            ],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            env=job_environment(),
        )
    except OSError as exc:
        ours.close()
        raise SlotProcessLost(f"could not start {what}: {exc}") from exc
    finally:
        theirs.close()
    return process, ours


class ForkedProcess:
    """A slot process the template forked: `poll`, `wait`, `kill`, `pid` and `returncode` as a `Popen`'s."""

    def __init__(self, pid: int, pidfd: int, template: SlotTemplate, generation: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd: int | None = pidfd
        self._template = template
        self._generation = generation  # of the template that forked it
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        return self._wait(0.0)

    def wait(self, timeout: float | None = None) -> int:
        returncode = self._wait(timeout)
        if returncode is None:
            raise subprocess.TimeoutExpired(f"slot process {self.pid}", timeout or 0.0)
        return returncode

    def kill(self) -> None:
        with self._lock:
            if self._pidfd is not None:
                try:
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
                except ProcessLookupError:
                    pass  # ended already

    def _wait(self, timeout: float | None) -> int | None:
        with self._lock:
            if self._pidfd is None:
                return self.returncode
            poller = select.poll()
            poller.register(self._pidfd, select.POLLIN)
            if not poller.poll(None if timeout is None else int(timeout * 1000)):
                return None
            os.close(self._pidfd)
            self._pidfd = None
            self.returncode = self._template.returncode_of(self.pid, self._generation)
            return self.returncode


class SlotTemplate:
    """One slot-process template, started when first asked to fork and again after it died."""

    def __init__(self, *, start_timeout: float) -> None:
        self._start_timeout = start_timeout
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._channel: socket.socket | None = None
        self._exits: dict[int, int] = {}  # pid → return code, as the template reported them
        self._generation = 0  # templates started so far
        self._closed = False

    @property
    def pid(self) -> int | None:
        """The running template's process id (None before it is started)."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def fork(self, control: socket.socket) -> ForkedProcess:
        """A slot process forked from the template (started now if it is not running), serving `control`.

        Raises `SlotProcessLost` if the template cannot be started or does not fork."""
        with self._lock:
            if self._closed:
                raise SlotProcessLost("the TaskExecutor's slot processes are stopping")
            if self._process is None or self._process.poll() is not None:
                self._start()
            assert self._channel is not None
            try:
                send_packet(self._channel, {"type": FORK}, [control.fileno()])
                answer, fds = self._next(FORKED, self._start_timeout)
            except OSError as exc:
                raise SlotProcessLost(f"the slot-process template did not fork: {exc}") from exc
            if answer.get("error") or len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                raise SlotProcessLost(f"the slot-process template did not fork: {answer.get('error')}")
            return ForkedProcess(int(answer["pid"]), fds[0], self, self._generation)

    def returncode_of(self, pid: int, generation: int) -> int:
        """The return code of a forked process that ended, as its template (the `generation`th) says
        once it reaped it; SIGKILL's if that template is gone, which took its children along."""
        deadline = time.monotonic() + EXIT_REPORT_WAIT_S
        with self._lock:
            while pid not in self._exits and self._channel is not None and generation == self._generation:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    self._next(None, remaining)
                except OSError:
                    break  # the template died (its children with it) or is slow: see below
            return self._exits.pop(pid, -signal.SIGKILL)

    def _next(self, kind: str | None, timeout: float) -> tuple[Message, list[int]]:
        """Read messages until one of `kind` (any, if None); exit reports on the way are recorded."""
        assert self._channel is not None
        deadline = time.monotonic() + timeout
        while True:
            self._channel.settimeout(max(deadline - time.monotonic(), 0.001))
            message, fds = receive_packet(self._channel)  # a timeout raises OSError
            if message is None:
                raise ConnectionResetError("the slot-process template closed its channel")
            if message["type"] == EXITED:
                self._exits[int(message["pid"])] = int(message["returncode"])
            if kind is None or message["type"] == kind:
                return message, fds
            for fd in fds:
                os.close(fd)

    def _start(self) -> None:
        """Start the template and wait for its imports (under the lock)."""
        if self._process is not None:
            log.warning(
                "the slot-process template %d ended (return code %s); starting another",
                self._process.pid,
                self._process.returncode,
            )
            self._drop()
        started = time.monotonic()
        process, ours = start_python_module(
            TEMPLATE_MODULE, what="the slot-process template", kind=socket.SOCK_SEQPACKET
        )
        self._process, self._channel = process, ours
        self._generation += 1
        try:
            self._next(READY, self._start_timeout)
        except (OSError, ValueError) as exc:
            self._drop()
            raise SlotProcessLost(f"the slot-process template did not start: {exc}") from exc
        log.info("slot-process template %d ready in %.2fs", process.pid, time.monotonic() - started)

    def _drop(self) -> None:
        """Kill and forget the template; its children die with it (their `PR_SET_PDEATHSIG`)."""
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            self._process.wait()
            self._process = None
        self._exits.clear()

    def close(self) -> None:
        """Stop the template (on the thread that started it, or after it ended)."""
        with self._lock:
            self._closed = True
            self._drop()
