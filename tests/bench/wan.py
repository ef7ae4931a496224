"""Benchmark (not a test): a long, thin link. The remote sits behind the test bed's proxy
(100 ms round trip, 500 KB/s per connection and direction) and holds a backlog in two hot
partitions. syncer copies it over 1, 4 and 16 lanes; MirrorMaker 2 (dedicated mode, same
jars) over the same link with tasks.max 1 and 2 (two partitions: more tasks would idle).
Each run copies its own topic, so every copier starts from an empty local topic.

    python -m tests.bench.wan [--records N] [--rate BYTES_PER_S] [--latency-ms MS]
        [--lanes 1,4,16] [--out results]

Writes results/bench-wan.json and results/bench-wan.png (throughput against connections).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import logging
import shutil
import subprocess
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from syncer.testbed import ClusterSpec, Testbed
from syncer.testbed.bed import free_port
from syncer.testbed.tools import perf_produce
from tests.bench.catchup import machine
from tests.bench.peers import Measured, axes, run_mm2, run_syncer, save, start_proxy
from tests.kafka_helpers import create_topic

PARTITIONS = 2
RECORD_SIZE = 1024
MM2_TASKS = (1, 2)
# chunks that cross the link in about a second per lane, so requests stay well inside the
# chunk timeout and the last chunks are small
CHUNK_BYTES = 524_288


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--rate", type=int, default=500_000, help="bytes/s per connection")
    parser.add_argument("--latency-ms", type=float, default=100.0, help="added round trip")
    parser.add_argument("--lanes", default="1,4,16", help="syncer connections to compare")
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args()
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    args.out.mkdir(parents=True, exist_ok=True)
    lanes = [int(n) for n in args.lanes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="syncer-bench-wan-"))
    console = Console(width=132)
    bed = Testbed(work / "bed")
    proxy: subprocess.Popen[bytes] | None = None
    rows: list[tuple[str, int, Measured]] = []
    try:
        port = free_port()
        bed.up([ClusterSpec("local"), ClusterSpec("far", advertised=f"127.0.0.1:{port}")])
        far, local = bed.clusters["far"], bed.clusters["local"].bootstrap
        proxy = start_proxy(port, far.listen, rate=args.rate, latency_ms=args.latency_ms)
        topics = [f"wan.lanes{n}" for n in lanes] + [f"wan.mm2t{t}" for t in MM2_TASKS]
        for topic in topics:
            asyncio.run(create_topic(far.direct, topic, PARTITIONS))
            perf_produce(
                far.direct, topic, records=args.records, record_size=RECORD_SIZE, jars=bed.jars
            )
        size = args.records * RECORD_SIZE
        for n in lanes:
            console.print(f"syncer, {n} lanes ...")
            measured = run_syncer(
                work,
                local,
                {"far": far.bootstrap},
                f"wan.lanes{n}",
                args.records,
                size,
                partitions=PARTITIONS,
                label=f"syncer, {n} lanes",
                copier={"partition_fetch_max_bytes": CHUNK_BYTES},
                remote_settings={"connections": n},
            )
            rows.append(("syncer", n, measured))
        for tasks in MM2_TASKS:
            console.print(f"MirrorMaker 2, tasks.max={tasks} ...")
            measured = run_mm2(
                work,
                bed.jars,
                local,
                far.bootstrap,
                f"wan.mm2t{tasks}",
                args.records,
                size,
                PARTITIONS,
                tasks,
            )
            rows.append(("mm2", tasks, measured))
        report(console, args, rows)
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.wait(10)
        bed.down()
        shutil.rmtree(work, ignore_errors=True)


def report(
    console: Console, args: argparse.Namespace, rows: list[tuple[str, int, Measured]]
) -> None:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    table = Table(
        title=f"WAN: {args.records} × {RECORD_SIZE} B in {PARTITIONS} partitions over a proxy:"
        f" {args.rate / 1e3:.0f} KB/s per connection, +{args.latency_ms:.0f} ms · {when}"
    )
    for column in ("copier", "copy s", "launch→done s", "MB/s", "CPU s", "peak RSS MiB"):
        table.add_column(column, justify="left" if column == "copier" else "right")
    for _kind, _n, m in rows:
        table.add_row(
            m.copier,
            f"{m.seconds:.1f}",
            f"{m.launch_to_last_s:.1f}",
            f"{m.mb_per_s:.2f}",
            f"{m.cpu_seconds:.1f}",
            f"{m.peak_rss_mib:.0f}",
        )
    console.print(table)
    syncer = {n: m for kind, n, m in rows if kind == "syncer"}
    mm2_best = max((m for kind, _n, m in rows if kind == "mm2"), key=lambda m: m.mb_per_s)
    ratios = {}
    if 1 in syncer:
        for n, m in syncer.items():
            if n != 1:
                ratios[f"syncer {n} lanes / 1 lane"] = m.mb_per_s / syncer[1].mb_per_s
    for n, m in syncer.items():
        ratios[f"syncer {n} lanes / best MM2 ({mm2_best.copier})"] = m.mb_per_s / mm2_best.mb_per_s
    for name, value in ratios.items():
        console.print(f"{name}: {value:.2f}x")
    document = {
        "benchmark": "wan",
        "date": when,
        "machine": machine(),
        "records": args.records,
        "record_size": RECORD_SIZE,
        "partitions": PARTITIONS,
        "rate_per_connection": args.rate,
        "latency_ms": args.latency_ms,
        "rows": [
            {
                "copier": m.copier,
                "connections": n,
                "copy_seconds": m.seconds,
                "launch_to_last_s": m.launch_to_last_s,
                "mb_per_s": m.mb_per_s,
                "cpu_seconds": m.cpu_seconds,
                "peak_rss_mib": m.peak_rss_mib,
            }
            for _kind, n, m in rows
        ],
        "ratios": ratios,
    }
    (args.out / "bench-wan.json").write_text(json.dumps(document, indent=2) + "\n")
    plot(args, rows, args.out / "bench-wan.png", when)
    console.print(f"wrote {args.out / 'bench-wan.json'} and {args.out / 'bench-wan.png'}")


def plot(
    args: argparse.Namespace, rows: list[tuple[str, int, Measured]], path: Path, when: str
) -> None:
    fig, ax = axes()
    ours = sorted((n, m.mb_per_s) for kind, n, m in rows if kind == "syncer")
    ax.plot([n for n, _ in ours], [r for _, r in ours], "o-", label="syncer (lanes)")
    theirs = sorted((n, m.mb_per_s) for kind, n, m in rows if kind == "mm2")
    ax.plot([n for n, _ in theirs], [r for _, r in theirs], "s--", label="MirrorMaker 2 (tasks)")
    most = max(n for _kind, n, _m in rows)
    ticks = [2**i for i in range(most.bit_length()) if 2**i <= most]
    ax.plot(ticks, [n * args.rate / 1e6 for n in ticks], ":", color="grey", label="link cap")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(n) for n in ticks])
    ax.set_xlabel("connections to the remote")
    ax.set_ylabel("MB/s copied")
    ax.set_title(
        f"{args.rate / 1e3:.0f} KB/s per connection, +{args.latency_ms:.0f} ms, {PARTITIONS}"
        f" partitions · {when}",
        fontsize=9,
    )
    ax.grid(True, alpha=0.3)
    ax.legend()
    save(fig, path)


if __name__ == "__main__":
    main()
