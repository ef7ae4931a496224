"""Benchmark (not a test): many partitions. 100 topics × 20 partitions on the remote, each
partition with a small backlog; `syncer run` from launch: time to the first copied byte, time
until every partition is in sync, peak RSS, and CPU once caught up and idle.

    make bench-scale      # or: python -m tests.bench.scale [--topics 100] [--partitions 20]

Writes results/bench-scale.json.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import logging
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition
from rich.console import Console
from rich.table import Table

from syncer.clusters import Cluster
from syncer.config import ClusterConfig
from syncer.errors import SyncerError
from syncer.testbed import ClusterSpec, Testbed
from tests.bench.catchup import machine
from tests.bench.peers import cpu_seconds

RECORDS_PER_PARTITION = 20
IDLE_S = 30.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args()
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="syncer-bench-scale-"))
    bed = Testbed(work / "bed")
    console = Console(width=120)
    try:
        bed.up([ClusterSpec("local"), ClusterSpec("east")])
        local, east = bed.clusters["local"].bootstrap, bed.clusters["east"].bootstrap
        topics = [f"scale.t{i:03d}" for i in range(args.topics)]
        total = args.topics * args.partitions
        console.print(f"creating {total} partitions on east with a small backlog each ...")
        asyncio.run(fill(east, topics, args.partitions))
        config = work / "scale.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "local": {"bootstrap_servers": local},
                    "remotes": [{"name": "east", "bootstrap_servers": east}],
                    "topics": {"include": ["scale[.].*"]},
                    "http": {"listen": "127.0.0.1:0"},
                }
            )
        )
        console.print("syncer run ...")
        started = time.monotonic()
        with (work / "syncer.log").open("w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "syncer", "run", "-c", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            first, synced, peak = asyncio.run(follow(proc, local, topics, args.partitions, started))
            cpu_before = cpu_seconds(proc.pid)
            time.sleep(IDLE_S)
            idle = (cpu_seconds(proc.pid) - cpu_before) / IDLE_S
            peak = max(peak, rss_mib(proc.pid))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        report(console, args, total, first, synced, peak, idle)
    finally:
        bed.down()
        shutil.rmtree(work, ignore_errors=True)


async def fill(bootstrap: str, topics: list[str], partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=120_000)
    await admin.start()
    try:
        for i in range(0, len(topics), 20):
            await admin.create_topics(
                [NewTopic(t, partitions, 1) for t in topics[i : i + 20]], timeout_ms=120_000
            )
    finally:
        await admin.close()
    await asyncio.sleep(2)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    try:
        sends = [
            await producer.send(t, b"x" * 200, key=b"k%d" % n, partition=p)
            for t in topics
            for p in range(partitions)
            for n in range(RECORDS_PER_PARTITION)
        ]
        await asyncio.gather(*sends)
    finally:
        await producer.stop()


async def follow(
    proc: subprocess.Popen[bytes], local: str, topics: list[str], partitions: int, started: float
) -> tuple[float, float, float]:
    """(seconds to the first copied record, seconds until all are copied, peak RSS MiB)."""
    want = len(topics) * partitions * RECORDS_PER_PARTITION
    tps = [TopicPartition(t, p) for t in topics for p in range(partitions)]
    first = 0.0
    peak = 0.0
    async with Cluster(ClusterConfig(local, name="bench"), role="bench") as cluster:
        while time.monotonic() - started < 600:
            if proc.poll() is not None:
                raise RuntimeError("syncer exited")
            peak = max(peak, rss_mib(proc.pid))
            try:
                await cluster.refresh_metadata()
                known = [tp for tp in tps if tp.topic in cluster._client.cluster.topics()]
                copied = sum((await cluster.latest(known)).values()) if known else 0
            except SyncerError:
                copied = 0
            now = time.monotonic() - started
            if copied and not first:
                first = now
            if copied >= want:
                return first, now, peak
            await asyncio.sleep(0.5)
    raise RuntimeError("not in sync after 600 s")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def report(
    console: Console,
    args: argparse.Namespace,
    total: int,
    first: float,
    synced: float,
    peak: float,
    idle: float,
) -> None:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    table = Table(title=f"{args.topics} topics × {args.partitions} partitions, loopback · {when}")
    for column in ("partitions", "first byte s", "all in sync s", "peak RSS MiB", "idle CPU"):
        table.add_column(column, justify="right")
    table.add_row(str(total), f"{first:.1f}", f"{synced:.1f}", f"{peak:.0f}", f"{idle:.1%}")
    console.print(table)
    document = {
        "benchmark": "scale",
        "date": when,
        "machine": machine(),
        "partitions": total,
        "first_byte_s": first,
        "in_sync_s": synced,
        "peak_rss_mib": peak,
        "idle_cpu_fraction_of_a_core": idle,
    }
    (args.out / "bench-scale.json").write_text(json.dumps(document, indent=2) + "\n")
    console.print(f"wrote {args.out / 'bench-scale.json'}")


if __name__ == "__main__":
    main()
