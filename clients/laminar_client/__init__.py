"""Smart gRPC client for Laminar (grows with the broker node issue).

Layers: :mod:`.transport` (channels, typed calls, error mapping, "no answer"),
:mod:`.metadata` (immutable cluster snapshots and how several nodes' answers merge),
:mod:`.retry` (backoff policy), :mod:`.health` (which nodes to skip after they
failed to answer), :mod:`.client` (routing and the public calls) and
:mod:`.producer` (idempotent sends). A batching producer and consumer groups
will be further API objects over the same transport and metadata cache.
"""

from laminar_client.client import (
    ACKS,
    AcksMode,
    Client,
    FetchResult,
    MetadataCache,
    PartitionOffsets,
    Watermarks,
)
from laminar_client.idempotent import IdempotentProducer
from laminar_client.metadata import (
    ClusterDescription,
    ClusterMetadata,
    FencedReplica,
    MemberInfo,
    PartitionHealth,
    PartitionMetadata,
    TopicConfig,
    TopicMetadata,
    answers_settled,
    merge_answers,
)
from laminar_client.retry import NO_RETRY, RetryPolicy
from laminar_client.transport import (
    AttemptTimeoutError,
    NoAnswerError,
    NodeUnreachableError,
    Transport,
    UnaryTransport,
)

__all__ = [
    "ACKS",
    "NO_RETRY",
    "AcksMode",
    "AttemptTimeoutError",
    "Client",
    "ClusterDescription",
    "ClusterMetadata",
    "FetchResult",
    "IdempotentProducer",
    "MemberInfo",
    "MetadataCache",
    "NoAnswerError",
    "NodeUnreachableError",
    "FencedReplica",
    "PartitionHealth",
    "PartitionMetadata",
    "PartitionOffsets",
    "RetryPolicy",
    "TopicConfig",
    "TopicMetadata",
    "Transport",
    "UnaryTransport",
    "Watermarks",
    "answers_settled",
    "merge_answers",
]
