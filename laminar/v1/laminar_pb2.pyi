from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Acks(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACKS_ALL: _ClassVar[Acks]
    ACKS_LEADER: _ClassVar[Acks]
    ACKS_NONE: _ClassVar[Acks]

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_UNKNOWN: _ClassVar[ErrorCode]
    NOT_LEADER: _ClassVar[ErrorCode]
    UNAVAILABLE: _ClassVar[ErrorCode]
    REQUEST_TIMEOUT: _ClassVar[ErrorCode]
    UNKNOWN_TOPIC_OR_PARTITION: _ClassVar[ErrorCode]
    OFFSET_OUT_OF_RANGE: _ClassVar[ErrorCode]
    INVALID_INPUT: _ClassVar[ErrorCode]
    RECORD_FORMAT: _ClassVar[ErrorCode]
    BATCH_TOO_LARGE: _ClassVar[ErrorCode]
    INVALID_TOPIC: _ClassVar[ErrorCode]
    TOPIC_EXISTS: _ClassVar[ErrorCode]
    OUT_OF_ORDER_SEQUENCE: _ClassVar[ErrorCode]
    STORAGE: _ClassVar[ErrorCode]
    CLUSTER_ID_MISMATCH: _ClassVar[ErrorCode]
    CONFIG: _ClassVar[ErrorCode]
    FENCED: _ClassVar[ErrorCode]
    GROUP_NOT_EMPTY: _ClassVar[ErrorCode]
    STORAGE_FULL: _ClassVar[ErrorCode]
    AUTHENTICATION_FAILED: _ClassVar[ErrorCode]
    AUTHORIZATION_FAILED: _ClassVar[ErrorCode]

class KeyringAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KEYRING_LIST: _ClassVar[KeyringAction]
    KEYRING_INSTALL: _ClassVar[KeyringAction]
    KEYRING_USE: _ClassVar[KeyringAction]
    KEYRING_REMOVE: _ClassVar[KeyringAction]
    KEYRING_SET_VERIFY: _ClassVar[KeyringAction]
ACKS_ALL: Acks
ACKS_LEADER: Acks
ACKS_NONE: Acks
ERROR_UNKNOWN: ErrorCode
NOT_LEADER: ErrorCode
UNAVAILABLE: ErrorCode
REQUEST_TIMEOUT: ErrorCode
UNKNOWN_TOPIC_OR_PARTITION: ErrorCode
OFFSET_OUT_OF_RANGE: ErrorCode
INVALID_INPUT: ErrorCode
RECORD_FORMAT: ErrorCode
BATCH_TOO_LARGE: ErrorCode
INVALID_TOPIC: ErrorCode
TOPIC_EXISTS: ErrorCode
OUT_OF_ORDER_SEQUENCE: ErrorCode
STORAGE: ErrorCode
CLUSTER_ID_MISMATCH: ErrorCode
CONFIG: ErrorCode
FENCED: ErrorCode
GROUP_NOT_EMPTY: ErrorCode
STORAGE_FULL: ErrorCode
AUTHENTICATION_FAILED: ErrorCode
AUTHORIZATION_FAILED: ErrorCode
KEYRING_LIST: KeyringAction
KEYRING_INSTALL: KeyringAction
KEYRING_USE: KeyringAction
KEYRING_REMOVE: KeyringAction
KEYRING_SET_VERIFY: KeyringAction

class ProduceRequest(_message.Message):
    __slots__ = ("topic", "partition", "batches", "acks", "timeout_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    batches: _containers.RepeatedScalarFieldContainer[bytes]
    acks: Acks
    timeout_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., batches: _Optional[_Iterable[bytes]] = ..., acks: _Optional[_Union[Acks, str]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class ProduceResponse(_message.Message):
    __slots__ = ("base_offsets", "duplicates")
    BASE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    base_offsets: _containers.RepeatedScalarFieldContainer[int]
    duplicates: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, base_offsets: _Optional[_Iterable[int]] = ..., duplicates: _Optional[_Iterable[bool]] = ...) -> None: ...

class PartitionBatches(_message.Message):
    __slots__ = ("topic", "partition", "batches")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    batches: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., batches: _Optional[_Iterable[bytes]] = ...) -> None: ...

class ProduceManyRequest(_message.Message):
    __slots__ = ("partitions", "acks", "timeout_ms")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionBatches]
    acks: Acks
    timeout_ms: int
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionBatches, _Mapping]]] = ..., acks: _Optional[_Union[Acks, str]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class PartitionProduced(_message.Message):
    __slots__ = ("topic", "partition", "base_offsets", "duplicates", "error")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    BASE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    base_offsets: _containers.RepeatedScalarFieldContainer[int]
    duplicates: _containers.RepeatedScalarFieldContainer[bool]
    error: ErrorDetail
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., base_offsets: _Optional[_Iterable[int]] = ..., duplicates: _Optional[_Iterable[bool]] = ..., error: _Optional[_Union[ErrorDetail, _Mapping]] = ...) -> None: ...

class ProduceManyResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionProduced]
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionProduced, _Mapping]]] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("topic", "partition", "offset", "max_bytes", "max_wait_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    max_bytes: int
    max_wait_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., max_bytes: _Optional[int] = ..., max_wait_ms: _Optional[int] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("batches", "high_watermark", "log_start_offset", "served_by")
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SERVED_BY_FIELD_NUMBER: _ClassVar[int]
    batches: bytes
    high_watermark: int
    log_start_offset: int
    served_by: str
    def __init__(self, batches: _Optional[bytes] = ..., high_watermark: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., served_by: _Optional[str] = ...) -> None: ...

class ReportCorruptionRequest(_message.Message):
    __slots__ = ("topic", "partition", "offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class ReportCorruptionResponse(_message.Message):
    __slots__ = ("damaged", "reason")
    DAMAGED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    damaged: bool
    reason: str
    def __init__(self, damaged: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class ListOffsetsRequest(_message.Message):
    __slots__ = ("topic", "partitions", "timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class PartitionOffsets(_message.Message):
    __slots__ = ("partition", "log_start_offset", "high_watermark", "offset_for_timestamp", "error")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FOR_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    partition: int
    log_start_offset: int
    high_watermark: int
    offset_for_timestamp: int
    error: ErrorDetail
    def __init__(self, partition: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ..., offset_for_timestamp: _Optional[int] = ..., error: _Optional[_Union[ErrorDetail, _Mapping]] = ...) -> None: ...

class ListOffsetsResponse(_message.Message):
    __slots__ = ("partitions", "served_by")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    SERVED_BY_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionOffsets]
    served_by: str
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionOffsets, _Mapping]]] = ..., served_by: _Optional[str] = ...) -> None: ...

class Member(_message.Message):
    __slots__ = ("node_id", "gossip_address", "grpc_address", "weight", "zone", "state", "incarnation")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    GOSSIP_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    gossip_address: str
    grpc_address: str
    weight: float
    zone: str
    state: str
    incarnation: int
    def __init__(self, node_id: _Optional[str] = ..., gossip_address: _Optional[str] = ..., grpc_address: _Optional[str] = ..., weight: _Optional[float] = ..., zone: _Optional[str] = ..., state: _Optional[str] = ..., incarnation: _Optional[int] = ...) -> None: ...

class PartitionInfo(_message.Message):
    __slots__ = ("partition", "replicas", "leader", "high_watermark", "voters", "learners")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    LEARNERS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    replicas: _containers.RepeatedScalarFieldContainer[str]
    leader: str
    high_watermark: int
    voters: _containers.RepeatedScalarFieldContainer[str]
    learners: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, partition: _Optional[int] = ..., replicas: _Optional[_Iterable[str]] = ..., leader: _Optional[str] = ..., high_watermark: _Optional[int] = ..., voters: _Optional[_Iterable[str]] = ..., learners: _Optional[_Iterable[str]] = ...) -> None: ...

