"""A master-like process that only contends for leadership, and its parent-side handle.

Run as `python -m sparkdispatch.testing.contender --name A --address http://host:1 -D key=value ...`,
it prints one JSON line per event on stdout: `{"event": "started"|"granted"|"revoked"|"stopped",
"name", "session_id", "t"}` where `t` is `time.monotonic()` (one clock for all processes of a
machine). Each grant is confirmed with `--address`. SIGTERM stops it gracefully.
`ContenderProcess` starts one and queues its events; the HA tests and bench/ha_takeover.py use it.

In the test's own process, `RecordingContender` records what an election grants, and
`leading(election)` starts an election with one and waits for the grant.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from sparkdispatch.config import Configuration, parse_overrides
from sparkdispatch.ha import LeaderElection, create_ha_services


class ContenderProcess:
    """A contender child process; its JSON events arrive on `events`."""

    def __init__(self, name: str, overrides: Sequence[str], *, address: str) -> None:
        self.name = name
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, "--name", name, "--address", address, *overrides],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.events.put(json.loads(line))

    def next_event(self, timeout: float) -> dict[str, Any]:
        return self.events.get(timeout=timeout)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        self._reader.join(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def first_grant(contenders: Iterable[ContenderProcess], timeout: float) -> tuple[ContenderProcess, dict[str, Any]]:
    """The first of `contenders` to report a grant, and that event."""
    contenders = list(contenders)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for contender in contenders:
            try:
                event = contender.events.get_nowait()
            except queue.Empty:
                continue
            if event["event"] == "granted":
                return contender, event
        time.sleep(0.005)
    raise TimeoutError(f"no contender was granted leadership within {timeout:g}s")


class RecordingContender:
    """A contender in the test's process: `session_id` and `granted` (set) while it leads."""

    def __init__(self) -> None:
        self.session_id: str | None = None
        self.granted = asyncio.Event()

    def grant_leadership(self, session_id: str) -> None:
        self.session_id = session_id
        self.granted.set()

    def revoke_leadership(self) -> None:
        self.session_id = None
        self.granted.clear()


async def leading(election: LeaderElection, *, timeout: float = 30.0) -> str:
    """Start `election` with a new RecordingContender; its session id once it is granted."""
    contender = RecordingContender()
    election.start(contender)
    await asyncio.wait_for(contender.granted.wait(), timeout)
    if contender.session_id is None:
        raise RuntimeError("leadership was revoked as soon as it was granted")
    return contender.session_id


def _emit(event: str, name: str, session_id: str | None = None) -> None:
    print(json.dumps({"event": event, "name": name, "session_id": session_id, "t": time.monotonic()}), flush=True)


class _PrintingContender:
    def __init__(self, name: str, address: str, election: LeaderElection) -> None:
        self.name = name
        self.address = address
        self.election = election

    def grant_leadership(self, session_id: str) -> None:
        _emit("granted", self.name, session_id)
        self.election.confirm_leadership(session_id, self.address)

    def revoke_leadership(self) -> None:
        _emit("revoked", self.name)


async def _main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--name", required=True)
    parser.add_argument("--address", required=True)
    parser.add_argument("-D", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format=f"%(asctime)s {args.name} %(name)s %(levelname)s %(message)s"
    )
    services = create_ha_services(Configuration.from_mapping(parse_overrides(args.overrides)))
    await services.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    _emit("started", args.name)
    services.election.start(_PrintingContender(args.name, args.address, services.election))
    try:
        await stop.wait()
    finally:
        await services.close()
        _emit("stopped", args.name)


if __name__ == "__main__":
    asyncio.run(_main())
