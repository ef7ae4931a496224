"""Produce requests written straight onto aiokafka's connection (``syncer.direct``): the bytes
must be exactly those aiokafka's own ``send`` writes for the same request, and the answer must
reach the right request through aiokafka's reader, handed on as it is read (no task awaits
it); a request unanswered or cut off is handed its failure, once."""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from aiokafka.conn import AIOKafkaConnection

from syncer.clusters import TP
from syncer.direct import by_id, open_connection, time_out, write_produce
from syncer.protocol import ProduceByIdRequest, ProducedById, ProduceResponse_v13, produced_by_id
from syncer.protocol.produce import produce_v13_frame, uvarint

ORDERS = uuid.UUID("11111111-2222-3333-4444-555555555555")
AUDIT = uuid.UUID("99999999-8888-7777-6666-555555555555")


class Captured:
    """aiokafka's StreamWriter, keeping what is written."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def writelines(self, pieces: list[bytes]) -> None:
        self.written.append(b"".join(pieces))

    def close(self) -> None:
        pass


def ignore(_outcome: object) -> None:
    pass


class Open:
    """aiokafka's StreamReader of an open connection."""

    def at_eof(self) -> bool:
        return False


MADE: list[AIOKafkaConnection] = []


@pytest.fixture(autouse=True)
def closed_after() -> Iterator[None]:
    """Each test's connections count as closed after it (no socket was ever opened)."""
    yield
    for conn in MADE:
        conn._reader = conn._writer = None
    MADE.clear()


async def connection(versions: dict[int, tuple[int, int]] | None = None) -> AIOKafkaConnection:
    conn = AIOKafkaConnection("127.0.0.1", 9092, client_id="syncer-local", request_timeout_ms=50)
    conn._writer = Captured()
    conn._reader = Open()
    conn._versions = {0: (3, 13)} if versions is None else versions
    MADE.append(conn)
    return conn


def test_uvarint_is_kafkas_seven_bits_a_byte() -> None:
    assert uvarint(0) == b"\x00"
    assert uvarint(127) == b"\x7f"
    assert uvarint(128) == b"\x80\x01"
    assert uvarint(16383) == b"\xff\x7f"
    assert uvarint(16384) == b"\x80\x80\x01"
    assert uvarint(300_000) == b"\xe0\xa7\x12"


