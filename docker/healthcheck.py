#!/usr/bin/env python3
"""Container healthchecks of the compose deployment; exit 0 healthy, 1 not.

    sparkdispatch-healthcheck master [URL]                 this master answers GET /overview
    sparkdispatch-healthcheck taskexecutor ID URL [URL...] the leader lists TaskExecutor ID
    sparkdispatch-healthcheck json URL                     URL answers 2xx with JSON (Spark's /json/)

Masters: URL defaults to http://127.0.0.1:8081. A standby answers `/overview` itself, so both
masters are healthy while one leads. TaskExecutor: any of the master URLs names the leader,
whose `/taskmanagers` must list ID. The bearer token is read from $SPARKDISPATCH_AUTH_TOKEN.
Standard library only, not sparkdispatch's aiohttp client: Docker runs it every few seconds under
the image's plain `python3`, so it starts fast and works whatever that interpreter has installed.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

TIMEOUT_S = 5.0


def _get(url: str) -> Any:
    headers = {"Accept": "application/json"}
    token = os.environ.get("SPARKDISPATCH_AUTH_TOKEN", "")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S) as answer:
        body = answer.read()
    return json.loads(body) if body else None


def check_master(url: str) -> str | None:
    """None when healthy, else why not."""
    overview = _get(f"{url.rstrip('/')}/overview")
    if not isinstance(overview, dict) or "is_leader" not in overview:
        return f"{url}/overview is not a sparkdispatch overview"
    return None


def check_task_executor(task_executor_id: str, masters: list[str]) -> str | None:
    problems = []
    for url in masters:
        try:
            leader = _get(f"{url.rstrip('/')}/overview").get("leader")
            if not leader:
                problems.append(f"{url} knows no leader")
                continue
            ids = {entry.get("id") for entry in _get(f"{leader}/taskmanagers").get("taskmanagers", [])}
        except (OSError, ValueError, AttributeError) as exc:
            problems.append(f"{url}: {exc}")
            continue
        return None if task_executor_id in ids else f"the leader {leader} does not list {task_executor_id}"
    return "; ".join(problems) or "no master URL given"


def check_json(url: str) -> str | None:
    # _get raises HTTPError for 4xx and 5xx, ValueError for a body that is not JSON
    return None if _get(url) is not None else f"{url} answered with an empty body"


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["master"] and len(argv) <= 2:
            problem = check_master(argv[1] if len(argv) == 2 else "http://127.0.0.1:8081")
        elif argv[:1] == ["taskexecutor"] and len(argv) >= 3:
            problem = check_task_executor(argv[1], argv[2:])
        elif argv[:1] == ["json"] and len(argv) == 2:
            problem = check_json(argv[1])
        else:
            print(__doc__.split("\n\n")[1], file=sys.stderr)
            return 2
    except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors
        problem = str(exc)
    if problem:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
