"""Fetch v13: the first version that names topics by id (Kafka 3.1+)."""

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
    Int8,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

from syncer.protocol.common import (
    FETCH,
    Uuid,
)
from syncer.protocol.lean import LeanAnswer, LeanHeader, Reader

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
    """A consumer fetch naming each topic by id: the broker answers UNKNOWN_TOPIC_ID for a
    topic deleted (and maybe recreated under the same name) since the id was learned,
    instead of serving the new log's records. Sessionless unless ``session`` (id, epoch)
    says otherwise (``fetch_session``); ``forgotten`` leaves partitions of a session."""

    API_KEY = FETCH

    def __init__(
        self,
        max_wait_ms: int,
        max_bytes: int,
        isolation_level: int,
        topics: Mapping[uuid.UUID, list[tuple[int, int, int]]],
        rack_id: str = "",
        session: tuple[int, int] = (0, -1),  # no session: a full fetch each time
        forgotten: Mapping[uuid.UUID, list[int]] | None = None,
    ) -> None:
        self.session = session
        self.forgotten = forgotten or {}
        self.max_wait_ms = max_wait_ms
        self.max_bytes = max_bytes
        self.isolation_level = isolation_level
        self.topics = topics  # id → (partition, offset, max bytes)
        self.rack_id = rack_id  # the client's rack: the leader may name a follower in it

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
            *self.session,  # session id, epoch
            topics,
            [(topic_id, partitions, {}) for topic_id, partitions in self.forgotten.items()],
            self.rack_id,
            {},
        )


class FetchedById(NamedTuple):
    """One partition of a fetch-by-id answer, with the fields of aiokafka's v11 answer (a
    named tuple: one is made per partition of every answer, a frozen dataclass took three
    and a half times as long to make)."""

    topic_id: uuid.UUID
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: tuple[tuple[int, int], ...]
    records: bytes | memoryview  # a view of the answer read by read_fetch_v13
    preferred_read_replica: int = -1  # the follower the leader names to read from (KIP-392)


def fetched_by_id(response: FetchResponse_v13) -> list[FetchedById]:
    """Every partition of the answer. A top-level error (one that concerns the whole request)
    is given to each partition that carries none of its own."""
    out: list[FetchedById] = []
    for topic_id, partitions, *_ in response.responses:
        for p in partitions:
            partition, code, hw, lso, start, aborted, replica, records, *_ = p
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
                    replica,
                )
            )
    return out


# encoding and decoding a sessionless fetch ourselves ---------------------------------------
# aiokafka's schema classes took ~30-60 us to encode one partition's poll and ~30-45 us to
# decode its answer of one 1 KiB batch: on the path of every record of a caught-up partition

_REQUEST_HEAD = struct.Struct(">hhi")  # api key, version, correlation id
_CLIENT_ID = struct.Struct(">h")
# replica id, max wait, min bytes, max bytes, isolation level, session id, session epoch
_BODY_HEAD = struct.Struct(">iiiibii")
# partition, current leader epoch, fetch offset, last fetched epoch, log start, max bytes
_PARTITION_ASK = struct.Struct(">iiqiqi")
_SIZE = struct.Struct(">i")
_ANSWER_HEAD = struct.Struct(">ihi")  # throttle time, error code, session id
# partition, error code, high watermark, last stable offset, log start offset
_PARTITION_HEAD = struct.Struct(">ihqqq")
_ABORTED = struct.Struct(">qq")
_REPLICA = struct.Struct(">i")


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def fetch_v13_frame(
    correlation_id: int,
    client_id: str,
    max_wait_ms: int,
    max_bytes: int,
    isolation_level: int,
    topics: Mapping[uuid.UUID, list[tuple[int, int, int]]],
    rack_id: str = "",
) -> bytes:
    """A whole sessionless Fetch v13 request (size prefix, header v2, body), byte for byte
    what aiokafka's structs encode for ``FetchByIdRequest`` with no session: ``topics`` by
    id, each partition (partition, offset, max bytes)."""
    name, rack = client_id.encode(), rack_id.encode()
    pieces = [
        _REQUEST_HEAD.pack(FETCH, 13, correlation_id),
        _CLIENT_ID.pack(len(name)),
        name,
        b"\x00",  # the header's tagged fields
        _BODY_HEAD.pack(-1, max_wait_ms, 1, max_bytes, isolation_level, 0, -1),
        _uvarint(len(topics) + 1),
    ]
    for topic_id, partitions in topics.items():
        pieces += (topic_id.bytes, _uvarint(len(partitions) + 1))
        for partition, offset, limit in partitions:
            pieces += (_PARTITION_ASK.pack(partition, -1, offset, -1, -1, limit), b"\x00")
        pieces.append(b"\x00")  # the topic's tagged fields
    pieces += (b"\x01", _uvarint(len(rack) + 1), rack, b"\x00")  # no forgotten topics
    body = b"".join(pieces)
    return _SIZE.pack(len(body)) + body


class FetchAnswer(NamedTuple):
    """A decoded Fetch v13 answer: its own error code and session id, and every partition
    (a top-level error given to each that carries none of its own, as ``fetched_by_id``)."""

    error_code: int
    session_id: int
    partitions: list[FetchedById]


def read_fetch_v13(data: bytes, pos: int = 0) -> FetchAnswer:
    """The Fetch v13 answer whose body starts at ``pos`` of ``data`` (past its header). The
    records of an answer of one partition (a poll's, decoded ahead of every record's write)
    are a view of ``data``, not a copy; those of several are copied apart, so that each
    partition's are freed as it is done with them (the copy's memory budget counts each
    partition's bytes)."""
    reader = Reader(data, pos)
    _throttle, top_error, session_id = reader.take(_ANSWER_HEAD)
    out: list[FetchedById] = []
    for _ in range(reader.uvarint() - 1):
        topic_id = reader.topic_id()
        for _ in range(reader.uvarint() - 1):
            partition, code, hw, lso, start = reader.take(_PARTITION_HEAD)
            aborted = []
            for _ in range(reader.uvarint() - 1):
                aborted.append(reader.take(_ABORTED))
                reader.skip_tags()
            (replica,) = reader.take(_REPLICA)
            records = reader.compact_view()
            reader.skip_tags()
            error = code or top_error
            out.append(
                FetchedById(
                    topic_id, partition, error, hw, lso, start, tuple(aborted), records, replica
                )
            )
        reader.skip_tags()
    reader.skip_tags()
    if len(out) > 1:  # a view would hold the whole answer while one partition's is held
        out = [p._replace(records=bytes(p.records)) for p in out]
    return FetchAnswer(top_error, session_id, out)


class LeanFetchRequest_v13(LeanHeader, FetchRequest_v13):
    """A Fetch v13 request as aiokafka's reader sees it, for the fetches written by
    ``direct.write_fetch``: its answer decoded by ``read_fetch_v13``."""

    RESPONSE_TYPE = LeanAnswer(read_fetch_v13)  # type: ignore[assignment]  # as aiokafka's would
