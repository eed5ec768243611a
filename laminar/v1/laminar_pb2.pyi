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
    __slots__ = ("partitions", "replication_factor", "retention_bytes", "retention_ms")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    RETENTION_BYTES_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    partitions: int
    replication_factor: int
    retention_bytes: int
    retention_ms: int
    def __init__(self, partitions: _Optional[int] = ..., replication_factor: _Optional[int] = ..., retention_bytes: _Optional[int] = ..., retention_ms: _Optional[int] = ...) -> None: ...

class TopicInfo(_message.Message):
    __slots__ = ("name", "config", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    config: TopicConfig
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionInfo]
    def __init__(self, name: _Optional[str] = ..., config: _Optional[_Union[TopicConfig, _Mapping]] = ..., partitions: _Optional[_Iterable[_Union[PartitionInfo, _Mapping]]] = ...) -> None: ...

class MetadataRequest(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topics: _Optional[_Iterable[str]] = ...) -> None: ...

class MetadataResponse(_message.Message):
    __slots__ = ("cluster_id", "node_id", "members", "topics", "metadata_offset")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    node_id: str
    members: _containers.RepeatedCompositeFieldContainer[Member]
    topics: _containers.RepeatedCompositeFieldContainer[TopicInfo]
    metadata_offset: int
    def __init__(self, cluster_id: _Optional[str] = ..., node_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., topics: _Optional[_Iterable[_Union[TopicInfo, _Mapping]]] = ..., metadata_offset: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("topic", "partition", "leader", "replicas", "voters", "under_replicated", "in_sync")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    UNDER_REPLICATED_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    leader: str
    replicas: _containers.RepeatedScalarFieldContainer[str]
    voters: _containers.RepeatedScalarFieldContainer[str]
    under_replicated: bool
    in_sync: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., leader: _Optional[str] = ..., replicas: _Optional[_Iterable[str]] = ..., voters: _Optional[_Iterable[str]] = ..., under_replicated: _Optional[bool] = ..., in_sync: _Optional[_Iterable[str]] = ...) -> None: ...

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

class DescribeClusterResponse(_message.Message):
    __slots__ = ("cluster_id", "node_id", "members", "partitions", "fenced")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    node_id: str
    members: _containers.RepeatedCompositeFieldContainer[Member]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionHealth]
    fenced: _containers.RepeatedCompositeFieldContainer[FencedReplica]
    def __init__(self, cluster_id: _Optional[str] = ..., node_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., partitions: _Optional[_Iterable[_Union[PartitionHealth, _Mapping]]] = ..., fenced: _Optional[_Iterable[_Union[FencedReplica, _Mapping]]] = ...) -> None: ...

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

class ErrorDetail(_message.Message):
    __slots__ = ("code", "message", "leader_id", "leader_address", "start_offset", "end_offset", "offset", "producer_id", "base_sequence", "expected_sequence")
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
    def __init__(self, code: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ..., leader_id: _Optional[str] = ..., leader_address: _Optional[str] = ..., start_offset: _Optional[int] = ..., end_offset: _Optional[int] = ..., offset: _Optional[int] = ..., producer_id: _Optional[int] = ..., base_sequence: _Optional[int] = ..., expected_sequence: _Optional[int] = ...) -> None: ...
