"""Benchmark helper (not a test, not a product): the least a one-threaded asyncio copier can do
between a record's arrival at the remote and its write to local, run by `make bench-steady`
beside syncer and MirrorMaker 2 as the hop's floor for a copier of syncer's kind.

Per partition, one long-polled Fetch v13 on a connection of its own to the remote (a broker
reads a connection's next request only once it answered the one before), and writes on one
of eight connections to local (as syncer). Everything happens in the socket's read callback
(``asyncio.Protocol.data_received``), with no task, future or loop turn between: the answer is
split into its batches (``batches.split_batches``), each stamped as syncer stamps it
(``batches.rewrite_for_local``: one idempotent producer id, sequence = offset, a fresh CRC) and
written as its own Produce v13 (acks=all), then the partition's next poll is written. No
checks of the records, no budget, no retries: a fetch error, a produce error, or a batch that
landed at another offset than its source's ends the process (exit 3), naming both. Offsets
match the remote's because both topics start empty and every batch is written in order.
Single-node clusters only (the bench's).

``--notes PATH``: each answer that brought records, each write and each produce answer is
noted with its wall-clock time, in the rows of ``syncer.hop_trace`` ("fetch", "written",
"answered"), written to PATH as the process ends on SIGTERM; ``bench-steady --timeline`` asks
for them and ``tests/bench/hop_timeline.py --copier floor`` sets them beside the readers'.

    python -m tests.bench.floor --remote HOST:PORT --local HOST:PORT --topic T --partitions N
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sys
import time
import uuid
from collections import deque
from collections.abc import Callable
from io import BytesIO
from typing import Any

import uvloop

from syncer.alignment import Outcome, StateClock, judge
from syncer.batches import Batch, rewrite_for_local, split_batches
from syncer.clusters import TP, Cluster
from syncer.config import ClusterConfig
from syncer.holes import RemoteEnds, scan
from syncer.partition import PartitionSources
from syncer.protocol.fetch import FetchedById, fetch_v13_frame, read_fetch_v13
from syncer.protocol.produce import ProduceResponse_v13, produce_v13_frame
from syncer.sources import SourceHealth

WRITE_CONNECTIONS = 8  # as syncer's writer (``writer.WRITE_CONNECTIONS``)
POLL_WAIT_MS = 500
FETCH_BYTES = 1 << 20
READ_COMMITTED = 1
_HEADER_V1 = 5  # an answer's correlation id and (flexible) tagged fields


def writes_of(
    records: bytes, offset: int, writer: tuple[int, int]
) -> tuple[list[tuple[int, bytes | bytearray]], int]:
    """The whole batches of a fetch answer's ``records`` from ``offset`` on, each as (its
    source offset, stamped for local with ``writer``: producer id and epoch), and the offset
    to poll next (a batch cut by the fetch's byte limit is asked again from its start)."""
    out = []
    for batch in split_batches(records):
        if batch.next_offset <= offset:
            continue  # before the offset asked: a broker answers from the batch holding it
        out.append((batch.base_offset, rewrite_for_local(batch, *writer)))
        offset = batch.next_offset
    return out, offset


class Notes:
    """What ``--notes`` keeps: rows of (kind, topic, partition, offset, wall-clock seconds)."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.rows: list[tuple[str, str, int, int, float]] = []

    def note(self, kind: str, partition: int, offset: int) -> None:
        self.rows.append((kind, self.topic, partition, offset, time.time()))

    def dump(self, path: str) -> None:
        with open(path, "w") as out:
            json.dump({"rows": self.rows}, out)


NOTES: Notes | None = None  # set by ``--notes``
WORK_S = 0.0  # set by ``--work-us``: busy time before each answer's writes
POST_S = 0.0  # set by ``--post-us``: busy time as each produce answer is read
GAP_S = 0.0  # set by ``--gap-us``: busy time between an answer's writes and its next poll
POLL_FIRST = False  # set by ``--poll-first``: the next poll written before an answer's writes
CHECKS = False  # set by ``--checks``: syncer's checks of each answer and write (``Checks``)
# the brokers' default producer.id.expiration.ms (the bench's brokers keep it)
PRODUCER_EXPIRY_MS = 86_400_000


class Refused(Exception):
    """What syncer's checks refuse to write (the floor exits naming it)."""


class Checks:
    """syncer's own checks of one partition's answers and writes (``--checks``, the
    ``floor+checks`` rounds), made with syncer's functions in the floor's one callback: what
    keeping syncer's invariants costs a copier with none of syncer's other machinery. Before
    the writes of an answer: the remote's ends (a remote that lost records copied from it:
    ``PartitionSources.shrunk``), the scan for holes, aborted data, control batches and the
    stable end (``holes.scan``), and for each write whether the broker is known to hold the
    producer state to pipeline it (``StateClock.may_pipeline``: syncer would wait there;
    the floor counts it). Each produce answer is judged (``alignment.judge``): anything but
    landed at its source offset is refused."""

    REMOTE = "remote"

    def __init__(self, topic: str, partition: int) -> None:
        tp = TP(topic, partition)
        self.sources = PartitionSources(tp, {self.REMOTE: SourceHealth(self.REMOTE, 0)})
        self.clock = StateClock(PRODUCER_EXPIRY_MS)
        self.proven_at: int | None = None  # the max timestamp of the last write landed
        self.in_flight: deque[int] = deque()  # max timestamps of the writes unanswered
        self.would_wait = 0  # writes syncer would have held until the ones before landed

    def writes_of(
        self, part: FetchedById, offset: int, writer: tuple[int, int]
    ) -> tuple[list[tuple[int, bytes | bytearray]], int]:
        """``writes_of`` with syncer's checks before the writes; raises Refused."""
        stable = part.last_stable_offset
        stable = stable if stable >= 0 else part.high_watermark
        self.sources.update_end(self.REMOTE, RemoteEnds(part.log_start_offset, stable))
        if self.sources.shrunk(offset, time.monotonic()):
            raise Refused(f"the remote's end {stable} is below the {offset} copied")
        found = scan(split_batches(part.records), offset, limit=stable, aborted=part.aborted)
        if found.hole is not None:
            raise Refused(found.hole.describe())
        if found.trim_first is not None:
            raise Refused(f"a batch starts below {offset}: the floor polls at batch borders")
        now_ms = int(time.time() * 1000)
        out = []
        for batch in found.writable:
            assert isinstance(batch, Batch)  # no filler: holes are refused above
            if self.in_flight and not self.clock.may_pipeline(
                self.proven_at, self.in_flight, now_ms
            ):
                self.would_wait += 1
            self.in_flight.append(batch.max_timestamp)
            out.append((batch.base_offset, rewrite_for_local(batch, *writer)))
        return out, found.next_offset

    def landed(self, source: int, error_code: int, base_offset: int) -> None:
        """The answer to the write of ``source``; raises Refused unless it landed there."""
        verdict = judge(source, error_code, base_offset, False)
        if verdict.outcome is not Outcome.LANDED:
            raise Refused(f"the write of {source}: {verdict.outcome.value}")
        self.proven_at = self.in_flight.popleft()


def work(seconds: float) -> None:
    """Keep the loop busy for ``seconds``, as a copier's own Python does before a write
    (``WORK_S``) or as it judges and counts an answered one (``POST_S``)."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def fail(why: str) -> None:
    print(f"floor: {why}", file=sys.stderr, flush=True)
    os._exit(3)


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


class Writes(Framed):
    """A connection to local, one batch per request: each answer is checked against the
    partition and source offset of the batch it answers (a connection answers in order)."""

    def __init__(self) -> None:
        super().__init__(self.produced)
        # (partition, source offset, its checks with --checks)
        self.expected: deque[tuple[int, int, Checks | None]] = deque()

    def send(
        self,
        topic_id: uuid.UUID,
        partition: int,
        source: int,
        batch: bytes | bytearray,
        checks: Checks | None = None,
    ) -> None:
        topics = {topic_id: [(partition, batch)]}
        self.transport.writelines(produce_v13_frame(self.next_id(), "floor", -1, 30_000, topics))
        self.expected.append((partition, source, checks))
        if NOTES is not None:
            NOTES.note("written", partition, source)

    def produced(self, answer: bytes) -> None:
        partition, source, checks = self.expected.popleft()
        if NOTES is not None:
            NOTES.note("answered", partition, source)
        response = ProduceResponse_v13.decode(BytesIO(answer[_HEADER_V1:]))
        for _topic, partitions, *_ in response.responses:
            for index, code, base_offset, *_ in partitions:
                if code:
                    fail(f"produce of offset {source} to partition {index} answered error {code}")
                if (index, base_offset) != (partition, source):
                    fail(
                        f"partition {partition}: the batch of source offset {source} landed"
                        f" at local offset {base_offset} of partition {index}"
                    )
                if checks is not None:
                    try:
                        checks.landed(source, code, base_offset)
                    except Refused as exc:
                        fail(f"partition {partition}: {exc}")
        if POST_S:
            work(POST_S)


class Partition:
    """One partition's poll, and the writes of what it brings."""

    def __init__(
        self, number: int, ids: tuple[uuid.UUID, uuid.UUID], writer: tuple[int, int]
    ) -> None:
        self.number, (self.remote_id, self.local_id), self.writer = number, ids, writer
        self.offset = 0
        self.fetch: Framed | None = None
        self.write: Writes | None = None
        self.checks = Checks("floor", number) if CHECKS else None

    def poll(self) -> None:
        assert self.fetch is not None and self.fetch.transport is not None
        ask = {self.remote_id: [(self.number, self.offset, FETCH_BYTES)]}
        frame = fetch_v13_frame(
            self.fetch.next_id(), "floor", POLL_WAIT_MS, FETCH_BYTES, READ_COMMITTED, ask
        )
        self.fetch.transport.write(frame)

    def fetched(self, answer: bytes) -> None:
        assert self.write is not None
        wrote = False
        for part in read_fetch_v13(answer, _HEADER_V1).partitions:
            if part.error_code:
                fail(f"fetch of partition {self.number} answered error {part.error_code}")
            if NOTES is not None and part.records:
                NOTES.note("fetch", self.number, self.offset)
            if WORK_S and part.records and not POLL_FIRST:
                work(WORK_S)
            if self.checks is not None and part.records:
                try:
                    writes, self.offset = self.checks.writes_of(part, self.offset, self.writer)
                except Refused as exc:
                    fail(f"partition {self.number}: {exc}")
            else:
                writes, self.offset = writes_of(part.records, self.offset, self.writer)
            if POLL_FIRST:
                self.poll()  # then the time before the writes (``WORK_S``)
                if WORK_S and part.records:
                    work(WORK_S)
            for source, batch in writes:
                self.write.send(self.local_id, self.number, source, batch, self.checks)
                wrote = True
        if POLL_FIRST:
            return
        if GAP_S and wrote:
            work(GAP_S)
        self.poll()


async def topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    async with Cluster(ClusterConfig(bootstrap, name="floor"), role="floor") as cluster:
        ids = await cluster.topic_ids([topic])
    if not ids or topic not in ids:
        fail(f"no id for {topic} at {bootstrap}")
    assert ids is not None
    return ids[topic]


async def copy(remote: str, local: str, topic: str, partitions: int) -> None:
    ids = await topic_id(remote, topic), await topic_id(local, topic)
    async with Cluster(ClusterConfig(local, name="floor"), role="floor") as cluster:
        writer = await cluster.init_producer_id()
    loop = asyncio.get_running_loop()
    r_host, r_port = remote.rsplit(":", 1)
    l_host, l_port = local.rsplit(":", 1)
    writes = []
    for _ in range(WRITE_CONNECTIONS):
        _t, conn = await loop.create_connection(Writes, l_host, int(l_port))
        writes.append(conn)
    for number in range(partitions):
        part = Partition(number, ids, writer)
        part.write = writes[number % WRITE_CONNECTIONS]
        _t, part.fetch = await loop.create_connection(
            lambda p=part: Framed(p.fetched), r_host, int(r_port)
        )
        part.poll()
    print("floor: copying", flush=True)
    await asyncio.Event().wait()  # until SIGTERM


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("--remote", "--local", "--topic"):
        parser.add_argument(name, required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--notes", help="note each answer, write and produce answer here")
    parser.add_argument(
        "--work-us",
        type=float,
        default=0.0,
        help="µs of busy Python before each answer's writes (a copier's checks stand-in;"
        " bench-steady's floor+N rounds): what the hop pays for a copier's time before a write",
    )
    parser.add_argument(
        "--post-us",
        type=float,
        default=0.0,
        help="µs of busy Python as each produce answer is read (bench-steady's floor+postN"
        " rounds): what the hop pays for a copier's time after its writes, judging and counting",
    )
    parser.add_argument(
        "--gap-us",
        type=float,
        default=0.0,
        help="µs of busy Python between an answer's writes and its partition's next poll"
        " (bench-steady's floor+gapN rounds): what the hop pays for a copier's time after a"
        " write that holds its next poll back, as syncer's bookkeeping of an answer does",
    )
    parser.add_argument(
        "--poll-first",
        action="store_true",
        help="write each partition's next poll before the writes of what its answer brought"
        " (bench-steady's floor+pollfirst rounds)",
    )
    parser.add_argument(
        "--checks",
        action="store_true",
        help="syncer's checks of each answer and write, by syncer's functions (bench-steady's"
        " floor+checks rounds): what keeping syncer's invariants costs the floor",
    )
    args = parser.parse_args()
    global WORK_S, POST_S, GAP_S, POLL_FIRST, CHECKS
    WORK_S, POST_S, GAP_S = args.work_us / 1e6, args.post_us / 1e6, args.gap_us / 1e6
    POLL_FIRST, CHECKS = args.poll_first, args.checks
    if args.notes:
        global NOTES
        NOTES = Notes(args.topic)
        notes, path = NOTES, args.notes

        def dump_and_exit(_signal: int, _frame: object) -> None:
            notes.dump(path)
            os._exit(0)

        signal.signal(signal.SIGTERM, dump_and_exit)
    uvloop.run(copy(args.remote, args.local, args.topic, args.partitions))


if __name__ == "__main__":
    main()