class TopicConfig(_message.Message):
    __slots__ = ("partitions", "replication_factor", "retention_bytes", "retention_ms", "cleanup_policy", "delete_retention_ms", "min_compaction_lag_ms", "max_compaction_lag_ms", "min_cleanable_dirty_ratio")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    RETENTION_BYTES_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_POLICY_FIELD_NUMBER: _ClassVar[int]
    DELETE_RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    MIN_COMPACTION_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_COMPACTION_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    MIN_CLEANABLE_DIRTY_RATIO_FIELD_NUMBER: _ClassVar[int]
    partitions: int
    replication_factor: int
    retention_bytes: int
    retention_ms: int
    cleanup_policy: str
    delete_retention_ms: int
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    min_cleanable_dirty_ratio: float
    def __init__(self, partitions: _Optional[int] = ..., replication_factor: _Optional[int] = ..., retention_bytes: _Optional[int] = ..., retention_ms: _Optional[int] = ..., cleanup_policy: _Optional[str] = ..., delete_retention_ms: _Optional[int] = ..., min_compaction_lag_ms: _Optional[int] = ..., max_compaction_lag_ms: _Optional[int] = ..., min_cleanable_dirty_ratio: _Optional[float] = ...) -> None: ...

class SettingSource(_message.Message):
    __slots__ = ("name", "source")
    class Source(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        TOPIC: _ClassVar[SettingSource.Source]
        CLUSTER_DEFAULT: _ClassVar[SettingSource.Source]
    TOPIC: SettingSource.Source
    CLUSTER_DEFAULT: SettingSource.Source
    NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    source: SettingSource.Source
    def __init__(self, name: _Optional[str] = ..., source: _Optional[_Union[SettingSource.Source, str]] = ...) -> None: ...

class TopicInfo(_message.Message):
    __slots__ = ("name", "config", "partitions", "defaults", "sources")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    name: str
    config: TopicConfig
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionInfo]
    defaults: _containers.RepeatedScalarFieldContainer[str]
    sources: _containers.RepeatedCompositeFieldContainer[SettingSource]
    def __init__(self, name: _Optional[str] = ..., config: _Optional[_Union[TopicConfig, _Mapping]] = ..., partitions: _Optional[_Iterable[_Union[PartitionInfo, _Mapping]]] = ..., defaults: _Optional[_Iterable[str]] = ..., sources: _Optional[_Iterable[_Union[SettingSource, _Mapping]]] = ...) -> None: ...

class MetadataRequest(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topics: _Optional[_Iterable[str]] = ...) -> None: ...

class MetadataResponse(_message.Message):
    __slots__ = ("cluster_id", "node_id", "members", "topics", "metadata_offset", "filtered")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FILTERED_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    node_id: str
    members: _containers.RepeatedCompositeFieldContainer[Member]
    topics: _containers.RepeatedCompositeFieldContainer[TopicInfo]
    metadata_offset: int
    filtered: bool
    def __init__(self, cluster_id: _Optional[str] = ..., node_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., topics: _Optional[_Iterable[_Union[TopicInfo, _Mapping]]] = ..., metadata_offset: _Optional[int] = ..., filtered: _Optional[bool] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("name", "config")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    name: str
    config: TopicConfig
    def __init__(self, name: _Optional[str] = ..., config: _Optional[_Union[TopicConfig, _Mapping]] = ...) -> None: ...

class CreateTopicResponse(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: TopicInfo
    def __init__(self, topic: _Optional[_Union[TopicInfo, _Mapping]] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AlterTopicRequest(_message.Message):
    __slots__ = ("name", "set", "reset", "validate_only")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SET_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    name: str
    set: TopicConfig
    reset: _containers.RepeatedScalarFieldContainer[str]
    validate_only: bool
    def __init__(self, name: _Optional[str] = ..., set: _Optional[_Union[TopicConfig, _Mapping]] = ..., reset: _Optional[_Iterable[str]] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class AlterTopicResponse(_message.Message):
    __slots__ = ("topic", "previous")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    topic: TopicInfo
    previous: TopicInfo
    def __init__(self, topic: _Optional[_Union[TopicInfo, _Mapping]] = ..., previous: _Optional[_Union[TopicInfo, _Mapping]] = ...) -> None: ...

class CreatePartitionsRequest(_message.Message):
    __slots__ = ("name", "to", "validate_only")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    name: str
    to: int
    validate_only: bool
    def __init__(self, name: _Optional[str] = ..., to: _Optional[int] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class CreatePartitionsResponse(_message.Message):
    __slots__ = ("topic", "previous")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    topic: TopicInfo
    previous: int
    def __init__(self, topic: _Optional[_Union[TopicInfo, _Mapping]] = ..., previous: _Optional[int] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicInfo]
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicInfo, _Mapping]]] = ...) -> None: ...

class DescribeClusterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PartitionHealth(_message.Message):
    __slots__ = ("topic", "partition", "leader", "replicas", "voters", "under_replicated", "in_sync", "term", "high_watermark")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    UNDER_REPLICATED_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    leader: str
    replicas: _containers.RepeatedScalarFieldContainer[str]
    voters: _containers.RepeatedScalarFieldContainer[str]
    under_replicated: bool
    in_sync: _containers.RepeatedScalarFieldContainer[str]
    term: int
    high_watermark: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., leader: _Optional[str] = ..., replicas: _Optional[_Iterable[str]] = ..., voters: _Optional[_Iterable[str]] = ..., under_replicated: _Optional[bool] = ..., in_sync: _Optional[_Iterable[str]] = ..., term: _Optional[int] = ..., high_watermark: _Optional[int] = ...) -> None: ...

