"""Old message formats (v0, v1) read into plain messages at their absolute offsets, grouped
into the runs that become v2 batches (``batches.split_batches`` builds them).

A topic written with message format v0 or v1 (Kafka up to 2.8 with ``message.format.version``
below 0.11, or old compacted data) comes back from Fetch as such message sets, and Kafka 4
brokers refuse to append them (KIP-724). Each message is ``offset (q) size (i) crc (I)
magic (b) attributes (b) [timestamp (q), v1 only] key (i + bytes) value (i + bytes)``; the
CRC-32 (not CRC-32C) covers magic to the end. A compressed message is a wrapper whose value
holds the inner messages, compressed:

- in v1 the inner offsets are relative and the wrapper's offset is the last inner's absolute
  offset, so absolute = wrapper offset - last inner offset + inner offset (a wrapper at
  offset 0, as some librdkafka versions produced, means relative = absolute); compaction
  keeps a wrapper's relative offsets, so its inner offsets may have gaps;
- in v0 the inner offsets are absolute and the wrapper's is the last one;
- a v1 wrapper with the LogAppendTime bit gives every inner message its own timestamp (the
  append time); otherwise each v1 message keeps its own; v0 messages have none (-1,
  Kafka's NO_TIMESTAMP, which is what a reader of the topic sees already).

These are Kafka's reading rules (``AbstractLegacyRecordBatch``'s deep iterator), written
afresh. What cannot be read exactly (a CRC that does not match, an unknown codec, nested
compression, offsets out of order) raises ``LegacyFormatError``: one line, never a guess.
"""

from __future__ import annotations

import itertools
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from aiokafka import codec as codecs

from syncer.errors import PartitionHalted

MAGIC_AT = 16  # where the magic byte is, in every format
NO_TIMESTAMP = -1
CODEC_MASK = 0x07
LOG_APPEND_TIME_BIT = 0x08
MIN_SIZE = 26  # a v0 message with a null key and value: 12 + crc 4 + magic 1 + attrs 1 + 8
# Uncompressed messages at consecutive offsets are merged into one v2 batch of at most
# ``run_bound`` bytes (see there): never more than RUN_BYTES, at least RUN_FLOOR.
RUN_BYTES = 1 << 18
RUN_FLOOR = 1 << 14  # a default producer's batch.size: a topic taking less is rare
V2_BATCH_BYTES = 61  # a v2 batch's header, its offset and length fields included
# the most a v2 record adds to its key and value: length, timestamp delta, offset delta, key
# length and value length varints at their widest (5 + 10 + 5 + 5 + 5), attributes, headers
V2_RECORD_BYTES = 32

_FRAME = struct.Struct(">qi")  # offset, size
_CRC = struct.Struct(">I")
_LENGTH = struct.Struct(">i")
_TIMESTAMP = struct.Struct(">q")

_DECOMPRESS: dict[int, tuple[str, Callable[[bytes], bytes]]] = {
    1: ("gzip", codecs.gzip_decode),
    2: ("snappy", codecs.snappy_decode),  # Kafka's v0/v1 snappy is xerial-framed: handled
    3: ("lz4", codecs.lz4_decode),
}


class LegacyFormatError(PartitionHalted):
    """A v0/v1 message that cannot be converted to v2 exactly (names its offset, magic and
    why; the copier adds the partition)."""


