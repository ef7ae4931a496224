"""Benchmark helper (not a test, not a product): the least a one-threaded asyncio copier can do
between a record's arrival at the remote and its write to local, run by `make bench-steady`
beside syncer and MirrorMaker 2 as the hop's floor for a copier of syncer's kind.

Per partition, one long-polled Fetch v13 on a connection of its own to the remote (a broker
reads a connection's next request only once it answered the one before), and writes on one
of four connections to local. Everything happens in the socket's read callback
(``asyncio.Protocol.data_received``), with no task, future or loop turn between: the answer is
split into its batches, each batch stamped as a client must send it (base offset 0, no
producer id, a fresh CRC) and written as its own Produce v13 (acks=all), then the partition's
next poll is written. No checks of any kind, no budget, no retries: a produce error or a
fetch error ends the process (exit 3). Offsets match the remote's because both topics start
empty and every batch is written in order. Single-node clusters only (the bench's).

    python -m tests.bench.floor --remote HOST:PORT --local HOST:PORT --topic T --partitions N
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import struct
import sys
import uuid
from collections.abc import Callable
from io import BytesIO
from typing import Any

import crc32c
import uvloop

from syncer.clusters import Cluster
from syncer.config import ClusterConfig
from syncer.protocol.fetch import fetch_v13_frame, read_fetch_v13
from syncer.protocol.produce import ProduceResponse_v13, produce_v13_frame

WRITE_CONNECTIONS = 4
POLL_WAIT_MS = 500
FETCH_BYTES = 1 << 20
READ_COMMITTED = 1
_HEADER_V1 = 5  # an answer's correlation id and (flexible) tagged fields
_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length
_LAST_DELTA = struct.Struct(">i")
_WRITER = struct.Struct(">qhi")  # producer id, epoch, base sequence
_CRC = struct.Struct(">I")


def batches(records: bytes) -> list[tuple[int, bytes]]:
    """The whole batches in a fetch answer's records, as (offset after the batch, bytes)."""
    out, pos = [], 0
    while pos + 12 <= len(records):
        base, length = _BATCH_HEAD.unpack_from(records, pos)
        end = pos + 12 + length
        if end > len(records):
            break  # cut by the fetch's byte limit: asked again from its offset
        (delta,) = _LAST_DELTA.unpack_from(records, pos + 23)
        out.append((base + delta + 1, records[pos:end]))
        pos = end
    return out


def stamped(batch: bytes) -> bytearray:
    """``batch`` as a client sends it: base offset 0, no producer, a fresh CRC."""
    out = bytearray(batch)
    out[0:8] = bytes(8)
    _WRITER.pack_into(out, 43, -1, -1, -1)
    _CRC.pack_into(out, 17, crc32c.crc32c(memoryview(out)[21:]))
    return out


class Framed(asyncio.Protocol):
    """One broker connection: every whole answer goes to ``on_answer`` as it arrives."""

    def __init__(self, on_answer: Callable[[bytes], None]) -> None:
        self.on_answer = on_answer
        self.buffer = bytearray()
        self.transport: Any = None
        self.correlation = 0

    def connection_made(self, transport: Any) -> None:  # uvloop's is no asyncio.Transport
        self.transport = transport
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= 4:
            size = int.from_bytes(self.buffer[:4], "big")
            if len(self.buffer) < 4 + size:
                return
            answer = bytes(self.buffer[4 : 4 + size])
            del self.buffer[: 4 + size]
            self.on_answer(answer)

    def connection_lost(self, exc: Exception | None) -> None:
        fail(f"connection lost: {exc!r}")

    def next_id(self) -> int:
        self.correlation += 1
        return self.correlation


def fail(why: str) -> None:
    print(f"floor: {why}", file=sys.stderr, flush=True)
    os._exit(3)


def produced(answer: bytes) -> None:
    response = ProduceResponse_v13.decode(BytesIO(answer[_HEADER_V1:]))
    for _topic, partitions, *_ in response.responses:
        for partition, code, *_ in partitions:
            if code:
                fail(f"produce to partition {partition} answered error {code}")


class Partition:
    """One partition's poll, and the writes of what it brings."""

    def __init__(self, number: int, remote_id: uuid.UUID, local_id: uuid.UUID) -> None:
        self.number, self.remote_id, self.local_id = number, remote_id, local_id
        self.offset = 0
        self.fetch: Framed | None = None
        self.write: Framed | None = None

    def poll(self) -> None:
        assert self.fetch is not None and self.fetch.transport is not None
        ask = {self.remote_id: [(self.number, self.offset, FETCH_BYTES)]}
        frame = fetch_v13_frame(
            self.fetch.next_id(), "floor", POLL_WAIT_MS, FETCH_BYTES, READ_COMMITTED, ask
        )
        self.fetch.transport.write(frame)

    def fetched(self, answer: bytes) -> None:
        assert self.write is not None and self.write.transport is not None
        for part in read_fetch_v13(answer, _HEADER_V1).partitions:
            if part.error_code:
                fail(f"fetch of partition {self.number} answered error {part.error_code}")
            for after, batch in batches(part.records):
                if after <= self.offset:
                    continue  # a batch before the offset asked (the broker starts at one)
                topics = {self.local_id: [(self.number, stamped(batch))]}
                frame = produce_v13_frame(self.write.next_id(), "floor", -1, 30_000, topics)
                self.write.transport.writelines(frame)
                self.offset = after
        self.poll()


async def topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    async with Cluster(ClusterConfig(bootstrap, name="floor"), role="floor") as cluster:
        ids = await cluster.topic_ids([topic])
    if not ids or topic not in ids:
        fail(f"no id for {topic} at {bootstrap}")
    assert ids is not None
    return ids[topic]


async def copy(remote: str, local: str, topic: str, partitions: int) -> None:
    remote_id, local_id = await topic_id(remote, topic), await topic_id(local, topic)
    loop = asyncio.get_running_loop()
    r_host, r_port = remote.rsplit(":", 1)
    l_host, l_port = local.rsplit(":", 1)
    writes = []
    for _ in range(WRITE_CONNECTIONS):
        _t, conn = await loop.create_connection(lambda: Framed(produced), l_host, int(l_port))
        writes.append(conn)
    for number in range(partitions):
        part = Partition(number, remote_id, local_id)
        part.write = writes[number % WRITE_CONNECTIONS]
        _t, part.fetch = await loop.create_connection(
            lambda p=part: Framed(p.fetched), r_host, int(r_port)
        )
        part.poll()
    print("floor: copying", flush=True)
    await asyncio.Event().wait()  # until SIGTERM


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--remote", required=True)
    parser.add_argument("--local", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    args = parser.parse_args()
    uvloop.run(copy(args.remote, args.local, args.topic, args.partitions))


if __name__ == "__main__":
    main()
