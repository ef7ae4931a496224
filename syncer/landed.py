"""What landed locally without a clean answer, compared with the source before anything
more is written (invariants 1 and 3): after a write whose outcome is unknown, a refused
sequence, or any resync that finds the local end beyond what was confirmed. And, when a
remote's record below the copied end differs from the local one, which log changed
(``Divergence``): the remote's (truncated or replaced) or the local one (a foreign
producer)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from syncer.alignment import Disagreement, compare_landed
from syncer.batches import record_digest
from syncer.clusters import TP, Cluster
from syncer.verify import RangeReader

# source records read past the compared range, to name where a misplaced record came from
LOOKAHEAD = 256


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
        return (
            f"{differs}{copied}: remote {self.remote}'s log no longer matches what was copied"
            f" (truncated or replaced at offset {at} or below{shorter}: an unclean leader"
            " election on the remote, or its topic deleted and recreated); nothing is copied"
            " on top of it"
        )
