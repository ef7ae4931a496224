"""Kafka requests that aiokafka's structs do not reach: the versions that carry topic ids.

A topic deleted and recreated keeps its name and gets a new id (KIP-516), so only the id tells
the new log from the old. aiokafka 0.14 stops at Metadata v5, Fetch v11 and Produce v8, which
know topics by name; these are Metadata v10 (the first with topic ids; Kafka 2.8+), Fetch v13
(the first that names topics by id; Kafka 3.1+) and Produce v13 (the first that names topics
by id; Kafka 4.1+), all "flexible" versions: compact arrays and strings, tagged fields, and
request header v2 (aiokafka sends that one for a struct with ``FLEXIBLE_VERSION``). Field
lists follow Kafka's MetadataRequest.json, FetchRequest.json, ProduceRequest.json and their
responses (Produce v13's checked against the schemas of kafka-clients 4.1.1)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from io import BytesIO
from typing import Any

from aiokafka.protocol.abstract import AbstractType
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactBytes,
    CompactString,
    Int8,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

PRODUCE = 0
METADATA = 3
FETCH = 1
METADATA_WITH_IDS = 10
FETCH_BY_ID = 13
PRODUCE_BY_ID = 13
UNKNOWN_TOPIC_ID = 100  # a request named a topic id the broker does not hold (deleted)
NO_ID = uuid.UUID(int=0)


class Uuid(AbstractType[uuid.UUID]):  # type: ignore[misc]
    """Kafka's uuid: 16 bytes, most significant first."""

    @classmethod
    def encode(cls, value: uuid.UUID) -> bytes:
        return value.bytes

    @classmethod
    def decode(cls, data: BytesIO) -> uuid.UUID:
        raw = data.read(16)
        if len(raw) != 16:
            raise ValueError("Buffer underrun decoding uuid")
        return uuid.UUID(bytes=raw)


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


# fetch ----------------------------------------------------------------------------------


