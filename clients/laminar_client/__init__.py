"""Smart gRPC client for Laminar (grows with the broker node issue).

Layers: :mod:`.transport` (channels, typed calls, error mapping), :mod:`.metadata`
(immutable cluster snapshots), :mod:`.retry` (backoff policy), :mod:`.client`
(routing and the public calls) and :mod:`.producer` (idempotent sends). A batching
producer and consumer groups will be further API objects over the same transport
and metadata cache.
"""

from laminar_client.client import (
    ACKS,
    AcksMode,
    Client,
    FetchResult,
    MetadataCache,
    Watermarks,
)
from laminar_client.metadata import (
    ClusterDescription,
    ClusterMetadata,
    MemberInfo,
    PartitionHealth,
    PartitionMetadata,
    TopicConfig,
    TopicMetadata,
)
from laminar_client.producer import IdempotentProducer
from laminar_client.retry import NO_RETRY, RetryPolicy
from laminar_client.transport import Transport

__all__ = [
    "ACKS",
    "NO_RETRY",
    "AcksMode",
    "Client",
    "ClusterDescription",
    "ClusterMetadata",
    "FetchResult",
    "IdempotentProducer",
    "MemberInfo",
    "MetadataCache",
    "PartitionHealth",
    "PartitionMetadata",
    "RetryPolicy",
    "TopicConfig",
    "TopicMetadata",
    "Transport",
    "Watermarks",
]
