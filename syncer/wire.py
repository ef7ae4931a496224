"""The raw requests of the data path, sent to a partition's leader (a fetch, with a rack, to
the read replica its leader named: ``syncer.replicas``): list offsets (a partition's ends),
fetch (in a session: ``fetch_session``), produce (by topic id where brokers can), InitProducerId.
Answers leave as plain values. A fetch answer carries its ``FetchOutcome``, decided here from
the error code, so that no caller judges Kafka's numbers; a produce answer's code is judged by
``alignment.judge``."""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.protocol.transaction import InitProducerIdRequest

from syncer.coalesce import Coalesced
from syncer.connection import TP, error_for, is_retriable
from syncer.errors import ClusterError, TransientClusterError
from syncer.fetch_session import FetchSession, Sessionless, exchange
from syncer.leaders import LEADER_MOVED_CODES
from syncer.produce import ProduceRequests
from syncer.produce import ProduceResult as ProduceResult  # where clusters.py finds it
from syncer.protocol import (
    UNKNOWN_TOPIC_ID,
    FetchByIdRequest,
)
from syncer.retry import retried

log = logging.getLogger(__name__)

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
EARLIEST = -2
LATEST = -1
OFFSET_OUT_OF_RANGE: int = kafka_errors.OffsetOutOfRangeError.errno  # below start, past end


class FetchOutcome(Enum):
    """What a fetch answer means for the one who asked, decided from its error code."""

    OK = "ok"  # records (or none) from the offset asked
    RETRY = "retry"  # Kafka says it may pass (a timeout, a partition not available yet)
    LEADER_MOVED = "leader moved"  # another broker leads now: refresh metadata, ask again
    OUT_OF_RANGE = "out of range"  # the log no longer holds the offset, or ends before it
    TOPIC_GONE = "topic gone"  # the topic id asked is not there: deleted, maybe recreated
    FAILED = "failed"  # any other error: asking again will not help
    # the leader named a read replica (no records), or the read replica asked answered an
    # error: ask again at once where ``fetch_node`` now says (nothing about the log itself)
    REROUTED = "rerouted"

    @property
    def retriable(self) -> bool:
        """May the same fetch succeed if asked again (after a metadata refresh)?"""
        return self in (FetchOutcome.RETRY, FetchOutcome.LEADER_MOVED, FetchOutcome.REROUTED)


def fetch_outcome(code: int) -> FetchOutcome:
    """The outcome of a fetch answer that carries ``code``."""
    if code == 0:
        return FetchOutcome.OK
    if code in LEADER_MOVED_CODES:
        return FetchOutcome.LEADER_MOVED
    if code == OFFSET_OUT_OF_RANGE:
        return FetchOutcome.OUT_OF_RANGE
    if code == UNKNOWN_TOPIC_ID:
        return FetchOutcome.TOPIC_GONE
    if is_retriable(code):
        return FetchOutcome.RETRY
    return FetchOutcome.FAILED


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """One partition of a fetch response, records still as raw bytes."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: tuple[tuple[int, int], ...]
    records: bytes
    preferred_read_replica: int = -1  # named by the leader (KIP-392); -1: none
    from_follower: bool = False  # answered by a broker that does not lead the partition

    @property
    def stable_end(self) -> int:
        return self.last_stable_offset if self.last_stable_offset >= 0 else self.high_watermark

    @property
    def outcome(self) -> FetchOutcome:
        """A follower's error says only that it cannot serve us (it lags: OFFSET_OUT_OF_RANGE;
        it is no replica now: NOT_LEADER_OR_FOLLOWER), never that the log lost the offset:
        KIP-392's client asks the leader then, and so do we."""
        if self.error_code and self.from_follower:
            return FetchOutcome.REROUTED
        if not self.error_code and self.preferred_read_replica >= 0 and not self.records:
            return FetchOutcome.REROUTED
        return fetch_outcome(self.error_code)

    def error(self, context: str) -> ClusterError:
        """Our error for a failed answer, to raise or to quote: transient exactly when the
        outcome is retriable (aiokafka 0.14 knows no leader epochs, so it would not say)."""
        error = error_for(self.error_code, context)
        if self.outcome.retriable and not isinstance(error, TransientClusterError):
            return TransientClusterError(str(error))
        return error


