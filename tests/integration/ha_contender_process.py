"""A master-like process that only contends for leadership; the HA tests and bench/ha_takeover.py run it.

    python ha_contender_process.py --name A --address http://127.0.0.1:1 -D key=value ...

It prints one JSON line per event on stdout: `{"event": "started"|"granted"|"revoked"|"stopped",
"name", "session_id", "t"}` where `t` is `time.monotonic()` (one clock for all processes of a
machine). Each grant is confirmed with `--address`. SIGTERM stops it gracefully.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import time

from sparkdispatch.config import Configuration, parse_overrides
from sparkdispatch.ha import create_ha_services


def emit(event: str, name: str, session_id: str | None = None) -> None:
    print(json.dumps({"event": event, "name": name, "session_id": session_id, "t": time.monotonic()}), flush=True)


class PrintingContender:
    def __init__(self, name: str, address: str) -> None:
        self.name = name
        self.address = address
        self.election = None  # set before start

    def grant_leadership(self, session_id: str) -> None:
        emit("granted", self.name, session_id)
        self.election.confirm_leadership(session_id, self.address)

    def revoke_leadership(self) -> None:
        emit("revoked", self.name)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--name", required=True)
    parser.add_argument("--address", required=True)
    parser.add_argument("-D", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format=f"%(asctime)s {args.name} %(name)s %(levelname)s %(message)s")
    config = Configuration.from_mapping(parse_overrides(args.overrides))
    services = create_ha_services(config)
    await services.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    contender = PrintingContender(args.name, args.address)
    contender.election = services.election
    emit("started", args.name)
    services.election.start(contender)
    try:
        await stop.wait()
    finally:
        await services.close()
        emit("stopped", args.name)


if __name__ == "__main__":
    asyncio.run(main())
