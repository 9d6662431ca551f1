"""Failed logins at `/ui/login`, counted per client address, so guessing the token takes ages.

An address that failed `max_failures` times within `window` seconds is refused, unheard, until
the oldest of those failures is `window` old: at most `max_failures` guesses per window each.
The address is the connection's peer: behind a reverse proxy every browser shares the proxy's,
so they are throttled together. At most `max_clients` addresses are remembered (the oldest
forgotten first), so a flood of addresses cannot grow the master's memory.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable

MAX_CLIENTS = 10_000


class LoginThrottle:
    """Failed logins per client address in a sliding window; all of it on the master's loop."""

    def __init__(
        self,
        *,
        max_failures: int,
        window: float,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = MAX_CLIENTS,
    ) -> None:
        self.max_failures = max_failures
        self.window = window
        self._clock = clock
        self._max_clients = max_clients
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def retry_after(self, client: str) -> float | None:
        """Seconds until `client` may try again; None when it may now."""
        failures = self._recent(client)
        if len(failures) < self.max_failures:
            return None
        return failures[0] + self.window - self._clock()

    def retry_after_seconds(self, client: str) -> int | None:
        """`retry_after`, rounded up to whole seconds for `Retry-After`."""
        wait = self.retry_after(client)
        return None if wait is None else max(1, math.ceil(wait))

    def failed(self, client: str) -> None:
        failures = self._recent(client)
        failures.append(self._clock())
        self._failures[client] = failures
        self._failures.move_to_end(client)
        while len(self._failures) > self._max_clients:
            self._failures.popitem(last=False)

    def succeeded(self, client: str) -> None:
        self._failures.pop(client, None)

    def _recent(self, client: str) -> deque[float]:
        failures = self._failures.get(client, deque())
        since = self._clock() - self.window
        while failures and failures[0] <= since:
            failures.popleft()
        if not failures:
            self._failures.pop(client, None)
        return failures
