"""The gRPC channel of a slot process's Connect sessions on its TaskExecutor's server.

Built for what each action costs there, since a task's actions are most of what it does:

- an action's answers are read on the thread that runs the action (gRPC's single-threaded
  unary-stream calls). By default gRPC starts a thread for a call on an idle channel and hands
  each answer over from it;
- the server's token goes with each call as its `authorization` metadata. Given as call
  credentials, pyspark's way, gRPC runs its token plugin on a new thread for every call.

Together 9.5 ms of a trivial task's 82 on this machine (bench/README.md, "Threads per Connect
call"). The server listens on loopback (`connect_url`), so the channel keeps gRPC's local
credentials, which refuse any other peer. Imports pyspark and grpc: import this module only where
a session is made.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc  # type: ignore[import-untyped]  # grpcio ships no type stubs
from grpc.experimental import ChannelOptions  # type: ignore[import-untyped]
from pyspark.sql.connect.client.core import DefaultChannelBuilder

from sparkdispatch.taskexecutor.connect_url import call_metadata


class SlotChannel(DefaultChannelBuilder):
    """pyspark's channel to `url` (`sc://localhost:<port>/;token=…;session_id=…`), with the
    action's thread reading its answers and the token sent as call metadata."""

    def __init__(self, url: str) -> None:
        super().__init__(url, channelOptions=[(ChannelOptions.SingleThreadedUnaryStream, 1)])
        on_loopback = not self.use_ssl and self.host == "localhost"
        # elsewhere, or with a token from pyspark's environment variable, pyspark's way
        self._token_metadata = call_metadata(url) if on_loopback else ()

    def toChannel(self) -> grpc.Channel:
        if not self._token_metadata:
            return super().toChannel()
        return self._secure_channel(self.endpoint, grpc.local_channel_credentials())

    def metadata(self) -> Iterable[tuple[str, str]]:
        return [*super().metadata(), *self._token_metadata]
