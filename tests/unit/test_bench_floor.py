"""The hop's floor copier (tests/bench/floor.py): what it writes of a fetch answer. Its numbers
come from `make bench-steady`; what it writes must still be what a broker takes, offset for
offset, stamped as syncer stamps it."""

from __future__ import annotations

import time
import uuid

import pytest

from syncer.batches import sequence_for, split_batches
from syncer.protocol.fetch import FetchedById
from tests.bench import floor
from tests.bench.floor import writes_of
from tests.unit.test_batches import GZIP, build


def test_an_answer_is_written_batch_by_batch_from_the_offset_asked() -> None:
    before = build(98, [(b"z", b"0"), (b"y", b"1")])  # a broker answers from the batch holding it
    payload = build(100, [(b"a", b"1"), (None, b"2")]) + build(102, [(b"c", None)], codec=GZIP)
    cut = build(103, [(b"d", b"4")])
    writes, next_offset = writes_of(before + payload + cut[:-3], 100, (7, 2))
    assert [source for source, _raw in writes] == [100, 102]
    assert next_offset == 103  # the cut batch is asked again from its start


def test_each_write_is_stamped_for_local_with_the_same_records() -> None:
    raw = build(5000, [(b"k", b"v"), (b"k2", None)], codec=GZIP)
    ((source, stamped),), _next = writes_of(raw, 5000, (7, 2))
    (out,) = split_batches(bytes(stamped))
    (batch,) = split_batches(raw)
    assert source == 5000
    assert out.base_offset == 0  # the broker assigns it: the local log's end
    assert (out.producer_id, out.producer_epoch, out.base_sequence) == (7, 2, sequence_for(5000))
    assert out.crc_ok()
    assert out.raw[61:] == batch.raw[61:]  # the records themselves


def test_the_busy_work_lasts_what_it_is_asked() -> None:
    started = time.perf_counter()
    floor.work(0.002)
    assert time.perf_counter() - started >= 0.002


def answer(payload: bytes, stable: int, log_start: int = 0) -> FetchedById:
    return FetchedById(uuid.uuid4(), 0, 0, stable, stable, log_start, (), payload)


def test_with_checks_the_floor_writes_what_the_plain_floor_writes() -> None:
    payload = build(100, [(b"a", b"1"), (None, b"2")]) + build(102, [(b"c", None)], codec=GZIP)
    checks = floor.Checks("t", 0)
    assert checks.writes_of(answer(payload, 103), 100, (7, 2)) == writes_of(payload, 100, (7, 2))
    assert list(checks.in_flight) == [b.max_timestamp for b in split_batches(payload)]
    # records of 2020: past the brokers' producer state expiry, so syncer would send the
    # second only once the first landed (the floor counts it and sends all the same)
    assert checks.would_wait == 1
    checks.landed(100, 0, 100)
    assert checks.proven_at == split_batches(payload)[0].max_timestamp


def test_with_checks_the_floor_refuses_a_hole_and_a_misplaced_write() -> None:
    gap = build(100, [(b"a", b"1")]) + build(105, [(b"b", b"2")])
    with pytest.raises(floor.Refused, match="missing"):
        floor.Checks("t", 0).writes_of(answer(gap, 106), 100, (7, 2))
    checks = floor.Checks("t", 0)
    one = build(100, [(b"a", b"1")])
    checks.writes_of(answer(one, 101), 100, (7, 2))
    with pytest.raises(floor.Refused, match="landed at another offset"):
        checks.landed(100, 0, 99)
