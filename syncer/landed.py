"""What landed locally without a clean answer, compared with the source before anything
more is written (invariants 1 and 3): after a write whose outcome is unknown, a refused
sequence, or any resync that finds the local end beyond what was confirmed. And, when a
remote's record below the copied end differs from the local one, which log changed
(``Divergence``): the remote's (truncated or replaced) or the local one (a foreign
producer). And when a remote's log lost records that were copied from it (``Shrunk``): where
it ends now and where its records first differ from the local ones, if they do."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum

from syncer.alignment import Disagreement, compare_landed
from syncer.batches import Batch, decode, is_filler, record_digest, split_batches
from syncer.clusters import TP, Cluster, FetchedPartition
from syncer.errors import TransientClusterError
from syncer.holes import RemoteEnds
from syncer.verify import RangeReader
from syncer.wire import FetchOutcome

log = logging.getLogger(__name__)

# source records read past the compared range, to name where a misplaced record came from
LOOKAHEAD = 256
# how far below a record that differs the first one that differs is looked for (read once,
# when a partition is about to halt)
SEARCH_WINDOW = 4096


async def visible_digests(cluster: Cluster, tp: TP, low: int, high: int) -> dict[int, bytes]:
    """offset → digest of every record a reader sees in ``[low, high)``."""
    reader = RangeReader(cluster, tp)
    return {r.offset: record_digest(r) async for r in reader.records(low, high)}


async def check_landed(
    local: Cluster, source: Cluster, tp: TP, low: int, high: int
) -> Disagreement | None:
    """The first offset in ``[low, high)`` where the local log differs from ``source``."""
    ours = await visible_digests(local, tp, low, high)
    theirs = await visible_digests(source, tp, low, high + LOOKAHEAD)
    return compare_landed(ours, theirs, low, high)


def records_of(answer: FetchedPartition, context: str) -> list[Batch]:
    """The batches of a fetch answer; a retriable error is raised, any other is no records
    (the comparison then has nothing to tell)."""
    if answer.outcome.retriable:
        raise answer.error(context)
    if answer.outcome is not FetchOutcome.OK:
        return []
    return split_batches(answer.records)


def real_digests(batches: list[Batch], low: int, high: int) -> dict[int, bytes]:
    """Digests of the records in ``[low, high)`` that a source holds too: fillers and
    markers are not among them."""
    return {
        r.offset: record_digest(r)
        for batch in batches
        if not batch.is_control
        for r in decode(batch)
        if low <= r.offset < high and not is_filler(r.key, r.headers)
    }


def first_difference(
    ours: Mapping[int, bytes], theirs: Mapping[int, bytes], low: int
) -> tuple[int | None, bool]:
    """The lowest offset both hold where the records differ, and whether it is surely the
    first: a record below it was seen equal, or the comparison began at ``low``, the start
    of both logs. (None, True) if every record both hold is equal."""
    common = sorted(ours.keys() & theirs.keys())
    differing = [o for o in common if ours[o] != theirs[o]]
    if not differing:
        return None, True
    first = differing[0]
    return first, first == low or any(o < first for o in common)


async def search_first_difference(
    local: Cluster, source: Cluster, tp: TP, low: int, high: int
) -> tuple[int | None, bool]:
    """``first_difference`` of the local log and ``source``'s in ``[low, high]``, read from
    at most ``SEARCH_WINDOW`` records below ``high``. ``low``: where both logs start."""
    low = max(low, high - SEARCH_WINDOW)
    ours = await visible_digests(local, tp, low, high + 1)
    theirs = await visible_digests(source, tp, low, high + 1)
    return first_difference(ours, theirs, low)


@dataclass(frozen=True, slots=True)
class Shrunk:
    """Remote ``remote``'s log ends at ``remote_end``, below the ``copied_end`` records copied
    from it; ``differs_at``: the first offset below its end where its record differs from
    the local one (None: what it still holds is what was copied), ``exact`` if surely the
    first."""

    where: str
    remote: str
    remote_end: int
    copied_end: int
    differs_at: int | None = None
    exact: bool = True

    @property
    def offset(self) -> int:
        """The first offset where the remote's log no longer holds what was copied."""
        return self.remote_end if self.differs_at is None else self.differs_at

    def describe(self) -> str:
        at = f"offset {self.offset}" + ("" if self.exact else " or below")
        changed = "truncated" if self.differs_at is None else "truncated and replaced"
        return (
            f"{self.where}: remote {self.remote}'s log ends at {self.remote_end}, below the"
            f" {self.copied_end} copied from it: it no longer matches what was copied"
            f" ({changed} at {at}: an unclean leader election on the remote, or its topic"
            " deleted and recreated); nothing is copied on top of it"
        )


