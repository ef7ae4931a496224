"""Metadata v10: the first version that reports each topic's id (Kafka 2.8+)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

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
