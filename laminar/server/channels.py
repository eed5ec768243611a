"""A bounded cache of gRPC channels from this node to other nodes."""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import grpc

from laminar.address import GRPC_RESOLVE_INTERVAL_MS
from laminar.security.tls import TlsReloader, grpc_channel_credentials

RETIRED_CHANNEL_GRACE_S = 35.0
"""How long a channel built from replaced TLS files may finish its calls in flight
(a metadata long-poll lasts seconds) before it is closed."""


class ChannelCache:
    """At most ``channels_max`` open ``grpc.aio`` channels, least recently used
    closed first (``evicted`` counts them). Used on the node's event loop.

    With ``tls``, channels are TLS, verify the other node against the CA bundle and
    present this node's certificate; when the files change (``tls.current()``'s
    generation moves) every channel is replaced by a new one on next use, and the
    old ones close once their calls end (at most :data:`RETIRED_CHANNEL_GRACE_S`).
    """

    def __init__(
        self,
        channels_max: int,
        options: Sequence[tuple[str, Any]] = (),
        *,
        tls: TlsReloader | None = None,
        interceptors: Sequence[Any] = (),
    ) -> None:
        """``interceptors``: client interceptors of every channel (tracing's)."""
        self._channels_max = channels_max
        self._interceptors = list(interceptors) or None
        # A peer's host name is resolved again soon after it stops answering.
        self._options = (
            ("grpc.dns_min_time_between_resolutions_ms", GRPC_RESOLVE_INTERVAL_MS),
            *options,
        )
        self._channels: OrderedDict[str, grpc.aio.Channel] = OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()
        self._retired: set[grpc.aio.Channel] = set()
        self._tls = tls
        self._generation = 0
        self._credentials: grpc.ChannelCredentials | None = None
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._channels)

    def get(self, address: str) -> grpc.aio.Channel:
        if self._tls is not None:
            state = self._tls.current()
            if state.generation != self._generation:
                self._generation = state.generation
                self._credentials = grpc_channel_credentials(state)
                for channel in self._channels.values():
                    self._close_later(channel, RETIRED_CHANNEL_GRACE_S)
                self._channels.clear()
        channel = self._channels.get(address)
        if channel is not None:
            self._channels.move_to_end(address)
            return channel
        if self._credentials is not None:
            channel = grpc.aio.secure_channel(
                address,
                self._credentials,
                options=list(self._options),
                interceptors=self._interceptors,
            )
        else:
            channel = grpc.aio.insecure_channel(
                address, options=list(self._options), interceptors=self._interceptors
            )
        self._channels[address] = channel
        while len(self._channels) > self._channels_max:
            _, oldest = self._channels.popitem(last=False)
            self.evicted += 1
            self._close_later(oldest, None)
        return channel

    def _close_later(self, channel: grpc.aio.Channel, grace_s: float | None) -> None:
        self._retired.add(channel)
        task = asyncio.get_running_loop().create_task(channel.close(grace_s))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        task.add_done_callback(lambda _: self._retired.discard(channel))

    async def close(self, timeout_s: float) -> None:
        """Close every channel (retired ones at once too), waiting at most ``timeout_s``."""
        channels = [*self._channels.values(), *self._retired]
        self._channels.clear()
        self._retired.clear()
        closing = [channel.close() for channel in channels]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*closing, *self._closing, return_exceptions=True), timeout_s
            )
