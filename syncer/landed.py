"""What landed locally without a clean answer, compared with the source before anything
more is written (invariants 1 and 3): after a write whose outcome is unknown, a refused
sequence, or any resync that finds the local end beyond what was confirmed."""

from __future__ import annotations

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