class FencedReplica(_message.Message):
    __slots__ = ("topic", "partition", "reason", "fenced_for_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    FENCED_FOR_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    reason: str
    fenced_for_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., reason: _Optional[str] = ..., fenced_for_ms: _Optional[int] = ...) -> None: ...

class DamagedReplica(_message.Message):
    __slots__ = ("topic", "partition", "reason", "damaged_for_ms", "quarantine")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DAMAGED_FOR_MS_FIELD_NUMBER: _ClassVar[int]
    QUARANTINE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    reason: str
    damaged_for_ms: int
    quarantine: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., reason: _Optional[str] = ..., damaged_for_ms: _Optional[int] = ..., quarantine: _Optional[str] = ...) -> None: ...

class NodeDisk(_message.Message):
    __slots__ = ("free_bytes", "total_bytes", "watermark_bytes", "full")
    FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    WATERMARK_BYTES_FIELD_NUMBER: _ClassVar[int]
    FULL_FIELD_NUMBER: _ClassVar[int]
    free_bytes: int
    total_bytes: int
    watermark_bytes: int
    full: bool
    def __init__(self, free_bytes: _Optional[int] = ..., total_bytes: _Optional[int] = ..., watermark_bytes: _Optional[int] = ..., full: _Optional[bool] = ...) -> None: ...

class DescribeClusterResponse(_message.Message):
    __slots__ = ("cluster_id", "node_id", "members", "partitions", "fenced", "damaged", "disk", "maintenance", "incompatible_peers", "protocol_version")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    DAMAGED_FIELD_NUMBER: _ClassVar[int]
    DISK_FIELD_NUMBER: _ClassVar[int]
    MAINTENANCE_FIELD_NUMBER: _ClassVar[int]
    INCOMPATIBLE_PEERS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    node_id: str
    members: _containers.RepeatedCompositeFieldContainer[Member]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionHealth]
    fenced: _containers.RepeatedCompositeFieldContainer[FencedReplica]
    damaged: _containers.RepeatedCompositeFieldContainer[DamagedReplica]
    disk: NodeDisk
    maintenance: _containers.RepeatedScalarFieldContainer[str]
    incompatible_peers: _containers.RepeatedCompositeFieldContainer[IncompatiblePeer]
    protocol_version: int
    def __init__(self, cluster_id: _Optional[str] = ..., node_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., partitions: _Optional[_Iterable[_Union[PartitionHealth, _Mapping]]] = ..., fenced: _Optional[_Iterable[_Union[FencedReplica, _Mapping]]] = ..., damaged: _Optional[_Iterable[_Union[DamagedReplica, _Mapping]]] = ..., disk: _Optional[_Union[NodeDisk, _Mapping]] = ..., maintenance: _Optional[_Iterable[str]] = ..., incompatible_peers: _Optional[_Iterable[_Union[IncompatiblePeer, _Mapping]]] = ..., protocol_version: _Optional[int] = ...) -> None: ...

class IncompatiblePeer(_message.Message):
    __slots__ = ("node_id", "address", "protocol_version", "reason", "refused_for_ms")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FOR_MS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    address: str
    protocol_version: int
    reason: str
    refused_for_ms: int
    def __init__(self, node_id: _Optional[str] = ..., address: _Optional[str] = ..., protocol_version: _Optional[int] = ..., reason: _Optional[str] = ..., refused_for_ms: _Optional[int] = ...) -> None: ...

