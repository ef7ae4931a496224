"""Batch splitting and rewriting over batches built by aiokafka's own record builder."""

from __future__ import annotations

import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from hypothesis import given
from hypothesis import strategies as st

from syncer.batches import (
    COALESCE_BATCH_BYTES,
    BatchFormatError,
    coalescable,
    coalesce_for_local,
    coalesced_runs,
    decode,
    record_digests,
    rewrite_for_local,
    sequence_for,
    split_batches,
    trim_for_local,
)
from syncer.errors import PartitionHalted
from syncer.legacy import LegacyFormatError

GZIP = 1


def build(
    base_offset: int,
    records: list[tuple[bytes | None, bytes | None]],
    *,
    codec: int = 0,
    transactional: bool = False,
    producer_id: int = 77,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=3,
        base_sequence=11,
        batch_size=1 << 30,  # never full: a full builder refuses appends (returns None)
    )
    for i, (key, value) in enumerate(records):
        n = base_offset + i  # timestamps and headers follow the offset, whatever the layout
        appended = builder.append(
            i, timestamp=1_600_000_000_000 + n, key=key, value=value, headers=[("h", b"%d" % n)]
        )
        assert appended is not None
    raw = bytearray(builder.build())
    raw[0:8] = base_offset.to_bytes(8, "big")  # as the broker stamps it in the log
    return bytes(raw)


def decode_raw(raw: bytes) -> list[tuple[int, bytes | None, bytes | None, int]]:
    batch = DefaultRecordBatch(raw)
    return [(r.offset, r.key, r.value, r.timestamp) for r in batch]


def test_split_reads_every_header_field() -> None:
    payload = build(100, [(b"a", b"1"), (None, b"2")]) + build(102, [(b"c", None)], codec=GZIP)
    first, second = split_batches(payload)
    assert (first.base_offset, first.record_count, first.last_offset, first.next_offset) == (
        100,
        2,
        101,
        102,
    )
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (77, 3, 11)
    assert first.codec == "none" and second.codec == "gzip"
    assert first.is_dense and not first.is_control and not first.is_transactional
    assert first.crc_ok() and second.crc_ok()


def test_a_truncated_trailing_batch_is_dropped() -> None:
    whole = build(0, [(b"k", b"v")])
    cut = build(1, [(b"k", b"v" * 100)])[:-10]
    assert [b.base_offset for b in split_batches(whole + cut)] == [0]


def test_an_unknown_magic_is_refused_as_a_halt() -> None:
    raw = bytearray(build(0, [(b"k", b"v")]))
    raw[16] = 3
    with pytest.raises(BatchFormatError, match="magic 3") as caught:
        split_batches(bytes(raw))
    assert isinstance(caught.value, PartitionHalted)  # one line, not an internal error


@given(st.data())
def test_a_byte_changed_under_the_crc_halts_naming_the_batch(data: st.DataObject) -> None:
    good = build(0, [(b"k%d" % i, b"v" * i) for i in range(5)])
    raw = bytearray(build(5, [(b"k%d" % i, b"w" * i) for i in range(7)], codec=GZIP))
    at = data.draw(st.integers(21, len(raw) - 1), label="byte")  # attributes to the end
    raw[at] ^= data.draw(st.integers(1, 255), label="flip")
    with pytest.raises(BatchFormatError) as caught:
        split_batches(good + bytes(raw))  # the good batch before it lands neither
    message = str(caught.value)
    assert isinstance(caught.value, PartitionHalted) and "\n" not in message
    assert message.startswith("batch at offset 5 fails its CRC-32C check (stored 0x")


def test_the_fields_outside_the_crc_are_not_checked_by_it() -> None:
    raw = bytearray(build(0, [(b"k", b"v")]))
    raw[12:16] = (99).to_bytes(4, "big")  # the partition leader epoch: the broker sets it
    (batch,) = split_batches(bytes(raw))
    assert batch.crc_ok() and decode(batch)[0].value == b"v"


def test_a_v2_batch_marked_v1_is_read_as_v1_and_fails_its_crc() -> None:
    raw = bytearray(build(0, [(b"k", b"v")]))
    raw[16] = 1
    with pytest.raises(LegacyFormatError, match=r"offset 0 \(magic 1\).*CRC mismatch"):
        split_batches(bytes(raw))


def test_rewrite_sets_writer_fields_clears_transaction_and_keeps_records() -> None:
    raw = build(
        2**31 + 5, [(b"k%d" % i, b"v" * i) for i in range(20)], codec=GZIP, transactional=True
    )
    (batch,) = split_batches(raw)
    out = rewrite_for_local(batch, producer_id=4242, producer_epoch=9)
    (rewritten,) = split_batches(out)
    assert rewritten.crc_ok()
    assert (rewritten.producer_id, rewritten.producer_epoch) == (4242, 9)
    assert rewritten.base_sequence == 5 == sequence_for(batch.base_offset)
    assert not rewritten.is_transactional
    assert rewritten.base_offset == 0  # the broker assigns it
    assert rewritten.codec == "gzip" and rewritten.record_count == 20
    before = [(o - batch.base_offset, k, v, t) for o, k, v, t in decode_raw(raw)]
    assert decode_raw(out) == before
    assert out[61:] == raw[61:]  # the record bytes travel untouched


@given(
    st.lists(
        st.tuples(st.binary(max_size=30) | st.none(), st.binary(max_size=200)),
        min_size=1,
        max_size=30,
    ),
    st.integers(0, 2**40),
    st.integers(0, 2**40),
)
def test_rewrite_always_yields_a_valid_crc(
    records: list[tuple[bytes | None, bytes]], base: int, pid: int
) -> None:
    (batch,) = split_batches(build(base, list(records)))
    (out,) = split_batches(rewrite_for_local(batch, pid, 0))
    assert out.crc_ok() and out.base_sequence == base % 2**31 and out.producer_id == pid


