"""Benchmark (not a test): steady state. A producer writes a fixed 5 MB/s (1 KiB records) into
the remote while a copier that is already running keeps local in step; a consumer on the local
cluster measures each record's end-to-end latency (its CreateTime at the producer to its
arrival from the local cluster; both copiers keep the source's timestamps). syncer (`run`)
first, then MirrorMaker 2, each on its own topic. Records of the first 25 s do not count: on
brokers just started, the first copier measured would otherwise pay for their JIT warm-up
(syncer's p99 was 50-100 ms in its first 20 s and 9 ms after).

    make bench-steady     # or: python -m tests.bench.steady [--seconds 60] [--out results]

Writes results/bench-steady.json and results/bench-steady.png (latency distributions).
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
from aiokafka import AIOKafkaConsumer
from rich.console import Console
from rich.table import Table

from syncer.clusters import Cluster
from syncer.config import ClusterConfig
from syncer.testbed import ClusterSpec, Testbed
from syncer.testbed.bed import log4j_properties
from syncer.testbed.tools import perf_produce_command
from tests.bench.catchup import machine
from tests.bench.peers import MM2_HEAP, MM2_PROPERTIES, axes, cpu_seconds, save
from tests.kafka_helpers import create_topic

PARTITIONS = 8
RECORD_SIZE = 1024
RATE_BYTES = 5_000_000
WARMUP_S = 25.0  # the brokers and both copiers warm up (JIT) before records count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0, help="producing time per copier")
    parser.add_argument("--tasks", type=int, default=8, help="MirrorMaker 2 tasks.max")
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument(
        "--copiers", default="syncer,mm2", help="which to run, comma-separated (syncer,mm2)"
    )
    args = parser.parse_args()
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="syncer-bench-steady-"))
    bed = Testbed(work / "bed")
    console = Console(width=120)
    results: dict[str, list[float]] = {}
    cpu: dict[str, float] = {}  # copier → CPU while measured, fraction of a core
    try:
        bed.up([ClusterSpec("local"), ClusterSpec("east")])
        local, east = bed.clusters["local"].bootstrap, bed.clusters["east"].bootstrap
        for copier in args.copiers.split(","):
            topic = f"steady.{copier}"
            asyncio.run(create_topic(east, topic, PARTITIONS))
            console.print(f"{copier}: starting ...")
            proc, target = start_copier(copier, work, bed, local, east, topic, args.tasks)
            try:
                asyncio.run(wait_for_topic(local, target))
                console.print(
                    f"{copier}: producing {RATE_BYTES / 1e6:.0f} MB/s for {args.seconds:.0f} s"
                )
                cpu_before, started = cpu_seconds(proc.pid), time.monotonic()
                results[copier] = asyncio.run(
                    measure(bed, east, local, topic, target, args.seconds)
                )
                cpu[copier] = (cpu_seconds(proc.pid) - cpu_before) / (time.monotonic() - started)
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        report(console, args, results, cpu)
    finally:
        bed.down()
        shutil.rmtree(work, ignore_errors=True)


def start_copier(
    copier: str, work: Path, bed: Testbed, local: str, east: str, topic: str, tasks: int
) -> tuple[subprocess.Popen[bytes], str]:
    log = (work / f"{copier}.log").open("w")
    if copier == "syncer":
        config = work / "steady.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "local": {"bootstrap_servers": local},
                    "remotes": [{"name": "east", "bootstrap_servers": east}],
                    "topics": {"include": [topic], "refresh_interval_s": 2},
                    "http": {"listen": "127.0.0.1:0"},
                }
            )
        )
        cmd = [sys.executable, "-m", "syncer", "run", "-c", str(config)]
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), topic
    props = work / "mm2-steady.properties"
    props.write_text(
        MM2_PROPERTIES.format(remote=east, local=local, topic=topic, tasks=tasks)
        # latency settings: the producer sends at once, the consumer does not wait for bytes
        + "local.producer.linger.ms = 0\n"
    )
    (work / "log4j2.properties").write_text(log4j_properties("WARN"))
    cmd = [
        "java",
        f"-Xmx{MM2_HEAP}",
        f"-Dlog4j2.configurationFile={work / 'log4j2.properties'}",
        "-cp",
        bed.jars.classpath,
        "org.apache.kafka.connect.mirror.MirrorMaker",
        str(props),
    ]
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), f"east.{topic}"


async def wait_for_topic(local: str, topic: str, timeout: float = 120.0) -> None:
    async with Cluster(ClusterConfig(local, name="bench"), role="bench") as cluster:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (await cluster.partition_counts()).get(topic) == PARTITIONS:
                await asyncio.sleep(5)  # let the copier settle on the new topic
                return
            await asyncio.sleep(0.5)
    raise RuntimeError(f"copier never created {topic} on local")


async def measure(
    bed: Testbed, east: str, local: str, topic: str, target: str, seconds: float
) -> list[float]:
    """Latencies in ms of every record produced after the warm-up."""
    consumer = AIOKafkaConsumer(
        target, bootstrap_servers=local, auto_offset_reset="latest", fetch_max_wait_ms=20
    )
    await consumer.start()
    await consumer.getmany(timeout_ms=1000)  # positions at the end before producing
    records = int(RATE_BYTES / RECORD_SIZE * seconds)
    producer = await asyncio.create_subprocess_exec(
        *perf_produce_command(
            east,
            topic,
            records=records,
            record_size=RECORD_SIZE,
            jars=bed.jars,
            producer_props={"linger.ms": "0", "batch.size": "16384", "acks": "all"},
            throughput=int(RATE_BYTES / RECORD_SIZE),
        ),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    started_ms = time.time() * 1000
    latencies: list[float] = []
    seen = 0
    try:
        deadline = time.monotonic() + seconds + 60
        while seen < records and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=200)
            now_ms = time.time() * 1000
            for messages in batches.values():
                for message in messages:
                    seen += 1
                    if message.timestamp >= started_ms + WARMUP_S * 1000:
                        latencies.append(now_ms - message.timestamp)
    finally:
        await consumer.stop()
        await producer.wait()
    if seen < records:
        raise RuntimeError(f"only {seen} of {records} records reached local")
    return latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(
    console: Console,
    args: argparse.Namespace,
    results: dict[str, list[float]],
    cpu: dict[str, float],
) -> None:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    table = Table(
        title=f"steady state: {RATE_BYTES / 1e6:.0f} MB/s of {RECORD_SIZE} B records,"
        f" {PARTITIONS} partitions, {args.seconds:.0f} s, loopback · {when}"
    )
    for column in ("copier", "records", "p50 ms", "p99 ms", "max ms", "CPU % of a core"):
        table.add_column(column, justify="left" if column == "copier" else "right")
    rows = {}
    for copier, values in results.items():
        rows[copier] = {
            "records": len(values),
            "p50_ms": percentile(values, 0.50),
            "p99_ms": percentile(values, 0.99),
            "max_ms": max(values),
            "cpu_fraction_of_a_core": cpu[copier],
        }
        r = rows[copier]
        table.add_row(
            copier,
            str(r["records"]),
            f"{r['p50_ms']:.0f}",
            f"{r['p99_ms']:.0f}",
            f"{r['max_ms']:.0f}",
            f"{100 * r['cpu_fraction_of_a_core']:.0f}",
        )
    console.print(table)
    ratios = {}
    if "syncer" in rows and "mm2" in rows:
        ratios = {
            "p50 (syncer / MM2)": rows["syncer"]["p50_ms"] / rows["mm2"]["p50_ms"],
            "p99 (syncer / MM2)": rows["syncer"]["p99_ms"] / rows["mm2"]["p99_ms"],
        }
        for name, value in ratios.items():
            console.print(f"{name}: {value:.2f}x")
    document = {
        "benchmark": "steady",
        "date": when,
        "machine": machine(),
        "rate_bytes_per_s": RATE_BYTES,
        "seconds": args.seconds,
        "rows": rows,
        "ratios": ratios,
    }
    (args.out / "bench-steady.json").write_text(json.dumps(document, indent=2) + "\n")
    plot(results, args.out / "bench-steady.png", when)
    console.print(f"wrote {args.out / 'bench-steady.json'} and {args.out / 'bench-steady.png'}")


def plot(results: dict[str, list[float]], path: Path, when: str) -> None:
    fig, ax = axes()
    for copier, values in results.items():
        ordered = sorted(values)
        ys = [i / len(ordered) for i in range(len(ordered))]
        ax.plot(ordered, ys, label="MirrorMaker 2" if copier == "mm2" else copier)
    ax.set_xscale("log")
    ax.set_xlabel("end-to-end latency, ms (log)")
    ax.set_ylabel("fraction of records")
    ax.set_title(f"steady state, {RATE_BYTES / 1e6:.0f} MB/s · {when}", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend()
    save(fig, path)


if __name__ == "__main__":
    main()
