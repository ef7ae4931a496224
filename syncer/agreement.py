"""Sources agree (invariant 5). The local log is the reference: a remote's records are written
only after its records just below the frontier are shown equal to what is there. Which
comparison a chunk needs is decided by ``proof_needed``:

- the remote that served the chunk written last, not failed since: its next records continue
  the same log, nothing to compare (one remote copying alone costs nothing);
- another remote: its records below the frontier are compared with the digests kept of the
  chunk written last (the chunk's answer holds the records below its start: its fetch starts
  one offset below, ``Chunk.lead``, or inside a batch), so two remotes that diverge never
  interleave;
- otherwise (a start, a remote that failed fetches, a local end that moved): the nearest real
  record of the local log below the frontier (a filler, such as a transaction marker's, is
  not one), read back.

A remote that disagrees is dropped for the partition and reported, and its fetched chunks are
thrown away; only when every remote is dropped does the partition halt (which side is wrong
cannot be told then). Where there is nothing to compare with (an empty local partition), and
every ``SAMPLE_EVERY`` chunks of one remote, records above the frontier are compared with
another remote's: the one listed later in the configuration is dropped."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import partial

from syncer.batches import Batch, record_digests
from syncer.chunks import Fetched
from syncer.clusters import TP, Cluster
from syncer.errors import PartitionHalted, SyncerError, TransientClusterError
from syncer.landed import (
    Divergence,
    Shrunk,
    confirm_shrink,
    real_digests,
    records_of,
    where_replaced,
    why_halted,
)
from syncer.lanes import Lanes
from syncer.partition import PartitionSources
from syncer.retry import retried

log = logging.getLogger(__name__)

SAMPLE_RECORDS = 256
SAMPLE_BYTES = 65536  # the comparison asks for this much (the broker sends whole batches)
BELOW_BYTES = 1  # below the frontier, the batch holding the record compared is enough
SAMPLE_EVERY = 32
TAIL_BATCHES = 2  # of a written chunk, kept (as digests) to compare with the next chunk
LOOKUP_TIMEOUT_S = 15.0
# how far below the frontier the nearest real local record is looked for first: past
# fillers (transaction markers, aborted data, compaction's holes); then in windows this many
# times as wide, down to the log's start
LOCAL_WINDOWS = (1, 16, 256, 4096)
LOCAL_WIDENING = 16
LOCAL_READ_BYTES = 1 << 20
# where a remote holds none of the local records compared, how many times the next ones
# further down are compared instead
DEEPER_LOOKS = 8
# a transaction marker's digest in a comparison: no record's (those are 16 bytes)
MARKER = b"marker"


class Proof(StrEnum):
    """What a chunk's records are compared with before it is written."""

    CONTINUES = "continues"  # served by the remote that wrote the records below: nothing
    WRITTEN = "written"  # the digests kept of the records written last
    LOCAL = "local"  # the local log, read back


@dataclass(frozen=True, slots=True)
class Written:
    """The chunk written last: its remote, the offsets it covered (``low`` to ``high``) and
    the digests of its last records (none with a single remote: nobody to compare)."""

    remote: str
    low: int
    high: int
    digests: Mapping[int, bytes] = field(default_factory=dict)

    def below(self, frontier: int) -> dict[int, bytes]:
        """Digests of the records written just below ``frontier``, if it ends among them."""
        if not self.low < frontier <= self.high:
            return {}
        return {o: d for o, d in self.digests.items() if o < frontier}


def proof_needed(remote: str, frontier: int, last: Written | None, checked: bool) -> Proof:
    """How a chunk of ``remote`` continuing at ``frontier`` is shown to continue the local
    log; ``checked``: the remote agreed with it and has not failed fetches since."""
    if last is not None and last.low <= frontier <= last.high:
        if last.remote == remote and checked:
            return Proof.CONTINUES
        if last.below(frontier):
            return Proof.WRITTEN
    return Proof.LOCAL


@dataclass(frozen=True, slots=True)
class Comparison:
    """Two sources' records on the offsets both hold."""

    compared: int
    differing: tuple[int, ...] = ()

    @property
    def agrees(self) -> bool:
        return self.compared > 0 and not self.differing