class FetchResponse_v13(Response):  # type: ignore[misc]
    API_KEY = FETCH
    API_VERSION = 13
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        ("session_id", Int32),
        (
            "responses",
            CompactArray(
                ("topic_id", Uuid),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("error_code", Int16),
                        ("high_watermark", Int64),
                        ("last_stable_offset", Int64),
                        ("log_start_offset", Int64),
                        (
                            "aborted_transactions",
                            CompactArray(
                                ("producer_id", Int64),
                                ("first_offset", Int64),
                                ("tags", TaggedFields),
                            ),
                        ),
                        ("preferred_read_replica", Int32),
                        ("records", CompactBytes),
                        ("tags", TaggedFields),  # diverging epoch, current leader, snapshot
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class FetchRequest_v13(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = FETCH
    API_VERSION = 13
    RESPONSE_TYPE = FetchResponse_v13
    SCHEMA = Schema(
        ("replica_id", Int32),
        ("max_wait_ms", Int32),
        ("min_bytes", Int32),
        ("max_bytes", Int32),
        ("isolation_level", Int8),
        ("session_id", Int32),
        ("session_epoch", Int32),
        (
            "topics",
            CompactArray(
                ("topic_id", Uuid),
                (
                    "partitions",
                    CompactArray(
                        ("partition", Int32),
                        ("current_leader_epoch", Int32),
                        ("fetch_offset", Int64),
                        ("last_fetched_epoch", Int32),
                        ("log_start_offset", Int64),
                        ("partition_max_bytes", Int32),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        (
            "forgotten_topics_data",
            CompactArray(
                ("topic_id", Uuid), ("partitions", CompactArray(Int32)), ("tags", TaggedFields)
            ),
        ),
        ("rack_id", CompactString("utf-8")),
        ("tags", TaggedFields),
    )


class FetchByIdRequest(Request[FetchRequest_v13]):  # type: ignore[misc]
    """A sessionless consumer fetch naming each topic by id: the broker answers
    UNKNOWN_TOPIC_ID for a topic deleted (and maybe recreated under the same name) since the
    id was learned, instead of serving the new log's records."""

    API_KEY = FETCH

    def __init__(
        self,
        max_wait_ms: int,
        max_bytes: int,
        isolation_level: int,
        topics: Mapping[uuid.UUID, list[tuple[int, int, int]]],
    ) -> None:
        self.max_wait_ms = max_wait_ms
        self.max_bytes = max_bytes
        self.isolation_level = isolation_level
        self.topics = topics  # id → (partition, offset, max bytes)

    def build(self, request_struct_class: type[FetchRequest_v13]) -> FetchRequest_v13:
        topics: list[tuple[uuid.UUID, list[tuple[Any, ...]], dict[int, bytes]]] = [
            (topic_id, [(p, -1, offset, -1, -1, limit, {}) for p, offset, limit in partitions], {})
            for topic_id, partitions in self.topics.items()
        ]
        return request_struct_class(
            -1,  # replica id: a consumer
            self.max_wait_ms,
            1,  # min bytes
            self.max_bytes,
            self.isolation_level,
            0,  # session id: none (a full fetch each time)
            -1,  # session epoch: final
            topics,
            [],  # forgotten topics
            "",  # rack id
            {},
        )


@dataclass(frozen=True, slots=True)
class FetchedById:
    """One partition of a fetch-by-id answer, with the fields of aiokafka's v11 answer."""

    topic_id: uuid.UUID
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: tuple[tuple[int, int], ...]
    records: bytes


def fetched_by_id(response: FetchResponse_v13) -> list[FetchedById]:
    """Every partition of the answer. A top-level error (one that concerns the whole request)
    is given to each partition that carries none of its own."""
    out: list[FetchedById] = []
    for topic_id, partitions, *_ in response.responses:
        for p in partitions:
            partition, code, hw, lso, start, aborted, _replica, records, *_ = p
            out.append(
                FetchedById(
                    topic_id,
                    partition,
                    code or response.error_code,
                    hw,
                    lso,
                    start,
                    tuple((a[0], a[1]) for a in (aborted or ())),
                    records or b"",
                )
            )
    return out


# produce --------------------------------------------------------------------------------


class ProduceResponse_v13(Response):  # type: ignore[misc]
    API_KEY = PRODUCE
    API_VERSION = PRODUCE_BY_ID
    SCHEMA = Schema(
        (
            "responses",
            CompactArray(
                ("topic_id", Uuid),
                (
                    "partition_responses",
                    CompactArray(
                        ("index", Int32),
                        ("error_code", Int16),
                        ("base_offset", Int64),
                        ("log_append_time_ms", Int64),
                        ("log_start_offset", Int64),
                        (
                            "record_errors",
                            CompactArray(
                                ("batch_index", Int32),
                                ("batch_index_error_message", CompactString("utf-8")),
                                ("tags", TaggedFields),
                            ),
                        ),
                        ("error_message", CompactString("utf-8")),
                        ("tags", TaggedFields),  # current leader
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("throttle_time_ms", Int32),
        ("tags", TaggedFields),  # node endpoints
    )


class ProduceRequest_v13(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = PRODUCE
    API_VERSION = PRODUCE_BY_ID
    RESPONSE_TYPE = ProduceResponse_v13
    SCHEMA = Schema(
        ("transactional_id", CompactString("utf-8")),
        ("acks", Int16),
        ("timeout_ms", Int32),
        (
            "topic_data",
            CompactArray(
                ("topic_id", Uuid),
                (
                    "partition_data",
                    CompactArray(
                        ("index", Int32), ("records", CompactBytes), ("tags", TaggedFields)
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class ProduceByIdRequest(Request[ProduceRequest_v13]):  # type: ignore[misc]
    """A non-transactional produce naming each topic by id: the broker answers
    UNKNOWN_TOPIC_ID for a topic deleted (and maybe recreated under the same name) since the
    id was learned, instead of appending to the new log."""

    API_KEY = PRODUCE

    def __init__(
        self, acks: int, timeout_ms: int, topics: Mapping[uuid.UUID, list[tuple[int, bytes]]]
    ) -> None:
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.topics = topics  # id → (partition, record batches)

    def build(self, request_struct_class: type[ProduceRequest_v13]) -> ProduceRequest_v13:
        topics: list[tuple[uuid.UUID, list[tuple[Any, ...]], dict[int, bytes]]] = [
            (topic_id, [(p, records, {}) for p, records in partitions], {})
            for topic_id, partitions in self.topics.items()
        ]
        return request_struct_class(None, self.acks, self.timeout_ms, topics, {})


@dataclass(frozen=True, slots=True)
class ProducedById:
    """One partition of a produce-by-id answer."""

    topic_id: uuid.UUID
    partition: int
    error_code: int
    base_offset: int
    message: str | None  # the broker's own words on an error, if it gave any


def produced_by_id(response: ProduceResponse_v13) -> list[ProducedById]:
    """Every partition of the answer."""
    return [
        ProducedById(topic_id, index, code, base_offset, message)
        for topic_id, partitions, *_ in response.responses
        for index, code, base_offset, _append_time, _start, _errors, message, *_ in partitions
    ]
