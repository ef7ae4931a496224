"""Our Metadata v10, Fetch v13 and Produce v13 structs: bytes as Kafka's message specs lay
them out."""

from __future__ import annotations

import struct
import uuid

import pytest

from syncer.errors import TransientClusterError
from syncer.protocol import (
    NO_ID,
    UNKNOWN_TOPIC_ID,
    FetchByIdRequest,
    FetchRequest_v13,
    FetchResponse_v13,
    MetadataRequest_v10,
    MetadataResponse_v10,
    ProduceByIdRequest,
    ProduceRequest_v13,
    ProduceResponse_v13,
    TopicIdsRequest,
    fetched_by_id,
    produced_by_id,
    topics_of,
)
from syncer.protocol.common import (
    FENCED_LEADER_EPOCH,
    KAFKA_STORAGE_ERROR,
    LEADER_NOT_AVAILABLE,
    NETWORK_EXCEPTION,
    NOT_LEADER_OR_FOLLOWER,
    REQUEST_TIMED_OUT,
    UNKNOWN_LEADER_EPOCH,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from syncer.wire import OFFSET_OUT_OF_RANGE, FetchedPartition, FetchOutcome, fetch_outcome

A = uuid.UUID("11111111-2222-3333-4444-555555555555")
B = uuid.UUID("aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee")


def uvarint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n])


def compact_string(s: str) -> bytes:
    return uvarint(len(s) + 1) + s.encode()


def test_the_metadata_request_names_topics_in_compact_arrays_and_never_creates_one() -> None:
    request = TopicIdsRequest(["t1"]).build(MetadataRequest_v10)
    assert request.FLEXIBLE_VERSION and request.API_VERSION == 10
    expected = (
        uvarint(2)  # one topic
        + NO_ID.bytes  # topic id: asked by name
        + compact_string("t1")
        + uvarint(0)  # its tagged fields
        + b"\x00"  # allow_auto_topic_creation: false
        + b"\x00\x00"  # cluster and topic authorized operations: not asked
        + uvarint(0)
    )
    assert request.encode() == expected


def test_a_metadata_request_for_every_topic_sends_a_null_array() -> None:
    assert TopicIdsRequest(None).build(MetadataRequest_v10).encode()[:1] == uvarint(0)


def test_a_metadata_answer_gives_each_topic_its_id_and_partition_count() -> None:
    partition = (0, 0, 1, 5, [1], [1], [], {})
    response = MetadataResponse_v10(
        0,
        [(1, "localhost", 9092, None, {})],
        "cluster",
        1,
        [
            (0, "t1", A, False, [partition, (0, 1, 1, 5, [1], [1], [], {})], -1, {}),
            (3, "gone", NO_ID, False, [], -1, {}),
        ],
        -1,
        {},
    )
    decoded = MetadataResponse_v10.decode(response.encode())
    found = topics_of(decoded)
    assert found["t1"].topic_id == A and found["t1"].partitions == 2
    assert found["t1"].error_code == 0
    assert found["gone"].error_code == 3 and found["gone"].topic_id == NO_ID


def test_a_fetch_by_id_names_topics_by_id_and_asks_no_session() -> None:
    request = FetchByIdRequest(500, 1 << 20, 1, {A: [(3, 42, 1000)]}).build(FetchRequest_v13)
    assert request.FLEXIBLE_VERSION and request.API_VERSION == 13
    expected = (
        struct.pack(">iiiib", -1, 500, 1, 1 << 20, 1)  # replica, wait, min, max, isolation
        + struct.pack(">ii", 0, -1)  # no session, final epoch
        + uvarint(2)
        + A.bytes
        + uvarint(2)
        + struct.pack(">iiqiqi", 3, -1, 42, -1, -1, 1000)
        + uvarint(0)  # partition's tagged fields
        + uvarint(0)  # topic's tagged fields
        + uvarint(1)  # no forgotten topics
        + compact_string("")  # rack id
        + uvarint(0)
    )
    assert request.encode() == expected


