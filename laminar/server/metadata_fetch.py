"""Fetching the metadata log (``__cluster/0``) from the nodes that hold it.

A node without a replica of ``__cluster/0`` follows the catalogue by long-polling
it from the replicas placement gives it (the metadata follower,
:mod:`laminar.server.follower`, calls :class:`RemoteMetadataFetch`), in random
order so that the followers spread over them. The high watermark the last answer
gave is what ``/ready`` compares the applied offset with.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

import grpc

from laminar.errors import OffsetOutOfRangeError
from laminar.grpc_errors import error_from_rpc
from laminar.server.channels import ChannelCache
from laminar.server.follower import READ_BYTES_MAX
from laminar.server.metadata import CLUSTER_TOPIC
from laminar.v1 import laminar_pb2, laminar_pb2_grpc

_LOG = logging.getLogger(__name__)
ROUND_PAUSE_S = 0.2
"""Pause after a round in which no node answered, before the follower asks again."""


class RemoteMetadataFetch:
    """One long-poll of ``__cluster/0`` from a node that should hold it, per call."""

    def __init__(
        self,
        node_id: str,
        holders: Callable[[], tuple[str, ...]],
        grpc_address_of: Callable[[str], str | None],
        channels: ChannelCache,
        call_metadata: Callable[[], tuple[tuple[str, str], ...] | None],
        *,
        wait_ms: int,
        call_timeout_ms: int,
        rng: random.Random,
    ) -> None:
        """``holders``: placement's replicas of ``__cluster/0``; ``call_metadata``:
        the metadata of this node's calls to other nodes (its asserted certificate)."""
        self.node_id = node_id
        self._holders = holders
        self._grpc_address_of = grpc_address_of
        self._channels = channels
        self._call_metadata = call_metadata
        self._wait_ms = wait_ms
        self._call_timeout_s = call_timeout_ms / 1000
        self._rng = rng
        self.high_watermark_seen: int | None = None
        """The metadata log's high watermark as the node long-polled last answered."""

    async def __call__(self, offset: int) -> bytes:
        """The batches from ``offset`` one holder answers (empty when none did);
        raises :class:`OffsetOutOfRangeError` when its log starts past ``offset``
        (the follower then reads a snapshot)."""
        candidates = [n for n in self._holders() if n != self.node_id]
        self._rng.shuffle(candidates)
        request = laminar_pb2.FetchRequest(
            topic=CLUSTER_TOPIC,
            partition=0,
            offset=offset,
            max_bytes=READ_BYTES_MAX,
            max_wait_ms=self._wait_ms,
        )
        for node in candidates:
            address = self._grpc_address_of(node)
            if address is None:
                continue
            stub = laminar_pb2_grpc.LaminarStub(self._channels.get(address))  # type: ignore[no-untyped-call]
            try:
                response = await stub.Fetch(
                    request, timeout=self._call_timeout_s, metadata=self._call_metadata()
                )
                self.high_watermark_seen = response.high_watermark
                return bytes(response.batches)
            except grpc.aio.AioRpcError as rpc_error:
                error = error_from_rpc(rpc_error)
                if isinstance(error, OffsetOutOfRangeError):
                    raise error from None  # its log starts past ``offset``: a snapshot
                _LOG.debug("metadata fetch from %s failed: %s", node, rpc_error.details())
        await asyncio.sleep(ROUND_PAUSE_S)
        return b""
