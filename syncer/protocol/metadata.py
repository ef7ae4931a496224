"""Metadata v10: the first version that reports each topic's id (Kafka 2.8+)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from io import BytesIO

from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Schema,
    TaggedFields,
)

from syncer.protocol.common import (
    METADATA,
    NO_ID,
    Uuid,
)

# metadata -------------------------------------------------------------------------------


class MetadataResponse_v10(Response):  # type: ignore[misc]
    API_KEY = METADATA
    API_VERSION = 10
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "brokers",
            CompactArray(
                ("node_id", Int32),
                ("host", CompactString("utf-8")),
                ("port", Int32),
                ("rack", CompactString("utf-8")),
                ("tags", TaggedFields),
            ),
        ),
        ("cluster_id", CompactString("utf-8")),
        ("controller_id", Int32),
        (
            "topics",
            CompactArray(
                ("error_code", Int16),
                ("name", CompactString("utf-8")),
                ("topic_id", Uuid),
                ("is_internal", Boolean),
                (
                    "partitions",
                    CompactArray(
                        ("error_code", Int16),
                        ("partition_index", Int32),
                        ("leader_id", Int32),
                        ("leader_epoch", Int32),
                        ("replica_nodes", CompactArray(Int32)),
                        ("isr_nodes", CompactArray(Int32)),
                        ("offline_replicas", CompactArray(Int32)),
                        ("tags", TaggedFields),
                    ),
                ),
                ("topic_authorized_operations", Int32),
                ("tags", TaggedFields),
            ),
        ),
        ("cluster_authorized_operations", Int32),
        ("tags", TaggedFields),
    )


class MetadataRequest_v10(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = METADATA
    API_VERSION = 10
    RESPONSE_TYPE = MetadataResponse_v10
    SCHEMA = Schema(
        (
            "topics",
            CompactArray(
                ("topic_id", Uuid), ("name", CompactString("utf-8")), ("tags", TaggedFields)
            ),
        ),
        ("allow_auto_topic_creation", Boolean),
        ("include_cluster_authorized_operations", Boolean),
        ("include_topic_authorized_operations", Boolean),
        ("tags", TaggedFields),
    )


class TopicIdsRequest(Request[MetadataRequest_v10]):  # type: ignore[misc]
    """Metadata of the named topics (all topics if None) with their ids; never creates one."""

    API_KEY = METADATA

    def __init__(self, topics: list[str] | None) -> None:
        self.topics = topics

    def build(self, request_struct_class: type[MetadataRequest_v10]) -> MetadataRequest_v10:
        topics: list[tuple[uuid.UUID, str, dict[int, bytes]]] | None = None
        if self.topics is not None:
            topics = [(NO_ID, t, {}) for t in self.topics]
        return request_struct_class(topics, False, False, False, {})


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One topic of a metadata answer: its id, partition count, and error (0: none)."""

    name: str
    topic_id: uuid.UUID
    partitions: int
    error_code: int


def topics_of(response: MetadataResponse_v10) -> dict[str, TopicMetadata]:
    """Topic name → what the answer says of it."""
    out: dict[str, TopicMetadata] = {}
    for error_code, name, topic_id, _internal, partitions, *_ in response.topics:
        if name is not None:
            out[name] = TopicMetadata(name, topic_id, len(partitions or ()), error_code)
    return out


# the census: every topic's name, id and partition count, decoded by hand -------------------


class TopicCensus:
    """A Metadata v10 answer for every topic, reduced while decoding to each topic's name,
    id, partition count and error: aiokafka's generic decoding builds a tuple per partition
    with its replica lists, which at 10,000 partitions was most of an idle process's topic
    refresh. Skipping the partitions' fields by their lengths costs a tenth of that."""

    API_KEY = METADATA
    API_VERSION = 10

    def __init__(self, topics: dict[str, TopicMetadata], brokers: int) -> None:
        self.topics = topics
        self.brokers = brokers  # how many the answer lists (a broker starting may know none)

    @classmethod
    def decode(cls, data: BytesIO | bytes) -> TopicCensus:
        raw = data.read() if isinstance(data, BytesIO) else data
        return census_of(raw)


