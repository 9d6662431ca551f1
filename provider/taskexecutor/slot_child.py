"""One slot process as its TaskExecutor sees it (`SlotChild`): the process, its control channel,
the code and interpreter it is bound to and its job's Connect session; how one is started and
warmed (`spawn_slot_process`), and how one ended (`describe_exit`)."""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from sparkdispatch.errors import SlotProcessLost
from sparkdispatch.taskexecutor.connect_url import shown
from sparkdispatch.taskexecutor.python_workers import ReleasedSessions
from sparkdispatch.taskexecutor.settings import SlotPoolSettings
from sparkdispatch.taskexecutor.slot_forking import ForkedProcess, SlotTemplate, start_python_module
from sparkdispatch.taskexecutor.slot_protocol import (
    READY,
    SERVER,
    STOP,
    STOPPED,
    WARM,
    WARMED,
    ControlChannel,
    Message,
)

log = logging.getLogger(__name__)

SLOT_PROCESS_MODULE = "sparkdispatch.taskexecutor.slot_process"


def describe_exit(returncode: int) -> str:
    """How a process ended, from its return code: `exited with code 1`, `killed by signal 9 (SIGKILL)`."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        return f"killed by signal {-returncode}"
    hint = "; out of memory? the kernel's OOM killer sends it" if name == "SIGKILL" else ""
    return f"killed by signal {-returncode} ({name}{hint})"


#: What the pool does with a slot process (pid, poll, wait, kill): one started anew, or one forked
#: from the template (slot_forking.py), which answers the same calls.
ChildProcess = subprocess.Popen[bytes] | ForkedProcess


class SlotChild:
    """One slot process, as the pool sees it: the process, its channel and the code it is bound to."""

    def __init__(self, process: ChildProcess, channel: ControlChannel, python: str | None = None) -> None:
        self.process = process
        self.channel = channel
        self.python = python  # the interpreter of the job's Python environment it runs in, None for the base
        self.code: tuple[str, ...] | None = None  # the artifact files it runs
        self.connect_url: str | None = None  # the server it was last told of
        self.session: SlotSession | None = None  # its current job's Connect session
        self.running = False  # an attempt runs in it (the pool's lock guards this and the next)
        self.releases_after_attempt = False  # told to move while running: its session goes after the attempt

    def tell_server(self, connect_url: str, released: ReleasedSessions) -> None:
        """Move the process to the server at `connect_url` (it releases its sessions elsewhere, after
        the attempt it runs, if any); a process gone meanwhile is left to its run or its replacement."""
        if self.connect_url == connect_url:
            return
        self.connect_url = connect_url
        if self.running:
            self.releases_after_attempt = True
        else:
            self.forget_session(released)
        try:
            self.channel.send({"type": SERVER, "connect_url": connect_url})
        except OSError:
            pass

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def receive(self, timeout: float | None) -> Message | None:
        self.channel.settimeout(timeout)
        try:
            return self.channel.receive()
        finally:
            self.channel.settimeout(None)

    def ended(self, wait_s: float) -> str:
        """How the process ended, waiting up to `wait_s` for it (killing it after that)."""
        try:
            returncode = self.process.wait(wait_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            returncode = self.process.wait()
        return describe_exit(returncode)

    def stop(self, grace_s: float, released: ReleasedSessions) -> None:
        """Ask the process to release its sessions and exit (those it made ahead unused go into
        `released`); kill it after `grace_s`."""
        deadline = time.monotonic() + grace_s
        try:
            self.channel.send({"type": STOP})
            while (message := self.receive(max(deadline - time.monotonic(), 0.001))) is not None:
                if message["type"] == STOPPED:
                    released.add_all(message.get("released", ()))
                    break
        except OSError:
            pass  # gone already, or it did not answer in time
        try:
            self.process.wait(max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            log.warning("slot process %d did not stop within %gs; killing it", self.pid, grace_s)
            self.process.kill()
            self.process.wait()
        self.channel.close()

    def forget_session(self, released: ReleasedSessions) -> None:
        """The process releases its job's session, or has gone: Spark's workers of it may go too."""
        if self.session is not None:
            released.add(self.session.server_session_id)
            self.session = None

    def kill(self) -> None:
        if self.alive:
            self.process.kill()
        self.process.wait()
        self.channel.close()


@dataclass(frozen=True)
class SlotSession:
    """A slot process's Connect session: its id, the server's own id of it, and the server's address."""

    session_id: str
    server_session_id: str | None
    connect_url: str


def spawn_slot_process(
    settings: SlotPoolSettings, connect_url: Callable[[], str], *, require_warm: bool, python: str | None = None
) -> SlotChild:
    """Start a slot process (in `python`, a job's environment, if given), wait for it to import
    the Connect client, and warm it against the server `connect_url()` names then (on the pool's
    spawner thread)."""
    started = time.monotonic()
    process, ours = start_python_module(
        SLOT_PROCESS_MODULE,
        what="a slot process",
        python=python,
        arguments=("--udf-python", python) if python is not None else (),
    )
    return _warmed(settings, SlotChild(process, ControlChannel(ours), python), connect_url, require_warm, started)


def fork_slot_process(
    settings: SlotPoolSettings, template: SlotTemplate, connect_url: Callable[[], str], *, require_warm: bool
) -> SlotChild:
    """A slot process forked from `template`, warmed as `spawn_slot_process` warms one (on the pool's
    spawner thread); raises `SlotProcessLost` if the template does not fork."""
    started = time.monotonic()
    ours, theirs = socket.socketpair()
    try:
        process = template.fork(theirs)
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return _warmed(settings, SlotChild(process, ControlChannel(ours)), connect_url, require_warm, started)


def _warmed(
    settings: SlotPoolSettings, child: SlotChild, connect_url: Callable[[], str], require_warm: bool, started: float
) -> SlotChild:
    """`child` once it said it is ready and made a session's first calls; killed if it fails to."""
    try:
        _expect(settings, child, READY, started)
        ready = time.monotonic()
        child.connect_url = connect_url()
        child.channel.send({"type": WARM, "connect_url": child.connect_url, "python_workers": settings.python_workers})
        warmed = _expect(settings, child, WARMED, started)
    except BaseException:
        child.kill()
        raise
    if warmed.get("error"):
        if require_warm:
            child.kill()
            raise SlotProcessLost(
                f"a slot process could not warm up against the Spark Connect server at "
                f"{shown(child.connect_url)}: {warmed['error']}"
            )
        log.warning(
            "slot process %d could not warm up against %s: %s", child.pid, shown(child.connect_url), warmed["error"]
        )
    now = time.monotonic()
    log.info(
        "slot process %d ready in %.2fs (%s %.2fs, warmed %.2fs)",
        child.pid,
        now - started,
        "spawned and imported" if isinstance(child.process, subprocess.Popen) else "forked",
        ready - started,
        now - ready,
    )
    return child


def _expect(settings: SlotPoolSettings, child: SlotChild, kind: str, started: float) -> Message:
    remaining = settings.start_timeout - (time.monotonic() - started)
    message = child.receive(timeout=max(remaining, 0.001))
    if message is not None and message["type"] == kind:
        return message
    if child.alive:
        raise SlotProcessLost(f"slot process {child.pid} did not say {kind!r} within {settings.start_timeout:g}s")
    raise SlotProcessLost(f"slot process {child.pid} {child.ended(0.0)} while starting")
