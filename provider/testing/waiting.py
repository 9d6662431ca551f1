"""One way to wait: `eventually(predicate, what)` asks `predicate()` at a fixed interval until what it
returns is true, and returns that; it fails naming `what` (with the logs of the processes it
watched) once `timeout` seconds pass, or at once if one of those processes ends.

`eventually` waits on the caller's loop, and `predicate` may be a coroutine function;
`eventually_blocking` is its twin for synchronous code (benchmarks, `LocalCluster`, threads).
A poll that fetches something (a JobResult, a leader's address) is a wait too: the predicate
returns it, or something false while there is nothing yet.

The interval is a fixed rate, not a pause after each answer: a predicate that took longer than
the interval (a long-polling HTTP call) is asked again at once, a quick one no more often than
once per interval, so no wait turns into a busy loop on the machine it measures.
"""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar, overload

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_INTERVAL_S = 0.02


class Watched(Protocol):
    """A process a wait gives up on as soon as it ends (a TaskExecutor, a whole local cluster)."""

    def exited(self) -> str | None:
        """None while it runs; else how it ended, with the tail of its log."""

    def logs(self) -> str:
        """What a timed-out wait reports of it: its log's tail, or where its logs are."""


class WatchedProcess:
    """A child process a test started, as its waits watch it: `log()` gives what it wrote (its tail is
    reported when it exits or a wait times out)."""

    def __init__(self, name: str, process: subprocess.Popen[bytes], log: Callable[[], str]) -> None:
        self.name = name
        self.process = process
        self.log = log

    def exited(self) -> str | None:
        if self.process.poll() is None:
            return None
        return f"{self.name} exited with {self.process.returncode}:\n{self._tail()}"

    def logs(self) -> str:
        return f"--- {self.name}\n{self._tail()}"

    def _tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])


class WaitTimedOut(TimeoutError, AssertionError):
    """What was waited for did not come in time: a failed expectation to a test, and a
    TimeoutError to harness code that tries something else when a wait runs out."""


class WatchedProcessExited(RuntimeError, AssertionError):
    """A watched process ended while a wait went on: it will not come any more."""


@overload
async def eventually(
    predicate: Callable[[], Awaitable[T | None]],
    what: str,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    interval: float = DEFAULT_INTERVAL_S,
    processes: Sequence[Watched] = (),
) -> T: ...


@overload
async def eventually(
    predicate: Callable[[], T | None],
    what: str,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    interval: float = DEFAULT_INTERVAL_S,
    processes: Sequence[Watched] = (),
) -> T: ...


async def eventually(
    predicate: Callable[[], T | None | Awaitable[T | None]],
    what: str,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    interval: float = DEFAULT_INTERVAL_S,
    processes: Sequence[Watched] = (),
) -> T:
    """The first true value of `predicate()` (awaited when it is awaitable), asked every `interval`
    seconds; `WaitTimedOut` after `timeout` seconds, `WatchedProcessExited` if one of `processes` ends."""
    pace = _Pace(what, timeout=timeout, interval=interval, processes=processes)
    while True:
        asked = time.monotonic()
        answer = predicate()
        value = await answer if inspect.isawaitable(answer) else answer
        if value:
            return value
        await asyncio.sleep(pace.next_pause(asked))


def eventually_blocking(
    predicate: Callable[[], T | None],
    what: str,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    interval: float = DEFAULT_INTERVAL_S,
    processes: Sequence[Watched] = (),
) -> T:
    """`eventually` for synchronous code: the calling thread sleeps between the questions."""
    pace = _Pace(what, timeout=timeout, interval=interval, processes=processes)
    while True:
        asked = time.monotonic()
        if value := predicate():
            return value
        time.sleep(pace.next_pause(asked))


class _Pace:
    """The deadline and the rate of one wait, and the processes it watches."""

    def __init__(self, what: str, *, timeout: float, interval: float, processes: Sequence[Watched]) -> None:
        self.what = what
        self.interval = interval
        self.processes = processes
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout

    def next_pause(self, asked: float) -> float:
        """Seconds until the next question, whose predecessor was asked at `asked`; raises when the wait is over."""
        for process in self.processes:
            if (ending := process.exited()) is not None:
                raise WatchedProcessExited(f"waiting for {self.what}: {ending}")
        now = time.monotonic()
        if now >= self.deadline:
            logs = "".join(f"\n{process.logs()}" for process in self.processes)
            raise WaitTimedOut(f"timed out after {self.timeout:g}s waiting for {self.what}{logs}")
        return max(0.0, min(asked + self.interval, self.deadline) - now)
