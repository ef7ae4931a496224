"""Fetch requests of the data path, sent to a partition's leader (with a rack, to the read
replica its leader named: ``syncer.replicas``): by name, or by topic id (in a session:
``fetch_session``), through aiokafka's ``send`` or written in the caller's loop turn
(``fetch_by_id_then``, ``syncer.direct``). Answers leave as ``FetchedPartition`` values."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.protocol.fetch import FetchRequest

from syncer.connection import TP, ClusterConnection
from syncer.direct import open_connection, time_out, write_fetch
from syncer.fetch_session import FetchSession, Sessionless, exchange
from syncer.fetched import READ_COMMITTED, FetchedPartition
from syncer.protocol import UNKNOWN_TOPIC_ID, FetchByIdRequest
from syncer.protocol.fetch import FetchedById, FetchRequest_v13

log = logging.getLogger(__name__)


class Fetches(ClusterConnection):
    """The fetch requests of one cluster, over its connection."""

    async def fetch(
        self,
        node: int,
        wants: Mapping[TP, int | tuple[int, int]],
        *,
        max_wait_ms: int,
        max_bytes: int,
        partition_max_bytes: int,
        connection: int = 0,
        nearest: bool = False,
    ) -> dict[TP, FetchedPartition]:
        """One read_committed fetch from ``node`` for every partition in ``wants`` (offset,
        or (offset, max bytes for that partition)), on connection number ``connection``.
        ``nearest``: carry the rack, so a leader may name a read replica instead of
        answering (the fetcher's fetches: it routes by ``fetch_node``); else the leader
        answers, as verify and the landed check want."""
        topics: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        for tp, want in wants.items():
            offset, limit = want if isinstance(want, tuple) else (want, partition_max_bytes)
            topics[tp.topic].append((tp.partition, offset, limit))
        rack = self._rack_for(wants) if nearest else ""
        request = FetchRequest(
            max_wait_ms, 1, max_bytes, READ_COMMITTED, list(topics.items()), rack_id=rack
        )
        seen = self.leaders.generation
        response = await self._send_fetch(node, request, wants, connection)
        out: dict[TP, FetchedPartition] = {}
        for topic, partitions in response.topics:
            for p in partitions:
                partition, code, hw, lso, start, aborted, replica, records = p
                out[TP(topic, partition)] = FetchedPartition(
                    code,
                    hw,
                    lso,
                    start,
                    tuple((a[0], a[1]) for a in (aborted or ())),
                    records or b"",
                    replica,
                )
        self.leaders_moved([(tp.topic, p.error_code) for tp, p in out.items()], seen)
        return self._judged(node, out)

    async def fetch_by_id(
        self,
        node: int,
        offsets: Mapping[TP, tuple[int, int]],
        topic_ids: Mapping[str, uuid.UUID],
        *,
        max_wait_ms: int,
        max_bytes: int,
        partition_max_bytes: int,
        connection: int = 0,
        nearest: bool = False,
        session: FetchSession | None = None,
    ) -> dict[TP, FetchedPartition]:
        """One read_committed Fetch v13 naming each topic by the id in ``topic_ids``; a topic
        without one is not asked and answers UNKNOWN_TOPIC_ID (its records may not be read
        until its id is known). In ``session`` if given (one request at a time; ``offsets``
        join it, the answer is ``FetchSession.answered``'s). NotImplementedError: no v13."""
        names = {i: t for t, i in topic_ids.items()} if session is not None else {}
        out, wanted = self._asked_by_id(offsets, topic_ids, partition_max_bytes, names)
        if not wanted and session is None:
            return out
        asked = [tp for tp in offsets if tp.topic in topic_ids]
        rack = self._rack_for(asked) if nearest else ""  # as in ``fetch``
        seen = self.leaders.generation
        sizes = (max_wait_ms, max_bytes, rack)

        async def send(request: FetchByIdRequest) -> Any:
            return await self._send_fetch(node, request, asked, connection)

        answers = await exchange(session or Sessionless(), wanted, sizes, send)
        return self._answered_by_id(node, answers.values(), names, out, seen)

    def fetch_by_id_then(
        self,
        node: int,
        offsets: Mapping[TP, tuple[int, int]],
        topic_ids: Mapping[str, uuid.UUID],
        then: Callable[[dict[TP, FetchedPartition] | Exception], None],
        *,
        max_wait_ms: int,
        max_bytes: int,
        partition_max_bytes: int,
        connection: int = 0,
        nearest: bool = False,
    ) -> Callable[[], None] | None:
        """``fetch_by_id`` without a session, its request written before this returns (in
        the caller's loop turn, ``syncer.direct``), its outcome handed to ``then`` once, with
        no task: the answer as it is read (in the read callback), or the error, as its
        connection closes or once it went unanswered for the request timeout (the connection
        is then closed, as ``send`` does). Sent by ``send``, a request is written once a task
        runs it, a loop turn after it was asked for: a caught-up partition's next poll
        reached the broker after the writes of the answer before it. Returns what gives the
        request up (its timeout cancelled; a follower asked goes back to the leader, as for
        a fetch that failed); None where it cannot be written now: the connection not open
        (or tuned) yet, no Fetch v13 on it, no topic of ``offsets`` with an id."""
        conn = open_connection(self._client, node, connection, FetchRequest_v13)
        if conn is None or (self._buffers and conn not in self._tuned):
            return None
        names: dict[uuid.UUID, str] = {}
        out, wanted = self._asked_by_id(offsets, topic_ids, partition_max_bytes, names)
        if not wanted:
            return None
        asked = [tp for tp in offsets if tp.topic in topic_ids]
        rack = self._rack_for(asked) if nearest else ""  # as in ``fetch``
        seen = self.leaders.generation
        topics: dict[uuid.UUID, list[tuple[int, int, int]]] = defaultdict(list)
        for (topic_id, partition), (offset, limit) in wanted.items():
            topics[topic_id].append((partition, offset, limit))

        def answered(response: Any) -> None:
            timer.cancel()
            outcome: dict[TP, FetchedPartition] | Exception
            try:
                if isinstance(response, BaseException):
                    raise response
                outcome = self._answered_by_id(node, response.partitions, names, out, seen)
            except (kafka_errors.KafkaError, OSError, TimeoutError) as exc:
                self._fetch_failed(node, asked)
                outcome = self.failed(node, exc)
            except Exception as exc:  # a bug: the fetches fail with it
                self._fetch_failed(node, asked)
                outcome = exc
            then(outcome)

        def give_up() -> None:
            timer.cancel()
            self._fetch_failed(node, asked)

        try:
            future = write_fetch(
                conn, max_wait_ms, max_bytes, READ_COMMITTED, topics, rack, answered
            )
        except kafka_errors.KafkaError as exc:
            self._fetch_failed(node, asked)
            raise self.failed(node, exc) from exc
        timer = asyncio.get_running_loop().call_later(conn._request_timeout, time_out, conn, future)
        return give_up

    @staticmethod
    def _asked_by_id(
        offsets: Mapping[TP, tuple[int, int]],
        topic_ids: Mapping[str, uuid.UUID],
        partition_max_bytes: int,
        names: dict[uuid.UUID, str],
    ) -> tuple[dict[TP, FetchedPartition], dict[tuple[uuid.UUID, int], tuple[int, int]]]:
        """What a fetch by id asks of each partition (its name noted in ``names``), and the
        answers of those whose topic has no id (not asked: UNKNOWN_TOPIC_ID)."""
        out: dict[TP, FetchedPartition] = {}
        wanted: dict[tuple[uuid.UUID, int], tuple[int, int]] = {}
        for tp, (offset, limit) in offsets.items():
            topic_id = topic_ids.get(tp.topic)
            if topic_id is None:
                out[tp] = FetchedPartition(UNKNOWN_TOPIC_ID, -1, -1, -1, (), b"")
                continue
            names[topic_id] = tp.topic
            wanted[(topic_id, tp.partition)] = (offset, min(limit, partition_max_bytes))
        return out, wanted

    def _answered_by_id(
        self,
        node: int,
        answers: Iterable[FetchedById],
        names: dict[uuid.UUID, str],
        out: dict[TP, FetchedPartition],
        seen: int,
    ) -> dict[TP, FetchedPartition]:
        answered = []
        for p in answers:
            name = names.get(p.topic_id)
            if name is not None:
                answered.append((name, p.error_code))
                out[TP(name, p.partition)] = FetchedPartition(
                    p.error_code,
                    p.high_watermark,
                    p.last_stable_offset,
                    p.log_start_offset,
                    p.aborted,
                    p.records,
                    p.preferred_read_replica,
                )
        self.leaders_moved(answered, seen)
        return self._judged(node, out)

    # reading from the nearest replica ---------------------------------------------------

    def _rack_for(self, tps: Iterable[TP]) -> str:
        """The rack a fetch of ``tps`` carries: ours, unless one of them falls back to its
        leader after its read replica failed (the leader would name that one again)."""
        if self.rack and self.read_replicas.carries_rack(tps, time.monotonic()):
            return self.rack
        return ""

    async def _send_fetch(
        self, node: int, request: object, tps: Collection[TP], connection: int
    ) -> Any:
        """Send a fetch; should it fail (no answer, a timeout that cancels it), the partitions
        it asked of a follower go back to their leader."""
        try:
            return await self.send(node, request, connection=connection)
        except BaseException:
            self._fetch_failed(node, tps)
            raise

    def _fetch_failed(self, node: int, tps: Collection[TP]) -> None:
        if self.rack:
            now = time.monotonic()
            for tp in tps:
                if self._client.cluster.leader_for_partition(tp) != node:
                    self.read_replicas.failed(tp, now)

    def _judged(self, node: int, out: dict[TP, FetchedPartition]) -> dict[TP, FetchedPartition]:
        """``node``'s answers, each marked if a follower gave it; the read replicas a leader
        named are remembered, and one that answered an error is forgotten. The record bytes
        are counted per node (which broker served the copy)."""
        brought = sum(len(p.records) for p in out.values())
        self.fetched_bytes[node] = self.fetched_bytes.get(node, 0) + brought
        if not self.rack:
            return out
        now = time.monotonic()
        for tp, p in out.items():
            if p.preferred_read_replica >= 0:  # only a leader names one
                self.read_replicas.named(tp, p.preferred_read_replica, node, now)
            elif self._client.cluster.leader_for_partition(tp) != node:
                out[tp] = p._replace(from_follower=True)
                if p.error_code:
                    log.info(
                        "%s[%d]: read replica %d of %s answered error %d: reading from the leader",
                        tp.topic,
                        tp.partition,
                        node,
                        self.name,
                        p.error_code,
                    )
                    self.read_replicas.failed(tp, now)
        return out
