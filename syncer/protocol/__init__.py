"""Kafka requests that aiokafka's structs do not reach: the versions that carry topic ids.

A topic deleted and recreated keeps its name and gets a new id (KIP-516), so only the id tells
the new log from the old. aiokafka 0.14 stops at Metadata v5, Fetch v11 and Produce v8, which
know topics by name; these are Metadata v10 (the first with topic ids; Kafka 2.8+), Fetch v13
(the first that names topics by id; Kafka 3.1+) and Produce v13 (the first that names topics
by id; Kafka 4.1+), all "flexible" versions: compact arrays and strings, tagged fields, and
request header v2 (aiokafka sends that one for a struct with ``FLEXIBLE_VERSION``). Field
lists follow Kafka's MetadataRequest.json, FetchRequest.json, ProduceRequest.json and their
responses (Produce v13's checked against the schemas of kafka-clients 4.1.1)."""

from syncer.protocol.common import (
    FETCH,
    FETCH_BY_ID,
    METADATA,
    METADATA_WITH_IDS,
    NO_ID,
    PRODUCE,
    PRODUCE_BY_ID,
    UNKNOWN_TOPIC_ID,
    Uuid,
)
from syncer.protocol.fetch import (
    FetchByIdRequest,
    FetchedById,
    FetchRequest_v13,
    FetchResponse_v13,
    fetched_by_id,
)
from syncer.protocol.metadata import (
    MetadataRequest_v10,
    MetadataResponse_v10,
    TopicIdsRequest,
    TopicMetadata,
    topics_of,
)
from syncer.protocol.produce import (
    ProduceByIdRequest,
    ProducedById,
    ProduceRequest_v13,
    ProduceResponse_v13,
    produced_by_id,
)

__all__ = [
    "FETCH",
    "FETCH_BY_ID",
    "METADATA",
    "METADATA_WITH_IDS",
    "NO_ID",
    "PRODUCE",
    "PRODUCE_BY_ID",
    "UNKNOWN_TOPIC_ID",
    "FetchByIdRequest",
    "FetchRequest_v13",
    "FetchResponse_v13",
    "FetchedById",
    "MetadataRequest_v10",
    "MetadataResponse_v10",
    "ProduceByIdRequest",
    "ProduceRequest_v13",
    "ProduceResponse_v13",
    "ProducedById",
    "TopicIdsRequest",
    "TopicMetadata",
    "Uuid",
    "fetched_by_id",
    "produced_by_id",
    "topics_of",
]