def compare(ours: Mapping[int, bytes], theirs: Mapping[int, bytes]) -> Comparison:
    common = ours.keys() & theirs.keys()
    return Comparison(len(common), tuple(sorted(o for o in common if ours[o] != theirs[o])))


def with_markers(
    digests: dict[int, bytes], batches: list[Batch], low: int, high: int
) -> dict[int, bytes]:
    """``digests`` of a remote's records in ``[low, high)``, and ``MARKER`` at each offset a
    transaction marker takes there: no local record (a filler aside, which is never
    compared) stands where its remote holds a marker, so one that does is another log."""
    for batch in batches:
        if batch.is_control:
            for offset in range(max(batch.base_offset, low), min(batch.next_offset, high)):
                digests[offset] = MARKER
    return digests


def chunk_epoch(got: Fetched) -> int:
    """The newest leader epoch among ``got``'s batches; -1 if none tells one."""
    return max((batch.leader_epoch for batch in got.batches), default=-1)


def _windows() -> Iterator[int]:
    """How far below the frontier each look for a local reference reaches."""
    yield from LOCAL_WINDOWS
    window = LOCAL_WINDOWS[-1]
    while True:
        window *= LOCAL_WIDENING
        yield window


class SourceDropped(Exception):
    """The remote that served a chunk was dropped for this partition."""


class CheckFailed(Exception):
    """A remote needed for the comparison did not answer; try the chunk again later."""


