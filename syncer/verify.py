"""``syncer verify``: are the local partitions identical to the remote ones? Both sides of a
range are read and hashed record by record into ``FANOUT`` sub-range digests; the first
sub-range whose digests differ is read again and split the same way (Merkle-style), until a
few records are left to compare one by one. Reading stops there: the data read is about
16/15 of the range, in a number of rounds logarithmic in its length.

What is compared is what a reader sees: timestamp, key, value and headers at each offset
(every record of a LogAppendTime batch has the batch's append time, as ``batches.decode`` and
Kafka's readers give it, so a remote LogAppendTime topic equals its CreateTime copy).
Transaction markers, aborted transactional data and syncer's filler records are not records
a reader sees, so a filled hole equals the hole it fills."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial

from syncer.batches import Batch, Record, decode, is_filler, record_digest, split_batches
from syncer.clusters import TP, Cluster
from syncer.errors import OffsetOutOfRange, PartitionHalted, TransientClusterError
from syncer.holes import aborted_batches
from syncer.retry import retried
from syncer.wire import FetchOutcome

FANOUT = 16
LEAF_RECORDS = 64  # a range this short is compared record by record
FETCH_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class Divergence:
    offset: int
    local: str  # what each side holds there, in a few words
    remote: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """The comparison of one partition with one remote over ``[low, high)``."""

    tp: TP
    remote: str
    low: int
    high: int
    divergence: Divergence | None
    rounds: int  # ranges compared, from the whole down to the leaf
    fetches: int  # fetch requests, both sides together


class RangeReader:
    """The visible records of one partition on one cluster, read over ranges."""

    def __init__(self, cluster: Cluster, tp: TP) -> None:
        self.cluster = cluster
        self.tp = tp
        self.fetches = 0

    async def records(self, low: int, high: int) -> AsyncIterator[Record]:
        """Every record a reader sees in ``[low, high)``, in offset order."""
        offset = low
        while offset < high:
            where = f"{self.cluster.name}: reading {self.tp.topic}[{self.tp.partition}]"
            batches, aborted = await retried(partial(self._batches, offset), what=where)
            if not batches:
                return  # the partition ends before ``high``
            for batch in batches:
                if batch.base_offset >= high:
                    return
                if not batch.is_control and batch.base_offset not in aborted:
                    for r in decode(batch):
                        if offset <= r.offset < high and not is_filler(r.key, r.headers):
                            yield r
                offset = batch.next_offset

    async def _batches(self, offset: int) -> tuple[list[Batch], set[int]]:
        """The batches of one fetch from ``offset`` on (none: the partition ends there) and
        the base offsets of those with aborted data. An error, or an answer with no batch
        below the partition's end, is retriable: never taken for the end (read as the end,
        it made a false divergence, or would hide one)."""
        node = await self.cluster.leader_for(self.tp)
        fetched = (
            await self.cluster.fetch(
                node,
                {self.tp: offset},
                max_wait_ms=0,
                max_bytes=FETCH_BYTES,
                partition_max_bytes=FETCH_BYTES,
            )
        )[self.tp]
        self.fetches += 1
        where = f"{self.cluster.name}: fetch of {self.tp.topic}[{self.tp.partition}] at {offset}"
        if fetched.outcome is FetchOutcome.OUT_OF_RANGE:
            raise OffsetOutOfRange(str(fetched.error(where)))
        if fetched.outcome is not FetchOutcome.OK:
            raise fetched.error(where)  # retried if its outcome is retriable
        try:
            batches = [b for b in split_batches(fetched.records) if b.next_offset > offset]
        except PartitionHalted as exc:  # a message set that cannot be read: say where
            raise PartitionHalted(f"{where}: {exc}") from exc
        if not batches and offset < fetched.stable_end:
            raise TransientClusterError(f"{where}: no records below its end {fetched.stable_end}")
        return batches, aborted_batches(batches, fetched.aborted)

    async def digests(self, low: int, high: int, width: int) -> list[bytes]:
        """One digest per sub-range ``[low + i*width, low + (i+1)*width)`` of ``[low, high)``."""
        parts = [hashlib.blake2b(digest_size=16) for _ in range(-(-(high - low) // width))]
        async for r in self.records(low, high):
            parts[(r.offset - low) // width].update(r.offset.to_bytes(8, "big") + record_digest(r))
        return [p.digest() for p in parts]

    async def leaf(self, low: int, high: int) -> dict[int, Record]:
        return {r.offset: r async for r in self.records(low, high)}


def describe(r: Record | None) -> str:
    if r is None:
        return "no record"
    value = "null value" if r.value is None else f"value of {len(r.value)} bytes"
    return f"key {r.key!r:.40}, {value}, timestamp {r.timestamp}, {len(r.headers)} headers"


async def compare(
    local: RangeReader, remote: RangeReader, low: int, high: int
) -> tuple[Divergence | None, int]:
    """The first offset in ``[low, high)`` where the two differ (None: identical), and the
    number of rounds it took."""
    rounds = 0
    while True:
        rounds += 1
        if high - low <= LEAF_RECORDS:
            mine, theirs = await asyncio.gather(local.leaf(low, high), remote.leaf(low, high))
            for offset in range(low, high):
                a, b = mine.get(offset), theirs.get(offset)
                if (a and record_digest(a)) != (b and record_digest(b)):
                    return Divergence(offset, describe(a), describe(b)), rounds
            return None, rounds
        width = -(-(high - low) // FANOUT)
        mine_d, theirs_d = await asyncio.gather(
            local.digests(low, high, width), remote.digests(low, high, width)
        )
        differing = [i for i, (a, b) in enumerate(zip(mine_d, theirs_d, strict=True)) if a != b]
        if not differing:
            return None, rounds
        low, high = low + differing[0] * width, min(high, low + (differing[0] + 1) * width)


async def verify_partition(
    local: Cluster,
    remote: Cluster,
    remote_name: str,
    tp: TP,
    *,
    low: int | None = None,
    high: int | None = None,
) -> Verdict:
    """Compare ``tp`` over ``[low, high)`` (default: the offsets both sides hold; a local end
    short of the remote's is lag, not divergence)."""
    (local_start, local_end), (remote_start, remote_end) = await asyncio.gather(
        _ends(local, tp), _ends(remote, tp)
    )
    start = max(local_start, remote_start) if low is None else low
    end = min(local_end, remote_end) if high is None else high
    mine, theirs = RangeReader(local, tp), RangeReader(remote, tp)
    divergence, rounds = (None, 0) if end <= start else await compare(mine, theirs, start, end)
    return Verdict(tp, remote_name, start, end, divergence, rounds, mine.fetches + theirs.fetches)


async def _ends(cluster: Cluster, tp: TP) -> tuple[int, int]:
    return (await cluster.ends([tp]))[tp]
