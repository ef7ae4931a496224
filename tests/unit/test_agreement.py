"""The comparison of a remote with the local log just below the local end, with stand-ins
for both clusters: a different record halts the partition; a filler syncer wrote where the
source holds aborted data is not evidence of anything; a remote that failed fetches since it
was checked is compared again before its records are written."""

from __future__ import annotations

from typing import Any

import pytest

from syncer.agreement import Agreement
from syncer.batches import filler_batches, split_batches
from syncer.chunks import Chunk, Fetched
from syncer.clusters import TP, FetchedPartition
from syncer.errors import PartitionHalted
from syncer.planner import RemoteEnds
from syncer.sources import SourceHealth
from tests.unit.test_batches import build

TPX = TP("t", 0)


def answer(raw: bytes, end: int = 100) -> FetchedPartition:
    return FetchedPartition(0, end, end, 0, (), raw)


class Side:
    """A cluster (or a remote's lanes) holding ``raw`` batches; counts its fetches."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.fetches = 0

    async def fetch(self, *args: Any, **kwargs: Any) -> Any:
        self.fetches += 1
        if args and isinstance(args[0], int):  # Cluster.fetch(node, wants, ...)
            return {TPX: answer(self.raw)}
        return answer(self.raw)  # Lanes.fetch(tp, offset, max_bytes)

    async def leader_for(self, tp: TP) -> int:
        return 1


def agreement(local: bytes, remote: bytes) -> tuple[Agreement, Side, SourceHealth]:
    health = SourceHealth("east", 0)
    source = Side(remote)
    check = Agreement(
        TPX,
        Side(local),  # type: ignore[arg-type]
        {"east": source},  # type: ignore[dict-item]
        {"east": health},
        {"east": RemoteEnds(0, 100)},
        {},
    )
    return check, source, health


def chunk_at(offset: int) -> Fetched:
    raw = build(offset, [(b"k", b"next")])
    return Fetched(Chunk(offset, None, "east"), answer(raw), split_batches(raw), offset + 1, offset)


def stamped(base: int, raw: bytes) -> bytes:
    return base.to_bytes(8, "big") + raw[8:]


async def test_a_different_record_below_the_local_end_halts() -> None:
    check, _source, _health = agreement(build(9, [(b"k", b"ours")]), build(9, [(b"k", b"theirs")]))
    with pytest.raises(PartitionHalted, match="the local record at offset 9 differs"):
        await check.check(chunk_at(10), 10)


async def test_a_local_filler_where_the_source_holds_aborted_data_is_no_divergence() -> None:
    ((base, _end, raw),) = filler_batches(9, 10, 1_600_000_000_009, "aborted", 5, 1)
    check, _source, _health = agreement(stamped(base, raw), build(9, [(b"k", b"aborted")]))
    await check.check(chunk_at(10), 10)  # no halt
    assert "east" in check.checked


async def test_a_remote_that_failed_since_it_was_checked_is_compared_again() -> None:
    same = build(9, [(b"k", b"same")])
    check, source, health = agreement(same, same)
    await check.check(chunk_at(10), 10)
    assert source.fetches == 1
    await check.check(chunk_at(10), 10)  # checked: the next chunks are written as they come
    assert source.fetches == 1
    health.failed(0.0, "link cut")  # ... its topic deleted and recreated meanwhile?
    source.raw = build(9, [(b"k", b"another log")])
    with pytest.raises(PartitionHalted, match="deleted and recreated"):
        await check.check(chunk_at(10), 10)
