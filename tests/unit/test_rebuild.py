"""Rebuilt batches (trim, LogAppendTime rewrite, fill) hold exactly the records asked for,
in every codec, however large and compressible the records are."""

from __future__ import annotations

import struct

import crc32c
import pytest

from syncer.batches import (
    TIMESTAMP_TYPE_BIT,
    Record,
    decode,
    record_digests,
    rewrite_for_local,
    split_batches,
    trim_for_local,
)
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


APPEND_TIME = 1_700_000_000_123  # what the remote broker stamped: newer than any CreateTime


def log_append_time(raw: bytes, append_time: int = APPEND_TIME) -> bytes:
    """``raw`` as a broker of a LogAppendTime topic stores it: the timestamp-type bit set and
    the batch's max timestamp overwritten with the append time (records untouched)."""
    out = bytearray(raw)
    attributes = struct.unpack_from(">h", out, 21)[0] | TIMESTAMP_TYPE_BIT
    struct.pack_into(">h", out, 21, attributes)
    struct.pack_into(">q", out, 35, append_time)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def test_a_reader_of_a_log_append_time_batch_sees_the_append_time_on_every_record() -> None:
    (batch,) = split_batches(log_append_time(build(40, [(b"a", b"1"), (b"b", b"2")])))
    assert batch.crc_ok()
    assert [(r.offset, r.timestamp) for r in decode(batch)] == [
        (40, APPEND_TIME),
        (41, APPEND_TIME),
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_a_log_append_time_batch_is_rewritten_as_create_time_at_the_append_time(
    codec: str,
) -> None:
    records = [(b"k%d" % i if i % 3 else None, compressible(i)) for i in range(300)]
    (batch,) = split_batches(log_append_time(build(2**31 + 7, records, codec=CODECS[codec])))
    raw = rewrite_for_local(batch, 4242, 9)
    (local,) = split_batches(stamped(raw, batch.base_offset))
    assert local.crc_ok() and local.codec == codec
    assert not local.attributes & TIMESTAMP_TYPE_BIT  # CreateTime: a client may send it
    assert (local.producer_id, local.producer_epoch, local.base_sequence) == (4242, 9, 7)
    assert local.record_count == 300 and local.max_timestamp == APPEND_TIME
    assert decode(local) == decode(batch)  # every record at the append time, as remote readers see
    assert {r.timestamp for r in decode(local)} == {APPEND_TIME}
    assert record_digests([local], 0, 2**32) == record_digests([batch], 0, 2**32)


def test_trimming_a_log_append_time_batch_keeps_the_append_time() -> None:
    (batch,) = split_batches(log_append_time(build(10, [(b"k", b"v%d" % i) for i in range(9)])))
    (local,) = split_batches(stamped(trim_for_local(batch, 15, 5, 1), 15))
    assert not local.attributes & TIMESTAMP_TYPE_BIT
    assert decode(local) == [r for r in decode(batch) if r.offset >= 15]
    assert {r.timestamp for r in decode(local)} == {APPEND_TIME}


def test_a_create_time_batch_is_still_copied_as_bytes() -> None:
    raw = build(3, [(b"k%d" % i, compressible(i)) for i in range(50)], codec=CODECS["zstd"])
    (batch,) = split_batches(raw)
    assert rewrite_for_local(batch, 5, 1)[61:] == raw[61:]  # records untouched, not rebuilt
