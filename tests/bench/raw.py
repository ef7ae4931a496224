"""Benchmark helper (not a test): L_raw, what the two brokers can do with syncer's bytes.

(a) serve: the remote serves a topic's backlog as raw fetches, bytes discarded: each process
    holds one connection to the leader with ``fetch_connections.PIPELINE`` requests in
    flight, each a no-wait fetch of every partition it still reads (``CopierConfig`` sizes:
    4 MiB a request, 1 MiB a partition), as syncer's data connection does. A partition's offsets are
    cut into one segment per request in flight (syncer's chunks do the same), so the second
    request need not wait for the first's answer to know where to read.
(b) append: the local broker appends the same batches, stamped exactly as syncer's writer
    stamps them (``batches.rewrite_for_local``: one idempotent producer id from
    InitProducerId, sequence = offset mod 2^31, fresh CRC), fed from memory (loaded before
    the clock starts): each process holds one acks=all connection with
    ``CopierConfig.max_in_flight`` produce requests in flight, each carrying the next batch
    of every partition it writes, as ``writer.Writer`` coalesces them (the catch-up bench
    runs as many processes as the writer has connections to a broker, ``WRITE_CONNECTIONS``).

L_raw = min(a, b), in MB/s of the case's uncompressed payload (as the catch-up bench counts
syncer), so the ratio syncer / L_raw compares like with like.

Why Python over raw sockets and not a compiled tool: the work per byte is the kernel's
(``recv_into`` one reused buffer, ``sendmsg`` of the stamped batches without joining them);
the Python per request is a few struct unpacks per partition, tens of microseconds against
megabytes moved. Each process reports its CPU seconds over its timed part, so a run shows
whether the tool was near a core; ``--procs`` splits the partitions over more processes
(and connections) to show the figure does not grow when the tool gets more room.

The catch-up bench's clusters are one node each: every request goes to the bootstrap
broker, which leads every partition (any other answer is an error here, and raises).

    python -m tests.bench.raw --remote HOST:PORT --local HOST:PORT --topic T --partitions N
        --bytes PAYLOAD_BYTES [--procs 1]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import multiprocessing.queues
import multiprocessing.synchronize
import queue
import resource
import socket
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import TypeVar

from aiokafka.structs import TopicPartition

from syncer.batches import rewrite_for_local, split_batches
from syncer.clusters import Cluster
from syncer.config import ClusterConfig, CopierConfig
from syncer.fetch_connections import PIPELINE
from syncer.writer import PRODUCE_TIMEOUT_MS

T = TypeVar("T")
BrokerClock = Callable[[], dict[str, float]]  # each broker's CPU seconds so far, by cluster
FETCH, PRODUCE = 1, 0
FETCH_V, PRODUCE_V = 11, 8  # the last versions that are not flexible: plain structs
READ_COMMITTED = 1
CLIENT = b"raw-limit"
COPIER = CopierConfig()

_I8, _I16, _I32, _I64 = (struct.Struct(f">{c}") for c in "bhiq")
_BATCH_HEAD = struct.Struct(">qi")  # base offset, length
_LAST_DELTA_AT = 23  # in a v2 batch: base offset 8, length 4, epoch 4, magic 1, crc 4, attrs 2


def _string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return _I16.pack(len(raw)) + raw


def _header(api: int, version: int, correlation: int) -> bytes:
    return struct.pack(">hhi", api, version, correlation) + _string(CLIENT)


class Connection:
    """One blocking socket speaking the framing: 4-byte size, then the message. Answers are
    read into one buffer that is reused (and grown), so discarded bytes are never copied."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray(8 * 1024 * 1024)
        self.correlation = 0

    def send(self, api: int, version: int, parts: Sequence[bytes | memoryview]) -> None:
        self.correlation += 1
        head = _header(api, version, self.correlation)
        size = len(head) + sum(len(p) for p in parts)
        pending = [memoryview(_I32.pack(size) + head), *map(memoryview, parts)]
        while pending:  # sendmsg may take only part of the buffers
            sent = self.sock.sendmsg(pending)
            while pending and sent >= len(pending[0]):
                sent -= len(pending[0])
                pending.pop(0)
            if sent:
                pending[0] = pending[0][sent:]

    def receive(self) -> memoryview:
        """The next answer's body (after its correlation id), valid until the next call."""
        size = _I32.unpack(self._read(4, 0))[0]
        if size > len(self.buffer):
            self.buffer = bytearray(size)
        view = self._read(size, 0)
        return view[4:]

    def _read(self, n: int, at: int) -> memoryview:
        view = memoryview(self.buffer)
        got = 0
        while got < n:
            read = self.sock.recv_into(view[at + got : at + n], n - got)
            if not read:
                raise ConnectionError("broker closed the connection")
            got += read
        return view[at : at + n]

    def close(self) -> None:
        self.sock.close()


