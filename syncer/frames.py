"""Answers read as their bytes arrive. aiokafka reads a connection with a task: the socket's
bytes go into a stream, the stream wakes the task, and the task hands the answer on one loop
turn later (on these cores a turn costs what the other callbacks of the turn cost: 0.1 ms at
the median, milliseconds when both cores are busy). Every answer of syncer's crossed it: a
caught-up partition's poll before its records could be written, and every produce answer.
Here an open connection's transport is given a protocol of ours that hands each whole answer
to aiokafka's own ``_handle_frame`` in the read callback (or, an answer to a request of
syncer's own, resolves it there itself), and aiokafka's reading task ends.
aiokafka's connection internals are used (``_reader``, ``_writer``, ``_read_task``,
``_closed_fut``, ``_handle_frame``): aiokafka is pinned below 0.15."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiokafka.conn import AIOKafkaConnection, CloseReason

from syncer.hop_trace import TRACE
from syncer.protocol.lean import LeanAnswer, header_v1

log = logging.getLogger(__name__)


class Frames(asyncio.Protocol):
    """One connection's answers, each handed to aiokafka as soon as it is whole."""

    def __init__(self, conn: AIOKafkaConnection, closed: asyncio.Future[None]) -> None:
        self.conn = conn
        self.closed = closed
        self.buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        if not buffer and len(data) >= 4 and len(data) == 4 + int.from_bytes(data[:4], "big"):
            self._frame(data, 4)  # one whole answer, as nearly all come: not copied
            return
        buffer += data
        while len(buffer) >= 4:
            end = 4 + int.from_bytes(buffer[:4], "big")
            if len(buffer) < end:
                return
            with memoryview(buffer) as view:  # one copy of the frame, not two
                frame = bytes(view[4:end])
            del buffer[:end]
            if not self._frame(frame, 0):
                return

    def _frame(self, data: bytes, start: int) -> bool:
        """Hand on the frame at ``start`` of ``data`` (to its end); False if that closed the
        connection."""
        try:
            self._hand_on(data, start)
        except Exception as exc:  # as aiokafka's reader: the connection is done for
            log.debug("closing %s:%s: %r", self.conn.host, self.conn.port, exc)
            self.conn.close(reason=CloseReason.CONNECTION_BROKEN, exc=exc)
            return False
        return True

    def _hand_on(self, data: bytes, start: int) -> None:
        """The frame at ``start`` of ``data`` to the request it answers. The answer to a
        request of syncer's own (``syncer.direct``: its answer type a ``LeanAnswer``), when
        the correlation ids match, is decoded and resolved here, as aiokafka's
        ``_handle_frame`` would, without its buffer and header objects (a dozen calls an
        answer, two answers a copied batch); every other frame, and one whose id does not
        match (aiokafka closes the connection), goes to ``_handle_frame``."""
        conn = self.conn
        requests = getattr(conn, "_requests", None)
        if requests:
            correlation_id, request, future = requests[0]
            answer = getattr(request, "RESPONSE_TYPE", None)
            if isinstance(answer, LeanAnswer):
                answered, body = header_v1(data, start)
                if answered == correlation_id:
                    if TRACE is not None:  # as the traced ``_handle_frame`` notes it
                        TRACE.whole_at[id(conn)] = time.time()
                    if not future.done():
                        future.set_result(answer.read(data, body))
                    conn._last_action = time.monotonic()
                    requests.popleft()
                    return
        conn._handle_frame(data[start:] if start else data)

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