class SetMaintenanceRequest(_message.Message):
    __slots__ = ("node_id", "enter")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ENTER_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    enter: bool
    def __init__(self, node_id: _Optional[str] = ..., enter: _Optional[bool] = ...) -> None: ...

class SetMaintenanceResponse(_message.Message):
    __slots__ = ("maintenance",)
    MAINTENANCE_FIELD_NUMBER: _ClassVar[int]
    maintenance: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, maintenance: _Optional[_Iterable[str]] = ...) -> None: ...

class RecoverPartitionRequest(_message.Message):
    __slots__ = ("topic", "partition", "accept_data_loss")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_DATA_LOSS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    accept_data_loss: bool
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., accept_data_loss: _Optional[bool] = ...) -> None: ...

class RecoverPartitionResponse(_message.Message):
    __slots__ = ("recovered", "hosted")
    RECOVERED_FIELD_NUMBER: _ClassVar[int]
    HOSTED_FIELD_NUMBER: _ClassVar[int]
    recovered: bool
    hosted: bool
    def __init__(self, recovered: _Optional[bool] = ..., hosted: _Optional[bool] = ...) -> None: ...

class UpdateNodeRequest(_message.Message):
    __slots__ = ("weight", "zone")
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    weight: float
    zone: str
    def __init__(self, weight: _Optional[float] = ..., zone: _Optional[str] = ...) -> None: ...

class UpdateNodeResponse(_message.Message):
    __slots__ = ("member",)
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    member: Member
    def __init__(self, member: _Optional[_Union[Member, _Mapping]] = ...) -> None: ...

class GroupPartitionEpoch(_message.Message):
    __slots__ = ("topic", "partition", "assignment_epoch")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    assignment_epoch: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., assignment_epoch: _Optional[int] = ...) -> None: ...

class GroupHeartbeatRequest(_message.Message):
    __slots__ = ("group", "member_id", "member_epoch", "instance_id", "weight", "topics", "pattern", "session_timeout_ms", "rebalance_timeout_ms", "owned", "released")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    OWNED_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    member_epoch: int
    instance_id: str
    weight: float
    topics: _containers.RepeatedScalarFieldContainer[str]
    pattern: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    owned: _containers.RepeatedCompositeFieldContainer[GroupPartitionEpoch]
    released: _containers.RepeatedCompositeFieldContainer[GroupPartitionEpoch]
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., instance_id: _Optional[str] = ..., weight: _Optional[float] = ..., topics: _Optional[_Iterable[str]] = ..., pattern: _Optional[str] = ..., session_timeout_ms: _Optional[int] = ..., rebalance_timeout_ms: _Optional[int] = ..., owned: _Optional[_Iterable[_Union[GroupPartitionEpoch, _Mapping]]] = ..., released: _Optional[_Iterable[_Union[GroupPartitionEpoch, _Mapping]]] = ...) -> None: ...

class GroupMemberKey(_message.Message):
    __slots__ = ("member_id", "key", "weight")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    key: str
    weight: float
    def __init__(self, member_id: _Optional[str] = ..., key: _Optional[str] = ..., weight: _Optional[float] = ...) -> None: ...

class GroupTopic(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: int
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[int] = ...) -> None: ...

class GroupOwnedPartition(_message.Message):
    __slots__ = ("topic", "partition", "assignment_epoch", "committed_offset", "metadata")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    assignment_epoch: int
    committed_offset: int
    metadata: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., assignment_epoch: _Optional[int] = ..., committed_offset: _Optional[int] = ..., metadata: _Optional[str] = ...) -> None: ...

class GroupHeartbeatResponse(_message.Message):
    __slots__ = ("member_id", "member_epoch", "group_epoch", "heartbeat_interval_ms", "members", "topics", "owned", "assigned")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    OWNED_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    member_epoch: int
    group_epoch: int
    heartbeat_interval_ms: int
    members: _containers.RepeatedCompositeFieldContainer[GroupMemberKey]
    topics: _containers.RepeatedCompositeFieldContainer[GroupTopic]
    owned: _containers.RepeatedCompositeFieldContainer[GroupOwnedPartition]
    assigned: _containers.RepeatedCompositeFieldContainer[TopicPartitionRef]
    def __init__(self, member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., group_epoch: _Optional[int] = ..., heartbeat_interval_ms: _Optional[int] = ..., members: _Optional[_Iterable[_Union[GroupMemberKey, _Mapping]]] = ..., topics: _Optional[_Iterable[_Union[GroupTopic, _Mapping]]] = ..., owned: _Optional[_Iterable[_Union[GroupOwnedPartition, _Mapping]]] = ..., assigned: _Optional[_Iterable[_Union[TopicPartitionRef, _Mapping]]] = ...) -> None: ...

