"""Chunk sizes on plain values: a full chunk's ask fits in one fetch, the ask reaches past the
leading batch, chunks shrink so every lane's requests fit the byte budget, the tail never
cuts below a batch."""

from __future__ import annotations

import pytest

from syncer.budget import ByteBudget
from syncer.chunk_sizes import (
    BUDGETED_PER_LANE,
    LEAD_FLOOR_BATCHES,
    MIN_FITTED_BYTES,
    BatchShape,
    ask_bytes,
    chunk_size,
    fitted_fetch_bytes,
    full_chunk_records,
    learned_shape,
    shaped_ask,
    shaped_chunk_size,
    shaped_full_records,
)
from syncer.sources import MAX_BUSY
from tests.unit.test_chunks import BENCH_BATCHES, launched, scheduler_for

KIB, MIB = 1024, 1024 * 1024


@pytest.mark.parametrize(
    ("fetch", "record", "batch"),
    [(512 * KIB, 1024.0, 65536.0), (512 * KIB, 1075.3, 16384.0), (MIB, 200.0, 1100.0),
     (87381, 1075.0, 65536.0), (4 * MIB, 10_000.0, 10_000.0)],
)  # fmt: skip
def test_a_full_chunk_asks_for_no_more_than_one_fetch_brings(
    fetch: int, record: float, batch: float
) -> None:
    # asked for more, the fetch would stop short of the chunk's end and the rest would be
    # fetched again: a round trip the in-order writes wait for
    records = full_chunk_records(fetch, record, batch)
    assert ask_bytes(records, record, batch) <= fetch
    # and no smaller than need be: one record more would not fit
    assert records == 1 or ask_bytes(records + 2, record, batch) > fetch


def test_the_ask_covers_the_records_and_the_batch_the_answer_starts_with() -> None:
    # the answer starts at the batch holding the chunk's first offset: up to a batch before it
    assert ask_bytes(100, 1000.0, 65536.0) >= 100 * 1000 + 65536
    assert ask_bytes(100, 1000.0, 65536.0) < 100 * 1000 * 1.1 + 65536


def test_a_record_bigger_than_a_fetch_still_makes_a_chunk_of_one() -> None:
    assert full_chunk_records(1000, 5000.0, 5000.0) == 1


def test_many_lanes_cut_chunks_so_every_lane_keeps_its_requests_inside_the_budget() -> None:
    fitted = fitted_fetch_bytes(512 * KIB, 16 * MIB, 64)
    assert fitted == 16 * MIB // (BUDGETED_PER_LANE * 64)
    assert 64 * BUDGETED_PER_LANE * fitted <= 16 * MIB


def test_few_lanes_keep_the_configured_fetch_size() -> None:
    assert fitted_fetch_bytes(512 * KIB, 16 * MIB, 1) == 512 * KIB
    assert fitted_fetch_bytes(512 * KIB, 64 * MIB, 16) == 512 * KIB


def test_a_fitted_chunk_is_never_cut_below_the_floor_nor_raised_above_the_fetch() -> None:
    assert fitted_fetch_bytes(512 * KIB, 16 * MIB, 10_000) == MIN_FITTED_BYTES
    assert fitted_fetch_bytes(16 * KIB, 16 * MIB, 10_000) == 16 * KIB


def test_the_tail_is_never_cut_below_a_batch() -> None:
    full, batch = 480, 60
    sizes, remaining = [], 3 * full
    while remaining:
        sizes.append(chunk_size(remaining, 16, full, batch))
        remaining -= sizes[-1]
    assert min(sizes[:-1]) >= batch  # full // 16 = 30 would be half a batch
    assert sum(sizes) == 3 * full
    assert chunk_size(10, 16, full, batch) == 10  # never more than is left
    assert chunk_size(1000, 16, 40, 60) == 40  # nor more than a full chunk


