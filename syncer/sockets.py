"""aiokafka's open sockets: their buffer sizes, and answers read off them straight into one
buffer per answer.

aiokafka reads every answer through an ``asyncio.StreamReader`` whose limit is 64 KiB: each
socket read of a multi-MB fetch answer is copied into the reader's buffer, wakes the reading
task, pauses and resumes the transport, and the finished answer is copied out twice more
(``bytes(buffer[:n])``). On this machine that cost ~0.75 CPU s per GiB read, a quarter of
all syncer spent copying a backlog; reading each answer with ``recv_into`` into a buffer of
the answer's size costs ~0.13 (both measured on a socket pair with 4 MiB answers, uvloop).

``adopt`` swaps aiokafka's protocol on an open plaintext connection for a ``FramedAnswers``
that hands every complete answer to the connection's own ``_handle_frame``, so answers are
still matched to requests (and decoded) exactly as aiokafka does; losing the connection or
its end of stream goes to aiokafka's protocol as before, whose reader then ends and closes
the connection, failing its pending requests. The swap happens only between answers (no
request waiting, nothing buffered), where aiokafka's reader is waiting for a size prefix and
no byte of an answer has been read. aiokafka's connection internals are read here
(``_protocol``, ``_reader``, ``_requests``, ``_handle_frame``): aiokafka is pinned <0.15.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import weakref
from collections.abc import Callable
from typing import Any

from aiokafka.conn import CloseReason

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
SCRATCH_BYTES = 64 * 1024  # small answers (produce, metadata) are read several at a time


class FramedAnswers(asyncio.BufferedProtocol):
    """Reads size-prefixed answers: small ones through a scratch buffer (one read may hold
    several), each larger one into a buffer of its own size, read in place. ``deliver``
    gets each answer without its size prefix; ``broken`` is called once if the stream is
    not Kafka's framing (a negative size)."""

    def __init__(
        self,
        deliver: Callable[[bytearray], None],
        broken: Callable[[Exception], None],
        previous: asyncio.BaseProtocol | None = None,
    ) -> None:
        self._deliver = deliver
        self._broken = broken
        self._previous = previous  # aiokafka's protocol: connection loss, flow control
        self._scratch = bytearray(SCRATCH_BYTES)
        self._held = 0  # bytes of the scratch buffer read and not yet handed on
        self._answer: bytearray | None = None  # a large answer being read in place
        self._filled = 0

    def __repr__(self) -> str:
        reading = f"{self._filled}/{len(self._answer)}" if self._answer is not None else "-"
        return f"<FramedAnswers [scratch {self._held} B, large answer {reading}]>"

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._answer is not None:
            return memoryview(self._answer)[self._filled :]
        return memoryview(self._scratch)[self._held :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._answer is not None:
            self._filled += nbytes
            if self._filled == len(self._answer):
                answer, self._answer = self._answer, None
                self._deliver(answer)
            return
        self._held += nbytes
        self._split_scratch()

    def _split_scratch(self) -> None:
        """Hand on every complete answer in the scratch buffer; start reading a large one in
        place; keep a partial small one (or a partial size prefix) at the buffer's front."""
        scratch, pos = self._scratch, 0
        while self._held - pos >= _SIZE.size:
            (size,) = _SIZE.unpack_from(scratch, pos)
            if size < 0:
                self._held = 0
                self._broken(ValueError(f"answer size {size}"))
                return
            start, end = pos + _SIZE.size, pos + _SIZE.size + size
            if end <= self._held:
                self._deliver(scratch[start:end])
                pos = end
            elif _SIZE.size + size > len(scratch):
                self._answer = bytearray(size)
                have = self._held - start
                self._answer[:have] = scratch[start : self._held]
                self._filled = have
                pos = self._held
                break
            else:
                break  # a small answer not read whole yet: it fits once moved to the front
        if pos:
            rest = self._held - pos
            scratch[:rest] = scratch[pos : self._held]
            self._held = rest

    # the rest is aiokafka's protocol's business ----------------------------------------

    def connection_lost(self, exc: Exception | None) -> None:
        if self._previous is not None:
            self._previous.connection_lost(exc)

    def eof_received(self) -> bool | None:
        if isinstance(self._previous, asyncio.Protocol):
            return self._previous.eof_received()
        return None

    def pause_writing(self) -> None:
        if self._previous is not None:
            self._previous.pause_writing()

    def resume_writing(self) -> None:
        if self._previous is not None:
            self._previous.resume_writing()


def adopt(conn: Any, adopted: weakref.WeakSet[Any]) -> None:
    """Read ``conn``'s answers through a ``FramedAnswers`` from now on, if it is an open
    plaintext aiokafka connection between answers; else leave it (``adopted`` remembers
    the ones done). SSL connections keep aiokafka's reader."""
    if conn is None or conn in adopted or not _between_answers(conn):
        return
    writer = conn._writer
    transport = writer.transport
    if transport.get_extra_info("sslcontext") is not None:
        adopted.add(conn)  # never: TLS stays aiokafka's
        return
    ref = weakref.ref(conn)

    def deliver(answer: bytearray) -> None:
        live = ref()
        if live is not None:
            live._handle_frame(answer)

    def broken(exc: Exception) -> None:
        live = ref()
        if live is not None:
            live.close(reason=CloseReason.OUT_OF_SYNC, exc=exc)

    transport.set_protocol(FramedAnswers(deliver, broken, conn._protocol))
    adopted.add(conn)


def _between_answers(conn: Any) -> bool:
    """No request waits for an answer and aiokafka's reader holds no byte: its task is
    waiting for the next size prefix, so the next byte on the socket starts an answer."""
    reader = getattr(conn, "_reader", None)
    writer = getattr(conn, "_writer", None)
    return bool(
        conn.connected()
        and writer is not None
        and reader is not None
        and not conn._requests
        and not reader._buffer
        and not reader._eof
        and not getattr(reader, "_paused", False)
    )


def socket_of(conn: Any) -> Any:
    """The socket of an aiokafka connection, None if it is not open."""
    writer = getattr(conn, "_writer", None)
    return writer.transport.get_extra_info("socket") if writer is not None else None


def socket_buffers(conns: list[Any]) -> list[tuple[int, int]]:
    """(SO_RCVBUF, SO_SNDBUF) of each open connection, as the kernel reports them."""
    socks = [socket_of(conn) for conn in conns]
    return [
        (
            s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
            s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
        )
        for s in socks
        if s is not None
    ]
