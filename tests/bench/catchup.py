"""Benchmark (not a test): catch-up of a >= 1 GiB backlog, 8 partitions, 1 KiB records, on
loopback; syncer and MirrorMaker 2 in turn on the same data, in one run, reported as ratios.

    make bench            # or: python -m tests.bench.catchup [--records N]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import logging
import os
import platform
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from syncer.testbed import ClusterSpec, Testbed
from syncer.testbed.tools import perf_produce
from tests.bench.peers import Measured, local_total, run_mm2, run_syncer
from tests.kafka_helpers import create_topic

PARTITIONS = 8
RECORD_SIZE = 1024


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, {platform.system()} {platform.release()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_100_000, help="backlog size")
    parser.add_argument("--tasks", type=int, default=8, help="MirrorMaker 2 tasks.max")
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args()
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # probes of starting brokers
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="syncer-bench-"))
    bed = Testbed(work / "bed")
    console = Console(width=132)
    try:
        console.print(f"starting clusters under {work} ...")
        bed.up([ClusterSpec("local"), ClusterSpec("east")])
        local, east = bed.clusters["local"].bootstrap, bed.clusters["east"].bootstrap
        topic = "bench.catchup"
        asyncio.run(create_topic(east, topic, PARTITIONS))
        console.print(f"writing {args.records} records of {RECORD_SIZE} B to east ...")
        perf_produce(east, topic, records=args.records, record_size=RECORD_SIZE, jars=bed.jars)
        assert asyncio.run(local_total(east, topic, PARTITIONS)) == args.records
        size = args.records * RECORD_SIZE
        console.print("syncer catch-up ...")
        ours = run_syncer(work, local, east, topic, args.records, size)
        assert asyncio.run(local_total(local, topic, PARTITIONS)) == args.records
        console.print(f"MirrorMaker 2 (tasks.max={args.tasks}) ...")
        peer = run_mm2(
            work, bed.jars, local, east, topic, args.records, size, PARTITIONS, args.tasks
        )
        report(console, args, ours, peer)
    finally:
        bed.down()
        shutil.rmtree(work, ignore_errors=True)


def report(console: Console, args: argparse.Namespace, ours: Measured, peer: Measured) -> None:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    table = Table(
        title=f"catch-up: {args.records} × {RECORD_SIZE} B, {PARTITIONS} partitions,"
        f" loopback · {when}"
    )
    columns = (
        "copier",
        "copy s",
        "launch→done s",
        "records/s",
        "MB/s",
        "CPU s",
        "CPU s/GiB",
        "peak RSS MiB",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "copier" else "right")
    for m in (ours, peer):
        table.add_row(
            m.copier,
            f"{m.seconds:.1f}",
            f"{m.launch_to_last_s:.1f}",
            f"{m.records_per_s:,.0f}",
            f"{m.mb_per_s:.1f}",
            f"{m.cpu_seconds:.1f}",
            f"{m.cpu_s_per_gib:.1f}",
            f"{m.peak_rss_mib:.0f}",
        )
    console.print(table)
    ratios = {
        "throughput (syncer / MM2)": ours.mb_per_s / peer.mb_per_s,
        "CPU per GiB (syncer / MM2)": ours.cpu_s_per_gib / peer.cpu_s_per_gib,
        "peak RSS (syncer / MM2)": ours.peak_rss_mib / peer.peak_rss_mib,
    }
    for name, value in ratios.items():
        console.print(f"{name}: {value:.2f}x")
    out = args.out / "bench-catchup.json"
    out.write_text(
        json.dumps(
            {
                "benchmark": "catch-up",
                "date": when,
                "machine": machine(),
                "records": args.records,
                "record_size": RECORD_SIZE,
                "partitions": PARTITIONS,
                "rows": [
                    asdict(ours) | {"mb_per_s": ours.mb_per_s, "cpu_s_per_gib": ours.cpu_s_per_gib},
                    asdict(peer) | {"mb_per_s": peer.mb_per_s, "cpu_s_per_gib": peer.cpu_s_per_gib},
                ],
                "ratios": ratios,
            },
            indent=2,
        )
        + "\n"
    )
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
