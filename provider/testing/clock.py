"""A clock that moves only when told, for tests of timeouts and backoffs."""

from __future__ import annotations


class ManualClock:
    """Callable like `time.monotonic`; `advance(seconds)` moves it."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
