"""Answers read as their bytes arrive. aiokafka reads a connection with a task: the socket's
bytes go into a stream, the stream wakes the task, and the task hands the answer on one loop
turn later (on these cores a turn costs what the other callbacks of the turn cost: 0.1 ms at
the median, milliseconds when both cores are busy). Every answer of syncer's crossed it: a
caught-up partition's poll before its records could be written, and every produce answer.
Here an open connection's transport is given a protocol of ours that hands each whole answer
to aiokafka's own ``_handle_frame`` in the read callback, and aiokafka's reading task ends.
aiokafka's connection internals are used (``_reader``, ``_writer``, ``_read_task``,
``_closed_fut``, ``_handle_frame``): aiokafka is pinned below 0.15."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka.conn import AIOKafkaConnection, CloseReason

log = logging.getLogger(__name__)


class Frames(asyncio.Protocol):
    """One connection's answers, each handed to aiokafka as soon as it is whole."""

    def __init__(self, conn: AIOKafkaConnection, closed: asyncio.Future[None]) -> None:
        self.conn = conn
        self.closed = closed
        self.buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        while len(buffer) >= 4:
            end = 4 + int.from_bytes(buffer[:4], "big")
            if len(buffer) < end:
                return
            with memoryview(buffer) as view:  # one copy of the frame, not two
                frame = bytes(view[4:end])
            del buffer[:end]
            try:
                self.conn._handle_frame(frame)
            except Exception as exc:  # as aiokafka's reader: the connection is done for
                log.debug("closing %s:%s: %r", self.conn.host, self.conn.port, exc)
                self.conn.close(reason=CloseReason.CONNECTION_BROKEN, exc=exc)
                return

    def eof_received(self) -> bool:
        return False  # the transport closes itself: ``connection_lost`` follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.close(reason=CloseReason.CONNECTION_BROKEN, exc=exc)
        if not self.closed.done():
            self.closed.set_result(None)


def read_as_it_comes(conn: Any) -> None:
    """Hand ``conn``'s answers to aiokafka from the read callback from now on. Only for a
    connection just opened, with no request in flight (aiokafka's reader, between requests,
    has taken no part of a frame); one aiokafka did not open the usual way, or whose reader
    holds bytes all the same, is left to aiokafka."""
    if not isinstance(conn, AIOKafkaConnection):
        return
    reader, writer, task = conn._reader, conn._writer, conn._read_task
    if reader is None or writer is None or task is None or conn._closed_fut is None:
        return
    if reader._buffer or conn._requests:
        return
    task.cancel()
    writer.transport.set_protocol(Frames(conn, conn._closed_fut))
