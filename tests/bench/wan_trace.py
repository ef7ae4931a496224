"""What ``bench-wan`` measures besides the copy: each lane's fetches timed in-process (where a
copy over lanes spends its time), and the proxy's own ceiling (what it carries over N capped
connections with no Kafka behind it, so a shortfall of the copier can be told from one of
this machine's proxy)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from syncer import Config, Syncer
from syncer.batches import split_batches
from syncer.clusters import TP, FetchedPartition
from syncer.fetcher import Fetcher
from syncer.testbed.bed import free_port
from tests.bench.peers import start_proxy


@dataclass(frozen=True)
class Answer:
    lane: int
    partition: int
    offset: int
    asked: int | None
    queued: float  # when the copier asked its lane (seconds from launch)
    answered: float
    nbytes: int
    first: int  # the first batch's base offset (``offset`` if none)
    covered: int  # one past the last whole batch (``offset`` if none)


def brought_again(answers: list[Answer]) -> int:
    """Offsets that more than one answer brought (whole batches), over all partitions."""
    again = 0
    for partition in {a.partition for a in answers}:
        reach = -1
        spans = sorted((a.first, a.covered) for a in answers if a.partition == partition)
        for first, covered in spans:
            again += max(0, min(covered, reach) - first)
            reach = max(reach, covered)
    return again


def busy_seconds(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of ``spans`` (a lane with a fetch asked or out)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


@dataclass
class Trace:
    label: str
    lanes: int
    backlog: int  # bytes of records to copy (what crossing the link more than once wastes)
    launched: float = 0.0
    done: float = 0.0  # seconds from launch
    answers: list[Answer] = field(default_factory=list)

    def summary(self, rate: int) -> dict[str, Any]:
        got = [a for a in self.answers if a.nbytes]
        first = min(a.answered for a in got)
        last = max(a.answered for a in got)
        total = sum(a.nbytes for a in got)
        span = last - first
        per_lane = []
        for lane in range(self.lanes):
            mine = [a for a in got if a.lane == lane]
            per_lane.append(
                {
                    "lane": lane,
                    "fetches": len(mine),
                    "bytes": sum(a.nbytes for a in mine),
                    "busy_s": busy_seconds([(a.queued, a.answered) for a in mine]),
                    "last_answer_s": max((a.answered for a in mine), default=0.0),
                }
            )
        lasts = sorted(lane["last_answer_s"] for lane in per_lane)
        return {
            "label": self.label,
            "lanes": self.lanes,
            "launch_to_first_answer_s": first,
            "first_to_last_answer_s": span,
            "last_answer_to_done_s": self.done - last,
            "launch_to_done_s": self.done,
            "fetched_bytes": total,
            "fetched_over_backlog": total / self.backlog,
            # the link's use: bytes it carried over the span, the first answer's excluded
            # (all lanes fetched it before the span began)
            "link_share_first_to_last": (total - sum(a.nbytes for a in got if a.answered == first))
            / max(span, 1e-9)
            / (self.lanes * rate),
            "share_of_cap_launch_to_done": self.backlog / self.done / (self.lanes * rate),
            "median_lane_done_s": lasts[len(lasts) // 2],
            "first_lane_done_s": lasts[0],
            "small_answers": sum(1 for a in got if a.nbytes < 0.5 * max(b.nbytes for b in got)),
            "fetches": len(self.answers),
            # offsets brought by more than one answer: each such record crossed the link twice
            "records_brought_again": brought_again(self.answers),
            "per_lane": per_lane,
        }

    def print(self, console: Console, rate: int) -> None:
        s = self.summary(rate)
        console.print(
            f"[bold]{self.label}[/] traced: launch→first answer"
            f" {s['launch_to_first_answer_s']:.2f} s, first→last answer"
            f" {s['first_to_last_answer_s']:.2f} s"
            f" (link busy {100 * s['link_share_first_to_last']:.0f}% of cap), fetched"
            f" {s['fetched_over_backlog']:.2f}× the backlog, last answer→done"
            f" {s['last_answer_to_done_s']:.2f} s, launch→done {s['launch_to_done_s']:.2f} s"
            f" ({100 * s['share_of_cap_launch_to_done']:.0f}% of cap); first lane done"
            f" {s['first_lane_done_s']:.2f} s, median {s['median_lane_done_s']:.2f} s;"
            f" {s['fetches']} fetches, {s['small_answers']} under half the largest"
        )
        table = Table(title=f"{self.label}: per lane")
        for column in ("lane", "fetches", "MB", "busy s", "busy % of first→last", "last answer s"):
            table.add_column(column, justify="right")
        span = s["first_to_last_answer_s"] + s["launch_to_first_answer_s"]
        for lane in s["per_lane"]:
            table.add_row(
                str(lane["lane"]),
                str(lane["fetches"]),
                f"{lane['bytes'] / 1e6:.2f}",
                f"{lane['busy_s']:.2f}",
                f"{100 * lane['busy_s'] / span:.0f}%",
                f"{lane['last_answer_s']:.2f}",
            )
        console.print(table)


@contextmanager
def timed_lanes(trace: Trace) -> Iterator[None]:
    """Every Fetcher.fetch of this process timed into ``trace``; lanes numbered as they first
    fetch."""
    original = Fetcher.fetch
    numbers: dict[int, int] = {}

    async def fetch(
        self: Fetcher, tp: TP, offset: int, max_bytes: int | None = None, **kw: Any
    ) -> FetchedPartition:
        lane = numbers.setdefault(id(self), len(numbers))
        queued = time.monotonic() - trace.launched
        got = await original(self, tp, offset, max_bytes, **kw)
        answered = time.monotonic() - trace.launched
        batches = split_batches(got.records)
        first = batches[0].base_offset if batches else offset
        covered = batches[-1].next_offset if batches else offset
        trace.answers.append(
            Answer(
                lane,
                tp.partition,
                offset,
                max_bytes,
                queued,
                answered,
                len(got.records),
                first,
                covered,
            )
        )
        return got

    Fetcher.fetch = fetch  # type: ignore[method-assign]
    try:
        yield
    finally:
        Fetcher.fetch = original  # type: ignore[method-assign]


def traced_copy(
    local: str,
    remote: str | dict[str, str],
    topic: str,
    lanes: int,
    copier: dict[str, int],
    label: str,
    backlog: int,
) -> Trace:
    """Catch ``topic`` up in this process over ``lanes`` lanes to each remote (``remote``: one
    bootstrap, or remote name → bootstrap), every fetch timed."""
    remotes = {"far": remote} if isinstance(remote, str) else remote
    config = Config.from_dict(
        {
            "local": {"bootstrap_servers": local},
            "remotes": [
                {"name": name, "bootstrap_servers": bootstrap, "connections": lanes}
                for name, bootstrap in remotes.items()
            ],
            "topics": {"include": [topic]},
            "copier": copier,
        }
    )
    trace = Trace(label, lanes * len(remotes), backlog)

    async def copy() -> None:
        async with Syncer(config) as syncer:
            summary = await syncer.catch_up()
            assert not summary.halted, summary

    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    handler = logging.FileHandler(f"/tmp/{topic}.log")  # why a fetch failed, if one did
    handler.setFormatter(logging.Formatter("%(relativeCreated)d %(levelname)s %(message)s"))
    logging.getLogger("syncer").addHandler(handler)
    # SYNCER_TRACE_LEVEL=DEBUG: every step, to see where the time before the first answer goes
    logging.getLogger("syncer").setLevel(os.environ.get("SYNCER_TRACE_LEVEL", "INFO"))
    with timed_lanes(trace):
        trace.launched = time.monotonic()
        asyncio.run(copy())
        trace.done = time.monotonic() - trace.launched
    return trace


def proxy_ceiling(connections: int, rate: int, latency_ms: float, seconds: float = 4.0) -> float:
    """Bytes/s the test bed's proxy (its own process, as in the bench) carries over
    ``connections`` connections at ``rate`` each, fed by a server that only sends zeros and
    read by a plain reader that only counts: the most any copier could get through it here."""
    return asyncio.run(_ceiling(connections, rate, latency_ms, seconds))


async def _ceiling(connections: int, rate: int, latency_ms: float, seconds: float) -> float:
    block = bytes(65536)
    sending: list[asyncio.StreamWriter] = []

    async def serve(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sending.append(writer)
        try:
            while True:
                writer.write(block)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    target = server.sockets[0].getsockname()[1]
    port = free_port()
    proxy = start_proxy(port, f"127.0.0.1:{target}", rate=rate, latency_ms=latency_ms)
    counted = [0]
    counting = asyncio.Event()

    async def read() -> None:
        for _ in range(100):
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                await asyncio.sleep(0.1)
        else:
            raise RuntimeError("the proxy never listened")
        try:
            while data := await reader.read(1 << 20):
                if counting.is_set():
                    counted[0] += len(data)
        finally:
            writer.close()

    readers = [asyncio.create_task(read()) for _ in range(connections)]
    try:
        await asyncio.sleep(1.5)  # connected, past the first round trip and the bucket's burst
        counting.set()
        started = time.monotonic()
        await asyncio.sleep(seconds)
        return counted[0] / (time.monotonic() - started)
    finally:
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        proxy.terminate()
        proxy.wait(10)
        for writer in sending:
            writer.transport.abort()  # the senders' drains fail now, ending them
        server.close()
        await asyncio.sleep(0.1)
