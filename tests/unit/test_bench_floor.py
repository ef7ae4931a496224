"""The hop's floor copier (tests/bench/floor.py): how it splits a fetch answer and stamps
each batch. Its numbers come from `make bench-steady`; what it writes must still be what a
broker takes, offset for offset."""

from __future__ import annotations

from syncer.batches import split_batches
from tests.bench.floor import batches, stamped
from tests.unit.test_batches import GZIP, build


def test_an_answer_splits_into_its_whole_batches_each_with_the_offset_after_it() -> None:
    payload = build(100, [(b"a", b"1"), (None, b"2")]) + build(102, [(b"c", None)], codec=GZIP)
    cut = build(103, [(b"d", b"4")])
    found = batches(payload + cut[:-3])  # the last batch cut by the fetch's byte limit
    assert [after for after, _raw in found] == [102, 103]
    assert b"".join(raw for _after, raw in found) == payload


def test_a_stamped_batch_is_one_a_client_may_send_with_the_same_records() -> None:
    raw = build(5000, [(b"k", b"v"), (b"k2", None)], codec=GZIP)
    (out,) = split_batches(bytes(stamped(raw)))
    (source,) = split_batches(raw)
    assert out.base_offset == 0  # the broker assigns it: the local log's end
    assert (out.producer_id, out.producer_epoch, out.base_sequence) == (-1, -1, -1)
    assert out.crc_ok()
    assert out.raw[21:43] == source.raw[21:43]  # attributes, deltas and timestamps kept
    assert out.raw[61:] == source.raw[61:]  # the records themselves
