"""The answers the copy reads by hand (``syncer.protocol.lean``, ``read_produce_v13``): a
Produce v13 answer must decode to what aiokafka's ``ProduceResponse_v13`` struct gives,
partition by partition, with record errors, messages and tagged fields where a broker puts
them; a response header must leave the buffer at the body, past its tagged fields."""

from __future__ import annotations

import io
import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from syncer.protocol import ProduceResponse_v13, produced_by_id
from syncer.protocol.lean import read_header_v1
from syncer.protocol.produce import read_produce_v13, uvarint
from tests.unit.test_direct import AUDIT, ORDERS
from tests.unit.test_direct_fetch import tagged

messages = st.one_of(st.none(), st.text(max_size=40))
# aiokafka's encoder takes no tag 0 (a broker sends one: the current leader, node endpoints)
partitions = st.lists(
    st.tuples(
        st.integers(0, 2**31 - 1),
        st.sampled_from([0, 6, 45, 47, 87]),  # none, not leader, out of order, bad epoch, invalid
        st.integers(-1, 2**62),
        st.one_of(st.just(-1), st.integers(0, 2**62)),  # the append time (-1: CreateTime)
        st.lists(st.tuples(st.integers(0, 100), messages), max_size=2),  # record errors
        messages,
        st.dictionaries(st.integers(1, 3), st.binary(max_size=20), max_size=2),  # as a leader
    ),
    max_size=4,
)


@given(orders=partitions, audit=partitions, throttle=st.integers(0, 1000))
def test_a_produce_answer_decodes_as_aiokafkas_struct_decodes_it(
    orders: list[
        tuple[int, int, int, int, list[tuple[int, str | None]], str | None, dict[int, bytes]]
    ],
    audit: list[
        tuple[int, int, int, int, list[tuple[int, str | None]], str | None, dict[int, bytes]]
    ],
    throttle: int,
) -> None:
    def rows(
        shape: list[
            tuple[int, int, int, int, list[tuple[int, str | None]], str | None, dict[int, bytes]]
        ],
    ) -> list[tuple[object, ...]]:
        return [
            (i, code, base, at, 0, [(b, m, {}) for b, m in errors], message, tagged(tags))
            for i, code, base, at, errors, message, tags in shape
        ]

    responses = [(ORDERS, rows(orders), {}), (AUDIT, rows(audit), tagged({1: b"x"}))]
    body = ProduceResponse_v13(responses, throttle, tagged({1: b"endpoints"})).encode()
    theirs = produced_by_id(ProduceResponse_v13.decode(io.BytesIO(body)))
    ours = read_produce_v13(b"head" + body, 4)
    assert produced_by_id(ours) == theirs
    assert [p.append_time for p in ours.partitions] == [row[3] for row in orders + audit]
    assert [p.topic_id for p in ours.partitions] == [ORDERS] * len(orders) + [AUDIT] * len(audit)


def test_a_truncated_produce_answer_is_refused() -> None:
    landed = [(0, 0, 5, -1, 0, [], "a message the broker gave", {})]
    body = ProduceResponse_v13([(ORDERS, landed, {})], 0, {}).encode()
    for cut in (1, 5, 20, 30):
        with pytest.raises((ValueError, struct.error, IndexError)):
            read_produce_v13(body[:-cut])


def test_the_same_topic_id_is_one_object() -> None:
    """Ids are made once per id, not once per answer."""
    landed = [(0, 0, 5, -1, 0, [], None, {})]
    body = ProduceResponse_v13([(uuid.UUID(int=7), landed, {})], 0, {}).encode()
    first, second = read_produce_v13(body), read_produce_v13(body)
    assert first.partitions[0].topic_id is second.partitions[0].topic_id == uuid.UUID(int=7)


@pytest.mark.parametrize("tags", [b"\x00", b"\x02\x00\x02hi\x05\x01z"])
def test_a_response_header_leaves_the_buffer_at_the_body(tags: bytes) -> None:
    buffer = io.BytesIO(struct.pack(">i", 42) + tags + b"BODY")
    header = read_header_v1(buffer)
    assert header.correlation_id == 42 and buffer.read() == b"BODY"


def test_uvarint_lengths_past_one_byte_are_read() -> None:
    text = "m" * 300  # a length of two varint bytes
    landed = [(3, 87, -1, -1, 0, [], text, {})]
    body = ProduceResponse_v13([(ORDERS, landed, {})], 0, {}).encode()
    assert len(uvarint(301)) == 2
    assert read_produce_v13(body).partitions[0].message == text
