"""Kafka's flexible encoding read by hand, for the answers the copy gets most: a fetch's and a
produce's, and the header before each. aiokafka's schema structs decode them field by field
through a tree of type objects: its Produce v13 answer and header took about 110 us of a
profiled copy's ~800 function calls per batch, ahead of every next step."""

from __future__ import annotations

import functools
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from io import BytesIO
from typing import Any, Generic, TypeVar

_INT32 = struct.Struct(">i")
T = TypeVar("T")


class Reader:
    """Kafka's flexible encoding, read from ``data`` at ``pos`` on."""

    def __init__(self, data: bytes, pos: int) -> None:
        self.data, self.pos = data, pos

    def uvarint(self) -> int:
        byte = self.data[self.pos]
        if not byte & 0x80:  # one byte: nearly every length and count of an answer
            self.pos += 1
            return byte
        value = shift = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise ValueError(f"invalid varint at {self.pos}")

    def take(self, fmt: struct.Struct) -> tuple[Any, ...]:
        values = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return values

    def skip_tags(self) -> None:
        if self.data[self.pos] == 0:  # no tagged fields: nearly always
            self.pos += 1
            return
        for _ in range(self.uvarint()):
            self.uvarint()  # the tag
            size = self.uvarint()
            self.pos += size
        if self.pos > len(self.data):
            raise ValueError("buffer underrun in tagged fields")

    def compact_view(self) -> memoryview:
        """Compact bytes (null read as empty), as a view of ``data``: a fetch answer's
        records are not copied out of it (tens of KiB a poll, each copy ahead of the
        write)."""
        size = self.uvarint() - 1
        if size <= 0:
            return memoryview(b"")
        end = self.pos + size
        if end > len(self.data):
            raise ValueError("buffer underrun decoding bytes")
        value, self.pos = memoryview(self.data)[self.pos : end], end
        return value

    def compact_string(self) -> str | None:
        """A compact nullable string (None for null)."""
        size = self.uvarint() - 1
        if size < 0:
            return None
        end = self.pos + size
        if end > len(self.data):
            raise ValueError("buffer underrun decoding a string")
        value, self.pos = self.data[self.pos : end].decode(), end
        return value

    def topic_id(self) -> uuid.UUID:
        end = self.pos + 16
        if end > len(self.data):
            raise ValueError("buffer underrun decoding a topic id")
        value, self.pos = _uuid(bytes(self.data[self.pos : end])), end
        return value


@functools.lru_cache(maxsize=1 << 16)
def _uuid(raw: bytes) -> uuid.UUID:
    """A topic id, made once per id: the same few come back in every answer."""
    return uuid.UUID(bytes=raw)


@dataclass(frozen=True, slots=True)
class ResponseHeader:
    """A response header v1 as aiokafka's reader uses it: its correlation id."""

    correlation_id: int


def header_v1(data: bytes, pos: int = 0) -> tuple[int, int]:
    """The correlation id of the answer whose header (v1: correlation id, tagged fields)
    starts at ``pos`` of ``data``, and where its body starts."""
    reader = Reader(data, pos)
    (correlation_id,) = reader.take(_INT32)
    reader.skip_tags()
    return correlation_id, reader.pos


def read_header_v1(buffer: BytesIO) -> ResponseHeader:
    """The header (v1) of the answer in ``buffer``, which is left at the body."""
    correlation_id, body = header_v1(buffer.getvalue(), buffer.tell())
    buffer.seek(body)
    return ResponseHeader(correlation_id)


class LeanAnswer(Generic[T]):
    """What aiokafka's reader decodes an answer with (its request's ``RESPONSE_TYPE``): ``read``
    over the frame's bytes, from the body on."""

    def __init__(self, read: Callable[[bytes, int], T]) -> None:
        self.read = read

    def decode(self, buffer: BytesIO) -> T:
        return self.read(buffer.getvalue(), buffer.tell())


class LeanHeader:
    """For a request struct written by ``syncer.direct``: aiokafka's reader reads its answers'
    header (v1) with ``read_header_v1``."""

    def parse_response_header(self, read_buffer: BytesIO) -> ResponseHeader:
        return read_header_v1(read_buffer)
