"""A bounded cache of gRPC channels from this node to other nodes."""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import grpc

from laminar.address import GRPC_RESOLVE_INTERVAL_MS


class ChannelCache:
    """At most ``channels_max`` open ``grpc.aio`` channels, least recently used
    closed first (``evicted`` counts them). Used on the node's event loop."""

    def __init__(self, channels_max: int, options: Sequence[tuple[str, Any]] = ()) -> None:
        self._channels_max = channels_max
        # A peer's host name is resolved again soon after it stops answering.
        self._options = (
            ("grpc.dns_min_time_between_resolutions_ms", GRPC_RESOLVE_INTERVAL_MS),
            *options,
        )
        self._channels: OrderedDict[str, grpc.aio.Channel] = OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._channels)

    def get(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is not None:
            self._channels.move_to_end(address)
            return channel
        channel = grpc.aio.insecure_channel(address, options=list(self._options))
        self._channels[address] = channel
        while len(self._channels) > self._channels_max:
            _, oldest = self._channels.popitem(last=False)
            self.evicted += 1
            task = asyncio.get_running_loop().create_task(oldest.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        return channel

    async def close(self, timeout_s: float) -> None:
        """Close every channel, waiting at most ``timeout_s``."""
        channels = list(self._channels.values())
        self._channels.clear()
        closing = [channel.close() for channel in channels]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*closing, *self._closing, return_exceptions=True), timeout_s
            )
