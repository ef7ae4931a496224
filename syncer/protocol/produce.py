"""Produce v13: the first version that names topics by id (Kafka 4.1+)."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from typing import Any, NamedTuple

from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    CompactArray,
    CompactBytes,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

from syncer.protocol.common import (
    PRODUCE,
    PRODUCE_BY_ID,
    Uuid,
)
from syncer.protocol.lean import LeanAnswer, LeanHeader, Reader

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
        self,
        acks: int,
        timeout_ms: int,
        topics: Mapping[uuid.UUID, list[tuple[int, bytes | bytearray]]],
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


class ProducedById(NamedTuple):
    """One partition of a produce-by-id answer."""

    topic_id: uuid.UUID
    partition: int
    error_code: int
    base_offset: int
    message: str | None  # the broker's own words on an error, if it gave any
    append_time: int = -1  # the broker's clock stamped on the batch (LogAppendTime), else -1


class ProduceAnswer(NamedTuple):
    """A Produce v13 answer as ``read_produce_v13`` decodes it: every partition."""

    partitions: list[ProducedById]


_PRODUCED = struct.Struct(">ihqqq")  # index, error code, base offset, append time, log start
_BATCH_INDEX = struct.Struct(">i")
_THROTTLE = struct.Struct(">i")


def read_produce_v13(data: bytes, pos: int = 0) -> ProduceAnswer:
    """The Produce v13 answer whose body starts at ``pos`` of ``data`` (past its header)."""
    reader = Reader(data, pos)
    out: list[ProducedById] = []
    for _ in range(reader.uvarint() - 1):
        topic_id = reader.topic_id()
        for _ in range(reader.uvarint() - 1):
            index, code, base_offset, append_time, _start = reader.take(_PRODUCED)
            for _ in range(reader.uvarint() - 1):  # record errors: the message says it
                reader.take(_BATCH_INDEX)
                reader.compact_string()
                reader.skip_tags()
            message = reader.compact_string()
            reader.skip_tags()  # the current leader, on NOT_LEADER_OR_FOLLOWER
            out.append(ProducedById(topic_id, index, code, base_offset, message, append_time))
        reader.skip_tags()
    reader.take(_THROTTLE)
    reader.skip_tags()  # node endpoints
    return ProduceAnswer(out)


class LeanProduceRequest_v13(LeanHeader, ProduceRequest_v13):
    """A Produce v13 request as aiokafka's reader sees it, for the produces written by
    ``direct.write_produce``: its answer decoded by ``read_produce_v13``."""

    RESPONSE_TYPE = LeanAnswer(read_produce_v13)  # type: ignore[assignment]  # as aiokafka's would


def produced_by_id(response: ProduceResponse_v13 | ProduceAnswer) -> list[ProducedById]:
    """Every partition of the answer."""
    if isinstance(response, ProduceAnswer):
        return response.partitions
    return [
        ProducedById(topic_id, index, code, base_offset, message, append_time)
        for topic_id, partitions, *_ in response.responses
        for index, code, base_offset, append_time, _start, _errors, message, *_ in partitions
    ]


# encoding a produce request ourselves -----------------------------------------------------

_INT16 = struct.Struct(">h").pack
_INT32 = struct.Struct(">i").pack


_ONE_BYTE = [bytes((value,)) for value in range(0x80)]  # nearly every count of a request


def uvarint(value: int) -> bytes:
    """Kafka's unsigned varint (compact lengths and array counts): 7 bits a byte, low first."""
    if 0 <= value <= 0x7F:
        return _ONE_BYTE[value]
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def produce_v13_frame(
    correlation_id: int,
    client_id: str,
    acks: int,
    timeout_ms: int,
    topics: Mapping[uuid.UUID, list[tuple[int, bytes | bytearray]]],
) -> list[bytes | bytearray]:
    """A whole Produce v13 request (size prefix, header v2, body) as the pieces to write,
    byte for byte what aiokafka's structs encode for ``ProduceByIdRequest``, but with each
    record batch its own piece: the batches (most of the bytes) are written as they are,
    never copied into one encoded request first."""
    name = client_id.encode()
    pieces: list[bytes | bytearray] = [
        b"",  # the size, once known
        _INT16(PRODUCE) + _INT16(PRODUCE_BY_ID) + _INT32(correlation_id),
        _INT16(len(name)) + name + b"\x00",  # client id; no tagged fields
        b"\x00" + _INT16(acks) + _INT32(timeout_ms) + uvarint(len(topics) + 1),
    ]
    for topic_id, partitions in topics.items():
        pieces.append(topic_id.bytes + uvarint(len(partitions) + 1))
        for index, records in partitions:
            pieces.append(_INT32(index) + uvarint(len(records) + 1))
            pieces.append(records)
            pieces.append(b"\x00")  # the partition's tagged fields
        pieces.append(b"\x00")  # the topic's
    pieces.append(b"\x00")  # the request's
    pieces[0] = _INT32(sum(map(len, pieces)))
    return pieces
