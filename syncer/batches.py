"""Record batches as bytes: split a fetch payload, read headers, rewrite the writer fields.

Kafka's v2 record batch starts with a 61-byte header (offsets below). The CRC-32C covers
everything from ``attributes`` to the end, so rewriting producer id, epoch, base sequence or
attributes means recomputing it; the records themselves (keys, values, headers, timestamps,
compressed or not) are not decoded on the copy path.

Where a batch must be rebuilt from its records (trimmed at the local end, a LogAppendTime
batch, small batches coalesced into one, fillers) the new batch is decoded again and compared
with the records it was asked to hold before it is returned: a produce answer names only the
base offset, so a short batch could not be caught after it is written.

Old message formats (v0, v1; ``syncer.legacy``) are converted to v2 batches at their own
offsets as a fetch payload is split, so everything after sees v2 batches only.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import crc32c

from syncer import legacy
from syncer.errors import PartitionHalted

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # base offset (8) + batch length (4)
MAGIC_V2 = 2

_BASE_OFFSET = struct.Struct(">qi")  # base offset, batch length
_CRC_AT = 17
_ATTRIBUTES_AT = 21
_WRITER_AT = 43  # producer id (q), producer epoch (h), base sequence (i)
_HEADER = struct.Struct(">qiibIhiqqqhii")
_WRITER = struct.Struct(">qhi")
_ATTRIBUTES = struct.Struct(">h")
_CRC = struct.Struct(">I")
_MAX_TIMESTAMP_AT = 35
_TIMESTAMP = struct.Struct(">q")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
SEQUENCE_MODULUS = 1 << 31

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CODEC_GZIP = 1


class BatchFormatError(PartitionHalted, ValueError):
    """The bytes are not a well-formed record batch: the partition halts, saying where."""


class RebuildFailed(PartitionHalted):
    """A rebuilt batch does not hold exactly the records it was built from (names offsets;
    the copier adds the partition)."""


class Batch(NamedTuple):
    """One record batch: its header fields and its bytes (a view into the fetch payload, or
    the v2 batch built from v0/v1 messages: ``converted_from``). A named tuple: every batch
    fetched is one, made ahead of its write (a frozen dataclass took 3.6 times as long)."""

    base_offset: int
    last_offset_delta: int
    record_count: int
    attributes: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    max_timestamp: int
    raw: memoryview
    converted_from: int | None = None  # the magic (0, 1) of the messages it was built from

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def leader_epoch(self) -> int:
        """The leader epoch its broker appended it in (the header's partitionLeaderEpoch);
        -1 if not known (a batch built from v0/v1 messages, which carry none)."""
        if self.converted_from is not None:
            return -1
        return int.from_bytes(self.raw[12:16], "big", signed=True)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def codec(self) -> str:
        return CODECS.get(self.attributes & COMPRESSION_MASK, "unknown")

    @property
    def is_dense(self) -> bool:
        """True if the batch holds a record at every offset it spans (no compaction gaps)."""
        return self.record_count == self.last_offset_delta + 1

    def crc_ok(self) -> bool:
        stored = _CRC.unpack_from(self.raw, _CRC_AT)[0]
        return bool(stored == crc32c.crc32c(self.raw[_ATTRIBUTES_AT:]))


def split_batches(payload: bytes | memoryview) -> list[Batch]:
    """Split a fetch payload into whole v2 batches; a truncated trailing batch is dropped
    (the broker cuts the last batch at the fetch size limit). Runs of v0/v1 messages come
    back as v2 batches built from them (``_converted``)."""
    batches: list[Batch] = []
    legacy_messages: list[memoryview] = []  # since the last v2 batch
    for raw in legacy.frames(memoryview(payload), "batch"):
        if raw[legacy.MAGIC_AT] in (0, 1):
            legacy_messages.append(raw)
            continue
        if legacy_messages:
            batches.extend(_converted(legacy_messages))
            legacy_messages = []
        if len(raw) < HEADER_SIZE:
            raise BatchFormatError(
                f"batch at offset {_BASE_OFFSET.unpack_from(raw)[0]} is"
                f" {len(raw)} bytes, shorter than a header"
            )
        batch = _parse(raw)
        _check_crc(batch)
        batches.append(batch)
    if legacy_messages:
        batches.extend(_converted(legacy_messages))
    return batches


def _check_crc(batch: Batch) -> None:
    """Halt on a batch whose bytes fail its CRC-32C: stamped for local, it would get a fresh
    CRC over the wrong bytes and land as a good batch (a reader of the source is told
    CorruptRecordException; one of the copy would be told nothing)."""
    raw = batch.raw
    stored = _CRC.unpack_from(raw, _CRC_AT)[0]
    computed = crc32c.crc32c(raw[_ATTRIBUTES_AT:])
    if stored != computed:
        raise BatchFormatError(
            f"batch at offset {batch.base_offset} fails its CRC-32C check (stored"
            f" {stored:#010x}, computed {computed:#010x}): its bytes were corrupted at the"
            " source or on the way"
        )


def _converted(messages: list[memoryview]) -> list[Batch]:
    """v0/v1 messages as v2 batches at their own offsets: same keys, values, timestamps (a
    reader's), codec; no headers, no writer (producer id -1), CreateTime."""
    out = []
    for run in legacy.runs(messages):
        rows = [_Row(m.offset - run.first, m.timestamp, m.key, m.value, ()) for m in run.messages]
        raw = bytearray(_build(run.codec, run.first, -1, -1, rows, base_sequence=-1))
        _BASE_OFFSET.pack_into(raw, 0, run.first, len(raw) - LOG_OVERHEAD)
        out.append(_parse(memoryview(raw))._replace(converted_from=run.magic))
    return out


def _parse(raw: memoryview) -> Batch:
    (
        base_offset,
        _length,
        _epoch,
        magic,
        _crc,
        attributes,
        last_delta,
        _base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = _HEADER.unpack_from(raw, 0)
    if magic != MAGIC_V2:
        raise BatchFormatError(f"batch at offset {base_offset} has magic {magic}, expected 2")
    return Batch(
        base_offset,
        last_delta,
        count,
        attributes,
        producer_id,
        producer_epoch,
        base_sequence,
        max_ts,
        raw,
    )


def max_timestamp_of(raw: bytes | bytearray) -> int:
    """The max timestamp in the header of a v2 batch stamped for local: its records' max, as
    a broker keeps it for our producer (``ProducerStateEntry``'s last timestamp, which its
    state's expiry counts from) and answers it for a duplicate of the batch."""
    return int(_TIMESTAMP.unpack_from(raw, _MAX_TIMESTAMP_AT)[0])


def sequence_for(offset: int) -> int:
    """The base sequence a batch destined for local ``offset`` carries (invariant 3)."""
    return offset % SEQUENCE_MODULUS


def rewrite_for_local(batch: Batch, producer_id: int, producer_epoch: int) -> bytes | bytearray:
    """Copy ``batch`` with our writer identity, sequence = its offset mod 2^31, the
    transactional bit cleared (we never write inside a transaction) and a fresh CRC.

    A LogAppendTime batch is rebuilt instead (see ``_rebuild``): a client may not send one
    (the broker answers InvalidTimestamp), and its readers see the batch's max timestamp."""
    if batch.attributes & TIMESTAMP_TYPE_BIT:
        return _rebuild(batch, batch.base_offset, producer_id, producer_epoch)
    out = bytearray(batch.raw)
    # Producers send base offset 0 and the broker assigns the real one; for compressed
    # batches it insists that the inner offsets start at 0. Not covered by the CRC.
    _BASE_OFFSET.pack_into(out, 0, 0, len(out) - LOG_OVERHEAD)
    _WRITER.pack_into(out, _WRITER_AT, producer_id, producer_epoch, sequence_for(batch.base_offset))
    attributes = batch.attributes & ~TRANSACTIONAL_BIT
    _ATTRIBUTES.pack_into(out, _ATTRIBUTES_AT, attributes)
    _CRC.pack_into(out, _CRC_AT, crc32c.crc32c(memoryview(out)[_ATTRIBUTES_AT:]))
    return out  # not copied again into bytes: nothing changes it once stamped


# a batch this small, uncompressed, may be written as a part of one batch with its neighbours
COALESCE_BATCH_BYTES = 8 * 1024


def coalescable(batch: Batch) -> bool:
    """May ``batch`` be written inside one batch with its neighbours: small, uncompressed,
    CreateTime, a record at every offset it spans, and not a control batch."""
    plain = batch.attributes & (COMPRESSION_MASK | TIMESTAMP_TYPE_BIT | CONTROL_BIT) == 0
    return plain and batch.is_dense and len(batch.raw) <= COALESCE_BATCH_BYTES


def coalesced_runs(batches: Sequence[Batch], limit: int) -> list[list[Batch]]:
    """``batches`` (in offset order) in the writes they go in: each run of coalescable
    neighbours, one following the other with no offset between, in writes of up to
    ``limit`` bytes; every other batch alone (``limit`` 0: every batch alone). A source that
    sends a record per batch fills a write per record, and a partition's writes go one
    after another (5 in flight, a connection's requests appended in turn)."""
    runs: list[list[Batch]] = []
    size = 0
    open_run = False  # the last run ends in a coalescable batch: the next may join it
    for batch in batches:
        small = coalescable(batch)
        if (
            open_run
            and small
            and size + len(batch.raw) <= limit
            and runs[-1][-1].next_offset == batch.base_offset
        ):
            runs[-1].append(batch)
            size += len(batch.raw)
        else:
            runs.append([batch])
            size = len(batch.raw)
        open_run = small
    return runs


def coalesce_for_local(run: Sequence[Batch], producer_id: int, producer_epoch: int) -> bytes:
    """One batch holding the records of ``run`` (``coalesced_runs``' output) at their own
    offsets, with their timestamps, keys, values and headers, stamped for local offset
    ``run[0].base_offset``: what a reader sees of each record is unchanged, only where one
    batch ends and the next begins (which no reader is shown)."""
    first = run[0].base_offset
    rows = [
        _Row(r.offset - first, r.timestamp, r.key, r.value, r.headers)
        for batch in run
        for r in decode(batch)
    ]
    return _build(0, first, producer_id, producer_epoch, rows)


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record: what must be identical on every source."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]  # a header's value may be null


def decode(batch: Batch) -> list[Record]:
    """The records of a batch (decompressed). Only for trimming and for comparing sources;
    the copy itself never decodes."""
    return _decode_raw(bytes(batch.raw))


def _decode_raw(raw: bytes) -> list[Record]:
    # For a LogAppendTime batch aiokafka gives every record the batch's max timestamp (the
    # append time), as Kafka's own readers do: what a reader sees, which is what we compare.
    from aiokafka.record.default_records import DefaultRecordBatch

    return [
        Record(r.offset, r.timestamp, r.key, r.value, tuple(tuple(h) for h in r.headers))
        for r in DefaultRecordBatch(raw)
    ]


def record_digests(batches: list[Batch], start: int, end: int) -> dict[int, bytes]:
    """A digest per record offset in ``[start, end)``: layout-independent, so sources whose
    batches are cut differently still compare equal when their records are."""
    out: dict[int, bytes] = {}
    for batch in batches:
        if batch.last_offset < start or batch.base_offset >= end or batch.is_control:
            continue
        for r in decode(batch):
            if start <= r.offset < end:
                out[r.offset] = record_digest(r)
    return out


def record_digest(r: Record) -> bytes:
    """16 bytes over what a reader sees of a record: timestamp, key, value, headers."""
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    # a null key, value or header value (a tombstone) is not an empty one: length -1, as on
    # the wire; every part carries its length, so no two records' parts run together alike
    parts: list[bytes | None] = [str(r.timestamp).encode(), r.key, r.value]
    for name, value in r.headers:
        parts += (name.encode(), value)
    for part in parts:
        h.update(b"\xff" * 4 if part is None else len(part).to_bytes(4, "big") + part)
    return h.digest()


def trim_for_local(
    batch: Batch, first: int, producer_id: int, producer_epoch: int
) -> bytes | bytearray:
    """A new batch holding the records of ``batch`` from offset ``first`` on, same codec,
    timestamps, keys, values and headers, stamped for local offset ``first``. Used where a
    source batch straddles the local end (sources cut their batches differently)."""
    return _rebuild(batch, first, producer_id, producer_epoch)


def _rebuild(batch: Batch, first: int, producer_id: int, producer_epoch: int) -> bytes:
    """The records of ``batch`` from ``first`` on as a new CreateTime batch: each record keeps
    the timestamp its readers see (a LogAppendTime batch's append time), its key, value,
    headers and offset; same codec."""
    rows = [
        _Row(r.offset - first, r.timestamp, r.key, r.value, r.headers)
        for r in decode(batch)
        if r.offset >= first
    ]
    return _build(batch.attributes & COMPRESSION_MASK, first, producer_id, producer_epoch, rows)


class _Row(NamedTuple):
    """A record to build, at offset ``delta`` from the new batch's base (a NamedTuple: fillers
    come by the hundred thousand)."""

    delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]]


def _build(
    compression: int,
    first: int,
    producer_id: int,
    producer_epoch: int,
    rows: list[_Row],
    *,
    base_sequence: int | None = None,
) -> bytes:
    """One CreateTime batch of ``rows``, checked to hold exactly their offsets and timestamps
    (the unit tests compare the rest; the check is what a short batch would fail)."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    if not rows:
        raise RebuildFailed(f"rebuilding a batch at offset {first}: no records to hold")
    builder = DefaultRecordBatchBuilder(
        magic=MAGIC_V2,
        compression_type=compression,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=sequence_for(first) if base_sequence is None else base_sequence,
        # The limit counts uncompressed bytes and an append past it is refused (None): far
        # above any batch a broker accepts. A refusal still raises below.
        batch_size=1 << 30,
    )
    for row in rows:
        appended = builder.append(
            row.delta,
            timestamp=row.timestamp,
            key=row.key,
            value=row.value,
            headers=list(row.headers),
        )
        if appended is None:
            raise RebuildFailed(
                f"rebuilding a batch at offset {first}: the builder refused the record at"
                f" offset {first + row.delta}"
            )
    raw = bytes(builder.build())
    problem = _rebuilt_wrong(raw, first, rows)
    if problem is not None:
        raise RebuildFailed(
            f"rebuilt batch for offsets {first}..{first + rows[-1].delta}: {problem}"
        )
    return raw


def _rebuilt_wrong(raw: bytes, first: int, rows: list[_Row]) -> str | None:
    """What is wrong with a rebuilt batch, or None if it holds exactly the offsets and
    timestamps of ``rows``."""
    from aiokafka.record.default_records import DefaultRecordBatch

    batches = split_batches(raw)
    if len(batches) != 1 or len(batches[0].raw) != len(raw):
        return f"its {len(raw)} bytes are not one whole batch"
    (rebuilt,) = batches
    if rebuilt.record_count != len(rows) or rebuilt.last_offset_delta != rows[-1].delta:
        return (
            f"it holds {rebuilt.record_count} records up to offset"
            f" {first + rebuilt.last_offset_delta}, not {len(rows)}"
        )
    held = [(r.offset, r.timestamp) for r in DefaultRecordBatch(raw)]
    for row, (delta, timestamp) in zip(rows, held, strict=False):
        if row.delta != delta:
            return f"it holds offset {first + delta} where {first + row.delta} belongs"
        if row.timestamp != timestamp:
            return f"offset {first + delta} has timestamp {timestamp}, not {row.timestamp}"
    if len(held) != len(rows):
        return f"it decodes to {len(held)} records, not {len(rows)}"
    return None


FILLER_KEY = b"syncer.filler"  # every filler has it: a compacted topic needs a key
FILLER_HEADER = "syncer.filler"  # its value says why: missing, compacted, marker, aborted
FILLER_BATCH_RECORDS = 50_000  # gzip keeps even this many fillers far below 1 MB


def filler_batches(
    first: int, end: int, timestamp: int, why: str, producer_id: int, producer_epoch: int
) -> list[tuple[int, int, bytes]]:
    """(base offset, next offset, bytes) of gzip batches of filler records for offsets
    ``[first, end)``: null value, key ``FILLER_KEY``, header ``FILLER_HEADER`` = ``why``."""
    out = []
    header = ((FILLER_HEADER, why.encode()),)
    for base in range(first, end, FILLER_BATCH_RECORDS):
        stop = min(end, base + FILLER_BATCH_RECORDS)
        rows = [_Row(delta, timestamp, FILLER_KEY, None, header) for delta in range(stop - base)]
        out.append((base, stop, _build(CODEC_GZIP, base, producer_id, producer_epoch, rows)))
    return out


def fill_around(
    batch: Batch, first: int, producer_id: int, producer_epoch: int
) -> tuple[bytes, int]:
    """One batch for offsets ``[first, batch.next_offset)``: the records of ``batch`` at
    their own offsets, fillers (why: compacted) at the offsets compaction removed; same
    codec, timestamps, keys, values and headers. Its bytes and how many fillers it holds."""
    found = {r.offset: r for r in decode(batch) if r.offset >= first}
    header = ((FILLER_HEADER, b"compacted"),)
    rows = []
    timestamp = batch.max_timestamp
    for offset in range(first, batch.next_offset):
        r = found.get(offset)
        if r is None:
            rows.append(_Row(offset - first, timestamp, FILLER_KEY, None, header))
        else:
            timestamp = r.timestamp
            rows.append(_Row(offset - first, r.timestamp, r.key, r.value, r.headers))
    compression = batch.attributes & COMPRESSION_MASK
    raw = _build(compression, first, producer_id, producer_epoch, rows)
    return raw, batch.next_offset - first - len(found)


def is_filler(key: bytes | None, headers: Iterable[tuple[str, bytes | None]]) -> bool:
    """Was this record written by syncer to fill a hole? (For consumers and for ``verify``.)"""
    return key == FILLER_KEY and any(name == FILLER_HEADER for name, _v in headers)


def first_timestamp(batch: Batch) -> int:
    """The batch's first timestamp (v2's baseTimestamp: its first record's, as producers
    write it; a record's own is this plus its delta)."""
    return int.from_bytes(batch.raw[27:35], "big", signed=True)