class LegacyMessage(NamedTuple):
    """One message as a reader sees it, at its absolute offset."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class MessageRun:
    """Messages that become one v2 batch: one wrapper's inner messages (same codec), or
    uncompressed messages at consecutive offsets (codec 0)."""

    codec: int
    magic: int
    messages: list[LegacyMessage]

    @property
    def first(self) -> int:
        return self.messages[0].offset


@dataclass(frozen=True, slots=True)
class _Message:
    """One message as stored: its fields before any wrapper rule applies."""

    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    size: int

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    def fail(self, why: str) -> LegacyFormatError:
        return LegacyFormatError(
            f"message at offset {self.offset} (magic {self.magic}) cannot be converted to v2: {why}"
        )


def frames(view: memoryview, what: str = "message") -> Iterator[memoryview]:
    """The whole messages or batches (``offset, size, ...``) at the start of ``view``; a
    partial one at the end is left (a fetch answer is cut at its byte limit)."""
    pos, end = 0, len(view)
    while end - pos >= _FRAME.size:
        offset, length = _FRAME.unpack_from(view, pos)
        size = _FRAME.size + length
        if end - pos < size:
            return
        if size <= MAGIC_AT:
            raise LegacyFormatError(f"{what} at offset {offset} is {size} bytes: no format")
        yield view[pos : pos + size]
        pos += size


def run_bound(stored_sizes: Iterable[int]) -> int:
    """How many bytes a v2 batch merged from uncompressed messages may take, given the sizes
    of the messages fetched with them, as stored (offset and length fields included, as
    Kafka compares a message with ``max.message.bytes``).

    A local topic refuses a batch above its ``max.message.bytes`` (MESSAGE_TOO_LARGE) though
    every message in it fits alone. The remote topic took its largest message, and the local
    one allows as much (``topics`` refuses a local limit below the remote's), so a batch no
    larger lands. Tiny messages would then go one per batch, one produce request each, so
    runs may reach RUN_FLOOR too: only a local topic allowing less than that could refuse
    one, and that halts loudly, naming the batch's offset (``writes``), never skips.

    A merged run is never needed: a message alone is its own batch. That batch is larger than
    the message by up to V2_BATCH_BYTES + V2_RECORD_BYTES - 26 bytes (67 for v0, 59 for v1),
    so a message within that of its topic's limit halts the same way, naming its offset."""
    return min(max(max(stored_sizes, default=0), RUN_FLOOR), RUN_BYTES)


def record_bytes(message: LegacyMessage) -> int:
    """At most how many bytes ``message`` takes as a record of a v2 batch."""
    return V2_RECORD_BYTES + len(message.key or b"") + len(message.value or b"")


def runs(messages: Sequence[memoryview]) -> list[MessageRun]:
    """Whole v0/v1 messages (each from its offset field on) as the runs that become v2
    batches, at their absolute offsets."""
    out: list[MessageRun] = []
    pending: list[LegacyMessage] = []  # uncompressed, consecutive offsets
    pending_bytes = 0  # the v2 batch they make, at most
    pending_magic = 0
    bound = run_bound(len(raw) for raw in messages)
    for raw in messages:
        message = _read(raw)
        if message.codec:
            out.extend(_flush(pending, pending_magic))
            pending, pending_bytes = [], 0
            out.append(MessageRun(message.codec, message.magic, _inner(message)))
            continue
        converted = _plain(message, None)
        follows = bool(pending) and pending[-1].offset + 1 == message.offset
        if (
            not follows
            or pending_bytes + record_bytes(converted) > bound
            or message.magic != pending_magic
        ):
            out.extend(_flush(pending, pending_magic))
            pending, pending_bytes, pending_magic = [], V2_BATCH_BYTES, message.magic
        pending.append(converted)
        pending_bytes += record_bytes(converted)
    out.extend(_flush(pending, pending_magic))
    return out


def _flush(pending: list[LegacyMessage], magic: int) -> list[MessageRun]:
    return [MessageRun(0, magic, pending)] if pending else []


def _plain(message: _Message, append_time: int | None) -> LegacyMessage:
    """What a reader sees of an uncompressed message (``append_time``: its wrapper's
    LogAppendTime, which replaces a v1 message's own timestamp)."""
    timestamp = message.timestamp
    if append_time is not None and message.magic == 1:
        timestamp = append_time
    return LegacyMessage(message.offset, timestamp, message.key, message.value)


def _read(raw: memoryview) -> _Message:
    """One whole message, its CRC checked and its lengths exact."""
    offset, _size = _FRAME.unpack_from(raw, 0)
    magic, attributes = raw[MAGIC_AT], raw[MAGIC_AT + 1]
    message = _Message(offset, magic, attributes, NO_TIMESTAMP, None, None, len(raw))
    if magic not in (0, 1):
        raise message.fail("not a v0 or v1 message")
    stored = _CRC.unpack_from(raw, 12)[0]
    computed = zlib.crc32(raw[MAGIC_AT:])
    if stored != computed:
        raise message.fail(f"CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")
    pos = MAGIC_AT + 2
    timestamp = NO_TIMESTAMP
    if magic == 1:
        if len(raw) < MIN_SIZE + 8:
            raise message.fail(f"{len(raw)} bytes, shorter than a v1 message")
        timestamp = _TIMESTAMP.unpack_from(raw, pos)[0]
        pos += 8
    key, pos = _field(raw, pos, message)
    value, pos = _field(raw, pos, message)
    if pos != len(raw):
        raise message.fail(f"{len(raw)} bytes, but its key and value end at byte {pos}")
    return _Message(offset, magic, attributes, timestamp, key, value, len(raw))


def _field(raw: memoryview, pos: int, message: _Message) -> tuple[bytes | None, int]:
    """A length-prefixed key or value at ``pos`` (-1: null) and the position after it."""
    if pos + 4 > len(raw):
        raise message.fail(f"{len(raw)} bytes, cut inside a length field")
    length = _LENGTH.unpack_from(raw, pos)[0]
    pos += 4
    if length == -1:
        return None, pos
    if length < 0 or pos + length > len(raw):
        raise message.fail(f"a key or value of {length} bytes past its end")
    return bytes(raw[pos : pos + length]), pos + length


def _inner(wrapper: _Message) -> list[LegacyMessage]:
    """The messages a compressed wrapper holds, at their absolute offsets."""
    inner = [_read(raw) for raw in _inner_frames(wrapper)]
    if not inner:
        raise wrapper.fail("a compressed message holding no messages")
    if any(m.codec for m in inner):
        raise wrapper.fail("a compressed message inside a compressed message")
    base = 0  # v0: the inner offsets are absolute
    if wrapper.magic == 1 and wrapper.offset != 0:  # a wrapper at 0: relative = absolute
        if wrapper.offset < inner[-1].offset:
            raise wrapper.fail(f"its last inner offset {inner[-1].offset} is above its own")
        base = wrapper.offset - inner[-1].offset
    elif wrapper.magic == 0 and inner[-1].offset != wrapper.offset:
        raise wrapper.fail(f"its last inner message is at offset {inner[-1].offset}")
    offsets = [base + m.offset for m in inner]
    if any(b <= a for a, b in itertools.pairwise(offsets)) or offsets[0] < 0:
        raise wrapper.fail(f"inner offsets out of order: {offsets[:8]}")
    append_time = wrapper.timestamp if wrapper.attributes & LOG_APPEND_TIME_BIT else None
    if wrapper.magic == 0:
        append_time = None
    return [_plain(m, append_time)._replace(offset=o) for m, o in zip(inner, offsets, strict=True)]


def _inner_frames(wrapper: _Message) -> list[memoryview]:
    """The whole inner messages of a wrapper's decompressed value; a partial one is an error
    here (the wrapper's CRC held, so this is how it was written)."""
    codec = _DECOMPRESS.get(wrapper.codec)
    if codec is None:
        raise wrapper.fail(f"unknown compression codec {wrapper.codec}")
    name, decompress = codec
    if wrapper.value is None:
        raise wrapper.fail("a compressed message with a null value")
    if name == "lz4" and wrapper.magic == 0:
        # Kafka 0.8/0.9 wrote LZ4 frames with a wrong header checksum (KAFKA-3160)
        raise wrapper.fail("lz4 in message format v0 (Kafka 0.8/0.9 framing) is not supported")
    try:
        plain = memoryview(decompress(wrapper.value))
    except Exception as exc:  # each codec library raises its own errors
        raise wrapper.fail(f"its {name} value does not decompress: {exc}") from exc
    whole = list(frames(plain, "inner message"))
    used = sum(len(f) for f in whole)
    if used != len(plain):
        raise wrapper.fail(f"its {name} value ends inside an inner message (byte {used})")
    return whole
