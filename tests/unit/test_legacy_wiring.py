"""Legacy message sets where a fetch answer is taken in: the chunk plan gets v2 batches at
the legacy offsets, and one that cannot be converted halts the partition with its bytes
given back to the process's budget."""

from __future__ import annotations

import pytest

from syncer.budget import ByteBudget
from syncer.chunk_plan import ChunkPlan
from syncer.clusters import FetchedPartition
from syncer.holes import RemoteEnds
from syncer.legacy import LegacyFormatError
from syncer.sources import SourceHealth
from tests.unit.test_legacy import GZIP, plain, wrapper


def one_chunk_plan(end: int) -> tuple[ChunkPlan, ByteBudget]:
    memory = ByteBudget(1 << 30)
    health = {"east": SourceHealth("east", 0, lanes=1)}
    plan = ChunkPlan(health, {"east": RemoteEnds(0, end)}, {}, lambda _n: 1 << 20, 4, memory)
    (chunk,) = plan.launches(0, end, 0.0)
    assert (chunk.start, chunk.remote) == (0, "east")
    return plan, memory


def test_a_legacy_answer_is_ready_as_v2_batches_at_its_offsets() -> None:
    payload = plain(1, [(0, 5, b"a", b"1"), (1, 6, b"b", b"2")]) + wrapper(
        1, GZIP, [(0, 7, b"c", b"3"), (2, 8, b"d", b"4")], 4
    )
    plan, memory = one_chunk_plan(5)
    (chunk,) = plan.inflight.values()
    got = plan.answered(chunk, FetchedPartition(0, 5, 5, 0, (), payload))
    assert [(b.base_offset, b.next_offset, b.converted_from) for b in got.batches] == [
        (0, 2, 1),
        (2, 5, 1),
    ]
    assert got.covered_end == 5
    taken = plan.take(0)
    assert taken is not None
    taken.ticket.release()
    assert memory.used == 0


def test_a_corrupt_legacy_answer_halts_and_its_bytes_come_back() -> None:
    raw = bytearray(plain(1, [(0, 5, b"a", b"1")]))
    raw[-1] ^= 0x01
    plan, memory = one_chunk_plan(1)
    (chunk,) = plan.inflight.values()
    with pytest.raises(LegacyFormatError, match=r"offset 0 \(magic 1\).*CRC"):
        plan.answered(chunk, FetchedPartition(0, 1, 1, 0, (), bytes(raw)))
    plan.clear()  # what the copier's halt does (ChunkScheduler.close)
    assert memory.used == 0
