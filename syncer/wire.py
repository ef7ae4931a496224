"""The raw requests of the data path, sent to a partition's leader: list offsets (a
partition's ends), fetch (``syncer.fetches``; its answers ``syncer.fetched``), produce (by
topic id where brokers can: ``syncer.produce``), InitProducerId. Answers leave as plain values;
a produce answer's code is judged by ``alignment.judge``."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable
from functools import cached_property, partial

from aiokafka.protocol.offset import OffsetRequest
from aiokafka.protocol.transaction import InitProducerIdRequest

from syncer.coalesce import Coalesced
from syncer.connection import TP, error_for
from syncer.errors import SyncerError
from syncer.fetched import OFFSET_OUT_OF_RANGE as OFFSET_OUT_OF_RANGE
from syncer.fetched import READ_COMMITTED as READ_COMMITTED
from syncer.fetched import READ_UNCOMMITTED as READ_UNCOMMITTED
from syncer.fetched import FetchedPartition as FetchedPartition
from syncer.fetched import FetchOutcome as FetchOutcome
from syncer.fetched import fetch_outcome as fetch_outcome
from syncer.fetches import Fetches
from syncer.produce import ProduceRequests
from syncer.produce import ProduceResult as ProduceResult  # where clusters.py finds it
from syncer.protocol.epochs import EpochEndRequest, epoch_end
from syncer.retry import retried

EARLIEST = -2
LATEST = -1
CONSUMER = -1  # ListOffsets' replica id of a client: answered up to the high watermark
# Kafka's debugging replica id: a ListOffsets of it is answered from the asked replica's log
# end, past records appended but not yet under the high watermark (``ReplicaManager
# .fetchOffset``: no isolation level but a client's, ``Partition.fetchOffsetForTimestamp``:
# then the log end offset); asked of the leader, it sees what the in-sync replicas have not
# taken yet
DEBUGGING = -2
# a remote's ends listed for a waiting partition (``stable_ends``) are asked together with
# those of every other partition asking within this time: one listing a broker, not one a
# partition, when thousands wait for the same dead remote
ENDS_GATHER_S = 0.5
ENDS_LIST_TIMEOUT_S = 5.0  # a leader that has not answered them by then: left out


class WireRequests(ProduceRequests, Fetches):
    """Ends, fetch, produce and producer ids of one cluster, over its connection."""

    async def ends(
        self, tps: Iterable[TP], *, isolation: int = READ_COMMITTED, answered_only: bool = False
    ) -> dict[TP, tuple[int, int]]:
        """(start, end) of each partition, in the order given; end is the last stable offset
        under read_committed. A partition answered with an error raises, or with
        ``answered_only`` is left out."""
        tps = list(tps)
        starts = await self._list_offsets(tps, EARLIEST, isolation, answered_only)
        if answered_only:
            tps = [tp for tp in tps if tp in starts]
        latest = await self._list_offsets(tps, LATEST, isolation, answered_only)
        if answered_only:
            tps = [tp for tp in tps if tp in latest]
        return {tp: (starts[tp], latest[tp]) for tp in tps}

    async def latest(
        self, tps: Iterable[TP], *, isolation: int = READ_UNCOMMITTED
    ) -> dict[TP, int]:
        """End of each partition: the high watermark, or the last stable offset."""
        tps = list(tps)
        if len(tps) == 1 and isolation == READ_UNCOMMITTED:  # each copier, all at a start
            return {tps[0]: await self._ends.read(tps[0])}
        return await self._list_offsets(tps, LATEST, isolation)

    async def stable_ends(self, tp: TP) -> tuple[int, int]:
        """(start, last stable offset) of ``tp``, listed with those of the partitions asking
        within ``ENDS_GATHER_S`` (``ends`` of them all); ``NotAnswered`` if it was left out
        (``_answered_stable_ends``). Never read again alone: thousands of partitions
        waiting for a dead remote would each ask a broker that does not answer."""
        return await self._stable_ends.read(tp)

    async def log_end(self, tp: TP) -> int:
        """The log end offset of ``tp``'s leader: its high watermark (``latest``) plus what
        it appended that its in-sync replicas have not all taken yet (``DEBUGGING``)."""
        return await self._log_ends.read(tp)

    @cached_property
    def _ends(self) -> Coalesced[TP, int]:
        return Coalesced(self._answered_ends)

    @cached_property
    def _stable_ends(self) -> Coalesced[TP, tuple[int, int]]:
        return Coalesced(self._answered_stable_ends, gather_s=ENDS_GATHER_S, alone=False)

    @cached_property
    def _log_ends(self) -> Coalesced[TP, int]:
        return Coalesced(partial(self._answered_ends, replica=DEBUGGING))

    async def _answered_ends(self, tps: list[TP], replica: int = CONSUMER) -> dict[TP, int]:
        """The ends of those of ``tps`` that answered (as ``replica`` asks). Those that did
        not are read alone by ``Coalesced``, which then raises their own error: at 10,000
        partitions a group member given partitions still being created had all its 3,333
        copiers' ends read alone, one request each, for a few hundred not led yet."""
        partial_ok = len(tps) > 1
        return await self._list_offsets(
            tps, LATEST, READ_UNCOMMITTED, answered_only=partial_ok, replica=replica
        )

    async def _answered_stable_ends(self, tps: list[TP]) -> dict[TP, tuple[int, int]]:
        """``ends`` under read_committed of those of ``tps`` whose leader answered them
        within ``ENDS_LIST_TIMEOUT_S``, each leader asked at once: a partition with no
        leader known, answered with an error, or led by a broker that does not answer is
        left out, and fails none of the others."""
        by_leader: dict[int, list[TP]] = defaultdict(list)
        for tp in tps:
            try:
                by_leader[await self.leader_for(tp)].append(tp)
            except SyncerError:
                continue
        listed = await asyncio.gather(
            *(self._stable_ends_of(led) for led in by_leader.values()), return_exceptions=True
        )
        out: dict[TP, tuple[int, int]] = {}
        for got in listed:
            if isinstance(got, dict):
                out.update(got)
        return out

    async def _stable_ends_of(self, tps: list[TP]) -> dict[TP, tuple[int, int]]:
        """``_answered_stable_ends`` of partitions of one leader."""
        async with asyncio.timeout(ENDS_LIST_TIMEOUT_S):
            return await self.ends(tps, answered_only=True)

    async def _list_offsets(
        self,
        tps: list[TP],
        which: int,
        isolation: int,
        answered_only: bool = False,
        replica: int = CONSUMER,
    ) -> dict[TP, int]:
        by_leader: dict[int, dict[str, list[tuple[int, int]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for tp in tps:
            by_leader[await self.leader_for(tp)][tp.topic].append((tp.partition, which))
        out: dict[TP, int] = {}
        for node, topics in by_leader.items():
            request = OffsetRequest(replica, isolation, list(topics.items()))
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

    async def epoch_end(self, tp: TP, epoch: int) -> tuple[int, int]:
        """(the largest leader epoch at or below ``epoch`` that ``tp``'s log holds, the
        offset where it ends), as its leader answers: the start of the epoch after it, or
        the log end for the current one; (-1, -1) if the log holds none at or below it."""
        node = await self.leader_for(tp)
        seen = self.leaders.generation
        request = EpochEndRequest(tp.topic, tp.partition, epoch)
        code, found, end = epoch_end(await self.send(node, request))
        self.leaders_moved([(tp.topic, code)], seen)
        if code:
            raise error_for(code, f"{self.name}: where leader epoch {epoch} of {tp} ends")
        return found, end

    async def init_producer_id(self) -> tuple[int, int]:
        """A fresh idempotent (non-transactional) producer id and epoch."""
        return await retried(self._init_producer_id, what=f"{self.name}: InitProducerId")

    async def _init_producer_id(self) -> tuple[int, int]:
        node = self._client.get_random_node()
        response = await self.send(node, InitProducerIdRequest(None, 60_000), connection=1)
        if response.error_code:
            raise error_for(response.error_code, f"{self.name}: InitProducerId")
        return int(response.producer_id), int(response.producer_epoch)
