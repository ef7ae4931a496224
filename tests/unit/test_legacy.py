"""Old message formats (v0, v1) converted to v2 batches at their own offsets, over message
sets built by aiokafka's own legacy encoder and read back with aiokafka's v2 reader."""

from __future__ import annotations

import zlib

import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder

from syncer.batches import (
    Batch,
    decode,
    record_digests,
    rewrite_for_local,
    sequence_for,
    split_batches,
)
from syncer.errors import PartitionHalted
from syncer.holes import HoleKind, scan
from syncer.legacy import RUN_BYTES, RUN_FLOOR, LegacyFormatError, run_bound

NONE, GZIP, SNAPPY, LZ4 = 0, 1, 2, 3
Row = tuple[int, int, bytes | None, bytes | None]  # offset, timestamp, key, value


def plain(magic: int, rows: list[Row]) -> bytes:
    """Uncompressed messages at their absolute offsets, one after the other."""
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=NONE, batch_size=1 << 30)
    for offset, timestamp, key, value in rows:
        assert builder.append(offset, timestamp=timestamp, key=key, value=value) is not None
    return bytes(builder.build())


def wrapper(magic: int, codec: int, inner: list[Row], offset: int) -> bytes:
    """One compressed message holding ``inner`` (offsets as stored: relative in v1, absolute
    in v0), at ``offset`` as the broker stamps it (not covered by the CRC)."""
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 30)
    for inner_offset, timestamp, key, value in inner:
        builder.append(inner_offset, timestamp=timestamp, key=key, value=value)
    raw = bytearray(builder.build())
    raw[0:8] = offset.to_bytes(8, "big")
    return bytes(raw)


def log_append_time(raw: bytes, timestamp: int) -> bytes:
    """A v1 wrapper as a LogAppendTime broker stores it: the bit set, its timestamp the
    append time, the CRC computed again."""
    out = bytearray(raw)
    out[17] |= 0x08
    out[18:26] = timestamp.to_bytes(8, "big")
    out[12:16] = zlib.crc32(out[16:]).to_bytes(4, "big")
    return bytes(out)


def seen(batches: list[Batch]) -> list[Row]:
    """What syncer's decoder gives, checked against aiokafka's own v2 reader."""
    out = []
    for batch in batches:
        ours = [(r.offset, r.timestamp, r.key, r.value) for r in decode(batch)]
        theirs = [(r.offset, r.timestamp, r.key, r.value) for r in DefaultRecordBatch(batch.raw)]
        assert ours == theirs
        assert all(not r.headers for r in decode(batch))
        assert batch.crc_ok()
        out.extend(ours)
    return out


ROWS: list[Row] = [(10, 1_000, b"a", b"1"), (11, 1_001, None, b"2"), (12, 1_002, b"c", None)]


@pytest.mark.parametrize("magic", [0, 1])
def test_uncompressed_messages_become_one_batch_at_their_offsets(magic: int) -> None:
    (batch,) = split_batches(plain(magic, ROWS))
    assert (batch.base_offset, batch.last_offset, batch.record_count) == (10, 12, 3)
    assert (batch.converted_from, batch.codec, batch.producer_id) == (magic, "none", -1)
    assert batch.base_sequence == -1 and not batch.is_transactional
    # v0 has no timestamps: -1 (NO_TIMESTAMP), what Kafka's own up-conversion keeps
    expected = [(o, ts if magic else -1, k, v) for o, ts, k, v in ROWS]
    assert seen([batch]) == expected


def test_a_gap_between_uncompressed_messages_stays_a_gap_between_batches() -> None:
    rows: list[Row] = [*ROWS[:2], (14, 1_004, b"e", b"5")]
    first, second = split_batches(plain(1, rows))
    assert (first.base_offset, first.next_offset, second.base_offset) == (10, 12, 14)
    assert seen([first, second]) == rows
    found = scan([first, second], 10, limit=100)
    assert found.hole is not None and found.hole.offset == 12
    assert found.hole.kind is HoleKind.MISSING_OFFSETS


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4])
def test_a_compacted_v1_wrapper_keeps_its_absolute_offsets_and_codec(codec: int) -> None:
    # compaction kept relative offsets 0, 2, 5 of six; the wrapper is at the last: 105
    inner: list[Row] = [(0, 2_000, b"x", b"0"), (2, 2_002, b"y", b"2"), (5, 2_005, b"z", b"5")]
    (batch,) = split_batches(wrapper(1, codec, inner, 105))
    assert (batch.base_offset, batch.last_offset, batch.record_count) == (100, 105, 3)
    assert batch.attributes & 0x07 == codec and batch.converted_from == 1
    assert seen([batch]) == [(100 + d, ts, k, v) for d, ts, k, v in inner]
    found = scan([batch], 100, limit=200)  # the gaps are a compacted batch's, as in v2
    assert found.hole is not None and found.hole.offset == 100
    assert found.hole.kind is HoleKind.COMPACTED_BATCH