def _partition_bytes(partition: int, code: int, records: bytes, tags: bytes) -> bytes:
    return (
        struct.pack(">ihqqq", partition, code, 10, 9, 0)
        + uvarint(2)  # one aborted transaction
        + struct.pack(">qq", 7, 4)
        + uvarint(0)
        + struct.pack(">i", -1)  # preferred read replica
        + uvarint(len(records) + 1)
        + records
        + tags
    )


def test_a_fetch_answer_skips_tagged_fields_it_does_not_know() -> None:
    # a diverging-epoch tagged field (tag 0, 12 bytes) on the first partition
    tagged = uvarint(1) + uvarint(0) + uvarint(12) + struct.pack(">iq", 3, 99)
    body = (
        struct.pack(">ihi", 0, 0, 0)
        + uvarint(3)  # two topics
        + A.bytes
        + uvarint(2)
        + _partition_bytes(0, 0, b"RAW", tagged)
        + uvarint(0)
        + B.bytes
        + uvarint(2)
        + _partition_bytes(1, UNKNOWN_TOPIC_ID, b"", uvarint(0))
        + uvarint(0)
        + uvarint(0)
    )
    first, second = fetched_by_id(FetchResponse_v13.decode(body))
    assert (first.topic_id, first.partition, first.error_code) == (A, 0, 0)
    assert (first.high_watermark, first.last_stable_offset, first.log_start_offset) == (10, 9, 0)
    assert first.aborted == ((7, 4),) and first.records == b"RAW"
    assert (second.topic_id, second.partition, second.error_code) == (B, 1, UNKNOWN_TOPIC_ID)


def test_a_top_level_fetch_error_reaches_every_partition() -> None:
    response = FetchResponse_v13(0, 35, 0, [(A, [(0, 0, 0, 0, 0, None, -1, None, {})], {})], {})
    (only,) = fetched_by_id(FetchResponse_v13.decode(response.encode()))
    assert only.error_code == 35 and only.records == b"" and only.aborted == ()


def test_a_short_uuid_is_an_error() -> None:
    with pytest.raises(ValueError, match="uuid"):
        FetchResponse_v13.decode(struct.pack(">ihi", 0, 0, 0) + uvarint(2) + b"\x01\x02")


def test_a_produce_by_id_names_topics_by_id_with_no_transactional_id() -> None:
    # ProduceRequest.json, version 13: the topic's Name ("versions": "0-12") gives way to
    # its TopicId ("13+"); flexible since version 9
    request = ProduceByIdRequest(-1, 30_000, {A: [(0, b"RAW"), (2, b"")], B: [(1, b"X")]})
    built = request.build(ProduceRequest_v13)
    assert built.FLEXIBLE_VERSION and (built.API_KEY, built.API_VERSION) == (0, 13)
    expected = (
        uvarint(0)  # transactional id: null
        + struct.pack(">hi", -1, 30_000)  # acks=all, timeout
        + uvarint(3)  # two topics
        + A.bytes
        + uvarint(3)  # two partitions
        + struct.pack(">i", 0)
        + uvarint(4)  # compact records: length + 1
        + b"RAW"
        + uvarint(0)  # partition's tagged fields
        + struct.pack(">i", 2)
        + uvarint(1)  # empty records
        + uvarint(0)
        + uvarint(0)  # topic's tagged fields
        + B.bytes
        + uvarint(2)
        + struct.pack(">i", 1)
        + uvarint(2)
        + b"X"
        + uvarint(0)
        + uvarint(0)
        + uvarint(0)  # request's tagged fields
    )
    assert built.encode() == expected