class Reader:
    """Sequential reads of a non-flexible response body."""

    def __init__(self, body: memoryview) -> None:
        self.body = body
        self.at = 0

    def take(self, s: struct.Struct) -> int:
        value: int = s.unpack_from(self.body, self.at)[0]
        self.at += s.size
        return value

    def skip_string(self) -> None:
        n = self.take(_I16)
        self.at += max(n, 0)

    def blob(self) -> memoryview:
        n = self.take(_I32)
        start, self.at = self.at, self.at + max(n, 0)
        return self.body[start : self.at]


# (a) serve ---------------------------------------------------------------------------------


def fetch_request(topic: str, wants: Sequence[tuple[int, int]]) -> bytes:
    """Fetch v11, no session, no wait, read_committed: (partition, offset) each."""
    head = struct.pack(
        ">iiiibii", -1, 0, 1, COPIER.fetch_max_bytes, READ_COMMITTED, 0, -1
    ) + _I32.pack(1)
    parts = b"".join(
        struct.pack(">iiqqi", p, -1, offset, -1, COPIER.partition_fetch_max_bytes)
        for p, offset in wants
    )
    return head + _string(topic) + _I32.pack(len(wants)) + parts + _I32.pack(0) + _string("")


def next_offsets(body: memoryview) -> Iterator[tuple[int, int, int]]:
    """(partition, next offset after the whole batches returned or -1, bytes) per partition
    of a Fetch v11 answer; raises on any error."""
    r = Reader(body)
    r.take(_I32)  # throttle
    if code := r.take(_I16):
        raise RuntimeError(f"fetch error {code}")
    r.take(_I32)  # session
    for _ in range(r.take(_I32)):
        r.skip_string()
        for _ in range(r.take(_I32)):
            partition, code = r.take(_I32), r.take(_I16)
            if code:
                raise RuntimeError(f"fetch error {code} on partition {partition}")
            r.at += 24  # high watermark, last stable offset, log start
            aborted = r.take(_I32)
            r.at += 16 * max(aborted, 0)
            r.take(_I32)  # preferred read replica
            records = r.blob()
            yield partition, _end_of_whole_batches(records), len(records)


def _end_of_whole_batches(records: memoryview) -> int:
    at, end = 0, -1
    while at + 12 <= len(records):
        base, length = _BATCH_HEAD.unpack_from(records, at)
        if at + 12 + length > len(records):
            break  # cut at the size limit: fetched again next time
        end = base + _I32.unpack_from(records, at + _LAST_DELTA_AT)[0] + 1
        at += 12 + length
    return end


