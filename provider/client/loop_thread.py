"""An asyncio event loop in a daemon thread, for synchronous callers of async code.

The sync wrappers of the REST clients (`SyncSparkDispatchClient`, the TaskExecutor's
`MasterClient`) run their async core on one: calls may come from any thread, and from code
that already has a running loop of its own.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """A private event loop running in a daemon thread; `run()` blocks the caller for a result."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def run(self, coroutine: Coroutine[Any, Any, T], *, timeout: float | None = None) -> T:
        """Run `coroutine` on the loop and return its value (or raise its error) here."""
        if self._closed:
            coroutine.close()
            raise RuntimeError(f"{self.name} is closed")
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError(f"{self.name}: run() called from its own loop would wait for itself")
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout)
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        """Stop the loop and its thread; further `run()` calls raise."""
        if self._closed:
            return
        self._closed = True
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()
