"""Fetch v13: the first version that names topics by id (Kafka 3.1+)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