def serve(
    remote: str,
    topic: str,
    ends: dict[int, int],
    start: Start,
) -> None:
    """Read partitions ``ends`` (partition → end offset) from 0 with PIPELINE lanes on one
    connection; puts (finish time, CPU seconds of the timed part, bytes received)."""
    conn = Connection(remote)
    lanes: list[dict[int, list[int]]] = []  # per lane: partition → [cursor, stop]
    for lane in range(PIPELINE):
        lanes.append(
            {
                p: [end * lane // PIPELINE, end * (lane + 1) // PIPELINE]
                for p, end in ends.items()
                if end * lane // PIPELINE < end * (lane + 1) // PIPELINE
            }
        )
    start.wait()
    cpu = _cpu()
    received, turn, queue = 0, 0, []
    requests = 0

    def ask(lane: int) -> None:
        nonlocal turn, requests
        requests += 1
        wants = sorted((p, c[0]) for p, c in lanes[lane].items())
        turn += 1
        wants = wants[turn % len(wants) :] + wants[: turn % len(wants)]  # fair order
        conn.send(FETCH, FETCH_V, [fetch_request(topic, wants)])
        queue.append(lane)

    for lane in range(PIPELINE):
        if lanes[lane]:
            ask(lane)
    while queue:
        lane = queue.pop(0)
        cursors = lanes[lane]
        for partition, end, size in next_offsets(conn.receive()):
            received += size
            if end > 0:
                cursors[partition][0] = end
                if end >= cursors[partition][1]:
                    del cursors[partition]
        if cursors:
            ask(lane)
    finished = time.monotonic()
    start.results.put((finished, _cpu() - cpu, received, {"requests": requests}))
    conn.close()


# (b) append --------------------------------------------------------------------------------


def load(
    remote: str, topic: str, ends: dict[int, int], writer: tuple[int, int]
) -> dict[int, list[bytes]]:
    """Every batch of partitions ``ends``, stamped as syncer's writer stamps them."""
    conn = Connection(remote)
    cursors = dict.fromkeys(ends, 0)
    out: dict[int, list[bytes]] = {p: [] for p in ends}
    while any(cursors[p] < ends[p] for p in ends):
        for p in ends:
            if cursors[p] >= ends[p]:
                continue
            conn.send(FETCH, FETCH_V, [fetch_request(topic, [(p, cursors[p])])])
            records = _records_of_only_partition(conn.receive())
            was = cursors[p]
            for batch in split_batches(records):
                if batch.base_offset >= cursors[p]:
                    out[p].append(rewrite_for_local(batch, *writer))
                    cursors[p] = batch.next_offset
            if cursors[p] == was:
                raise RuntimeError(f"partition {p}: no whole batch at offset {was}")
    conn.close()
    return out


def _records_of_only_partition(body: memoryview) -> bytes:
    r = Reader(body)
    r.take(_I32)
    if code := r.take(_I16):
        raise RuntimeError(f"fetch error {code}")
    r.take(_I32)
    r.take(_I32)  # one topic
    r.skip_string()
    r.take(_I32)  # one partition
    partition, code = r.take(_I32), r.take(_I16)
    if code:
        raise RuntimeError(f"fetch error {code} on partition {partition}")
    r.at += 24  # high watermark, last stable offset, log start
    aborted = r.take(_I32)  # (not inline: ``r.at += ...`` would read ``at`` before it moves)
    r.at += 16 * max(aborted, 0)
    r.take(_I32)  # preferred read replica
    return bytes(r.blob())


def produce_parts(topic: str, batches: Sequence[tuple[int, bytes]]) -> list[bytes]:
    """Produce v8, acks=all, no transaction: one batch per partition."""
    parts = [
        struct.pack(">hhi", -1, -1, PRODUCE_TIMEOUT_MS)
        + _I32.pack(1)
        + _string(topic)
        + _I32.pack(len(batches))
    ]
    for partition, batch in batches:
        parts += [struct.pack(">ii", partition, len(batch)), batch]
    return parts


def check_produced(body: memoryview, expected: dict[int, int]) -> None:
    """Every partition landed at the offset it was stamped for (the sequence is the offset)."""
    r = Reader(body)
    for _ in range(r.take(_I32)):
        r.skip_string()
        for _ in range(r.take(_I32)):
            partition, code, base = r.take(_I32), r.take(_I16), r.take(_I64)
            if code or base != expected[partition]:
                raise RuntimeError(f"partition {partition}: error {code}, landed at {base}")
            r.at += 16  # log append time, log start offset
            for _ in range(r.take(_I32)):
                r.take(_I32)
                r.skip_string()
            r.skip_string()


def append(
    local: str,
    remote: str,
    topic: str,
    local_topic: str,
    ends: dict[int, int],
    writer: tuple[int, int],
    cap: int | None,
    start: Start,
) -> None:
    """Load partitions ``ends`` into memory, then (after the barrier) write them to
    ``local_topic`` with max_in_flight requests on one connection; puts (finish time, CPU
    seconds of the timed part, bytes sent). ``cap``: at most that many batches a request
    (partitions in turn), to see what smaller requests cost the broker."""
    queues = {
        p: list(reversed(batches)) for p, batches in load(remote, topic, ends, writer).items()
    }
    conn = Connection(local)
    start.wait()
    cpu = _cpu()
    sent, in_flight = 0, []
    # requests, batches, and the seconds of each request from written to answer read
    counts = {"requests": 0, "batches": 0, "request_s": 0.0}
    while True:
        while queues and len(in_flight) < COPIER.max_in_flight:
            order = sorted(queues)
            turn = int(counts["requests"]) % len(order)
            order = (order[turn:] + order[:turn])[:cap]
            batches = [(p, queues[p].pop()) for p in sorted(order)]
            queues = {p: q for p, q in queues.items() if q}
            conn.send(PRODUCE, PRODUCE_V, produce_parts(local_topic, batches))
            in_flight.append(({p: _landing_offset(b) for p, b in batches}, time.monotonic()))
            sent += sum(len(b) for _p, b in batches)
            counts["requests"] += 1
            counts["batches"] += len(batches)
        if not in_flight:
            break
        expected, written = in_flight.pop(0)
        check_produced(conn.receive(), expected)
        counts["request_s"] += time.monotonic() - written
    finished = time.monotonic()
    start.results.put((finished, _cpu() - cpu, sent, counts))
    conn.close()


# a stamped batch carries base offset 0 (as producers send); where it must land is its base
# sequence (the source offset, < 2^31 in these backlogs), at byte 53
_SEQUENCE_AT = 53


def _landing_offset(batch: bytes) -> int:
    return int(_I32.unpack_from(batch, _SEQUENCE_AT)[0])


# driver ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    """One timed phase over every process: wall seconds from the barrier to the last
    process done, and each process's CPU seconds over its part."""

    seconds: float
    cpu_seconds: tuple[float, ...]
    wire_bytes: int  # as the brokers moved them (compressed where the batches are)
    # CPU seconds each broker JVM spent over the timed part, by cluster name ("east", ...)
    broker_cpu_s: dict[str, float] = field(default_factory=dict)
    # summed over the processes: requests, and for appends batches and request seconds
    counts: dict[str, float] = field(default_factory=dict)

    def per_request(self) -> dict[str, float]:
        """Bytes, batches and seconds (written to answered) per request, and requests in
        flight on average (each connection keeps max_in_flight until its last requests)."""
        n = self.counts.get("requests", 0)
        if not n:
            return {}
        out = {"requests": n, "bytes": self.wire_bytes / n}
        if "batches" in self.counts:
            out["batches"] = self.counts["batches"] / n
            out["request_s"] = self.counts["request_s"] / n
            out["in_flight"] = self.counts["request_s"] / self.seconds
        return out

    @property
    def max_cpu_share(self) -> float:
        """The busiest process's CPU over the phase's wall time (1.0 = a whole core)."""
        return max(self.cpu_seconds) / self.seconds


@dataclass(frozen=True)
class RawLimit:
    """Each phase run ``repeats`` times in a row; the fastest run of each counts (the first
    may pay the broker's warm-up for this case's codec and sizes: "as fast as it can")."""

    serves: tuple[Phase, ...]
    appends: tuple[Phase, ...]
    payload_bytes: int
    procs: int

    @property
    def serve(self) -> Phase:
        return min(self.serves, key=lambda p: p.seconds)

    @property
    def append(self) -> Phase:
        return min(self.appends, key=lambda p: p.seconds)

    @property
    def serve_mb_per_s(self) -> float:
        return self.payload_bytes / 1e6 / self.serve.seconds

    @property
    def append_mb_per_s(self) -> float:
        return self.payload_bytes / 1e6 / self.append.seconds

    @property
    def mb_per_s(self) -> float:
        return min(self.serve_mb_per_s, self.append_mb_per_s)

    def as_dict(self) -> dict[str, object]:
        return {
            "serve_mb_per_s": self.serve_mb_per_s,
            "append_mb_per_s": self.append_mb_per_s,
            "l_raw_mb_per_s": self.mb_per_s,
            "serve_seconds": self.serve.seconds,
            "append_seconds": self.append.seconds,
            "serve_tool_cpu_share": self.serve.max_cpu_share,
            "append_tool_cpu_share": self.append.max_cpu_share,
            "serve_wire_bytes": self.serve.wire_bytes,
            "append_wire_bytes": self.append.wire_bytes,
            "procs": self.procs,
            "serve_runs_mb_per_s": [self.payload_bytes / 1e6 / p.seconds for p in self.serves],
            "append_runs_mb_per_s": [self.payload_bytes / 1e6 / p.seconds for p in self.appends],
            # each broker's CPU seconds per GB of payload in the phase's counted run
            "serve_broker_cpu_s_per_gb": self.per_gb(self.serve),
            "append_broker_cpu_s_per_gb": self.per_gb(self.append),
            # per request of the counted runs: bytes, batches, seconds, and in flight
            "serve_per_request": self.serve.per_request(),
            "append_per_request": self.append.per_request(),
        }

    def per_gb(self, phase: Phase) -> dict[str, float]:
        return {name: s / (self.payload_bytes / 1e9) for name, s in phase.broker_cpu_s.items()}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _split(ends: dict[int, int], procs: int) -> list[dict[int, int]]:
    shares = [{p: e for p, e in ends.items() if p % procs == i} for i in range(procs)]
    return [s for s in shares if s]


@dataclass(frozen=True)
class Start:
    """The workers' start line: each says it is ready (loaded, connected), the driver
    starts the clock and lets them all go; each puts its result."""

    ready: multiprocessing.queues.Queue[int]
    go: multiprocessing.synchronize.Event
    results: multiprocessing.queues.Queue[tuple[float, float, int, dict[str, float]]]

    def wait(self) -> None:
        self.ready.put(1)
        self.go.wait()


def _collect(q: multiprocessing.queues.Queue[T], workers: list[BaseProcess]) -> list[T]:
    """One item from every worker; raises as soon as a worker died instead."""
    out: list[T] = []
    while len(out) < len(workers):
        try:
            out.append(q.get(timeout=1))
        except queue.Empty:
            if any(w.exitcode for w in workers):
                raise RuntimeError("a raw limit worker failed (its traceback is above)") from None
    return out


def _run_phase(
    target: object, shares: list[tuple[object, ...]], brokers: BrokerClock | None = None
) -> Phase:
    """``target`` run on each share's arguments in a process of its own, all started at
    once; None: each share names its own target first."""
    ctx = multiprocessing.get_context("spawn")
    start = Start(ctx.Queue(), ctx.Event(), ctx.Queue())
    jobs = [(target, s) if target is not None else (s[0], s[1:]) for s in shares]
    workers = [ctx.Process(target=t, args=(*s, start), daemon=True) for t, s in jobs]  # type: ignore[arg-type]
    for w in workers:
        w.start()
    try:
        _collect(start.ready, workers)
        before = brokers() if brokers else {}
        started = time.monotonic()
        start.go.set()
        done = _collect(start.results, workers)
        after = brokers() if brokers else {}
    finally:
        for w in workers:
            if w.exitcode is None and not start.go.is_set():
                w.kill()
    for w in workers:
        w.join()
        if w.exitcode:
            raise RuntimeError(f"raw limit worker failed with {w.exitcode}")
    counts: dict[str, float] = {}
    for *_ignored, more in done:
        for key, value in more.items():
            counts[key] = counts.get(key, 0) + value
    return Phase(
        max(f for f, _c, _b, _n in done) - started,
        tuple(c for _f, c, _b, _n in done),
        sum(b for _f, _c, b, _n in done),
        {name: after[name] - before[name] for name in before},
        counts,
    )


async def _ends(remote: str, topic: str, partitions: int) -> dict[int, int]:
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    async with Cluster(ClusterConfig(remote, name="bench"), role="bench") as cluster:
        return {tp.partition: end for tp, end in (await cluster.latest(tps)).items()}


async def _fresh_topic(local: str, topic: str, partitions: int) -> tuple[int, int]:
    """An empty local topic for one append run (the batches are stamped for offsets from 0),
    and the producer id and epoch to stamp them with."""
    from tests.kafka_helpers import create_topic

    await create_topic(local, topic, partitions)
    async with Cluster(ClusterConfig(local, name="bench"), role="bench") as cluster:
        return await cluster.init_producer_id()


async def _delete(local: str, topic: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=local)
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()


def raw_topic(topic: str, run: int = 0) -> str:
    """The local topic an append run writes to (deleted after it)."""
    return f"raw.{topic}.{run}"


def measure(
    remote: str,
    local: str,
    topic: str,
    partitions: int,
    payload_bytes: int,
    *,
    procs: int = 1,
    repeats: int = 2,
    brokers: BrokerClock | None = None,
) -> RawLimit:
    """(a) ``repeats`` times, then (b) ``repeats`` times, on ``topic``'s backlog at
    ``remote``; ``procs`` processes each. ``brokers``: read before and after each timed
    part, for the brokers' CPU in it."""
    shares = _split(asyncio.run(_ends(remote, topic, partitions)), procs)
    served = tuple(
        _run_phase(serve, [(remote, topic, s) for s in shares], brokers) for _ in range(repeats)
    )
    appended = []
    for run in range(repeats):
        target = raw_topic(topic, run)
        writer = asyncio.run(_fresh_topic(local, target, partitions))
        appended.append(
            _run_phase(
                append, [(local, remote, topic, target, s, writer, None) for s in shares], brokers
            )
        )
        asyncio.run(_delete(local, target))
    return RawLimit(served, tuple(appended), payload_bytes, procs)


def measure_append(
    remote: str, local: str, topic: str, partitions: int, cap: int, brokers: BrokerClock
) -> Phase:
    """One append run, one process, at most ``cap`` batches a request."""
    ends = asyncio.run(_ends(remote, topic, partitions))
    target = raw_topic(topic, 100 + cap)
    writer = asyncio.run(_fresh_topic(local, target, partitions))
    phase = _run_phase(append, [(local, remote, topic, target, ends, writer, cap)], brokers)
    asyncio.run(_delete(local, target))
    return phase


def measure_together(
    remote: str, local: str, topic: str, partitions: int, brokers: BrokerClock
) -> Phase:
    """(a) and (b) at once, one process each, as a copy makes the two brokers work at once
    on the same cores: the seconds until both are done (the serving ends first, then the
    appending has the cores to itself). Not L_raw: what the two brokers' work costs the
    machine together, without the copier's own."""
    ends = asyncio.run(_ends(remote, topic, partitions))
    target = raw_topic(topic, 200)
    writer = asyncio.run(_fresh_topic(local, target, partitions))
    jobs: list[tuple[object, ...]] = [
        (serve, remote, topic, ends),
        (append, local, remote, topic, target, ends, writer, None),
    ]
    phase = _run_phase(None, jobs, brokers)
    asyncio.run(_delete(local, target))
    return phase


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--remote", required=True)
    parser.add_argument("--local", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--bytes", type=int, required=True, help="the backlog's payload bytes")
    parser.add_argument("--procs", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    limit = measure(
        args.remote,
        args.local,
        args.topic,
        args.partitions,
        args.bytes,
        procs=args.procs,
        repeats=args.repeats,
    )
    for key, value in limit.as_dict().items():
        print(f"{key}: {value:.3f}" if isinstance(value, float) else f"{key}: {value}")


if __name__ == "__main__":
    main()
