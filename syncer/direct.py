"""Requests written straight onto aiokafka's open connection, within the caller's step of
the event loop (through ``AIOKafkaClient.send`` a request is written only once a task runs
it, a loop turn after it was asked for), and encoded here rather than by aiokafka's schema
classes: a produce request (``write_produce``) as ``produce_v13_frame``'s pieces, the record
batches as they are, in one ``writelines`` (aiokafka copied every batch into one encoded
request and again behind a size prefix); a sessionless fetch (``write_fetch``) by
``fetch_v13_frame``, its answer decoded by ``read_fetch_v13`` (aiokafka's structs took tens
of microseconds each way for a poll of one partition). Answers are read by aiokafka's own
reader (``_requests``, in the order the requests were written), so the two never interleave.

Used only where aiokafka's connection to the node is open (and its socket buffers tuned);
otherwise the caller sends through ``ClusterConnection.send``, which opens it. aiokafka's
connection internals are read here (``_conns``, ``_writer``, ``_requests``,
``_next_correlation_id``): aiokafka is pinned below 0.15."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.conn import AIOKafkaConnection, CloseReason

from syncer.connection import TP
from syncer.hop_trace import TRACE
from syncer.protocol import ProduceRequest_v13
from syncer.protocol.fetch import FetchAnswer, LeanFetchRequest_v13, fetch_v13_frame
from syncer.protocol.produce import LeanProduceRequest_v13, produce_v13_frame

log = logging.getLogger(__name__)

# what aiokafka's reader asks of the request an answer belongs to: its header's version and
# the answer's type (a flexible request's answer has header v1)
_ANSWER_OF = LeanProduceRequest_v13(None, -1, 0, [], {})
_FETCH_ANSWER_OF = LeanFetchRequest_v13(-1, 0, 1, 0, 0, 0, -1, [], [], "", {})


def open_connection(
    client: Any, node: int, group: int, speaks: type[Any] = ProduceRequest_v13
) -> AIOKafkaConnection | None:
    """aiokafka's connection to ``node`` in ``group`` if it is open and speaks the request
    ``speaks`` (a request struct: its API key and version), else None (not connected yet,
    or a stand-in client in tests)."""
    conns = getattr(client, "_conns", None)
    conn = conns.get((node, group)) if conns is not None else None
    if not isinstance(conn, AIOKafkaConnection) or not conn.connected():
        return None
    versions = getattr(conn, "_versions", None) or {}
    low, high = versions.get(speaks.API_KEY, (0, -1))
    if not low <= speaks.API_VERSION <= high:
        return None
    return conn


def write_produce(
    conn: AIOKafkaConnection,
    acks: int,
    timeout_ms: int,
    topics: Mapping[uuid.UUID, list[tuple[int, bytes | bytearray]]],
    then: Callable[[Any], None],
) -> asyncio.Future[Any]:
    """Write one Produce v13 request on ``conn`` now; its future (``Concluded``) hands
    ``then`` the decoded ``ProduceResponse_v13`` as aiokafka's reader sets it, or the
    KafkaConnectionError it is failed with as the connection closes. Raises
    KafkaConnectionError if the connection broke (``then`` is not called)."""
    writer = conn._writer
    if writer is None:
        raise kafka_errors.KafkaConnectionError(f"No connection to broker at {conn.host}")
    correlation_id = conn._next_correlation_id()
    frame = produce_v13_frame(correlation_id, conn._client_id, acks, timeout_ms, topics)
    try:
        writer.writelines(frame)
    except OSError as err:
        conn.close(reason=CloseReason.CONNECTION_BROKEN)
        raise kafka_errors.KafkaConnectionError(f"Connection at {conn.host} broken") from err
    future = Concluded(then, conn)
    conn._requests.append((correlation_id, _ANSWER_OF, future))
    return future


def time_out(conn: AIOKafkaConnection, future: asyncio.Future[Any]) -> None:
    """``future``'s request went unanswered for aiokafka's request timeout: it fails with
    RequestTimedOutError, and the connection is closed, as aiokafka's ``send`` does (its
    reader would otherwise match the late answer to the next request)."""
    if not future.done():
        future.set_exception(kafka_errors.RequestTimedOutError())
        conn.close(reason=CloseReason.CONNECTION_TIMEOUT)


class Concluded(asyncio.Future[Any]):
    """A request's future that hands ``then`` its answer or its failure as either is set (in
    the read callback, or as its connection closes), with no task awaiting it. What ``then``
    raises is logged, never raised into aiokafka's reader (which would close the
    connection)."""

    def __init__(self, then: Callable[[Any], None], conn: Any) -> None:
        super().__init__()
        self._then = then
        self._conn = conn

    def set_result(self, result: Any, /) -> None:
        super().set_result(result)
        if TRACE is not None:
            whole = TRACE.whole_at.get(id(self._conn), 0.0)
            TRACE.frame_at[id(self._conn)] = (whole, time.time())
        self._hand_on(result)

    def set_exception(self, exception: type[BaseException] | BaseException, /) -> None:
        super().set_exception(exception)
        self._hand_on(self.exception())  # retrieved: nobody awaits this future

    def _hand_on(self, outcome: Any) -> None:
        try:
            self._then(outcome)
        except Exception:
            log.exception("handing on an answer from %s", self._conn.host)


def write_fetch(
    conn: AIOKafkaConnection,
    max_wait_ms: int,
    max_bytes: int,
    isolation_level: int,
    topics: Mapping[uuid.UUID, list[tuple[int, int, int]]],
    rack_id: str,
    then: Callable[[Any], None],
) -> asyncio.Future[FetchAnswer]:
    """Write one sessionless Fetch v13 request on ``conn`` now (``fetch_v13_frame``); its
    future (``Concluded``) hands ``then`` the answer, decoded by ``read_fetch_v13`` in
    aiokafka's reader, as it is set, or the KafkaConnectionError it is failed with as the
    connection closes. Raises KafkaConnectionError if the connection broke (``then`` is not
    called)."""
    writer = conn._writer
    if writer is None:
        raise kafka_errors.KafkaConnectionError(f"No connection to broker at {conn.host}")
    correlation_id = conn._next_correlation_id()
    frame = fetch_v13_frame(
        correlation_id, conn._client_id, max_wait_ms, max_bytes, isolation_level, topics, rack_id
    )
    try:
        writer.write(frame)
    except OSError as err:
        conn.close(reason=CloseReason.CONNECTION_BROKEN)
        raise kafka_errors.KafkaConnectionError(f"Connection at {conn.host} broken") from err
    if TRACE is not None:
        TRACE.sent_at[id(conn)] = time.time()
    future = Concluded(then, conn)
    conn._requests.append((correlation_id, _FETCH_ANSWER_OF, future))
    return future


def by_id(
    batches: Mapping[TP, bytes | bytearray], topic_ids: Mapping[str, uuid.UUID]
) -> tuple[dict[uuid.UUID, list[tuple[int, bytes | bytearray]]], dict[uuid.UUID, str], list[TP]]:
    """``batches`` by topic id, the name of each id, and the partitions whose topic has no
    id here yet (not sent: the topic refresh has not learned it)."""
    topics: dict[uuid.UUID, list[tuple[int, bytes | bytearray]]] = defaultdict(list)
    names: dict[uuid.UUID, str] = {}
    unknown = []
    for tp, batch in batches.items():
        topic_id = topic_ids.get(tp.topic)
        if topic_id is None:
            unknown.append(tp)
            continue
        names[topic_id] = tp.topic
        topics[topic_id].append((tp.partition, batch))
    return topics, names, unknown
