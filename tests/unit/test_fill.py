"""Policy fill over plain values: which offsets become fillers, and the filler batches."""

from __future__ import annotations

import itertools

from aiokafka.record.default_records import DefaultRecordBatch
from hypothesis import given
from hypothesis import strategies as st

from syncer.batches import (
    FILLER_BATCH_RECORDS,
    FILLER_HEADER,
    FILLER_KEY,
    Batch,
    fill_around,
    filler_batches,
    is_filler,
    sequence_for,
    split_batches,
)
from syncer.holes import Filler, HoleKind, scan
from tests.unit.test_holes import batch

PID, EPOCH = 77, 3


def spans(items: list[Batch | Filler], first: int) -> list[tuple[int, int, str]]:
    out = []
    for item in items:
        if isinstance(item, Filler):
            out.append((item.base_offset, item.next_offset, item.kind.name))
        else:
            out.append((max(first, item.base_offset), item.next_offset, "copy"))
    return out


def test_fill_covers_every_kind_of_hole_and_goes_on() -> None:
    batches = [
        batch(10, 5),  # 10..14
        batch(18, 2),  # 15..17 missing (compaction removed whole batches)
        batch(20, 1, control=True),  # a transaction marker
        batch(21, 3, transactional=True, pid=9),  # aborted
        batch(24, 2, delta=4),  # compacted: two records left of 24..28
        batch(29, 1),
    ]
    found = scan(batches, 10, limit=30, aborted=[(9, 21)], fill=True)
    assert found.hole is None and found.next_offset == 30
    assert spans(found.writable, 10) == [
        (10, 15, "copy"),
        (15, 18, "MISSING_OFFSETS"),
        (18, 20, "copy"),
        (20, 21, "CONTROL_BATCH"),
        (21, 24, "ABORTED_DATA"),
        (24, 29, "COMPACTED_BATCH"),
        (29, 30, "copy"),
    ]


def test_halt_stops_at_the_first_hole_as_before() -> None:
    found = scan([batch(10, 5), batch(20, 1)], 10, limit=30)
    assert found.hole is not None and found.hole.kind is HoleKind.MISSING_OFFSETS
    assert found.next_offset == 15


def test_fill_stops_at_the_stable_end() -> None:
    found = scan([batch(10, 5), batch(20, 1, control=True)], 10, limit=15, fill=True)
    assert spans(found.writable, 10) == [(10, 15, "copy")] and found.next_offset == 15


@given(
    layout=st.lists(
        st.tuples(
            st.integers(0, 3),  # offsets missing before the batch
            st.integers(1, 6),  # records
            st.sampled_from(["data", "control", "aborted", "compacted"]),
        ),
        min_size=1,
        max_size=12,
    ),
    start_in_first=st.integers(0, 5),
)
def test_fill_covers_the_range_exactly_once_whatever_the_layout(
    layout: list[tuple[int, int, str]], start_in_first: int
) -> None:
    batches, offset = [], 100
    for missing, count, kind in layout:
        offset += missing
        if kind == "compacted":
            batches.append(batch(offset, count, delta=count + 2))
            offset += count + 3
        else:
            control, aborted = kind == "control", kind == "aborted"
            n = 1 if control else count
            batches.append(batch(offset, n, control=control, transactional=aborted, pid=9))
            offset += n
    first = batches[0].base_offset + min(start_in_first, batches[0].last_offset_delta)
    found = scan(batches, first, limit=offset, aborted=[(9, 0)], fill=True)
    covered = spans(found.writable, first)
    assert covered[0][0] == first and covered[-1][1] == offset == found.next_offset
    for (_a, end, _k), (start, _b, _l) in itertools.pairwise(covered):
        assert end == start  # contiguous: no offset skipped, none written twice


def test_filler_batches_hold_null_values_at_every_offset_with_our_sequence() -> None:
    pieces = filler_batches(1_000, 1_000 + FILLER_BATCH_RECORDS + 10, 1234, "marker", PID, EPOCH)
    assert [(b, e) for b, e, _raw in pieces] == [
        (1_000, 1_000 + FILLER_BATCH_RECORDS),
        (1_000 + FILLER_BATCH_RECORDS, 1_000 + FILLER_BATCH_RECORDS + 10),
    ]
    assert all(len(raw) < 1_000_000 for _b, _e, raw in pieces)  # under max.message.bytes
    base, end, raw = pieces[1]
    (parsed,) = split_batches(raw)
    assert parsed.crc_ok() and parsed.producer_id == PID and parsed.producer_epoch == EPOCH
    assert parsed.base_sequence == sequence_for(base) and parsed.record_count == end - base
    records = list(DefaultRecordBatch(raw))
    assert [r.offset for r in records] == list(range(10))
    assert all(r.value is None and r.key == FILLER_KEY and r.timestamp == 1234 for r in records)
    assert all(list(r.headers) == [(FILLER_HEADER, b"marker")] for r in records)
    assert is_filler(records[0].key, records[0].headers)


def test_fill_around_keeps_real_records_at_their_offsets() -> None:
    compacted = batch(50, 2, delta=4)  # records at 50 and 51 of 50..54
    raw, fillers = fill_around(compacted, 51, PID, EPOCH)  # the local end is 51
    (parsed,) = split_batches(raw)
    assert parsed.crc_ok() and parsed.base_sequence == sequence_for(51) and fillers == 3
    records = list(DefaultRecordBatch(raw))
    assert [r.offset for r in records] == [0, 1, 2, 3]  # 51..54, the broker adds the base
    assert (records[0].key, records[0].value) == (b"k", b"v")
    assert not is_filler(records[0].key, records[0].headers)
    assert all(is_filler(r.key, r.headers) for r in records[1:])


def test_a_producers_next_transaction_after_its_abort_marker_is_not_aborted() -> None:
    batches = [
        batch(0, 2, transactional=True, pid=9),  # aborted
        batch(2, 1, control=True, pid=9),  # its abort marker
        batch(3, 2, transactional=True, pid=9),  # committed later by the same producer
        batch(5, 1, control=True, pid=9),
    ]
    found = scan(batches, 0, limit=6, aborted=[(9, 0)], fill=True)
    assert spans(found.writable, 0) == [
        (0, 2, "ABORTED_DATA"),
        (2, 3, "CONTROL_BATCH"),
        (3, 5, "copy"),
        (5, 6, "CONTROL_BATCH"),
    ]
