"""The timeline of a tailing partition's copy, for the steady-state benchmark (#23): off
unless the environment names a file in ``SYNCER_HOP_TRACE``; then the fetcher, the chunk
schedulers and the writer note when each step happened (wall-clock seconds, so that the
benchmark's readers, in another process, can be set beside them) and the notes go to that
file as JSON when the process exits. Nothing here decides anything.

What is noted, per partition and offset:
- ``sent``: a fetch carrying the partition from ``offset`` was written (its poll re-armed),
  with the request's kind and how many partitions it carried;
- ``answer``: that fetch's answer, when its bytes were whole on the socket (``frame``),
  decoded (``decoded``) and handed to the copier (``handed``), and what it brought;
- ``taken``: the copier took the chunk (woke with it);
- ``written`` / ``answered``: a produce request carrying the batch from ``offset`` was
  written to the local broker, and its answer came back.

The socket side is read by wrapping aiokafka's connection (``_handle_frame`` and ``send``):
the time the last frame came whole and the last request was written, per connection."""

from __future__ import annotations

import atexit
import json
import os
import time
from pathlib import Path
from typing import Any

from aiokafka.conn import AIOKafkaConnection

ENV = "SYNCER_HOP_TRACE"


class HopTrace:
    """The process's notes, written to ``path`` as JSON by ``dump``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[tuple[Any, ...]] = []
        self.frame_at: dict[int, tuple[float, float]] = {}  # id(conn) → (whole, decoded)
        self.whole_at: dict[int, float] = {}  # id(conn) → the frame being handled came whole
        self.sent_at: dict[int, float] = {}  # id(conn) → its last request written

    def note(self, kind: str, topic: str, partition: int, offset: int, *rest: Any) -> None:
        self.rows.append((kind, topic, partition, offset, time.time(), *rest))

    def dump(self) -> None:
        self.path.write_text(json.dumps({"rows": self.rows}) + "\n")


def _wrap_connection(trace: HopTrace) -> None:
    """Note each connection's last whole answer frame and last request written."""
    handle_frame = AIOKafkaConnection._handle_frame
    send = AIOKafkaConnection.send

    def traced_handle_frame(self: AIOKafkaConnection, resp: bytes) -> None:
        whole = trace.whole_at[id(self)] = time.time()
        handle_frame(self, resp)
        noted = trace.frame_at.get(id(self))
        if noted is None or noted[0] != whole:  # not noted by an answer's hook inside it
            trace.frame_at[id(self)] = (whole, time.time())

    def traced_send(self: AIOKafkaConnection, *args: Any, **kwargs: Any) -> Any:
        out = send(self, *args, **kwargs)
        trace.sent_at[id(self)] = time.time()
        return out

    AIOKafkaConnection._handle_frame = traced_handle_frame
    AIOKafkaConnection.send = traced_send


def _from_env() -> HopTrace | None:
    path = os.environ.get(ENV)
    if not path:
        return None
    trace = HopTrace(Path(path))
    _wrap_connection(trace)
    atexit.register(trace.dump)
    return trace


TRACE: HopTrace | None = _from_env()


def fetch_answered(
    trace: HopTrace, client: Any, request: Any, result: dict[Any, Any], data: int
) -> None:
    """A fetch ``request`` (``fetch_wants.SentRequest``) brought ``result``, handed back
    now; ``data`` is the data connection's number (else a poll)."""
    conn = client._conns.get((request.node, request.connection))
    whole, decoded = trace.frame_at.get(id(conn), (0.0, 0.0))
    sent = trace.sent_at.get(id(conn), 0.0)
    kind = "data" if request.connection == data else "poll"
    for tp, (offset, _limit) in request.offsets.items():
        got = result.get(tp)
        records = got.records if got is not None else b""
        first = int.from_bytes(records[:8], "big") if records else -1
        asked = len(request.offsets)
        trace.note(
            "fetch", tp.topic, tp.partition, offset,
            sent, whole, decoded, kind, asked, len(records), first,
        )  # fmt: skip