class OffsetCommit(_message.Message):
    __slots__ = ("topic", "partition", "next_offset", "metadata", "assignment_epoch")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    next_offset: int
    metadata: str
    assignment_epoch: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., next_offset: _Optional[int] = ..., metadata: _Optional[str] = ..., assignment_epoch: _Optional[int] = ...) -> None: ...

class CommitOffsetsRequest(_message.Message):
    __slots__ = ("group", "member_id", "member_epoch", "offsets")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    member_epoch: int
    offsets: _containers.RepeatedCompositeFieldContainer[OffsetCommit]
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., offsets: _Optional[_Iterable[_Union[OffsetCommit, _Mapping]]] = ...) -> None: ...

class PartitionCommitted(_message.Message):
    __slots__ = ("topic", "partition", "error")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error: ErrorDetail
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error: _Optional[_Union[ErrorDetail, _Mapping]] = ...) -> None: ...

class CommitOffsetsResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionCommitted]
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionCommitted, _Mapping]]] = ...) -> None: ...

class TopicPartitionRef(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class FetchOffsetsRequest(_message.Message):
    __slots__ = ("group", "partitions")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    group: str
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitionRef]
    def __init__(self, group: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[TopicPartitionRef, _Mapping]]] = ...) -> None: ...

class CommittedOffset(_message.Message):
    __slots__ = ("topic", "partition", "next_offset", "metadata")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    next_offset: int
    metadata: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., next_offset: _Optional[int] = ..., metadata: _Optional[str] = ...) -> None: ...

class FetchOffsetsResponse(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[CommittedOffset]
    def __init__(self, offsets: _Optional[_Iterable[_Union[CommittedOffset, _Mapping]]] = ...) -> None: ...

class LeaveGroupRequest(_message.Message):
    __slots__ = ("group", "member_id", "member_epoch")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    member_epoch: int
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ...) -> None: ...

class LeaveGroupResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GroupSummary(_message.Message):
    __slots__ = ("group", "state", "member_count", "coordinator")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MEMBER_COUNT_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    group: str
    state: str
    member_count: int
    coordinator: str
    def __init__(self, group: _Optional[str] = ..., state: _Optional[str] = ..., member_count: _Optional[int] = ..., coordinator: _Optional[str] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[GroupSummary]
    def __init__(self, groups: _Optional[_Iterable[_Union[GroupSummary, _Mapping]]] = ...) -> None: ...

class DescribeGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class GroupMemberInfo(_message.Message):
    __slots__ = ("member_id", "instance_id", "weight", "member_epoch", "session_timeout_ms", "rebalance_timeout_ms", "host")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    instance_id: str
    weight: float
    member_epoch: int
    session_timeout_ms: int
    rebalance_timeout_ms: int
    host: str
    def __init__(self, member_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., weight: _Optional[float] = ..., member_epoch: _Optional[int] = ..., session_timeout_ms: _Optional[int] = ..., rebalance_timeout_ms: _Optional[int] = ..., host: _Optional[str] = ...) -> None: ...

class GroupPartitionInfo(_message.Message):
    __slots__ = ("topic", "partition", "owner", "assignment_epoch", "target", "committed_offset", "metadata")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    owner: str
    assignment_epoch: int
    target: str
    committed_offset: int
    metadata: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., owner: _Optional[str] = ..., assignment_epoch: _Optional[int] = ..., target: _Optional[str] = ..., committed_offset: _Optional[int] = ..., metadata: _Optional[str] = ...) -> None: ...