class Agreement:
    """Per partition: the remotes checked so far and what was written last; a remote that
    disagrees is dropped through the partition's ``PartitionSources``."""

    def __init__(
        self,
        tp: TP,
        local: Cluster,
        fetchers: Mapping[str, Lanes],
        sources: PartitionSources,
        writer_id: int | None = None,
    ) -> None:
        self.tp = tp
        self.writer_id = writer_id  # the producer id this deployment writes with
        self._local_writers: dict[int, int] = {}  # offset → producer id, of the local records
        self.local = local
        self.fetchers = fetchers
        self.sources = sources
        self.checked: set[str] = set()
        self.last: Written | None = None
        self._passed: Fetched | None = None  # the chunk ``check`` let through last
        self._chunks: dict[str, int] = {}
        self._failures: dict[str, int] = {}  # each remote's failed fetches when last checked
        # remote → (the leader epoch of the last batch written from it, the offset written
        # up to): a chunk of another epoch is checked against where that epoch ends now
        self._epochs: dict[str, tuple[int, int]] = {}

    def __repr__(self) -> str:
        last = "-" if self.last is None else f"{self.last.remote} to {self.last.high}"
        return (
            f"<Agreement {self.tp.topic}[{self.tp.partition}] [checked: {sorted(self.checked)},"
            f" dropped: {sorted(self.sources.dropped)}, written last: {last}]>"
        )

    @property
    def where(self) -> str:
        return f"{self.tp.topic}[{self.tp.partition}]"

    async def check(self, got: Fetched, frontier: int) -> None:
        """Raise ``SourceDropped`` if ``got``'s remote must not be written from,
        ``PartitionHalted`` if no remote is left, ``CheckFailed`` if a remote needed to
        tell did not answer."""
        if self.check_now(got, frontier):
            return
        remote = got.remote
        self._still_used(remote)
        self._note_failures(remote)
        self._passed = None
        if got.covered_end <= frontier:
            return  # nothing in it to write
        await self._check_epoch(got)
        seen = self._chunks.get(remote, 0)
        self._chunks[remote] = seen + 1
        proof = proof_needed(remote, frontier, self.last, remote in self.checked)
        if proof is Proof.CONTINUES:
            if seen % SAMPLE_EVERY == 0:
                await self._against_remotes(got, frontier)
                self._still_used(remote)
            self._passed = got
            return
        told = proof is Proof.WRITTEN and await self._against_written(got, frontier)
        if not told and not await self._against_local(got, frontier):
            await self._against_remotes(got, frontier)  # nothing below to compare with
        self._still_used(remote)  # dropped while compared (``drop_for_topic``, from outside)
        self.checked.add(remote)
        self._failures[remote] = self.sources.health(remote).errors
        self._passed = got

    def _still_used(self, remote: str) -> None:
        if remote in self.sources.dropped:
            raise SourceDropped(f"remote {remote} was dropped: {self.sources.dropped[remote]}")

    def check_now(self, got: Fetched, frontier: int) -> bool:
        """``check`` where it reads nothing: True once ``got`` passed; False if it needs a
        comparison or its remote was dropped or failed since it was checked (nothing is
        changed then: ``check`` decides)."""
        remote = got.remote
        failures = self.sources.health(remote).errors
        if remote in self.sources.dropped or self._failures.get(remote) != failures:
            return False
        if got.covered_end <= frontier:
            self._passed = None
            return True  # nothing in it to write
        if self._epoch_moved(got):
            return False
        if proof_needed(remote, frontier, self.last, remote in self.checked) is not Proof.CONTINUES:
            return False
        seen = self._chunks.get(remote, 0)
        if seen % SAMPLE_EVERY == 0 and self._sample(got, frontier) is not None:
            return False
        self._chunks[remote] = seen + 1
        self._passed = got
        return True

    def written(self, got: Fetched) -> None:
        """The chunk just written. Only the digests of its last batches are kept, not the
        chunk; with a single remote, none (nobody else to compare them with)."""
        if got is not self._passed or not got.batches:
            return  # nothing of it written: the records below the frontier are the last's
        if (epoch := chunk_epoch(got)) >= 0:
            self._epochs[got.remote] = (epoch, got.covered_end)
        digests: dict[int, bytes] = {}
        if len(self.fetchers) > 1:
            tail = got.batches[-TAIL_BATCHES:]
            digests = record_digests(tail, tail[0].base_offset, got.covered_end)
        self.last = Written(got.remote, got.first_offset, got.covered_end, digests)

    def local_checked(self) -> None:
        """The local log grew past what our answers confirmed (writes whose answers were
        lost) and was found to hold the reference remote's records there. What ``written``
        noted last may not be what landed: a write sent again from another remote is
        answered as a duplicate of the first (the broker matches sequences, not records),
        whichever remote's records that one held. So the next chunk, of any remote, is
        compared with the local log, and a remote with another history there is dropped
        rather than continued unchecked."""
        self.last = None

    def drop(self, remote: str, reason: str) -> None:
        """Drop ``remote`` for a difference found outside a chunk's check (what landed from
        writes whose answers were lost, ``PartitionCopier._check_landed``); halt if it was
        the last one left."""
        self._drop_or_halt(remote, reason, f"remote {remote}'s {reason}")

    def drop_for_topic(self, remote: str, reason: str) -> None:
        """Drop ``remote``: its topic there is gone or another log now, while another remote
        holds the one copied (``topic_ids.judged``); told from outside the copier's task,
        between its steps (what it fetched is thrown away at the next). Raises
        PartitionHalted if no remote is left."""
        self._drop(remote, reason, logging.DEBUG)  # logged once for the topic
        if self.sources.every_dropped():
            others = "; ".join(f"{n}: {r}" for n, r in self.sources.dropped.items() if n != remote)
            left = "no other remote serves it"
            if others:
                left = f"every other remote was dropped too ({others})"
            raise PartitionHalted(f"{self.where}: {reason}; {left}")

    def _epoch_moved(self, got: Fetched) -> bool:
        """Do ``got``'s batches carry another leader epoch than the last ones written from
        its remote (``_check_epoch`` then asks where that one ends)?"""
        known = self._epochs.get(got.remote)
        return known is not None and chunk_epoch(got) > known[0]

    async def _check_epoch(self, got: Fetched) -> None:
        """A remote whose leader changed since records were last written from it: its log
        must still hold the epoch of those records up to where they were written (Kafka's
        own consumers check so after a leader change, KIP-320). A leader elected uncleanly
        starts its epoch at its own log end, below records the lost leader had served:
        chunks fetched before the change and chunks of the new leader after it otherwise
        each passed as continuing the log, two histories spliced with no comparison seeing
        it (a review of the agreement, 2026-12-07). The remote is dropped (the partition
        halts if it was the last one) if the epoch ends below them."""
        remote = got.remote
        if not self._epoch_moved(got):
            return
        epoch, written_to = self._epochs[remote]
        source = self.fetchers[remote].lanes[0].cluster
        where = f"{self.where}: where remote {remote}'s leader epoch {epoch} ends"
        asked = partial(source.epoch_end, self.tp, epoch)  # a leader that moved: asked again
        try:
            found, end = await asyncio.wait_for(
                retried(asked, what=where, give_up_after_s=LOOKUP_TIMEOUT_S), LOOKUP_TIMEOUT_S
            )
        except (SyncerError, TimeoutError, OSError) as exc:
            self.sources.health(remote).failed(time.monotonic(), f"{type(exc).__name__}: {exc}")
            raise CheckFailed(f"{where}: {exc}") from exc
        if found == epoch and end >= written_to:
            return  # it holds them still (``written`` notes the new epoch)
        if found < 0 and end < 0:  # no epochs kept (Kafka 2.8, message format before 0.11)
            log.info("%s: it keeps no leader epochs: compared with the local log", where)
            self.checked.discard(remote)  # the record below the frontier is compared
            self.last = None
            self._epochs.pop(remote, None)
            return
        at = min(end, written_to) if end >= 0 else 0
        held = f"ends at offset {end}" if found == epoch else "is not in its log"
        reason = (
            f"its leader epoch {epoch}, of the records copied from it up to offset"
            f" {written_to}, {held}: its log no longer holds them (an unclean leader"
            " election there)"
        )
        divergence = Divergence(  # where its epoch ends, its records are another epoch's
            self.where, remote, at, written_to, copied_from=remote, first=at, exact=found == epoch
        )
        self._disagrees(remote, reason, divergence)

    def _note_failures(self, remote: str) -> None:
        """A remote that failed fetches since it was checked may be back with other data (a
        topic deleted and recreated, a cluster restored): compare it again before writing
        from it rather than splice another log onto what was copied."""
        failures = self.sources.health(remote).errors
        if self._failures.setdefault(remote, failures) != failures:
            self._failures[remote] = failures
            self.checked.discard(remote)

    async def _against_written(self, got: Fetched, frontier: int) -> bool:
        """Compare with the records written last, below ``frontier``: from the chunk where it
        overlaps them, else from a small fetch. False if nothing could be compared."""
        assert self.last is not None
        ours = self.last.below(frontier)
        theirs = record_digests(got.batches, min(ours), frontier)
        result = compare(ours, theirs)
        if not result.compared:
            nearest = max(ours)
            theirs = await self._remote_digests(got.remote, nearest, frontier)
            result = compare(ours, theirs)
        if result.differing:
            at = result.differing[-1]
            self._disagrees(
                got.remote,
                f"records differ from those written from remote {self.last.remote} at offset {at}",
                self._divergence(got.remote, at, frontier, self.last.remote),
            )
        return result.agrees

    async def _against_local(self, got: Fetched, frontier: int) -> bool:
        """Compare with the nearest real records of the local log below ``frontier``. False
        if there are none (an empty partition) or the remote holds none of them."""
        ours = await self._local_reference(frontier)
        if not ours:
            return False
        ours, result = await self._compared_below(got.remote, ours, frontier)
        if result.differing:
            at = result.differing[-1]
            source = self.fetchers[got.remote].lanes[0].cluster
            start = self.sources.ends[got.remote].start
            first, exact = await where_replaced(self.local, source, self.tp, start, at)
            self._disagrees(
                got.remote,
                f"records differ from the local log's at offset {at}",
                replace(self._divergence(got.remote, at, frontier), first=first, exact=exact),
            )
        if not result.compared:
            log.warning(
                "%s: remote %s holds none of the local records %d..%d to compare with",
                self.where,
                got.remote,
                min(ours),
                max(ours),
            )
        return result.agrees

    async def _compared_below(
        self, remote: str, ours: dict[int, bytes], frontier: int
    ) -> tuple[dict[int, bytes], Comparison]:
        """``remote``'s records compared with ``ours``, the local log's nearest real records
        below ``frontier``; where it holds none of them (compacted away there, or below its
        start), with the local log's next real records further down, until it holds one of
        them, or nothing lower (its start, the local log's) is left to compare: a comparison
        of nothing proves nothing, and counted as agreeing it let a recreated remote's new
        log through onto the old one. The local records compared last, and the result."""
        theirs = await self._remote_digests(remote, min(ours), frontier)
        result = compare(ours, theirs)
        for _ in range(DEEPER_LOOKS):
            below = min(ours)
            ends = self.sources.ends.get(remote)
            if result.compared or (ends is not None and below <= ends.start):
                break
            deeper = await self._local_reference(below)
            if not deeper:
                break
            ours = deeper
            theirs = await self._remote_digests(remote, min(ours), below, LOCAL_READ_BYTES)
            result = compare(ours, theirs)
        return ours, result

    async def check_ends(self, copied_end: int) -> None:
        """Drop each remote whose log lost records copied from it (``PartitionSources.
        shrunk``: an out-of-range answer, or an end below them for the grace), once a
        listing of its ends confirms it; ``PartitionHalted`` if none is left. Nothing of its
        new history is written on top of what was copied; one merely seen below them has
        its next records compared with the local log (a new history may pass them soon)."""
        self.ends_hold(copied_end)
        for remote in self.sources.shrunk(copied_end, time.monotonic()):
            source = self.fetchers[remote].lanes[0].cluster
            held = self.sources.held(remote, copied_end)
            ends, found = await confirm_shrink(
                self.local, source, self.tp, self.where, remote, held
            )
            # an end back at ``held``: a high watermark that caught up, or a start moved past
            # the frontier (then ``stuck`` halts: the records are gone at the source)
            self.sources.update_end(remote, ends)
            if found is not None:
                self._drop_or_halt(remote, f"its log ends at {ends.end}, below {held}", found)

    def ends_hold(self, copied_end: int) -> bool:
        """``check_ends`` where it lists nothing: each remote seen below what was copied from
        it is compared again before it is written from; False if one lost records copied
        from it (then ``check_ends`` lists its ends)."""
        for remote, ends in self.sources.usable().items():
            if ends.end < self.sources.held(remote, copied_end):
                self.checked.discard(remote)
        return not self.sources.shrunk(copied_end, time.monotonic())

    async def holds_real_records_below(self, frontier: int) -> bool:
        """Does the local log hold a record below ``frontier`` that is not a filler?"""
        return bool(await self._local_reference(frontier))

    async def _local_reference(self, frontier: int) -> dict[int, bytes]:
        """Digests of the real records (not fillers) nearest below ``frontier``, looked for in
        windows ever wider down to the log's start; empty only if the local log holds none
        below it. Past the first windows lie a long run of fillers (an aborted transaction
        of thousands of records) or writes still in flight above the high watermark:
        stopping there, a remote with another history was let through unchecked."""
        try:
            start, _end = (await self.local.ends([self.tp]))[self.tp]
            high = frontier  # what lies above was read, and held no real record
            for window in _windows():
                low = max(start, frontier - window)
                if low >= high:
                    return {}
                batches = await self._read_local(low, high)
                found = real_digests(batches, low, high)
                self._local_writers = {
                    o: b.producer_id
                    for b in batches
                    for o in found
                    if b.base_offset <= o < b.next_offset
                }
                if found or low == start:
                    return found
                high = low
        except (TimeoutError, OSError) as exc:
            raise TransientClusterError(f"{self.where}: reading the local log: {exc}") from exc
        return {}  # not reached: the windows end at the log's start

    async def _read_local(self, low: int, high: int) -> list[Batch]:
        node = await self.local.leader_for(self.tp)
        batches: list[Batch] = []
        offset = low
        while offset < high:
            answer = await asyncio.wait_for(
                self.local.fetch(
                    node,
                    {self.tp: offset},
                    max_wait_ms=0,
                    max_bytes=LOCAL_READ_BYTES,
                    partition_max_bytes=LOCAL_READ_BYTES,
                ),
                LOOKUP_TIMEOUT_S,
            )
            got = records_of(answer[self.tp], f"{self.where}: reading the local log at {offset}")
            fresh = [b for b in got if b.next_offset > offset and b.base_offset < high]
            if not fresh:
                break  # the local end (writes still in flight are not there yet)
            batches += fresh
            offset = fresh[-1].next_offset
        return [b for b in batches if b.next_offset > low]

    async def _remote_digests(
        self, remote: str, low: int, high: int, max_bytes: int = BELOW_BYTES
    ) -> dict[int, bytes]:
        """Digests of ``remote``'s records in ``[low, high)``, read in a fetch of this
        partition alone: a broker sends a batch over a partition's limit only for the first
        partition of an answer that has records (KIP-74), so in a request shared with other
        partitions the answer could be a cut slice, taken for "nothing to compare"."""
        ends = self.sources.ends
        low = max(low, ends[remote].start) if remote in ends else low
        where = f"{self.where}: comparing remote {remote} at {low}"
        source = self.fetchers[remote].lanes[0].cluster
        try:
            node = await source.leader_for(self.tp)
            fetched = await asyncio.wait_for(
                source.fetch(
                    node,
                    {self.tp: low},
                    max_wait_ms=0,
                    max_bytes=max_bytes,
                    partition_max_bytes=max_bytes,
                ),
                LOOKUP_TIMEOUT_S,
            )
            answer = fetched[self.tp]
            batches = records_of(answer, where)
            end = answer.stable_end
            if low < end and not any(b.next_offset > low for b in batches):
                raise TransientClusterError(f"{where}: no records below its end {end}")
        except (TransientClusterError, TimeoutError, OSError) as exc:
            self.sources.health(remote).failed(time.monotonic(), f"{type(exc).__name__}: {exc}")
            raise CheckFailed(f"comparing {remote}'s records at {low}: {exc}") from exc
        return with_markers(record_digests(batches, low, high), batches, low, high)

    def _sample(self, got: Fetched, frontier: int) -> tuple[str, int, int] | None:
        """The remote to compare ``got``'s records above ``frontier`` with, and the offsets
        (``low`` to ``high``); None if no other remote holds them."""
        low, high = frontier, min(got.covered_end, frontier + SAMPLE_RECORDS)
        reference = self._reference(got.remote, low)
        if reference is None or high <= low:
            return None
        return reference, low, high

    async def _against_remotes(self, got: Fetched, frontier: int) -> None:
        """Above the frontier there is no local record to compare with: compare with another
        remote that holds the offsets, and drop the one listed later if they differ."""
        sample = self._sample(got, frontier)
        if sample is None:
            return
        reference, low, high = sample
        theirs = await self._remote_digests(reference, low, high, SAMPLE_BYTES)
        result = compare(record_digests(got.batches, low, high), theirs)
        if result.agrees:
            self.checked.add(reference)
        if not result.differing:
            return
        ranked = sorted((got.remote, reference), key=lambda n: self.sources.health(n).rank)
        loser, winner = ranked[::-1]
        reason = f"records differ from remote {winner}'s at offset {result.differing[0]}"
        if loser == got.remote:
            self._disagrees(loser, reason, f"remote {loser}'s {reason}")
        self._drop(loser, reason)

    def _reference(self, remote: str, offset: int) -> str | None:
        now, health = time.monotonic(), self.sources.health
        others = [
            name
            for name, e in self.sources.usable().items()
            if name != remote and e.start <= offset < e.end and health(name).healthy(now)
        ]
        if not others:
            return None
        return min(others, key=lambda n: (n not in self.checked, health(n).rank))

    def _divergence(
        self, remote: str, at: int, frontier: int, copied_from: str | None = None
    ) -> Divergence:
        """What is known of ``remote``'s record at ``at`` differing from the local one."""
        ends = self.sources.ends.get(remote)
        return Divergence(
            self.where,
            remote,
            at,
            frontier,
            remote_end=None if ends is None else ends.end,
            copied_from=copied_from,
            local_writer=None if copied_from else self._local_writers.get(at),
            our_writer=self.writer_id,
        )

    def _disagrees(self, remote: str, reason: str, halt: str | Divergence) -> None:
        """Drop ``remote``; halt the partition if it was the last one left, saying which
        log changed where that is known (``Divergence``)."""
        self._drop_or_halt(remote, reason, halt)
        raise SourceDropped(f"remote {remote} dropped: {reason}")

    def _drop_or_halt(self, remote: str, reason: str, halt: str | Divergence | Shrunk) -> None:
        self._drop(remote, reason)
        if self.sources.every_dropped():
            others = "; ".join(f"{n}: {r}" for n, r in self.sources.dropped.items() if n != remote)
            why = why_halted(self.where, halt)
            raise PartitionHalted(
                why + (f"; every other remote was dropped too ({others})" if others else "")
            )

    def _drop(self, remote: str, reason: str, level: int = logging.ERROR) -> None:
        self.sources.drop(remote, reason)
        self.checked.discard(remote)
        log.log(level, "%s: remote %s dropped as a source: %s", self.where, remote, reason)
