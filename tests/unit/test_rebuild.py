"""Rebuilt batches (trim, LogAppendTime rewrite, fill) hold exactly the records asked for,
in every codec, however large and compressible the records are."""

from __future__ import annotations

import pytest

from syncer.batches import Record, decode, split_batches, trim_for_local
from tests.unit.test_batches import build

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def compressible(i: int) -> bytes:
    return (b"record %06d " % i) * 38 + b"." * 44  # 500 bytes, mostly repeats


def stamped(raw: bytes, base: int) -> bytes:
    return base.to_bytes(8, "big") + raw[8:]  # the broker stamps the base offset


@pytest.mark.parametrize("codec", CODECS)
def test_trimming_a_large_compressible_batch_keeps_every_record(codec: str) -> None:
    records = [(b"k%d" % i, compressible(i)) for i in range(1_000)]
    (batch,) = split_batches(build(5_000, records, codec=CODECS[codec]))
    first = 5_010  # the 10th record on
    (trimmed,) = split_batches(stamped(trim_for_local(batch, first, 5, 1), first))
    assert trimmed.crc_ok() and trimmed.codec == codec
    assert trimmed.record_count == 990
    kept: list[Record] = decode(trimmed)
    assert kept == [r for r in decode(batch) if r.offset >= first]
    assert [r.offset for r in kept] == list(range(first, 6_000))


def test_a_short_rebuilt_batch_is_named_not_returned() -> None:
    from syncer.batches import _rebuilt_wrong, _Row

    raw = build(0, [(b"k0", b"v"), (b"k1", b"v")])  # two records where three were asked for
    rows = [_Row(i, 1_600_000_000_000 + i, b"k%d" % i, b"v", ()) for i in range(3)]
    assert _rebuilt_wrong(raw, 700, rows) == "it holds 2 records up to offset 701, not 3"
    assert _rebuilt_wrong(raw, 700, rows[:2]) is None
    late = [rows[0], rows[1]._replace(timestamp=5)]
    assert _rebuilt_wrong(raw, 700, late) == "offset 701 has timestamp 1600000000001, not 5"
