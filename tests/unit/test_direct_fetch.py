"""Sessionless fetches written straight onto aiokafka's connection (``syncer.direct``): the
bytes must be exactly those aiokafka's own ``send`` writes for the same ``FetchByIdRequest``,
and the answer, decoded by ``read_fetch_v13`` in aiokafka's reader, must equal what
aiokafka's ``FetchResponse_v13`` decodes, partition by partition."""

from __future__ import annotations

import io
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from syncer.direct import write_fetch
from syncer.protocol import FetchByIdRequest, FetchResponse_v13, fetched_by_id
from syncer.protocol.fetch import read_fetch_v13
from syncer.protocol.produce import uvarint
from tests.unit.test_direct import AUDIT, ORDERS, connection, ignore

FETCH_VERSIONS = {1: (4, 13)}


@pytest.mark.parametrize("rack", ["", "eu-west-1a"])
@pytest.mark.parametrize("partitions", [1, 3, 200])
async def test_a_fetch_written_directly_is_byte_for_byte_aiokafkas(
    rack: str, partitions: int
) -> None:
    """Both ways, the same request with the same correlation id: one topic or two, up to
    200 partitions (the compact array's varint is two bytes past 126), large offsets."""
    topics = {ORDERS: [(p, 2**40 + p, 1 << 20) for p in range(partitions)], AUDIT: [(7, 0, 99)]}
    ours, theirs = await connection(FETCH_VERSIONS), await connection(FETCH_VERSIONS)
    write_fetch(ours, 500, 4 << 20, 1, topics, rack, ignore)
    sent = theirs.send(FetchByIdRequest(500, 4 << 20, 1, topics, rack))
    assert ours._writer.written == theirs._writer.written  # type: ignore[union-attr]
    sent.close()  # its answer is not awaited here


def answer_rows(
    shape: list[tuple[int, int, list[tuple[int, int]], bytes | None, dict[int, bytes]]],
) -> list[tuple[object, ...]]:
    """Partitions of an answer: (partition, error, aborted, records, tagged fields)."""
    return [
        (p, code, 100 + p, 90 + p, p, [(*a, {}) for a in aborted], p % 3 - 1, records, tagged(tags))
        for p, code, aborted, records, tags in shape
    ]


def tagged(fields: dict[int, bytes]) -> dict[int, bytes]:
    """Tagged fields as aiokafka's encoder takes them: it writes each value as given, so
    the value's size goes in front of it here, and the tags in order."""
    return {tag: uvarint(len(v)) + v for tag, v in sorted(fields.items())}


partition_shapes = st.lists(
    st.tuples(
        st.integers(0, 2**31 - 1),
        st.sampled_from([0, 1, 6, 100]),
        st.lists(st.tuples(st.integers(-1, 2**62), st.integers(0, 2**62)), max_size=3),
        st.one_of(st.none(), st.binary(max_size=300)),
        st.dictionaries(st.integers(1, 3), st.binary(max_size=20), max_size=2),
    ),
    max_size=5,
)


@given(
    partitions=partition_shapes,
    others=partition_shapes,
    top_error=st.sampled_from([0, 70]),
    session=st.integers(0, 2**31 - 1),
)
def test_an_answer_decodes_as_aiokafkas_structs_decode_it(
    partitions: list[tuple[int, int, list[tuple[int, int]], bytes | None, dict[int, bytes]]],
    others: list[tuple[int, int, list[tuple[int, int]], bytes | None, dict[int, bytes]]],
    top_error: int,
    session: int,
) -> None:
    """Aborted transactions, records none or empty, tagged fields where a broker puts them
    (a diverging epoch, the current leader), a top-level error."""
    responses = [
        (ORDERS, answer_rows(partitions), {}),
        (AUDIT, answer_rows(others), tagged({1: b"t"})),
    ]
    body = FetchResponse_v13(3, top_error, session, responses, {}).encode()
    theirs = fetched_by_id(FetchResponse_v13.decode(io.BytesIO(body)))
    got = read_fetch_v13(b"head" + body, 4)
    assert got.partitions == theirs
    assert (got.error_code, got.session_id) == (top_error, session)


def test_one_partitions_records_are_a_view_of_the_answer_several_are_copied_apart() -> None:
    """A poll's records are not copied out of the answer; an answer of several partitions
    is not held whole by one partition's records while the others' are done with."""
    one = [(ORDERS, answer_rows([(0, 0, [], b"R" * 100, {})]), {})]
    body = FetchResponse_v13(0, 0, 0, one, {}).encode()
    (alone,) = read_fetch_v13(body).partitions
    assert isinstance(alone.records, memoryview) and alone.records.obj is body
    two = [(ORDERS, answer_rows([(0, 0, [], b"R" * 100, {}), (1, 0, [], b"S" * 9, {})]), {})]
    body = FetchResponse_v13(0, 0, 0, two, {}).encode()
    first, second = read_fetch_v13(body).partitions
    assert type(first.records) is bytes and type(second.records) is bytes
    assert (first.records, second.records) == (b"R" * 100, b"S" * 9)


def test_a_truncated_answer_is_refused() -> None:
    responses = [(ORDERS, answer_rows([(0, 0, [], b"R" * 100, {})]), {})]
    body = FetchResponse_v13(0, 0, 0, responses, {}).encode()
    with pytest.raises((ValueError, struct.error, IndexError)):
        read_fetch_v13(body[:-20])


async def test_the_answer_reaches_its_fetch_through_aiokafkas_reader_as_it_is_read() -> None:
    """Two fetches in flight on one connection; each answer (header v1: correlation id,
    tagged fields) reaches the one it belongs to, decoded, in the read callback itself."""
    conn = await connection(FETCH_VERSIONS)
    got: list[Any] = []
    write_fetch(conn, 500, 1000, 1, {ORDERS: [(0, 5, 100)]}, "", got.append)
    write_fetch(conn, 500, 1000, 1, {ORDERS: [(1, 9, 100)]}, "", got.append)
    for correlation_id, partition in ((1, 0), (2, 1)):
        rows = answer_rows([(partition, 0, [], b"batch%d" % partition, {})])
        body = FetchResponse_v13(0, 0, 0, [(ORDERS, rows, {})], {}).encode()
        conn._handle_frame(struct.pack(">i", correlation_id) + b"\x00" + body)
        assert len(got) == correlation_id
    assert [(a.partitions[0].partition, a.partitions[0].records) for a in got] == [
        (0, b"batch0"),
        (1, b"batch1"),
    ]
    assert all(a.partitions[0].topic_id == ORDERS for a in got)
