"""Benchmark (not a test): bandwidth caps against a backlog far larger than they let through.

For each cap (``remotes[].max_bytes_per_second``), syncer copies a fresh topic whose backlog
would take it well over the measured span; the rate is what the cluster layer counted
fetched per second (apart from the caps' own count), over ``--seconds`` after the first two;
then the copy is stopped and every partition compared batch by batch with the remote over
the offsets copied. One uncapped run shows what the link gives without a cap.

    python -m tests.bench.caps [--caps 5000000,20000000] [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from syncer.syncer import Syncer
from syncer.testbed import ClusterSpec, Testbed
from syncer.testbed.tools import perf_produce
from tests.bench.catchup import machine
from tests.kafka_helpers import create_topic, make_config, partition_digests

PARTITIONS = 8
RECORD_SIZE = 1024
SETTLE_S = 2.0
UNCAPPED_S = 8.0


@dataclasses.dataclass
class Row:
    cap: int  # bytes/s; 0: none
    seconds: float
    fetched: int  # bytes fetched over the measured span
    exact: bool

    @property
    def rate(self) -> float:
        return self.fetched / self.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--caps", default="5000000,20000000", help="bytes/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured span per cap")
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args()
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    args.out.mkdir(parents=True, exist_ok=True)
    caps = [int(c) for c in args.caps.split(",")]
    work = Path(tempfile.mkdtemp(prefix="syncer-bench-caps-"))
    console = Console(width=120)
    bed = Testbed(work / "bed")
    try:
        bed.up([ClusterSpec("local"), ClusterSpec("east")])
        local, east = bed.clusters["local"].bootstrap, bed.clusters["east"].bootstrap
        rows = []
        for cap in [*caps, 0]:
            seconds = args.seconds if cap else UNCAPPED_S
            topic = f"bench.cap{cap}"
            # enough that the copy is still behind when the span ends (uncapped: a guess)
            size = int((cap or 60_000_000) * (seconds + SETTLE_S) * 1.3)
            asyncio.run(create_topic(east, topic, PARTITIONS))
            console.print(f"{topic}: writing {size / 1e6:.0f} MB ...")
            perf_produce(
                east, topic, records=size // RECORD_SIZE, record_size=RECORD_SIZE, jars=bed.jars
            )
            rows.append(asyncio.run(measure(console, local, east, topic, cap, seconds)))
        report(console, args, rows)
    finally:
        bed.down()
        shutil.rmtree(work, ignore_errors=True)


async def measure(
    console: Console, local: str, east: str, topic: str, cap: int, seconds: float
) -> Row:
    config = make_config(local, {"east": east}, [topic])
    remote = dataclasses.replace(config.remotes[0], max_bytes_per_second=cap)
    syncer = Syncer(dataclasses.replace(config, remotes=(remote,)))

    def fetched() -> int:
        return sum(sum(r.fetched_by_node.values()) for r in syncer.snapshot().remotes)

    async with syncer:
        copying = asyncio.create_task(syncer.catch_up())
        await asyncio.sleep(SETTLE_S)
        start, first = time.monotonic(), fetched()
        label = f"cap {cap / 1e6:.0f} MB/s" if cap else "no cap"
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task(label, total=seconds)
            while (elapsed := time.monotonic() - start) < seconds and not copying.done():
                progress.update(task, completed=elapsed)
                await asyncio.sleep(0.2)
        span, taken = time.monotonic() - start, fetched() - first
        if copying.done() and cap:
            raise RuntimeError(f"{topic}: the backlog ran out before the span ended")
        await syncer.stop()
        await copying
    exact = True
    for partition in range(PARTITIONS):
        here = await partition_digests(local, topic, partition)
        there = (await partition_digests(east, topic, partition))[: len(here)]
        if here != there or not here:
            differ = next(
                (i for i, (a, b) in enumerate(zip(here, there, strict=False)) if a != b), None
            )
            console.print(f"{topic}[{partition}]: {len(here)} records, first differing: {differ}")
        exact = exact and here == there and bool(here)
    return Row(cap, span, taken, exact)


def report(console: Console, args: argparse.Namespace, rows: list[Row]) -> None:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    table = Table(title=f"bandwidth caps, {PARTITIONS} partitions of 1 KiB records · {when}")
    for column in ("cap MB/s", "measured s", "MB/s", "rate / cap", "copy exact"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            f"{row.cap / 1e6:.1f}" if row.cap else "none",
            f"{row.seconds:.1f}",
            f"{row.rate / 1e6:.2f}",
            f"{row.rate / row.cap:.3f}" if row.cap else "-",
            "yes" if row.exact else "NO",
        )
    console.print(table)
    out = args.out / "bench-caps.json"
    doc = {
        "benchmark": "caps",
        "date": when,
        "machine": machine(),
        "rows": [
            {
                "cap": r.cap,
                "seconds": r.seconds,
                "mb_per_s": r.rate / 1e6,
                "ratio": r.rate / r.cap if r.cap else None,
                "exact": r.exact,
            }
            for r in rows
        ],
    }
    out.write_text(json.dumps(doc, indent=2) + "\n")
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
