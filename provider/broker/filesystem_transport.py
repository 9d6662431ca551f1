"""kombu's `filesystem://` transport, with messages that appear whole or not at all, and consumers woken when one lands.

kombu's own writer creates a message file and only then writes into it, while a consumer may
already move that file away and read it empty: the worker then dies on a JSON decode error.
Here a message is written under a name no queue matches and renamed into place, which is atomic
within one directory.

A consumer polls its folder every `broker.polling-interval` (20 ms: an idle worker costs little),
and on Linux the folder is watched too (folder_watch.py): a message renamed into it wakes the
consumer at once, so a job's first deployment to an idle TaskExecutor waits ~1 ms, not up to 20.
Where it cannot be watched, a TaskExecutor still knows when a deployment is due: its JobMaster
deploys a slot's next task as soon as it hears that the last one ended. `expect_message()` wakes
the consumer and has it poll every `FAST_POLLING_INTERVAL_S` for a while (not while the folder
is watched: the watch wakes it), so that deployment waits ~1 ms, not ~10.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable
from queue import Empty
from time import monotonic
from typing import Any

from kombu import Connection
from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.json import dumps

from sparkdispatch.broker.folder_watch import watch_folder

#: kombu's JSON encoder, the one its own filesystem transport writes with.
_encode: Callable[[Any], str] = dumps


class Channel(filesystem.Channel):
    # kombu's filesystem Channel renames the base's `message` to `payload`: no override satisfies both.
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = final + ".part"  # `<queue>.msg.part` is no queue's name: consumers skip it
        try:
            with open(partial, "wb") as handle:
                handle.write(_encode(payload).encode())
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


#: How often a consumer polls while a message is expected (`expect_message`).
FAST_POLLING_INTERVAL_S = 0.001
#: How long a consumer polls fast after `expect_message()`.
EXPECTED_WITHIN_S = 1.0


class _Pace:
    """When this process's consumers poll fast, and the event that wakes them from a slow poll."""

    def __init__(self) -> None:
        self.fast_until = 0.0
        self.wake = threading.Event()
        #: the consumers' folder is watched (folder_watch.py): a message wakes them, no fast polls needed
        self.watched = False

    def interval(self, slow: float) -> float:
        return FAST_POLLING_INTERVAL_S if monotonic() < self.fast_until and not self.watched else slow

    def unwatched(self) -> None:
        """The folder's watch ended: the consumers poll fast again when a message is expected."""
        self.watched = False


_pace = _Pace()


def expect_message(within_s: float = EXPECTED_WITHIN_S) -> None:
    """A message for this process is likely within `within_s`: its consumers poll fast until then.
    Any thread may call it; without a `filesystem://` consumer it changes nothing."""
    _pace.fast_until = max(_pace.fast_until, monotonic() + within_s)
    _pace.wake.set()


class Transport(filesystem.Transport):
    Channel = Channel

    #: this transport's folder is watched, or cannot be (then its consumers poll)
    _watch_asked = False

    # kombu's stubs give the virtual transport's signature, which differs from its base's (as `_put`'s)
    def drain_events(self, connection: Connection, timeout: float | None = None) -> None:  # type: ignore[override]
        """kombu's loop, with the polling interval read at each round (a call lasts up to 2 s) and
        a slow poll's sleep cut short by a message landing in the watched folder, by
        `expect_message()`, or by the call's `timeout`."""
        started = monotonic()
        cycle = self.cycle
        assert cycle is not None  # made with the transport's first channel, before any consumer drains
        if not self._watch_asked:
            self._watch_asked = True
            options = self.client.transport_options if self.client is not None else None
            folder = (options or {}).get("data_folder_in")
            if folder is not None:
                _pace.watched = True  # before the watch starts: `unwatched` may come at once
                if not watch_folder(str(folder), _pace.wake.set, ended=_pace.unwatched):
                    _pace.watched = False
        while True:
            try:
                cycle.get(self._deliver, timeout=timeout)
                return
            except Empty:
                waited = monotonic() - started
                if timeout is not None and waited >= timeout:
                    raise TimeoutError() from None
                pause = _pace.interval(self.polling_interval or FAST_POLLING_INTERVAL_S)
                _pace.wake.wait(pause if timeout is None else min(pause, timeout - waited))
                _pace.wake.clear()


TRANSPORT = f"{__name__}:Transport"
