"""Sources agree (invariant 5): before a remote's records are written for a partition, a
sample of them is compared, record by record, with the same offsets elsewhere: another remote
that holds them, or the local log just below the local end. Between two remotes that
disagree, the one listed later in the configuration is dropped for that partition and
reported; a remote that disagrees with the local log halts the partition (which side is
wrong cannot be told). Sampling goes on every ``SAMPLE_EVERY`` chunks, and again at once after a
remote failed fetches (it may be back with other data)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from syncer.batches import (
    Batch,
    Record,
    decode,
    is_filler,
    record_digest,
    record_digests,
    split_batches,
)
from syncer.chunks import Fetched
from syncer.clusters import TP, Cluster
from syncer.errors import PartitionHalted, TransientClusterError
from syncer.fetcher import Lanes
from syncer.planner import RemoteEnds
from syncer.sources import SourceHealth

log = logging.getLogger(__name__)

SAMPLE_RECORDS = 256
SAMPLE_BYTES = 65536  # the comparison asks for this much (the broker sends whole batches)
SAMPLE_EVERY = 32
TAIL_BATCHES = 2  # of a written chunk, kept (as digests) to compare with the next chunk
LOOKUP_TIMEOUT_S = 15.0


@dataclass(frozen=True, slots=True)
class _Tail:
    """Record digests of the last batches of the chunk written last."""

    remote: str
    low: int
    high: int
    digests: dict[int, bytes]


class SourceDropped(Exception):
    """The remote that served a chunk was dropped for this partition."""


class CheckFailed(Exception):
    """A remote needed for the comparison did not answer; try the chunk again later."""


class Agreement:
    """Per partition: the remotes checked so far and the ones dropped (remote → reason)."""

    def __init__(
        self,
        tp: TP,
        local: Cluster,
        fetchers: Mapping[str, Lanes],
        health: Mapping[str, SourceHealth],
        ends: Mapping[str, RemoteEnds],
        dropped: dict[str, str],
    ) -> None:
        self.tp = tp
        self.local = local
        self.fetchers = fetchers
        self.health = health
        self.ends = ends
        self.dropped = dropped
        self.checked: set[str] = set()
        self._previous: _Tail | None = None
        self._chunks: dict[str, int] = {}
        self._failures: dict[str, int] = {}  # each remote's failed fetches when last checked

    async def check(self, got: Fetched, frontier: int) -> None:
        """Raise ``SourceDropped`` if ``got``'s remote must not be written from."""
        remote = got.remote
        seen = self._chunks.get(remote, 0)
        self._chunks[remote] = seen + 1
        failures = self.health[remote].errors
        if self._failures.setdefault(remote, failures) != failures:
            # it failed fetches since it was checked: it may be back with other data (a
            # topic deleted and recreated, a cluster restored), so compare before writing
            # from it again rather than splice another log onto what was copied
            self._failures[remote] = failures
            self.checked.discard(remote)
        if remote in self.checked and seen % SAMPLE_EVERY:
            return
        if self._against_previous(got, frontier):
            self.checked.add(remote)
            return
        low, high = frontier, min(got.covered_end, frontier + SAMPLE_RECORDS)
        if high <= low:
            return
        reference = self._reference(remote, low)
        asked = reference or remote
        try:
            if reference is not None:
                await self._against_remote(got, reference, low, high)
            elif frontier > 0:
                await self._against_local(remote, frontier - 1)
        except (TransientClusterError, TimeoutError, OSError) as exc:
            self.health[asked].failed(time.monotonic(), f"{type(exc).__name__}: {exc}")
            raise CheckFailed(f"comparing {remote} with {asked}: {exc}") from exc
        self.checked.add(remote)

    def written(self, got: Fetched) -> None:
        """The chunk just written: the next one, from another remote, usually overlaps its
        last batch (a fetch starts at the batch holding its offset), which compares the two
        sources without a fetch. Only the digests of its last batches are kept, not the
        chunk; with a single remote there is nothing to compare."""
        if len(self.fetchers) < 2 or not got.batches:
            self._previous = None
            return
        tail = got.batches[-TAIL_BATCHES:]
        low, high = tail[0].base_offset, got.covered_end
        self._previous = _Tail(got.remote, low, high, record_digests(tail, low, high))

    def _against_previous(self, got: Fetched, frontier: int) -> bool:
        """True if ``got`` agrees with the last written chunk, from another checked remote,
        on the records where both overlap below ``frontier``; raise if it disagrees."""
        previous = self._previous
        if previous is None or previous.remote == got.remote:
            return False
        if previous.remote not in self.checked or previous.remote in self.dropped:
            return False
        low = max(got.first_offset, previous.low)
        high = min(frontier, previous.high, got.covered_end)
        if high <= low:
            return False
        ours = record_digests(got.batches, low, high)
        theirs = {o: d for o, d in previous.digests.items() if low <= o < high}
        differing = sorted(o for o in ours.keys() & theirs.keys() if ours[o] != theirs[o])
        if differing:
            winner, loser = sorted((got.remote, previous.remote), key=lambda n: self.health[n].rank)
            self._drop(loser, f"records differ from remote {winner}'s at offset {differing[0]}")
            if loser == got.remote:
                raise SourceDropped(loser)
            return False
        return bool(ours.keys() & theirs.keys())

    def _reference(self, remote: str, offset: int) -> str | None:
        now = time.monotonic()
        others = [
            name
            for name, e in self.ends.items()
            if name != remote
            and name not in self.dropped
            and e.start <= offset < e.end
            and self.health[name].healthy(now)
        ]
        if not others:
            return None
        return min(others, key=lambda n: (n not in self.checked, self.health[n].rank))

    async def _against_remote(self, got: Fetched, reference: str, low: int, high: int) -> None:
        fetched = await asyncio.wait_for(
            self.fetchers[reference].fetch(self.tp, low, SAMPLE_BYTES), LOOKUP_TIMEOUT_S
        )
        theirs = record_digests(split_batches(fetched.records), low, high)
        ours = record_digests(got.batches, low, high)
        differing = sorted(o for o in ours.keys() & theirs.keys() if ours[o] != theirs[o])
        if not differing:
            self.checked.add(reference)
            return
        loser, winner = sorted((got.remote, reference), key=lambda n: self.health[n].rank)[::-1]
        self._drop(loser, f"records differ from remote {winner}'s at offset {differing[0]}")
        if loser == got.remote:
            raise SourceDropped(loser)

    async def _against_local(self, remote: str, offset: int) -> None:
        fetched = await asyncio.wait_for(
            self.fetchers[remote].fetch(self.tp, offset, SAMPLE_BYTES), LOOKUP_TIMEOUT_S
        )
        theirs = record_digests(split_batches(fetched.records), offset, offset + 1)
        node = await self.local.leader_for(self.tp)
        local = await self.local.fetch(
            node, {self.tp: offset}, max_wait_ms=0, max_bytes=1 << 20, partition_max_bytes=1 << 20
        )
        ours = _record_at(split_batches(local[self.tp].records), offset)
        if ours is None or is_filler(ours.key, ours.headers):
            return  # a filler: syncer wrote it in a hole of the source, nothing to compare
        if offset in theirs and theirs[offset] != record_digest(ours):
            raise PartitionHalted(
                f"{self.tp.topic}[{self.tp.partition}]: the local record at offset {offset}"
                f" differs from remote {remote}'s: a foreign producer wrote into the local"
                " partition, or the remote holds other data than what was copied before (its"
                " topic deleted and recreated, or the cluster restored from elsewhere?)"
            )

    def _drop(self, remote: str, reason: str) -> None:
        self.dropped[remote] = reason
        log.error(
            "%s[%d]: remote %s dropped as a source: %s",
            self.tp.topic,
            self.tp.partition,
            remote,
            reason,
        )


def _record_at(batches: list[Batch], offset: int) -> Record | None:
    for batch in batches:
        if batch.base_offset <= offset <= batch.last_offset and not batch.is_control:
            return next((r for r in decode(batch) if r.offset == offset), None)
    return None