@pytest.mark.parametrize("kind", [bytes, bytearray])  # as stamped by rewrite_for_local
@pytest.mark.parametrize("size", [0, 1, 126, 127, 128, 20_000, 1_100_000])
async def test_a_request_written_directly_is_byte_for_byte_aiokafkas(size: int, kind: type) -> None:
    """Both ways, the same request with the same correlation id: batches of several sizes
    (the compact length's varint changes width at 127 and 16383), two topics, several
    partitions."""
    batch = kind(bytes(range(256)) * (size // 256) + b"\x07" * (size % 256))
    topics = {ORDERS: [(0, batch), (3, b"x" * 200)], AUDIT: [(1, batch[: size // 2])]}
    ours, theirs = await connection(), await connection()
    write_produce(ours, -1, 30_000, topics, ignore)
    sent = theirs.send(ProduceByIdRequest(-1, 30_000, topics))
    assert ours._writer.written == theirs._writer.written  # type: ignore[union-attr]
    assert len(ours._writer.written) == 1  # type: ignore[union-attr]
    sent.close()  # its answer is not awaited here


def test_the_frame_says_its_own_size_and_keeps_each_batch_a_piece_of_its_own() -> None:
    batch = b"B" * 1000
    pieces = produce_v13_frame(7, "me", -1, 5, {ORDERS: [(2, batch)]})
    assert struct.unpack(">i", pieces[0])[0] == sum(len(p) for p in pieces[1:])
    assert any(p is batch for p in pieces)  # written as it is, not copied into the request


async def test_the_answer_reaches_its_request_through_aiokafkas_reader_as_it_is_read() -> None:
    conn = await connection()
    got: list[Any] = []
    write_produce(conn, -1, 1000, {ORDERS: [(0, b"R")]}, got.append)
    write_produce(conn, -1, 1000, {ORDERS: [(1, b"R")]}, got.append)
    for correlation_id, offset in ((1, 5), (2, 9)):
        landed = [(correlation_id - 1, 0, offset, -1, 0, [], None, {})]
        body = ProduceResponse_v13([(ORDERS, landed, {})], 0, {}).encode()
        conn._handle_frame(struct.pack(">i", correlation_id) + b"\x00" + body)
        assert len(got) == correlation_id  # handed on in the read callback itself
    assert [produced_by_id(r) for r in got] == [
        [ProducedById(ORDERS, 0, 0, 5, None)],
        [ProducedById(ORDERS, 1, 0, 9, None)],
    ]


async def test_an_unanswered_request_times_out_once_and_closes_its_connection() -> None:
    conn = await connection()
    closed: list[Any] = []
    conn.close = lambda reason=None, exc=None: closed.append(reason)  # type: ignore[method-assign]
    got: list[Any] = []
    future = write_produce(conn, -1, 1000, {ORDERS: [(0, b"R")]}, got.append)
    time_out(conn, future)
    assert [type(e).__name__ for e in got] == ["RequestTimedOutError"]
    assert closed  # the late answer must not be matched to the next request
    landed = [(0, 0, 5, -1, 0, [], None, {})]
    body = ProduceResponse_v13([(ORDERS, landed, {})], 0, {}).encode()
    conn._handle_frame(struct.pack(">i", 1) + b"\x00" + body)  # late: not handed on again
    time_out(conn, future)
    assert len(got) == 1


async def test_a_connection_that_closes_hands_each_request_its_failure() -> None:
    conn = await connection()
    conn._read_task = asyncio.get_running_loop().create_future()
    got: list[Any] = []
    for p in range(2):
        write_produce(conn, -1, 1000, {ORDERS: [(p, b"R")]}, got.append)
    conn.close()
    assert [type(e).__name__ for e in got] == ["KafkaConnectionError"] * 2


async def test_what_the_receiver_of_an_answer_raises_stays_out_of_aiokafkas_reader() -> None:
    conn = await connection()

    def broken(_outcome: object) -> None:
        raise RuntimeError("a bug in the receiver")

    write_produce(conn, -1, 1000, {ORDERS: [(0, b"R")]}, broken)
    body = ProduceResponse_v13([(ORDERS, [(0, 0, 5, -1, 0, [], None, {})], {})], 0, {}).encode()
    conn._handle_frame(struct.pack(">i", 1) + b"\x00" + body)  # raises nothing
    assert not conn._requests


async def test_only_an_open_connection_that_takes_produce_v13_is_written_directly() -> None:
    class Client:
        _conns: ClassVar[dict[tuple[int, int], Any]] = {}

    Client._conns = {(1, 0): await connection(), (2, 0): await connection({0: (3, 9)})}
    assert open_connection(Client(), 1, 0) is Client._conns[(1, 0)]
    assert open_connection(Client(), 2, 0) is None  # a broker before Kafka 4.1
    assert open_connection(Client(), 3, 0) is None  # not connected yet
    assert open_connection(object(), 1, 0) is None  # a stand-in client
    Client._conns[(1, 0)]._reader = None  # closed
    assert open_connection(Client(), 1, 0) is None


def test_partitions_whose_topic_has_no_id_yet_are_kept_out() -> None:
    batches = {TP("orders", 0): b"a", TP("orders", 1): b"b", TP("new", 0): b"c"}
    topics, names, unknown = by_id(batches, {"orders": ORDERS})
    assert topics == {ORDERS: [(0, b"a"), (1, b"b")]}
    assert names == {ORDERS: "orders"}
    assert unknown == [TP("new", 0)]


async def test_requests_reach_the_socket_in_the_order_they_were_made() -> None:
    conn = await connection()
    for p in range(3):
        write_produce(conn, -1, 1000, {ORDERS: [(p, b"R")]}, ignore)
    ids = [struct.unpack(">i", w[8:12])[0] for w in conn._writer.written]  # type: ignore[union-attr]
    assert ids == [1, 2, 3]
    assert [c for c, _r, _f in conn._requests] == [1, 2, 3]
    await asyncio.sleep(0)
