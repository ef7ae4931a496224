"""``syncer testbed demo``: what ``make run`` runs. Brings up a local and two remote clusters,
fills the remotes with sample data (orders on east, payments on west), keeps a trickle of new
orders coming, and runs the syncer between them until Ctrl-C; then stops the clusters."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path

import yaml
from aiokafka import AIOKafkaProducer

from syncer.check import print_lines
from syncer.clusters import Cluster
from syncer.config import ClusterConfig, Config
from syncer.http import StatusServer
from syncer.preflight import preflight
from syncer.report import gather_rows, merge_live, remote_rows
from syncer.status import status_document
from syncer.syncer import Syncer
from syncer.tables import print_report
from syncer.tasks import cancel_and_wait
from syncer.testbed.bed import ClusterSpec, Testbed
from syncer.testbed.errors import TestbedError
from syncer.testbed.tools import perf_produce

log = logging.getLogger(__name__)

# west is read under a bandwidth cap: its 50 MB take ~5 s, and the status shows "10.0 (10.0)"
DEMO_CAPS = {"west": {"max_bytes_per_second": 10_000_000}}
SAMPLE = {  # remote → (topic, partitions, records of 1 KiB)
    "east": ("demo.orders", 4, 200_000),
    "west": ("demo.payments", 2, 50_000),
}


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = verbs.add_parser("demo", help="local + two remotes, sample data, syncer until Ctrl-C")
    demo.add_argument("--state", type=Path, default=Path(".run"))
    demo.add_argument("--seconds", type=float, default=None, help="stop after this long")
    demo.add_argument("--keep", action="store_true", help="leave the clusters running")


def run(args: argparse.Namespace) -> int:
    bed = (
        Testbed.load(args.state) if (args.state / "testbed.json").exists() else Testbed(args.state)
    )
    wanted = [
        n
        for n in ("local", "east", "west")
        if n not in bed.clusters or not bed.clusters[n].is_running()
    ]
    if wanted:
        print(f"starting Kafka clusters {', '.join(wanted)} under {bed.state_dir} ...")
        bed.up([ClusterSpec(n) for n in wanted])
    try:
        config = _write_config(bed, args.state / "syncer.yaml")
        for remote, (topic, partitions, records) in SAMPLE.items():
            fill(bed, remote, topic, partitions, records, only_if_new=True)
        print(f"config: {args.state / 'syncer.yaml'}  (Ctrl-C to stop)")
        import uvloop

        return int(uvloop.run(_sync(config, bed, args.seconds)))
    finally:
        if not args.keep:
            print("stopping the clusters ...")
            bed.down()


def _write_config(bed: Testbed, path: Path) -> Config:
    raw = {
        "local": {"bootstrap_servers": bed.clusters["local"].bootstrap},
        "remotes": [
            {"name": n, "bootstrap_servers": bed.clusters[n].bootstrap, **DEMO_CAPS.get(n, {})}
            for n in SAMPLE
        ],
        "topics": {"include": [r"demo\..*"], "refresh_interval_s": 5},
    }
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return Config.from_dict(raw, source=str(path))


def fill(
    bed: Testbed,
    cluster: str,
    topic: str,
    partitions: int,
    records: int,
    *,
    only_if_new: bool = False,
    record_size: int = 1024,
) -> bool:
    """Write ``records`` sample records (``record_size`` bytes, lz4) into ``topic`` of one
    cluster of the bed, creating it with ``partitions`` partitions if missing; with
    ``only_if_new`` an existing topic is left as it is (the demo, run again, adds nothing).
    Returns whether anything was written."""
    if cluster not in bed.clusters:
        raise TestbedError(f"no cluster {cluster!r} in {bed.state_path}")
    bootstrap = bed.clusters[cluster].bootstrap

    async def create() -> bool:
        async with Cluster(ClusterConfig(bootstrap, name=cluster), role="remote") as admin:
            if topic in await admin.partition_counts():
                return False
            await admin.create_topic(topic, partitions, {}, 1)
            return True

    if not asyncio.run(create()) and only_if_new:
        return False
    print(f"filling {cluster}/{topic}: {records} records of {record_size} B ...")
    figures = perf_produce(
        bootstrap,
        topic,
        records=records,
        record_size=record_size,
        jars=bed.jars,
        producer_props={"compression.type": "lz4"},
    )
    print(f"filled {cluster}/{topic}: {figures.split(',')[0] or records}")
    return True


async def _trickle(bootstrap: str, topic: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=50)
    await producer.start()
    try:
        n = 0
        while True:
            await producer.send(topic, key=b"order-%d" % n, value=b'{"amount": %d}' % n)
            n += 1
            await asyncio.sleep(0.05)
    finally:
        await producer.stop()


async def _sync(config: Config, bed: Testbed, seconds: float | None) -> int:
    print_lines(await preflight(config), as_json=False)  # what `syncer check` says first
    syncer = Syncer(config)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, syncer.request_stop)
    if seconds is not None:
        loop.call_later(seconds, syncer.request_stop)
    trickle = asyncio.create_task(_trickle(bed.clusters["east"].bootstrap, "demo.orders"))
    reporter = asyncio.create_task(_report_every(syncer, 10.0))
    try:
        async with contextlib.AsyncExitStack() as stack:
            address = config.http.address
            if address is not None:
                server = await stack.enter_async_context(StatusServer(syncer, address))
                print(f"metrics and status: {server.url}/metrics {server.url}/status", flush=True)
            await stack.enter_async_context(syncer)
            try:
                summary = await syncer.run()
            finally:
                await _cancel(trickle, reporter)  # before the syncer closes its clusters
    finally:
        await _cancel(trickle, reporter)
    print(summary.line(), file=sys.stderr)
    return 5 if summary.halted else 0


async def _cancel(*tasks: asyncio.Task[None]) -> None:
    """Stop the demo's helpers; what they were doing when stopped does not matter."""
    await cancel_and_wait(*tasks)


async def _report_every(syncer: Syncer, period: float) -> None:
    while True:
        await asyncio.sleep(period)
        rows = await gather_rows(syncer, look_for_holes=False)
        live = [status_document(syncer.snapshot())]
        merge_live(rows, live)
        remotes = remote_rows(list(syncer.remotes), rows, {}, live)
        print_report(rows, remotes, as_json=False, title="syncer status", holes=False, notes=[])
