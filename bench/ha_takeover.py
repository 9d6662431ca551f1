"""How fast a standby master takes over: after SIGKILL of the leader, and after a graceful stop.

    .venv/bin/python bench/ha_takeover.py [--rounds 5] [--session-timeout 4s]

Starts its own ZooKeeper, then per round two contender processes
(`python -m sparkdispatch.testing.contender`, the real election) under a fresh root. It kills
the leader (SIGKILL, or SIGTERM for the graceful case) and measures until the standby is
granted leadership. Prints the medians and writes bench/results/ha_takeover.json. A SIGKILLed
leader's latch node lives until its ZooKeeper session expires, so expect about the session
timeout; the target is session timeout + 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from sparkdispatch.config import parse_duration
from sparkdispatch.testing.contender import ContenderProcess, first_grant
from sparkdispatch.testing.services import ZooKeeperServer

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "ha_takeover.json"
GRANT_TIMEOUT_S = 60.0


def one_round(zookeeper: ZooKeeperServer, storage: Path, session_timeout: str, sig: signal.Signals) -> float:
    overrides = [
        "-D",
        "high-availability.mode=zookeeper",
        "-D",
        f"high-availability.zookeeper.quorum={zookeeper.hosts}",
        "-D",
        f"high-availability.zookeeper.path.root=/bench-{uuid.uuid4().hex[:12]}",
        "-D",
        f"high-availability.zookeeper.session-timeout={session_timeout}",
        "-D",
        f"storage.dir={storage}",
    ]
    contenders = [ContenderProcess(name, overrides, address=f"http://{name}:8081") for name in ("a", "b")]
    try:
        leader, _ = first_grant(contenders, GRANT_TIMEOUT_S)
        standby = [c for c in contenders if c is not leader]
        time.sleep(0.5)  # let the standby settle behind the leader's latch node
        stopped_at = time.monotonic()
        os.kill(leader.process.pid, sig)
        _, granted = first_grant(standby, GRANT_TIMEOUT_S)
        return float(granted["t"]) - stopped_at
    finally:
        for contender in contenders:
            contender.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--session-timeout", default="4s")
    args = parser.parse_args()
    session_timeout = parse_duration(args.session_timeout)
    zookeeper = ZooKeeperServer()
    zookeeper.start()
    try:
        with tempfile.TemporaryDirectory(prefix="sparkdispatch-bench-") as storage:
            kill = [
                one_round(zookeeper, Path(storage), args.session_timeout, signal.SIGKILL) for _ in range(args.rounds)
            ]
            for i, seconds in enumerate(kill, 1):
                print(f"SIGKILL round {i}: standby granted after {seconds:.3f}s")
            graceful = [
                one_round(zookeeper, Path(storage), args.session_timeout, signal.SIGTERM) for _ in range(args.rounds)
            ]
            for i, seconds in enumerate(graceful, 1):
                print(f"SIGTERM round {i}: standby granted after {seconds:.3f}s")
    finally:
        zookeeper.stop()
    target = session_timeout + 1.0
    report = {
        "benchmark": "ha_takeover",
        "session_timeout_s": session_timeout,
        "rounds": args.rounds,
        "sigkill_takeover_s": [round(s, 4) for s in kill],
        "sigkill_takeover_median_s": round(statistics.median(kill), 4),
        "sigkill_target_s": target,
        "sigkill_within_target": all(s <= target for s in kill),
        "graceful_handover_s": [round(s, 4) for s in graceful],
        "graceful_handover_median_s": round(statistics.median(graceful), 4),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print(
        f"median SIGKILL takeover {report['sigkill_takeover_median_s']:.3f}s "
        f"(session timeout {session_timeout:g}s, target <= {target:g}s: "
        f"{'met' if report['sigkill_within_target'] else 'MISSED'})"
    )
    print(f"median graceful handover {report['graceful_handover_median_s'] * 1000:.1f}ms")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