@pytest.mark.parametrize("codec", [GZIP, SNAPPY])
def test_a_v0_wrapper_has_absolute_inner_offsets_and_no_timestamps(codec: int) -> None:
    inner: list[Row] = [(7, 0, b"a", b"1"), (8, 0, b"b", b"2"), (9, 0, None, b"3")]
    (batch,) = split_batches(wrapper(0, codec, inner, 9))
    assert seen([batch]) == [(o, -1, k, v) for o, _ts, k, v in inner]
    assert batch.max_timestamp == -1


def test_a_v1_wrapper_at_offset_zero_reads_its_inner_offsets_as_absolute() -> None:
    inner: list[Row] = [(0, 5, b"a", b"1"), (1, 6, b"b", b"2")]
    (batch,) = split_batches(wrapper(1, GZIP, inner, 0))
    assert [r[0] for r in seen([batch])] == [0, 1]


def test_a_log_append_time_wrapper_gives_every_message_its_time_as_create_time() -> None:
    inner: list[Row] = [(0, 1, b"a", b"1"), (1, 2, b"b", b"2"), (2, 3, b"c", b"3")]
    raw = log_append_time(wrapper(1, GZIP, inner, 42), 1_700_000_000_123)
    (batch,) = split_batches(raw)
    assert [r[1] for r in seen([batch])] == [1_700_000_000_123] * 3
    assert not batch.attributes & 0x08  # CreateTime: a client may not send LogAppendTime
    assert batch.max_timestamp == 1_700_000_000_123


@pytest.mark.parametrize("codec", [NONE, GZIP])
def test_a_partial_trailing_message_is_left_for_the_next_fetch(codec: int) -> None:
    first = plain(1, ROWS) if codec == NONE else wrapper(1, codec, [(0, 1, b"k", b"v")], 12)
    cut = wrapper(1, GZIP, [(0, 1, b"k", b"v" * 100), (1, 2, b"k", b"w")], 14)
    for keep in (5, 17, len(cut) - 1):
        batches = split_batches(first + cut[:keep])
        assert batches[-1].next_offset == 13


def test_a_bad_crc_halts_naming_offset_and_magic_in_one_line() -> None:
    raw = bytearray(plain(1, ROWS))
    raw[-1] ^= 0xFF  # the third message's value
    with pytest.raises(LegacyFormatError) as caught:
        split_batches(bytes(raw))
    message = str(caught.value)
    assert isinstance(caught.value, PartitionHalted) and "\n" not in message
    assert message.startswith("message at offset 12 (magic 1) cannot be converted to v2")
    assert "CRC mismatch" in message


def test_a_bad_crc_inside_a_wrapper_halts() -> None:
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=NONE, batch_size=1 << 30)
    builder.append(0, timestamp=1, key=b"k", value=b"value")
    inner = bytearray(builder.build())
    inner[-1] ^= 0x01
    raw = _wrap(1, GZIP, zlib_gzip(bytes(inner)), offset=3)
    with pytest.raises(LegacyFormatError, match=r"offset 0 \(magic 1\).*CRC mismatch"):
        split_batches(raw)


def test_an_unknown_codec_halts() -> None:
    raw = _wrap(1, 4, b"zstd is not a v1 codec", offset=8)
    with pytest.raises(LegacyFormatError, match=r"offset 8 \(magic 1\).*unknown compression"):
        split_batches(raw)


def test_a_value_that_does_not_decompress_halts() -> None:
    with pytest.raises(LegacyFormatError, match="gzip value does not decompress"):
        split_batches(_wrap(1, GZIP, b"not gzip at all", offset=8))


def test_inner_offsets_above_the_wrapper_halt() -> None:
    inner: list[Row] = [(0, 1, b"a", b"1"), (5, 2, b"b", b"2")]
    with pytest.raises(LegacyFormatError, match="above its own"):
        split_batches(wrapper(1, GZIP, inner, 3))


def test_a_v0_wrapper_not_at_its_last_inner_offset_halts() -> None:
    with pytest.raises(LegacyFormatError, match="last inner message is at offset 1"):
        split_batches(wrapper(0, GZIP, [(0, 0, b"a", b"1"), (1, 0, b"b", b"2")], 4))


def test_legacy_and_v2_in_one_answer_keep_their_order() -> None:
    v2 = _v2(13, [(13, 9, b"m", b"v2")])
    payload = plain(1, ROWS) + v2 + wrapper(1, GZIP, [(0, 20, b"n", b"w")], 14)
    batches = split_batches(payload)
    assert [(b.base_offset, b.converted_from) for b in batches] == [(10, 1), (13, None), (14, 1)]
    assert [r[0] for r in seen(batches)] == [10, 11, 12, 13, 14]


