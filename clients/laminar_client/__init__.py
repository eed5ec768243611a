"""Laminar's Python client.

- :class:`Producer` / :class:`AsyncProducer`: ``send`` records (batched per
  partition, pipelined, idempotent); :class:`DeliveryFuture` per record.
- :class:`Consumer` / :class:`AsyncConsumer`: read assigned partitions record by
  record, or as columnar :class:`ConsumerBatch` es with ``to_arrow()``.
- :class:`Client`: admin calls (topics, cluster status, offsets) and the low-level
  produce/fetch of whole batches; :class:`IdempotentProducer` writes pre-built
  batches.
- :func:`key_partition`: the one key -> partition function (CLI and Spark too);
  :mod:`laminar_client.serializers`: bytes, str, JSON, msgpack.
- :class:`TlsOptions`: the CA file (and client certificate) of a cluster serving
  TLS, passed as ``Client(..., tls=...)``.
- Every error is a :class:`LaminarError` subclass, re-exported here.

How the layers fit, and why one asyncio core serves both the sync and the async
surface: ``docs/design.md``, "Client". The transport, the metadata cache and the
per-partition sender are internal (:mod:`laminar_client.transport`,
:class:`laminar_client.metadata_cache.MetadataCache`, :mod:`laminar_client._sender`).
The value types (:class:`TopicPartition`, :class:`FetchResult`, ...) are defined
once, in the leaf module :mod:`laminar_client.types`.
"""

from laminar.errors import (
    AttemptTimeoutError,
    AuthenticationError,
    AuthorizationError,
    BatchLimitError,
    BufferFullError,
    ChecksumMismatchError,
    ClientClosedError,
    ClusterIdMismatchError,
    ClusterUnreachableError,
    ConfigError,
    CorruptBatchError,
    CorruptSegmentError,
    CorruptStateError,
    DeliveryTimeoutError,
    DuplicateSequenceError,
    FencedMemberError,
    GroupEntryFormatError,
    GroupNotEmptyError,
    InvalidInputError,
    InvalidTopicError,
    LaminarError,
    LeaderMovedError,
    LogClosedError,
    NoAnswerError,
    NodeRefusedError,
    NodeUnreachableError,
    NonMonotonicOffsetError,
    NotLeaderError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    ProducerSequenceError,
    RecordDeserializationError,
    RecordFormatError,
    RequestTimeoutError,
    RetriableError,
    StorageError,
    StorageFullError,
    TlsHandshakeError,
    TopicExistsError,
    TopicNotAuthorizedError,
    TruncatedBatchError,
    UnavailableError,
    UnknownTopicOrPartitionError,
    UnsupportedMagicError,
    ZstdVersionError,
)
from laminar.records import Compression
from laminar_client.client import ACKS, Client
from laminar_client.consumer import AsyncConsumer, Consumer, ConsumerBatch, ConsumerRecord
from laminar_client.idempotent import IdempotentProducer
from laminar_client.metadata import (
    ClusterDescription,
    ClusterMetadata,
    DamagedReplica,
    FencedReplica,
    GossipKeyring,
    IncompatiblePeer,
    MemberInfo,
    NodeDisk,
    PartitionHealth,
    PartitionMetadata,
    TopicConfig,
    TopicMetadata,
)
from laminar_client.partitioner import StickyPartitioner, key_partition
from laminar_client.producer import (
    AsyncProducer,
    Callback,
    DeliveryFuture,
    Producer,
    ProducerConfig,
    RecordMetadata,
)
from laminar_client.retry import NO_RETRY, RetryPolicy
from laminar_client.tls import TlsOptions
from laminar_client.types import (
    AcksMode,
    FetchResult,
    OffsetReset,
    PartitionOffsets,
    TopicPartition,
    Watermarks,
)

__all__ = [
    "ACKS",
    "NO_RETRY",
    "AcksMode",
    "AsyncConsumer",
    "AsyncProducer",
    "AttemptTimeoutError",
    "BatchLimitError",
    "BufferFullError",
    "Callback",
    "ChecksumMismatchError",
    "Client",
    "ClientClosedError",
    "ClusterDescription",
    "ClusterIdMismatchError",
    "ClusterMetadata",
    "Compression",
    "AuthenticationError",
    "AuthorizationError",
    "TopicNotAuthorizedError",
    "ConfigError",
    "Consumer",
    "ConsumerBatch",
    "ConsumerRecord",
    "CorruptBatchError",
    "CorruptSegmentError",
    "CorruptStateError",
    "DeliveryFuture",
    "DeliveryTimeoutError",
    "DuplicateSequenceError",
    "FencedMemberError",
    "DamagedReplica",
    "FencedReplica",
    "FetchResult",
    "GossipKeyring",
    "GroupEntryFormatError",
    "GroupNotEmptyError",
    "IdempotentProducer",
    "InvalidInputError",
    "InvalidTopicError",
    "LaminarError",
    "LeaderMovedError",
    "LogClosedError",
    "MemberInfo",
    "IncompatiblePeer",
    "NodeDisk",
    "ClusterUnreachableError",
    "NoAnswerError",
    "NodeRefusedError",
    "NodeUnreachableError",
    "NonMonotonicOffsetError",
    "NotLeaderError",
    "OffsetOutOfRangeError",
    "OffsetReset",
    "OutOfOrderSequenceError",
    "PartitionHealth",
    "PartitionMetadata",
    "PartitionOffsets",
    "Producer",
    "ProducerConfig",
    "ProducerSequenceError",
    "RecordDeserializationError",
    "RecordFormatError",
    "RecordMetadata",
    "RequestTimeoutError",
    "RetriableError",
    "RetryPolicy",
    "StickyPartitioner",
    "StorageError",
    "StorageFullError",
    "ZstdVersionError",
    "TlsHandshakeError",
    "TlsOptions",
    "TopicConfig",
    "TopicExistsError",
    "TopicMetadata",
    "TopicPartition",
    "TruncatedBatchError",
    "UnavailableError",
    "UnknownTopicOrPartitionError",
    "UnsupportedMagicError",
    "Watermarks",
    "key_partition",
]
