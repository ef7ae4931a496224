"""What the request structs share: API keys and versions, Kafka's uuid type."""

from __future__ import annotations

import uuid
from io import BytesIO

from aiokafka.protocol.abstract import AbstractType

PRODUCE = 0
METADATA = 3
FETCH = 1
METADATA_WITH_IDS = 10
FETCH_BY_ID = 13
PRODUCE_BY_ID = 13
UNKNOWN_TOPIC_ID = 100  # a request named a topic id the broker does not hold (deleted)

# Kafka's error codes that syncer decides on (the protocol's numbers, one home for them)
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
NETWORK_EXCEPTION = 13
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
RECORD_LIST_TOO_LARGE = 18
INVALID_TIMESTAMP = 32
OUT_OF_ORDER_SEQUENCE = 45
DUPLICATE_SEQUENCE = 46
KAFKA_STORAGE_ERROR = 56
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
INVALID_RECORD = 87
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
