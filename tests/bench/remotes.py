"""Benchmark (not a test): one remote against two and three, each behind a bandwidth-capped
proxy.

Every remote holds an offset-aligned copy of the same topic (west and north are syncer mirrors
of east). syncer reads each remote over one connection, so one remote gives about the proxy's
cap; with more, chunks of every partition are fetched from all of them at once.

    python -m tests.bench.remotes [--records N] [--rate BYTES_PER_S] [--latency-ms MS]
        [--remotes 1,2,3]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import json
import logging
import shutil
import subprocess
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from syncer.config import Config
from syncer.syncer import Syncer
from syncer.testbed import ClusterSpec, Testbed
from syncer.testbed.bed import free_port
from syncer.testbed.tools import perf_produce
from tests.bench.catchup import machine
from tests.bench.peers import Measured, run_syncer, start_proxy
from tests.bench.wan_trace import Trace, traced_copy
from tests.kafka_helpers import create_topic

PARTITIONS = 8
RECORD_SIZE = 1024
REMOTES = ("east", "west", "north")  # east holds the records; the others mirror it


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=120_000)
    parser.add_argument("--rate", type=int, default=2_000_000, help="bytes/s per connection")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="added round trip")
    parser.add_argument(
        "--chunk-bytes", type=int, default=1_048_576, help="copier.partition_fetch_max_bytes"
    )
    parser.add_argument("--max-chunks", type=int, default=8, help="copier.max_chunks")
    parser.add_argument("--remotes", default="1,2,3", help="how many remotes, per run")
    parser.add_argument("--trace", action="store_true", help="also time each fetch in-process")
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args()
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="syncer-bench-remotes-"))
    console = Console(width=132)
    bed = Testbed(work / "bed")
    proxies: list[subprocess.Popen[bytes]] = []
    try:
        counts = [int(n) for n in args.remotes.split(",")]
        names = REMOTES[: max(counts)]
        ports = {name: free_port() for name in names}
        bed.up(
            [
                ClusterSpec("local"),
                *[ClusterSpec(n, advertised=f"127.0.0.1:{p}") for n, p in ports.items()],
            ]
        )
        for name, port in ports.items():
            proxies.append(
                start_proxy(
                    port, bed.clusters[name].listen, rate=args.rate, latency_ms=args.latency_ms
                )
            )
        east = bed.clusters["east"]
        topics = [f"bench.r{n}" for n in counts]
        if args.trace:
            topics += [f"bench.r{n}.trace" for n in counts]
        for topic in topics:
            asyncio.run(create_topic(east.direct, topic, PARTITIONS))
            perf_produce(
                east.direct,
                topic,
                records=args.records,
                record_size=RECORD_SIZE,
                jars=bed.jars,
            )
        for name in names[1:]:
            asyncio.run(_mirror(east.direct, bed.clusters[name].direct))
        size = args.records * RECORD_SIZE
        local = bed.clusters["local"].bootstrap
        copier = {"partition_fetch_max_bytes": args.chunk_bytes, "max_chunks": args.max_chunks}
        runs = []
        traces: list[Trace] = []
        for n in counts:
            console.print(f"{n} remote(s) ...")
            runs.append(
                run_syncer(
                    work,
                    local,
                    {name: bed.clusters[name].bootstrap for name in names[:n]},
                    f"bench.r{n}",
                    args.records,
                    size,
                    label=f"syncer, {n} remote{'s' if n > 1 else ''}",
                    copier=copier,
                )
            )
            if args.trace:
                trace = traced_copy(
                    local,
                    {name: bed.clusters[name].bootstrap for name in names[:n]},
                    f"bench.r{n}.trace",
                    1,
                    copier,
                    f"traced, {n} remotes",
                    size,
                )
                traces.append(trace)
                trace.print(console, args.rate)
        report(console, args, list(zip(counts, runs, strict=True)), traces)
    finally:
        for proxy in proxies:
            proxy.terminate()
            proxy.wait(10)
        bed.down()
        shutil.rmtree(work, ignore_errors=True)


async def _mirror(east: str, west: str) -> None:
    config = Config.from_dict(
        {
            "local": {"bootstrap_servers": west},
            "remotes": [{"name": "east", "bootstrap_servers": east}],
            "topics": {"include": ["bench[.].*"]},
        }
    )
    async with Syncer(config) as syncer:
        await syncer.catch_up()


def report(
    console: Console,
    args: argparse.Namespace,
    runs: list[tuple[int, Measured]],
    traces: list[Trace],
) -> None:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    table = Table(
        title=f"{args.records} × {RECORD_SIZE} B, {PARTITIONS} partitions, each remote"
        f" behind a proxy: {args.rate / 1e6:.1f} MB/s per connection,"
        f" +{args.latency_ms:.0f} ms · {when}"
    )
    # rates from launch to the last record: with several sources the first record may land
    # late (it waits for its chunk) while data has long been flowing
    columns = (
        "copier",
        "launch→first s",
        "launch→done s",
        "MB/s",
        "× one remote",
        "% of cap",
        "CPU s",
        "peak RSS MiB",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "copier" else "right")
    one = next((m for n, m in runs if n == 1), None)
    ratios = {}
    for n, m in runs:
        if one is not None and n != 1:
            ratios[f"{n} remotes / 1 remote"] = rate(m) / rate(one)
        table.add_row(
            m.copier,
            f"{m.launch_to_last_s - m.seconds:.1f}",
            f"{m.launch_to_last_s:.1f}",
            f"{rate(m):.2f}",
            "" if one is None else f"{rate(m) / rate(one):.2f}",
            f"{100 * rate(m) * 1e6 / (n * args.rate):.0f}%",
            f"{m.cpu_seconds:.1f}",
            f"{m.peak_rss_mib:.0f}",
        )
    console.print(table)
    for name, ratio in ratios.items():
        console.print(f"{name}: {ratio:.2f}x")
    out = args.out / "bench-remotes.json"
    out.write_text(
        json.dumps(
            {
                "benchmark": "remotes",
                "date": when,
                "machine": machine(),
                "records": args.records,
                "rate_per_connection": args.rate,
                "latency_ms": args.latency_ms,
                "rows": [
                    {
                        "copier": m.copier,
                        "remotes": n,
                        "seconds": m.launch_to_last_s,
                        "launch_to_first_s": m.launch_to_last_s - m.seconds,
                        "mb_per_s": rate(m),
                    }
                    for n, m in runs
                ],
                "ratios": ratios,
                "traces": [t.summary(args.rate) for t in traces],
                "answers": {t.label: [dataclasses.astuple(a) for a in t.answers] for t in traces},
            },
            indent=2,
        )
        + "\n"
    )
    console.print(f"wrote {out}")


def rate(m: Measured) -> float:
    return m.bytes / 1e6 / m.launch_to_last_s


if __name__ == "__main__":
    main()