async def confirm_shrink(
    local: Cluster, source: Cluster, tp: TP, where: str, remote: str, held: int
) -> tuple[RemoteEnds, Shrunk | None]:
    """``remote``'s ends (``source``'s, listed: its end is the high watermark, which a leader
    elected cleanly never has below its predecessor's), and what its log lost of the
    ``held`` records copied from it, told where its records first differ from the local ones
    if they do; None if it ends at ``held`` or beyond."""
    try:
        start, _stable = (await source.ends([tp]))[tp]
        end = (await source.latest([tp]))[tp]
    except (TimeoutError, OSError) as exc:
        raise TransientClusterError(f"{where}: listing remote {remote}'s ends: {exc}") from exc
    ends = RemoteEnds(start, end)
    if end >= held:
        return ends, None
    found = Shrunk(where, remote, end, held)
    if end <= start:
        return ends, found  # it holds nothing any more
    first, exact = await search_first_difference(local, source, tp, start, end - 1)
    return ends, found if first is None else replace(found, differs_at=first, exact=exact)


async def where_replaced(
    local: Cluster, source: Cluster, tp: TP, start: int, differs_at: int
) -> tuple[int, bool]:
    """Where ``source``'s records (its log starts at ``start``) first differ from the local
    ones, at or below ``differs_at``, and whether that is surely the first: to name where a
    remote's log was replaced. ``differs_at`` and False if the search fails."""
    try:
        first, exact = await search_first_difference(local, source, tp, start, differs_at)
    except (TransientClusterError, TimeoutError, OSError) as exc:
        log.warning(
            "%s[%d]: looking for the first record that differs: %s", tp.topic, tp.partition, exc
        )
        return differs_at, False
    return (differs_at, False) if first is None else (first, exact)


class Changed(Enum):
    """Which log no longer holds what it held when the record was copied."""

    REMOTE = "remote"  # the remote's: truncated (an unclean leader election) or replaced
    LOCAL = "local"  # the local one: records this deployment did not write
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Divergence:
    """What is known when remote ``remote``'s record at ``offset``, below the copied end
    ``copied_end`` (the local end), differs from the local one there."""

    where: str  # topic[partition]
    remote: str
    offset: int
    copied_end: int
    remote_end: int | None = None  # the remote's end as last seen
    copied_from: str | None = None  # the remote the local record was copied from, if known
    local_writer: int | None = None  # the producer id of the local record's batch, if read
    our_writer: int | None = None  # the producer id this deployment writes with
    first: int | None = None  # where the remote's log first differs, at or below ``offset``
    exact: bool = False  # ``first`` is surely the first (a record below it is equal)

    @property
    def changed(self) -> Changed:
        """The local log changed if its record there was written by another producer; the
        remote's if its record differs from one this deployment copied (from it or another
        remote), or it now ends below what was copied. Else nobody can tell."""
        known = self.local_writer is not None and self.our_writer is not None
        if known and self.local_writer != self.our_writer:
            return Changed.LOCAL
        ours = (known and self.local_writer == self.our_writer) or self.copied_from is not None
        if ours or self._shrunk:
            return Changed.REMOTE
        return Changed.UNKNOWN

    @property
    def _shrunk(self) -> bool:
        return self.remote_end is not None and self.remote_end < self.copied_end

    def describe(self) -> str:
        """Why the partition halts, saying which log changed where that is known."""
        at, changed = self.offset, self.changed
        differs = (
            f"{self.where}: the local record at offset {at} differs from remote {self.remote}'s"
        )
        if changed is Changed.LOCAL:
            return (
                f"{differs}: it was not written by this deployment (producer id"
                f" {self.local_writer}, ours is {self.our_writer}): a foreign producer wrote into"
                " the local partition"
            )
        if changed is Changed.UNKNOWN:
            return (
                f"{differs}: a foreign producer wrote into the local partition, or the remote"
                " holds other data than what was copied before (its topic deleted and"
                " recreated, or the cluster restored from elsewhere?)"
            )
        copied = " (this deployment copied it)"
        if self.copied_from == self.remote:
            copied = " (copied from it)"
        elif self.copied_from is not None:
            copied = f" (copied from remote {self.copied_from})"
        shorter = ""
        if self._shrunk:
            shorter = f"; it ends at {self.remote_end}, below the {self.copied_end} copied"
        replaced = f"offset {at} or below" if self.first is None else f"offset {self.first}"
        if self.first is not None and not self.exact:
            replaced += " or below"
        return (
            f"{differs}{copied}: remote {self.remote}'s log no longer matches what was copied"
            f" (truncated or replaced at {replaced}{shorter}: an unclean leader"
            " election on the remote, or its topic deleted and recreated); nothing is copied"
            " on top of it"
        )


def why_halted(where: str, halt: str | Divergence | Shrunk) -> str:
    """Why a partition halts when the last remote left disagreed with the local log: a
    ``Divergence`` or a ``Shrunk`` says which log changed; a bare reason cannot tell."""
    if not isinstance(halt, str):
        return halt.describe()
    return (
        f"{where}: {halt}: a foreign producer wrote into the local partition, or the remote"
        " holds other data than what was copied before (its topic deleted and recreated, or"
        " the cluster restored from elsewhere?)"
    )