def test_a_long_run_of_messages_is_cut_into_batches_a_broker_accepts() -> None:
    rows: list[Row] = [(i, i, b"k", bytes(1000)) for i in range(600)]
    batches = split_batches(plain(1, rows))
    assert len(batches) > 1
    assert all(len(b.raw) <= RUN_FLOOR for b in batches)
    assert [b.base_offset for b in batches[1:]] == [b.next_offset for b in batches[:-1]]
    assert seen(batches) == rows


@pytest.mark.parametrize(
    ("sizes", "bound"),
    [
        ([], RUN_FLOOR),  # nothing known: the floor
        ([40, 100, 70], RUN_FLOOR),  # small messages: the floor, not one batch each
        ([100, 40_000, 70], 40_000),  # the topic took 40,000 bytes: so may a batch
        ([RUN_FLOOR + 1], RUN_FLOOR + 1),
        ([900_000, 100], RUN_BYTES),  # never above the cap
    ],
)
def test_a_merged_run_is_no_larger_than_the_largest_message_or_the_floor(
    sizes: list[int], bound: int
) -> None:
    assert run_bound(sizes) == bound


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("value_bytes", [0, 90, 1_000, 7_000, 40_000])
def test_each_merged_batch_fits_within_the_bound_of_its_answer(
    magic: int, value_bytes: int
) -> None:
    """A local topic whose max.message.bytes is the remote's (64 KiB here) takes every
    batch: no merged run grows past what the remote itself took, or the floor."""
    limit = 64 << 10
    rows: list[Row] = [
        (i, 1_600_000_000_000 + i, b"key-%d" % i if i % 3 else None, bytes(value_bytes))
        for i in range(400)
    ]
    payload = plain(magic, rows)
    largest = max(len(plain(magic, [row])) for row in rows)
    assert largest <= limit
    batches = split_batches(payload)
    merged = [b for b in batches if b.record_count > 1]
    assert all(len(b.raw) <= max(largest, RUN_FLOOR) <= limit for b in merged)
    alone = [b for b in batches if b.record_count == 1]  # grows a little: see run_bound
    assert all(len(b.raw) <= largest + 67 for b in alone)
    if value_bytes <= 1_000:  # small messages still share batches
        assert len(batches) < len(rows) / 10
    assert [r[:2] for r in seen(batches)] == [(o, ts if magic else -1) for o, ts, _k, _v in rows]


def test_one_message_alone_may_grow_by_the_v2_overhead() -> None:
    """It cannot be split: it is its own batch, a little larger than as stored (a topic
    whose limit is that close refuses it, and the partition halts naming its offset)."""
    row: Row = (5, 1_600_000_000_000, b"k", bytes(100_000))
    stored = len(plain(1, [row]))
    (batch,) = split_batches(plain(1, [row]))
    assert stored < len(batch.raw) <= stored + 59


def test_a_converted_batch_is_stamped_for_local_like_any_other() -> None:
    (batch,) = split_batches(
        wrapper(1, SNAPPY, [(0, 7, b"a", b"1"), (1, 8, b"b", b"2")], 2**31 + 5)
    )
    (local,) = split_batches(rewrite_for_local(batch, 900, 4))
    assert (local.base_offset, local.producer_id, local.producer_epoch) == (0, 900, 4)
    assert local.base_sequence == sequence_for(2**31 + 4) and local.crc_ok()
    assert [(r.timestamp, r.key, r.value) for r in decode(local)] == [
        (7, b"a", b"1"),
        (8, b"b", b"2"),
    ]


def test_equal_content_compares_equal_across_formats() -> None:
    legacy = split_batches(plain(1, ROWS))
    native = split_batches(_v2(10, ROWS))
    assert record_digests(legacy, 0, 100) == record_digests(native, 0, 100)
    changed = split_batches(plain(1, [*ROWS[:2], (12, 1_002, b"c", b"")]))
    assert record_digests(changed, 0, 100) != record_digests(native, 0, 100)


def _v2(base: int, rows: list[Row]) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=NONE,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for offset, timestamp, key, value in rows:
        builder.append(offset - base, timestamp=timestamp, key=key, value=value, headers=[])
    raw = bytearray(builder.build())
    raw[0:8] = base.to_bytes(8, "big")
    return bytes(raw)


def zlib_gzip(data: bytes) -> bytes:
    from aiokafka.codec import gzip_encode

    return gzip_encode(data)


def _wrap(magic: int, codec: int, value: bytes, *, offset: int) -> bytes:
    """A wrapper message around any ``value`` (aiokafka's builder only wraps what it
    compresses itself): an uncompressed message given the codec bits and a fresh CRC."""
    raw = bytearray(plain(magic, [(offset, 0, None, value)]))
    raw[17] = codec
    raw[12:16] = zlib.crc32(raw[16:]).to_bytes(4, "big")
    return bytes(raw)