def census_of(raw: bytes) -> TopicCensus:
    """The census in the body of a Metadata v10 answer (after its header)."""
    reader = _Reader(raw)
    reader.skip(4)  # throttle_time_ms
    brokers = reader.length()
    for _ in range(brokers):
        reader.skip(4)  # node_id
        reader.string()  # host
        reader.skip(4)  # port
        reader.string()  # rack
        reader.tags()
    reader.string()  # cluster_id
    reader.skip(4)  # controller_id
    topics: dict[str, TopicMetadata] = {}
    for _ in range(reader.length()):
        error_code = reader.int16()
        name = reader.string()
        topic_id = uuid.UUID(bytes=reader.take(16))
        internal = reader.take(1) != b"\x00"
        partitions = reader.length()
        for _ in range(partitions):
            reader.skip_partition()
        reader.skip(4)  # topic_authorized_operations
        reader.tags()
        if name is not None and not internal:  # __consumer_offsets and the like: not ours
            topics[name] = TopicMetadata(name, topic_id, partitions, error_code)
    return TopicCensus(topics, brokers)


class _Reader:
    """Reads the flexible versions' types from ``raw``, front to back."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.at = 0

    def skip(self, n: int) -> None:
        if self.at + n > len(self.raw):
            raise ValueError("metadata answer cut short")
        self.at += n

    def take(self, n: int) -> bytes:
        start = self.at
        self.skip(n)
        return self.raw[start : self.at]

    def int16(self) -> int:
        return int.from_bytes(self.take(2), "big", signed=True)

    def varint(self) -> int:
        value = shift = 0
        while True:
            if self.at >= len(self.raw):
                raise ValueError("metadata answer cut short")
            byte = self.raw[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def length(self) -> int:
        """A compact array's or string's length (a null one: 0)."""
        return max(0, self.varint() - 1)

    def string(self) -> str | None:
        n = self.varint()
        return None if n == 0 else self.take(n - 1).decode("utf-8")

    def skip_partition(self) -> None:
        """One partition of a topic: its error_code, partition_index, leader_id and
        leader_epoch, its replica_nodes, isr_nodes and offline_replicas (Int32 arrays; a
        length under 128 is one byte, read here without a call) and its tagged fields."""
        raw, end = self.raw, len(self.raw)
        self.at += 14
        for _ in range(3):
            at = self.at
            if at < end and raw[at] < 0x80:
                self.at = at + 1 + 4 * max(0, raw[at] - 1)
            else:
                self.skip(4 * self.length())
        if self.at < end and raw[self.at] == 0:  # no tagged fields
            self.at += 1
        else:
            self.tags()
        if self.at > end:
            raise ValueError("metadata answer cut short")

    def tags(self) -> None:
        for _ in range(self.varint()):
            self.varint()  # tag
            self.skip(self.varint())


class MetadataCensusRequest_v10(RequestStruct):  # type: ignore[misc]
    """Metadata v10's request, its answer decoded as a ``TopicCensus``."""

    FLEXIBLE_VERSION = True
    API_KEY = METADATA
    API_VERSION = 10
    RESPONSE_TYPE = TopicCensus
    SCHEMA = MetadataRequest_v10.SCHEMA


class TopicCensusRequest(Request[MetadataCensusRequest_v10]):  # type: ignore[misc]
    """Metadata of every topic, answered as a ``TopicCensus``; never creates a topic."""

    API_KEY = METADATA

    def build(
        self, request_struct_class: type[MetadataCensusRequest_v10]
    ) -> MetadataCensusRequest_v10:
        return request_struct_class(None, False, False, False, {})