class WireRequests(ProduceRequests):
    """Ends, fetch, produce and producer ids of one cluster, over its connection."""

    async def ends(
        self, tps: Iterable[TP], *, isolation: int = READ_COMMITTED
    ) -> dict[TP, tuple[int, int]]:
        """(start, end) of each partition; end is the last stable offset under read_committed."""
        tps = list(tps)
        starts = await self._list_offsets(tps, EARLIEST, isolation)
        latest = await self._list_offsets(tps, LATEST, isolation)
        return {tp: (starts[tp], latest[tp]) for tp in tps}

    async def latest(
        self, tps: Iterable[TP], *, isolation: int = READ_UNCOMMITTED
    ) -> dict[TP, int]:
        """End of each partition: the high watermark, or the last stable offset."""
        tps = list(tps)
        if len(tps) == 1 and isolation == READ_UNCOMMITTED:  # each copier, all at a start
            return {tps[0]: await self._ends.read(tps[0])}
        return await self._list_offsets(tps, LATEST, isolation)

    @cached_property
    def _ends(self) -> Coalesced[TP, int]:
        return Coalesced(self._answered_ends)

    async def _answered_ends(self, tps: list[TP]) -> dict[TP, int]:
        """The ends of those of ``tps`` that answered. Those that did not are read alone by
        ``Coalesced``, which then raises their own error: at 10,000 partitions a group
        member given partitions still being created had all its 3,333 copiers' ends read
        alone, one request each, for a few hundred not led yet."""
        partial_ok = len(tps) > 1
        return await self._list_offsets(tps, LATEST, READ_UNCOMMITTED, answered_only=partial_ok)

    async def _list_offsets(
        self, tps: list[TP], which: int, isolation: int, answered_only: bool = False
    ) -> dict[TP, int]:
        by_leader: dict[int, dict[str, list[tuple[int, int]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for tp in tps:
            by_leader[await self.leader_for(tp)][tp.topic].append((tp.partition, which))
        out: dict[TP, int] = {}
        for node, topics in by_leader.items():
            request = OffsetRequest(-1, isolation, list(topics.items()))
            seen = self.leaders.generation
            response = await self.send(node, request)
            codes = [(t, code) for t, partitions in response.topics for _p, code, *_ in partitions]
            self.leaders_moved(codes, seen)
            for topic, partitions in response.topics:
                for partition, code, *rest in partitions:
                    if code and answered_only:
                        continue
                    if code:
                        raise error_for(code, f"{self.name}: list offsets {topic}[{partition}]")
                    out[TP(topic, partition)] = int(rest[-1])
        return out

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
        out: dict[TP, FetchedPartition] = {}
        wanted: dict[tuple[uuid.UUID, int], tuple[int, int]] = {}
        names = {i: t for t, i in topic_ids.items()} if session is not None else {}
        for tp, (offset, limit) in offsets.items():
            topic_id = topic_ids.get(tp.topic)
            if topic_id is None:
                out[tp] = FetchedPartition(UNKNOWN_TOPIC_ID, -1, -1, -1, (), b"")
                continue
            names[topic_id] = tp.topic
            wanted[(topic_id, tp.partition)] = (offset, min(limit, partition_max_bytes))
        if not wanted and session is None:
            return out
        asked = [tp for tp in offsets if tp.topic in topic_ids]
        rack = self._rack_for(asked) if nearest else ""  # as in ``fetch``
        seen = self.leaders.generation
        sizes = (max_wait_ms, max_bytes, rack)

        async def send(request: FetchByIdRequest) -> Any:
            return await self._send_fetch(node, request, asked, connection)

        answers = await exchange(session or Sessionless(), wanted, sizes, send)
        answered = []
        for p in answers.values():
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
            if self.rack:
                now = time.monotonic()
                for tp in tps:
                    if self._client.cluster.leader_for_partition(tp) != node:
                        self.read_replicas.failed(tp, now)
            raise

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
                out[tp] = dataclasses.replace(p, from_follower=True)
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

    async def init_producer_id(self) -> tuple[int, int]:
        """A fresh idempotent (non-transactional) producer id and epoch."""
        return await retried(self._init_producer_id, what=f"{self.name}: InitProducerId")

    async def _init_producer_id(self) -> tuple[int, int]:
        node = self._client.get_random_node()
        response = await self.send(node, InitProducerIdRequest(None, 60_000), connection=1)
        if response.error_code:
            raise error_for(response.error_code, f"{self.name}: InitProducerId")
        return int(response.producer_id), int(response.producer_epoch)
