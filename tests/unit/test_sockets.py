"""Answers read into one buffer each (syncer.sockets): every answer handed on whole, in order,
however the socket cuts the stream; the swap on a live connection happens only between
answers, and losing the connection still reaches aiokafka's protocol."""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import weakref
from collections import deque
from typing import Any

import pytest
import uvloop

from syncer.sockets import SCRATCH_BYTES, FramedAnswers, adopt

SIZES = [0, 1, 5, 100, SCRATCH_BYTES - 5, SCRATCH_BYTES - 4, SCRATCH_BYTES - 3, 3, 200_000, 7]


def framed(payloads: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


def payloads(sizes: list[int], seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(n) for n in sizes]


def feed(protocol: FramedAnswers, stream: bytes, cuts: list[int]) -> None:
    """Like a transport: each read fills at most what ``get_buffer`` offers."""
    pos = 0
    for want in cuts:
        if pos >= len(stream):
            return
        buffer = protocol.get_buffer(-1)
        n = min(want, len(buffer), len(stream) - pos)
        buffer[:n] = stream[pos : pos + n]
        protocol.buffer_updated(n)
        pos += n
    while pos < len(stream):
        buffer = protocol.get_buffer(-1)
        n = min(len(buffer), len(stream) - pos)
        buffer[:n] = stream[pos : pos + n]
        protocol.buffer_updated(n)
        pos += n


@pytest.mark.parametrize("seed", range(40))
def test_every_answer_is_handed_on_whole_and_in_order_however_the_stream_is_cut(
    seed: int,
) -> None:
    rng = random.Random(seed)
    sizes = rng.sample(SIZES, len(SIZES)) + [rng.randrange(0, 300_000) for _ in range(5)]
    sent = payloads(sizes, seed)
    got: list[bytes] = []
    protocol = FramedAnswers(lambda a: got.append(bytes(a)), pytest.fail)
    cuts = [rng.choice([1, 2, 3, 4, 5, 17, 4096, 70_000, 1 << 20]) for _ in range(400)]
    feed(protocol, framed(sent), cuts)
    assert got == sent


def test_several_small_answers_in_one_read_each_come_out() -> None:
    sent = payloads([10, 0, 300], 1)
    got: list[bytes] = []
    protocol = FramedAnswers(lambda a: got.append(bytes(a)), pytest.fail)
    feed(protocol, framed(sent), [1 << 20])
    assert got == sent
    assert "scratch 0 B" in repr(protocol)


def test_a_large_answer_is_read_in_place_into_its_own_buffer() -> None:
    (sent,) = payloads([500_000], 2)
    got: list[bytearray] = []
    protocol = FramedAnswers(got.append, pytest.fail)
    stream = framed([sent])
    protocol.get_buffer(-1)[:100] = stream[:100]  # the size prefix and a little
    protocol.buffer_updated(100)
    buffer = protocol.get_buffer(-1)
    assert len(buffer) == 500_000 - 96  # the rest of the answer, read straight into it
    feed(protocol, stream[100:], [])
    assert [bytes(a) for a in got] == [sent]


def test_a_negative_size_is_a_broken_stream_and_hands_nothing_on() -> None:
    got: list[bytearray] = []
    broken: list[Exception] = []
    protocol = FramedAnswers(got.append, broken.append)
    feed(protocol, struct.pack(">i", -5) + b"x" * 20, [])
    assert got == [] and len(broken) == 1


class StandInConnection:
    """The parts of aiokafka's connection that ``adopt`` reads, over a socket pair."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._protocol = writer._protocol  # type: ignore[attr-defined]
        self._requests: deque[Any] = deque()
        self.answers: list[bytes] = []
        self.closed: list[Any] = []

    def connected(self) -> bool:
        return not self._writer.transport.is_closing()

    def _handle_frame(self, answer: bytearray) -> None:
        self.answers.append(bytes(answer))

    def close(self, reason: Any = None, exc: Exception | None = None) -> None:
        self.closed.append(reason)


async def over_socket_pair() -> tuple[StandInConnection, socket.socket]:
    ours, theirs = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=ours)
    return StandInConnection(reader, writer), theirs


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_live_connection_swapped_between_answers_reads_every_answer(loop: str) -> None:
    async def scenario() -> None:
        conn, theirs = await over_socket_pair()
        adopted: weakref.WeakSet[Any] = weakref.WeakSet()
        adopt(conn, adopted)
        assert conn in adopted
        sent = payloads([3, 200_000, 0, 40], 3)
        theirs.setblocking(False)
        await asyncio.get_running_loop().sock_sendall(theirs, framed(sent))
        for _ in range(200):
            if len(conn.answers) == len(sent):
                break
            await asyncio.sleep(0.01)
        assert conn.answers == sent
        theirs.close()  # the loss still reaches aiokafka's protocol: its reader sees the end
        await asyncio.wait_for(conn._reader.read(), 2)
        assert conn._reader.at_eof()
        conn._writer.close()

    if loop == "uvloop":
        uvloop.run(scenario())
    else:
        asyncio.run(scenario())


def test_no_swap_while_a_request_waits_or_bytes_are_buffered() -> None:
    async def scenario() -> None:
        conn, theirs = await over_socket_pair()
        adopted: weakref.WeakSet[Any] = weakref.WeakSet()
        conn._requests.append((1, None, None))
        adopt(conn, adopted)
        assert conn not in adopted  # an answer may be half read by aiokafka's reader
        conn._requests.clear()
        conn._reader.feed_data(b"\x00\x00")
        adopt(conn, adopted)
        assert conn not in adopted
        theirs.close()
        conn._writer.close()

    asyncio.run(scenario())
