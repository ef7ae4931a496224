"""Pure decisions over values: which remote serves a partition, what in a fetched run of
batches may be written, and where the first hole is. No I/O here; unit-tested with plain values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from syncer.batches import Batch


class RemoteEnds(NamedTuple):
    """What a remote holds of one partition: ``[start, end)``; ``end`` is the last stable
    offset (the high watermark when no transaction is open)."""

    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Choice:
    """The plan for one partition: copy ``[local_end, target)`` from ``remote``."""

    remote: str | None
    local_end: int
    target: int
    lost_below: int | None = None  # a remote start above local_end: data lost at the source

    @property
    def gap(self) -> int:
        return max(0, self.target - self.local_end)


def choose_remote(local_end: int, remotes: Mapping[str, RemoteEnds]) -> Choice:
    """Pick the remote furthest ahead of ``local_end`` that still holds ``local_end``.

    Ties go to the first remote in configuration order. If every remote that is ahead starts
    above ``local_end``, the records in between are gone at the source: say so, never skip."""
    ahead = {name: ends for name, ends in remotes.items() if ends.end > local_end}
    target = max((ends.end for ends in remotes.values()), default=local_end)
    if not ahead:
        return Choice(None, local_end, max(target, local_end))
    holding = {name: e for name, e in ahead.items() if e.start <= local_end}
    if not holding:
        lowest_start = min(e.start for e in ahead.values())
        return Choice(None, local_end, target, lost_below=lowest_start)
    best = max(holding, key=lambda name: holding[name].end)
    return Choice(best, local_end, holding[best].end)


class HoleKind(Enum):
    MISSING_OFFSETS = "offsets missing at the source (compaction or deleted records)"
    COMPACTED_BATCH = "batch with compacted-away records"
    CONTROL_BATCH = "transaction marker"
    ABORTED_DATA = "aborted transactional data"


# the value of a filler's header: why the offset holds no record of the source
FILLER_REASONS = {
    HoleKind.MISSING_OFFSETS: "missing",
    HoleKind.COMPACTED_BATCH: "compacted",
    HoleKind.CONTROL_BATCH: "marker",
    HoleKind.ABORTED_DATA: "aborted",
}


@dataclass(frozen=True, slots=True)
class Hole:
    offset: int
    kind: HoleKind

    def describe(self) -> str:
        return f"hole at offset {self.offset}: {self.kind.value}"


@dataclass(frozen=True, slots=True)
class Filler:
    """Offsets ``[base_offset, next_offset)`` of a hole, written as filler records so that
    later offsets stay aligned (policy ``fill``). ``around``: a compacted batch whose records
    keep their offsets, with fillers in its gaps."""

    base_offset: int
    next_offset: int
    timestamp: int
    kind: HoleKind
    around: Batch | None = None


class Scan(NamedTuple):
    """The writable prefix of a fetched run of batches, and the hole that ends it, if any."""

    writable: list[Batch | Filler]
    next_offset: int
    hole: Hole | None = None
    trim_first: int | None = None  # the first writable batch starts before: keep from here


def aborted_batches(batches: Sequence[Batch], aborted: Iterable[tuple[int, int]]) -> set[int]:
    """Base offsets of the batches that are aborted transactional data, as a read_committed
    consumer tells: a producer is aborting from the first offset of an aborted transaction
    (the fetch response lists those overlapping the fetched range) until its next
    transaction marker."""
    pending = sorted(aborted, key=lambda a: a[1])
    aborting: set[int] = set()
    out = set()
    for batch in batches:
        while pending and pending[0][1] <= batch.last_offset:
            aborting.add(pending.pop(0)[0])
        if batch.is_control:
            aborting.discard(batch.producer_id)  # the marker ends its transaction
        elif batch.is_transactional and batch.producer_id in aborting:
            out.add(batch.base_offset)
    return out


def scan(
    batches: Sequence[Batch],
    expected: int,
    *,
    limit: int,
    aborted: Iterable[tuple[int, int]] = (),
    fill: bool = False,
) -> Scan:
    """Walk ``batches`` from offset ``expected`` and keep those that can be written as they
    are, stopping before ``limit`` (the source's stable end) or at the first hole; with
    ``fill``, a hole becomes a ``Filler`` over its offsets and the walk goes on."""
    aborted_at = aborted_batches(batches, aborted)
    writable: list[Batch | Filler] = []
    trim_first = None
    for batch in batches:
        aborted_data = batch.base_offset in aborted_at
        if batch.last_offset < expected:
            continue  # the broker may return a batch that ends before the fetch offset
        if batch.base_offset >= limit:
            break
        hole = _hole_in(batch, expected, aborted_data)
        if hole is not None and not fill:
            return Scan(writable, expected, hole, trim_first)
        if hole is not None and hole.kind is HoleKind.MISSING_OFFSETS:
            writable.append(Filler(expected, batch.base_offset, batch.max_timestamp, hole.kind))
            expected = batch.base_offset
            hole = _hole_in(batch, expected, aborted_data)
        if hole is not None:
            around = batch if hole.kind is HoleKind.COMPACTED_BATCH else None
            first = max(batch.base_offset, expected)
            writable.append(
                Filler(first, batch.next_offset, batch.max_timestamp, hole.kind, around)
            )
        else:
            if batch.base_offset < expected:
                trim_first = expected  # only the first can straddle: the rest start at `expected`
            writable.append(batch)
        expected = batch.next_offset
    return Scan(writable, expected, None, trim_first)


def _hole_in(batch: Batch, expected: int, aborted: bool) -> Hole | None:
    if batch.base_offset > expected:
        return Hole(expected, HoleKind.MISSING_OFFSETS)
    if batch.is_control:
        return Hole(batch.base_offset, HoleKind.CONTROL_BATCH)
    if aborted:
        return Hole(batch.base_offset, HoleKind.ABORTED_DATA)
    if not batch.is_dense:
        return Hole(max(batch.base_offset, expected), HoleKind.COMPACTED_BATCH)
    return None