class DescribeGroupResponse(_message.Message):
    __slots__ = ("group", "state", "group_epoch", "coordinator", "topics", "pattern", "members", "partitions")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    group: str
    state: str
    group_epoch: int
    coordinator: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    pattern: str
    members: _containers.RepeatedCompositeFieldContainer[GroupMemberInfo]
    partitions: _containers.RepeatedCompositeFieldContainer[GroupPartitionInfo]
    def __init__(self, group: _Optional[str] = ..., state: _Optional[str] = ..., group_epoch: _Optional[int] = ..., coordinator: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., pattern: _Optional[str] = ..., members: _Optional[_Iterable[_Union[GroupMemberInfo, _Mapping]]] = ..., partitions: _Optional[_Iterable[_Union[GroupPartitionInfo, _Mapping]]] = ...) -> None: ...

class ResetOffsetsRequest(_message.Message):
    __slots__ = ("group", "offsets")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    group: str
    offsets: _containers.RepeatedCompositeFieldContainer[CommittedOffset]
    def __init__(self, group: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[CommittedOffset, _Mapping]]] = ...) -> None: ...

class ResetOffsetsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeleteGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class DeleteGroupResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ErrorDetail(_message.Message):
    __slots__ = ("code", "message", "leader_id", "leader_address", "start_offset", "end_offset", "offset", "producer_id", "base_sequence", "expected_sequence", "group", "member_id", "reason", "member_count", "nodes", "operation", "resource_type", "resource_name")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    BASE_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MEMBER_COUNT_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    code: ErrorCode
    message: str
    leader_id: str
    leader_address: str
    start_offset: int
    end_offset: int
    offset: int
    producer_id: int
    base_sequence: int
    expected_sequence: int
    group: str
    member_id: str
    reason: str
    member_count: int
    nodes: _containers.RepeatedScalarFieldContainer[str]
    operation: str
    resource_type: str
    resource_name: str
    def __init__(self, code: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ..., leader_id: _Optional[str] = ..., leader_address: _Optional[str] = ..., start_offset: _Optional[int] = ..., end_offset: _Optional[int] = ..., offset: _Optional[int] = ..., producer_id: _Optional[int] = ..., base_sequence: _Optional[int] = ..., expected_sequence: _Optional[int] = ..., group: _Optional[str] = ..., member_id: _Optional[str] = ..., reason: _Optional[str] = ..., member_count: _Optional[int] = ..., nodes: _Optional[_Iterable[str]] = ..., operation: _Optional[str] = ..., resource_type: _Optional[str] = ..., resource_name: _Optional[str] = ...) -> None: ...

class GossipKeyringRequest(_message.Message):
    __slots__ = ("action", "key", "encrypt_verify_incoming", "encrypt_verify_outgoing")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    ENCRYPT_VERIFY_INCOMING_FIELD_NUMBER: _ClassVar[int]
    ENCRYPT_VERIFY_OUTGOING_FIELD_NUMBER: _ClassVar[int]
    action: KeyringAction
    key: bytes
    encrypt_verify_incoming: bool
    encrypt_verify_outgoing: bool
    def __init__(self, action: _Optional[_Union[KeyringAction, str]] = ..., key: _Optional[bytes] = ..., encrypt_verify_incoming: _Optional[bool] = ..., encrypt_verify_outgoing: _Optional[bool] = ...) -> None: ...

class GossipKeyringResponse(_message.Message):
    __slots__ = ("node_id", "keys", "encrypt_verify_incoming", "encrypt_verify_outgoing", "counters")
    class CountersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    ENCRYPT_VERIFY_INCOMING_FIELD_NUMBER: _ClassVar[int]
    ENCRYPT_VERIFY_OUTGOING_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    encrypt_verify_incoming: bool
    encrypt_verify_outgoing: bool
    counters: _containers.ScalarMap[str, int]
    def __init__(self, node_id: _Optional[str] = ..., keys: _Optional[_Iterable[bytes]] = ..., encrypt_verify_incoming: _Optional[bool] = ..., encrypt_verify_outgoing: _Optional[bool] = ..., counters: _Optional[_Mapping[str, int]] = ...) -> None: ...

class AclBinding(_message.Message):
    __slots__ = ("principal", "operation", "resource_type", "resource_name", "pattern", "permission")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    principal: str
    operation: str
    resource_type: str
    resource_name: str
    pattern: str
    permission: str
    def __init__(self, principal: _Optional[str] = ..., operation: _Optional[str] = ..., resource_type: _Optional[str] = ..., resource_name: _Optional[str] = ..., pattern: _Optional[str] = ..., permission: _Optional[str] = ...) -> None: ...