def test_a_produce_answer_by_id_gives_each_partition_its_code_offset_and_message() -> None:
    # a current-leader tagged field (tag 0: leader id, leader epoch) on the first partition,
    # node endpoints (tag 0) on the answer: skipped
    leader = uvarint(1) + uvarint(0) + uvarint(9) + struct.pack(">ii", 2, 7) + uvarint(0)
    endpoints = uvarint(1) + uvarint(0) + uvarint(3) + b"\x01\x00\x00"
    body = (
        uvarint(3)  # two topics
        + A.bytes
        + uvarint(2)
        + struct.pack(">ihqqq", 0, 0, 42, -1, 0)  # landed at 42
        + uvarint(1)  # no record errors
        + uvarint(0)  # error message: null
        + leader
        + uvarint(0)
        + B.bytes
        + uvarint(2)
        + struct.pack(">ihqqq", 3, UNKNOWN_TOPIC_ID, -1, -1, -1)
        + uvarint(2)  # one record error
        + struct.pack(">i", 5)
        + compact_string("bad")
        + uvarint(0)
        + compact_string("gone")
        + uvarint(0)
        + uvarint(0)
        + struct.pack(">i", 0)  # throttle time
        + endpoints
    )
    first, second = produced_by_id(ProduceResponse_v13.decode(body))
    assert (first.topic_id, first.partition, first.error_code, first.base_offset) == (A, 0, 0, 42)
    assert first.message is None
    assert (second.topic_id, second.partition, second.error_code) == (B, 3, UNKNOWN_TOPIC_ID)
    assert (second.base_offset, second.message) == (-1, "gone")


# fetch answers as outcomes ------------------------------------------------------------------


def answer_with(code: int) -> FetchedPartition:
    return FetchedPartition(code, 10, 10, 0, (), b"")


@pytest.mark.parametrize(
    ("code", "outcome"),
    [
        (0, FetchOutcome.OK),
        (OFFSET_OUT_OF_RANGE, FetchOutcome.OUT_OF_RANGE),
        (UNKNOWN_TOPIC_ID, FetchOutcome.TOPIC_GONE),
        (NOT_LEADER_OR_FOLLOWER, FetchOutcome.LEADER_MOVED),
        (FENCED_LEADER_EPOCH, FetchOutcome.LEADER_MOVED),
        (UNKNOWN_LEADER_EPOCH, FetchOutcome.LEADER_MOVED),
        (UNKNOWN_TOPIC_OR_PARTITION, FetchOutcome.RETRY),
        (LEADER_NOT_AVAILABLE, FetchOutcome.RETRY),
        (REQUEST_TIMED_OUT, FetchOutcome.RETRY),
        (KAFKA_STORAGE_ERROR, FetchOutcome.RETRY),
        (NETWORK_EXCEPTION, FetchOutcome.FAILED),  # aiokafka: not retriable
        (29, FetchOutcome.FAILED),  # TOPIC_AUTHORIZATION_FAILED
        (35, FetchOutcome.FAILED),  # UNSUPPORTED_VERSION
        (-1, FetchOutcome.FAILED),  # UNKNOWN_SERVER_ERROR
    ],
)
def test_each_fetch_error_code_has_its_outcome(code: int, outcome: FetchOutcome) -> None:
    assert fetch_outcome(code) is outcome
    assert answer_with(code).outcome is outcome


@pytest.mark.parametrize(
    "code",
    [
        OFFSET_OUT_OF_RANGE,
        UNKNOWN_TOPIC_ID,
        NOT_LEADER_OR_FOLLOWER,
        FENCED_LEADER_EPOCH,  # aiokafka 0.14 does not know it: transient all the same
        REQUEST_TIMED_OUT,
        NETWORK_EXCEPTION,
        35,
    ],
)
def test_an_answer_raises_a_transient_error_exactly_when_its_outcome_is_retriable(
    code: int,
) -> None:
    answer = answer_with(code)
    error = answer.error("t[0] at 5")
    retriable = answer.outcome in (FetchOutcome.RETRY, FetchOutcome.LEADER_MOVED)
    assert answer.outcome.retriable is retriable
    assert isinstance(error, TransientClusterError) is retriable
    assert str(error).startswith("t[0] at 5: ")
