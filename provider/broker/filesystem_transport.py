"""kombu's `filesystem://` transport, with messages that appear whole or not at all.

kombu's own writer creates a message file and only then writes into it, while a consumer may
already move that file away and read it empty: the worker then dies on a JSON decode error.
Here a message is written under a name no queue matches and renamed into place, which is atomic
within one directory.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.json import dumps

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


class Transport(filesystem.Transport):
    Channel = Channel


TRANSPORT = f"{__name__}:Transport"