class AclFilter(_message.Message):
    __slots__ = ("principal", "operation", "resource_type", "resource_name", "pattern", "permission")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    principal: str
    operation: str
    resource_type: str
    resource_name: str
    pattern: str
    permission: str
    def __init__(self, principal: _Optional[str] = ..., operation: _Optional[str] = ..., resource_type: _Optional[str] = ..., resource_name: _Optional[str] = ..., pattern: _Optional[str] = ..., permission: _Optional[str] = ...) -> None: ...

class CreateAclsRequest(_message.Message):
    __slots__ = ("acls",)
    ACLS_FIELD_NUMBER: _ClassVar[int]
    acls: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, acls: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class CreateAclsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAclsRequest(_message.Message):
    __slots__ = ("filter",)
    FILTER_FIELD_NUMBER: _ClassVar[int]
    filter: AclFilter
    def __init__(self, filter: _Optional[_Union[AclFilter, _Mapping]] = ...) -> None: ...

class ListAclsResponse(_message.Message):
    __slots__ = ("acls",)
    ACLS_FIELD_NUMBER: _ClassVar[int]
    acls: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, acls: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class DeleteAclsRequest(_message.Message):
    __slots__ = ("filters",)
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    filters: _containers.RepeatedCompositeFieldContainer[AclFilter]
    def __init__(self, filters: _Optional[_Iterable[_Union[AclFilter, _Mapping]]] = ...) -> None: ...

class DeleteAclsResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, deleted: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class NodeStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CounterSample(_message.Message):
    __slots__ = ("age_ms", "produced_records", "fetched_records")
    AGE_MS_FIELD_NUMBER: _ClassVar[int]
    PRODUCED_RECORDS_FIELD_NUMBER: _ClassVar[int]
    FETCHED_RECORDS_FIELD_NUMBER: _ClassVar[int]
    age_ms: int
    produced_records: int
    fetched_records: int
    def __init__(self, age_ms: _Optional[int] = ..., produced_records: _Optional[int] = ..., fetched_records: _Optional[int] = ...) -> None: ...

class LeadershipChange(_message.Message):
    __slots__ = ("topic", "partition", "leader", "term", "age_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    AGE_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    leader: str
    term: int
    age_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., leader: _Optional[str] = ..., term: _Optional[int] = ..., age_ms: _Optional[int] = ...) -> None: ...

class GroupCommitted(_message.Message):
    __slots__ = ("topic", "partition", "committed_offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    committed_offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., committed_offset: _Optional[int] = ...) -> None: ...

class GroupStatus(_message.Message):
    __slots__ = ("group", "state", "member_count", "committed", "committed_more")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MEMBER_COUNT_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_MORE_FIELD_NUMBER: _ClassVar[int]
    group: str
    state: str
    member_count: int
    committed: _containers.RepeatedCompositeFieldContainer[GroupCommitted]
    committed_more: int
    def __init__(self, group: _Optional[str] = ..., state: _Optional[str] = ..., member_count: _Optional[int] = ..., committed: _Optional[_Iterable[_Union[GroupCommitted, _Mapping]]] = ..., committed_more: _Optional[int] = ...) -> None: ...

class NodeStatusResponse(_message.Message):
    __slots__ = ("cluster", "sample_interval_ms", "samples", "leadership_changes", "groups", "groups_more")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    LEADERSHIP_CHANGES_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_MORE_FIELD_NUMBER: _ClassVar[int]
    cluster: DescribeClusterResponse
    sample_interval_ms: int
    samples: _containers.RepeatedCompositeFieldContainer[CounterSample]
    leadership_changes: _containers.RepeatedCompositeFieldContainer[LeadershipChange]
    groups: _containers.RepeatedCompositeFieldContainer[GroupStatus]
    groups_more: int
    def __init__(self, cluster: _Optional[_Union[DescribeClusterResponse, _Mapping]] = ..., sample_interval_ms: _Optional[int] = ..., samples: _Optional[_Iterable[_Union[CounterSample, _Mapping]]] = ..., leadership_changes: _Optional[_Iterable[_Union[LeadershipChange, _Mapping]]] = ..., groups: _Optional[_Iterable[_Union[GroupStatus, _Mapping]]] = ..., groups_more: _Optional[int] = ...) -> None: ...
