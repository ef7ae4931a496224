"""Remote choice and hole detection over plain values."""

from __future__ import annotations

import crc32c
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import given
from hypothesis import strategies as st

from syncer.batches import Batch, split_batches
from syncer.holes import HoleKind, RemoteEnds, choose_remote, scan


def batch(
    base: int,
    count: int,
    *,
    delta: int | None = None,
    control: bool = False,
    transactional: bool = False,
    pid: int = 1,
) -> Batch:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=transactional,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(i, timestamp=0, key=b"k", value=b"v", headers=[])
    raw = bytearray(builder.build())
    raw[0:8] = base.to_bytes(8, "big")
    if delta is not None:
        raw[23:27] = delta.to_bytes(4, "big")
    if control:
        raw[22] |= 0x20
    raw[17:21] = crc32c.crc32c(raw[21:]).to_bytes(4, "big")  # as a broker stores it
    (parsed,) = split_batches(bytes(raw))
    return parsed


def test_choose_the_remote_furthest_ahead_that_holds_the_local_end() -> None:
    remotes = {"a": RemoteEnds(0, 100), "b": RemoteEnds(0, 250), "c": RemoteEnds(200, 300)}
    choice = choose_remote(150, remotes)
    assert (choice.remote, choice.target, choice.gap) == ("b", 250, 100)


def test_nothing_to_do_when_no_remote_is_ahead() -> None:
    choice = choose_remote(100, {"a": RemoteEnds(0, 100), "b": RemoteEnds(0, 90)})
    assert choice.remote is None and choice.gap == 0


def test_a_remote_start_beyond_the_local_end_is_reported_as_loss() -> None:
    choice = choose_remote(10, {"a": RemoteEnds(50, 100)})
    assert choice.remote is None and choice.lost_below == 50


def test_scan_keeps_contiguous_batches_up_to_the_limit() -> None:
    batches = [batch(10, 5), batch(15, 5), batch(20, 5)]
    found = scan(batches, 10, limit=20)
    assert [b.base_offset for b in found.writable] == [10, 15]
    assert found.next_offset == 20 and found.hole is None


def test_scan_skips_a_batch_that_ends_before_the_fetch_offset() -> None:
    found = scan([batch(0, 5), batch(5, 5)], 5, limit=100)
    assert [b.base_offset for b in found.writable] == [5]


def test_missing_offsets_are_a_hole() -> None:
    found = scan([batch(0, 5), batch(8, 5)], 0, limit=100)
    assert found.hole is not None and found.hole.offset == 5
    assert found.hole.kind is HoleKind.MISSING_OFFSETS and found.next_offset == 5


def test_control_batch_compacted_batch_and_split_batch_are_holes() -> None:
    assert scan([batch(0, 1, control=True)], 0, limit=9).hole.kind is HoleKind.CONTROL_BATCH  # type: ignore[union-attr]
    assert scan([batch(0, 3, delta=5)], 0, limit=9).hole.kind is HoleKind.COMPACTED_BATCH  # type: ignore[union-attr]


def test_a_batch_straddling_the_local_end_is_written_trimmed() -> None:
    found = scan([batch(0, 5), batch(5, 3)], 2, limit=9)
    assert found.hole is None and found.trim_first == 2 and found.next_offset == 8
    assert [b.base_offset for b in found.writable] == [0, 5]


def test_aborted_transactional_data_is_a_hole_committed_is_not() -> None:
    data = batch(4, 2, transactional=True, pid=9)
    assert scan([data], 4, limit=9, aborted=[(9, 4)]).hole.kind is HoleKind.ABORTED_DATA  # type: ignore[union-attr]
    assert scan([data], 4, limit=9, aborted=[(8, 0)]).hole is None


@given(st.lists(st.integers(1, 20), min_size=1, max_size=30), st.data())
def test_scan_writes_a_contiguous_prefix_and_stops_exactly_at_a_gap(
    sizes: list[int], data: st.DataObject
) -> None:
    offsets, pos = [], 0
    gap_at = data.draw(st.none() | st.integers(0, len(sizes) - 1))
    for i, size in enumerate(sizes):
        if i == gap_at:
            pos += data.draw(st.integers(1, 5))
        offsets.append((pos, size))
        pos += size
    found = scan([batch(b, n) for b, n in offsets], 0, limit=pos)
    expected = 0
    for b in found.writable:
        assert b.base_offset == expected
        expected = b.next_offset
    assert found.next_offset == expected
    if gap_at is None:
        assert found.hole is None and expected == pos
    else:
        assert found.hole is not None and found.hole.offset == expected