def test_trim_keeps_the_tail_of_a_batch_with_its_codec_and_fields() -> None:
    raw = build(100, [(b"k%d" % i, b"v%d" % i) for i in range(10)], codec=GZIP)
    (batch,) = split_batches(raw)
    out = trim_for_local(batch, 104, producer_id=5, producer_epoch=1)
    (trimmed,) = split_batches(out)
    assert trimmed.crc_ok() and trimmed.codec == "gzip"
    assert (trimmed.record_count, trimmed.base_sequence, trimmed.producer_id) == (6, 104, 5)
    original = {r.offset: r for r in decode(batch)}
    for r in decode(trimmed):
        source = original[r.offset + 104]  # offsets restart at 0; the broker assigns them
        assert (r.key, r.value, r.timestamp, r.headers) == (
            source.key,
            source.value,
            source.timestamp,
            source.headers,
        )


def test_record_digests_ignore_batch_layout_and_see_any_difference() -> None:
    records = [(b"k%d" % i, b"v%d" % i) for i in range(6)]
    one = split_batches(build(0, records))
    two = split_batches(build(0, records[:2]) + build(2, records[2:], codec=GZIP))
    assert record_digests(one, 1, 5) == record_digests(two, 1, 5)
    assert set(record_digests(one, 1, 5)) == {1, 2, 3, 4}
    other = split_batches(build(0, [*records[:3], (b"k3", b"changed"), *records[4:]]))
    differing = {
        o for o, d in record_digests(one, 0, 6).items() if record_digests(other, 0, 6)[o] != d
    }
    assert differing == {3}


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ([("h", None)], [("h", b"")]),  # a null header value is not an empty one
        ([("a", b"\0b")], [("a\0", b"b")]),  # nor do a name and a value run together
        ([("a", b"b")], [("a", b"b"), ("a", b"b")]),
        ([("h", None), ("g", b"x")], [("g", b"x"), ("h", None)]),  # the order is seen
    ],
)
def test_record_digests_tell_headers_apart(
    one: list[tuple[str, bytes | None]], other: list[tuple[str, bytes | None]]
) -> None:
    def digest(headers: list[tuple[str, bytes | None]]) -> bytes:
        builder = DefaultRecordBatchBuilder(
            magic=2, compression_type=0, is_transactional=False, producer_id=-1,
            producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
        )  # fmt: skip
        builder.append(0, timestamp=5, key=b"k", value=b"v", headers=headers)
        return record_digests(split_batches(bytes(builder.build())), 0, 1)[0]

    assert digest(one) == digest(list(one)) and digest(one) != digest(other)


@pytest.mark.parametrize(
    ("mine", "theirs"),
    [
        ((b"k", None), (b"k", b"")),  # a tombstone is not an empty value
        ((None, b"v"), (b"", b"v")),
        ((b"k", None), (b"k", b"\0")),
    ],
)
def test_record_digests_tell_null_from_empty(
    mine: tuple[bytes | None, bytes | None], theirs: tuple[bytes | None, bytes | None]
) -> None:
    assert record_digests(split_batches(build(0, [mine])), 0, 1) != record_digests(
        split_batches(build(0, [theirs])), 0, 1
    )


def test_small_plain_neighbours_coalesce_into_writes_up_to_the_limit() -> None:
    payload = b"".join(build(10 + 2 * i, [(b"k", b"v" * 100)] * 2) for i in range(6))
    batches = split_batches(payload)
    size = len(batches[0].raw)
    runs = coalesced_runs(batches, limit=4 * size)
    assert [[b.base_offset for b in run] for run in runs] == [[10, 12, 14, 16], [18, 20]]
    assert coalesced_runs(batches, limit=0) == [[b] for b in batches]  # off: each alone


def test_compressed_large_sparse_or_apart_batches_go_alone() -> None:
    compressed = build(2, [(b"k", b"v")], codec=GZIP)
    large = build(3, [(b"k", b"x" * (COALESCE_BATCH_BYTES + 1))])
    apart = build(5, [(b"k", b"v")])  # offset 4 lies between: not a neighbour of the one above
    payload = build(0, [(b"k", b"v")] * 2) + compressed + large + apart + build(6, [(b"k", b"v")])
    runs = coalesced_runs(split_batches(payload), limit=1 << 20)
    assert [[b.base_offset for b in run] for run in runs] == [[0], [2], [3], [5, 6]]
    assert not coalescable(split_batches(compressed)[0])
    assert not coalescable(split_batches(large)[0])


def test_a_coalesced_batch_holds_every_record_at_its_own_offset() -> None:
    first = build(2**31 + 40, [(b"a", b"1"), (None, b"2")])
    second = build(2**31 + 42, [(b"c", None), (b"", b"")], transactional=True)
    third = build(2**31 + 44, [(b"e", b"5")])
    run = split_batches(first + second + third)
    out = coalesce_for_local(run, producer_id=4242, producer_epoch=9)
    (batch,) = split_batches(out)
    assert batch.crc_ok() and batch.codec == "none" and not batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch) == (4242, 9)
    assert batch.base_sequence == sequence_for(2**31 + 40) and batch.record_count == 5
    source = [r for b in run for r in decode(b)]
    base = run[0].base_offset
    assert [(r.offset + base, r.key, r.value, r.timestamp, r.headers) for r in decode(batch)] == [
        (r.offset, r.key, r.value, r.timestamp, r.headers) for r in source
    ]
    landed = bytearray(out)
    landed[0:8] = base.to_bytes(8, "big")  # as the broker stamps it in the log
    assert record_digests(run, base, base + 5) == record_digests(
        split_batches(landed), base, base + 5
    )