async def test_a_16_mib_budget_keeps_two_requests_on_each_of_64_lanes() -> None:
    memory = ByteBudget(16 * MIB)
    scheduler = scheduler_for({"east": 64}, memory, BENCH_BATCHES)
    try:
        scheduler.launch(0, 10_000_000)
        chunks = launched(scheduler)
        # full 1 MiB chunks would fill the budget with 16 and leave 48 lanes idle
        assert len(chunks) == MAX_BUSY * 64
        assert memory.used <= memory.limit
    finally:
        await scheduler.close()


# whole batches ---------------------------------------------------------------------------------

SHAPE = BatchShape(64, 66_100)


def test_the_shape_is_the_median_span_and_the_largest_batch_of_it() -> None:
    seen = [(64, 66_000), (64, 66_100), (1, 80), (64, 65_900), (128, 131_000)]
    assert learned_shape(seen) == SHAPE  # the marker and the odd double batch left out
    assert learned_shape([]) is None


def test_a_chunk_of_whole_batches_asks_for_them_and_not_the_next() -> None:
    for batches in (1, 2, 7):
        ask = shaped_ask(batches * 64, SHAPE)
        assert batches * SHAPE.size <= ask < batches * SHAPE.size + SHAPE.size // 10
    # a chunk not a batch's multiple (the gap's last) asks for every batch it touches
    assert shaped_ask(65, SHAPE) >= 2 * SHAPE.size


@pytest.mark.parametrize("fetch", [87_381, 349_525, 512 * KIB, MIB])
def test_a_full_chunk_of_whole_batches_fits_one_fetch(fetch: int) -> None:
    records = shaped_full_records(fetch, SHAPE)
    assert records % SHAPE.records == 0
    assert shaped_ask(records, SHAPE) <= fetch
    assert shaped_ask(records + SHAPE.records, SHAPE) > fetch  # one batch more would not fit


def test_a_fetch_smaller_than_a_batch_still_makes_a_chunk_of_one_batch() -> None:
    assert shaped_full_records(1000, SHAPE) == SHAPE.records


def test_chunks_end_where_a_batch_ends_down_to_the_last() -> None:
    full = shaped_full_records(349_525, SHAPE)
    remaining, sizes = 100_000, []
    while remaining:
        size = shaped_chunk_size(remaining, 16, full, SHAPE)
        sizes.append(size)
        remaining -= size
    assert all(s % SHAPE.records == 0 for s in sizes[:-1])
    assert min(sizes[:-1]) >= SHAPE.records and max(sizes) <= full
    assert sizes[0] == full and sizes[-2] < full  # the tail still shrinks


def cut(remaining: int, full: int, lead: bool) -> list[int]:
    sizes = []
    while remaining:
        sizes.append(shaped_chunk_size(remaining, 3, full, SHAPE, lead))
        remaining -= sizes[-1]
    return sizes


def test_a_chunk_with_a_lead_has_its_floor_of_batches_and_leaves_no_smaller_rest() -> None:
    # 3 remotes, 1 MiB fetches: the tail split went down to one batch, and a one-batch
    # chunk with a lead brought two
    full = shaped_full_records(MIB, SHAPE)
    floor = LEAD_FLOOR_BATCHES * SHAPE.records
    for remaining in (119 * SHAPE.records, 119 * SHAPE.records + 5, 7 * SHAPE.records):
        sizes = cut(remaining, full, lead=True)
        assert sum(sizes) == remaining and max(sizes) <= full
        assert min(sizes) >= floor, sizes
        assert all(s % SHAPE.records == 0 for s in sizes[:-1])
    assert cut(2 * SHAPE.records, full, lead=True) == [2 * SHAPE.records]  # all there is
    # without a lead the tail still goes down to one batch, and leaves no smaller rest
    sizes = cut(119 * SHAPE.records + 5, full, lead=False)
    assert min(sizes[:-1]) == SHAPE.records and sizes[-1] >= SHAPE.records
    # a full chunk below the rest and the floor: never under the floor itself
    b = SHAPE.records
    assert shaped_chunk_size(7 * b, 1, 6 * b, SHAPE, True) == floor
    assert shaped_chunk_size(12 * b, 1, 6 * b, SHAPE, True) == 6 * b
