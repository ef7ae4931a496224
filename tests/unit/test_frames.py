"""Answers handed to aiokafka as their bytes arrive (``syncer.frames``): each whole frame,
however the socket cut it, goes to the connection's ``_handle_frame`` in the read callback,
in order; a frame that cannot be handled, or a connection that ends, closes the connection
and resolves what aiokafka's close waits for. Over a real socket pair, with a stand-in for
aiokafka's connection (the real ones are every integration test's)."""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from typing import Any

from syncer.frames import Frames
from syncer.protocol.lean import LeanAnswer


class Conn:
    host, port = "127.0.0.1", 0

    def __init__(self, fail_on: bytes | None = None) -> None:
        self.frames: list[bytes] = []
        self.closed: list[Any] = []
        self.fail_on = fail_on
        self._requests: deque[tuple[int, Any, asyncio.Future[Any]]] = deque()  # aiokafka's

    def _handle_frame(self, frame: bytes) -> None:
        if frame == self.fail_on:
            raise ValueError("garbled")
        self.frames.append(frame)
        if self._requests:  # as aiokafka's: the request it answers is done
            self._requests.popleft()

    def close(self, reason: Any = None, exc: Any = None) -> None:
        self.closed.append(reason)


def framed(*payloads: bytes) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in payloads)


async def connected(conn: Conn) -> tuple[Frames, socket.socket, asyncio.Future[None]]:
    ours, theirs = socket.socketpair()
    closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    frames = Frames(conn, closed)  # type: ignore[arg-type]
    await asyncio.get_running_loop().connect_accepted_socket(lambda: frames, ours)
    return frames, theirs, closed


async def test_every_whole_frame_is_handed_on_however_the_bytes_are_cut() -> None:
    conn = Conn()
    frames = Frames(conn, asyncio.get_running_loop().create_future())  # type: ignore[arg-type]
    stream = framed(b"first", b"", b"x" * 70_000, b"last")
    for cut in (1, 3, 4, 5, 4096):
        conn.frames.clear()
        for i in range(0, len(stream), cut):
            frames.data_received(stream[i : i + cut])
        assert conn.frames == [b"first", b"", b"x" * 70_000, b"last"]
        assert not frames.buffer
    conn.frames.clear()
    for payload in (b"first", b"", b"x" * 70_000, b"last"):  # one whole frame a read, as most
        frames.data_received(framed(payload))  # come: handed on from the bytes read
    assert conn.frames == [b"first", b"", b"x" * 70_000, b"last"]
    frames.data_received(stream[:7])  # a frame not whole yet waits for the rest
    assert conn.frames == [b"first", b"", b"x" * 70_000, b"last"] and frames.buffer
    frames.data_received(stream[7:] + framed(b"next")[:3])
    frames.data_received(framed(b"next")[3:])
    frames.data_received(framed(b"alone"))
    assert conn.frames[4:] == [b"first", b"", b"x" * 70_000, b"last", b"next", b"alone"]


async def test_a_frame_is_handled_in_the_read_callback_itself() -> None:
    conn = Conn()
    _frames, theirs, _closed = await connected(conn)
    handled_in: list[int] = []
    turn = 0

    def handle(frame: bytes) -> None:
        handled_in.append(turn)

    conn._handle_frame = handle  # type: ignore[method-assign]
    theirs.sendall(framed(b"answer"))
    for turn in range(1, 50):  # noqa: B007  # read by ``handle``
        await asyncio.sleep(0)
        if handled_in:
            break
    theirs.close()
    assert len(handled_in) == 1  # one frame, handed on once (no reader task's turn after)


async def test_a_frame_aiokafka_cannot_handle_closes_the_connection() -> None:
    conn = Conn(fail_on=b"bad")
    frames = Frames(conn, asyncio.get_running_loop().create_future())  # type: ignore[arg-type]
    frames.data_received(framed(b"good", b"bad", b"never"))
    assert conn.frames == [b"good"] and len(conn.closed) == 1


async def test_a_connection_that_ends_closes_it_and_resolves_what_close_waits_for() -> None:
    conn = Conn()
    _frames, theirs, closed = await connected(conn)
    theirs.close()
    await asyncio.wait_for(closed, 1)
    assert conn.closed  # aiokafka fails the requests still in flight


class Lean:
    """A request of syncer's own as aiokafka's reader sees it: its answer type a
    ``LeanAnswer`` that reads the body as it is, from where the header ends."""

    RESPONSE_TYPE = LeanAnswer(lambda data, pos: data[pos:])


class Struct:
    """One of aiokafka's own requests (its answer type is no ``LeanAnswer``)."""

    RESPONSE_TYPE = object()


def answer(correlation_id: int, body: bytes, tags: bytes = b"\x00") -> bytes:
    return correlation_id.to_bytes(4, "big", signed=True) + tags + body


async def test_an_answer_to_a_request_of_syncers_own_is_resolved_without_aiokafka() -> None:
    """The hop (issue 23): decoded by the request's own reader as its bytes arrive, past a
    header with or without tagged fields, without aiokafka's ``_handle_frame``; aiokafka's
    own requests, in between on the same connection, still go to it, in order."""
    conn = Conn()
    loop = asyncio.get_running_loop()
    futures = [loop.create_future() for _ in range(3)]
    conn._requests += [(7, Lean(), futures[0]), (8, Struct(), futures[1]), (9, Lean(), futures[2])]
    frames = Frames(conn, loop.create_future())  # type: ignore[arg-type]
    tagged = b"\x01\x05\x02xy"  # one tagged field: tag 5, two bytes
    stream = framed(answer(7, b"body"), answer(8, b"theirs"), answer(9, b"more", tagged))
    frames.data_received(stream[:20])
    assert futures[0].result() == b"body" and len(conn._requests) == 2
    frames.data_received(stream[20:])
    assert conn.frames == [answer(8, b"theirs")]  # aiokafka's own: to aiokafka
    assert futures[2].result() == b"more"
    assert not conn._requests and not conn.closed
    # each answer read whole, alone: decoded from the bytes read, past their size
    futures = [loop.create_future() for _ in range(2)]
    conn._requests += [(10, Lean(), futures[0]), (11, Struct(), futures[1])]
    frames.data_received(framed(answer(10, b"one", tagged)))
    frames.data_received(framed(answer(11, b"two")))
    assert futures[0].result() == b"one" and conn.frames[1:] == [answer(11, b"two")]


async def test_an_answer_whose_correlation_id_does_not_match_goes_to_aiokafka() -> None:
    """aiokafka's ``_handle_frame`` fails the request and closes the connection (out of
    sync): not resolved here with another request's answer."""
    conn = Conn()
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    conn._requests.append((7, Lean(), future))
    frames = Frames(conn, loop.create_future())  # type: ignore[arg-type]
    conn._handle_frame = conn.frames.append  # type: ignore[method-assign]  # aiokafka fails it
    frames.data_received(framed(answer(6, b"stale")))
    assert conn.frames == [answer(6, b"stale")] and not future.done()
