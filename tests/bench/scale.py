"""Benchmark (not a test): many partitions. 500 topics × 20 partitions (10,000) on the remote,
each partition with a small backlog; `syncer run` from launch: time to the first copied
record, time until every partition is in sync, peak RSS, CPU while the partitions settle
(the first SETTLE_S after all are in sync: still polled as busy until quiet for QUIET_S), and
CPU once caught up and idle (the IDLE_S after that).
Then the same with three processes in one coordination group on a fresh local cluster: each
member's share of the partitions (from its /status), its peak RSS and its idle CPU.

    make bench-scale      # or: python -m tests.bench.scale [--topics 500] [--partitions 20]

Setup (creating the topics, writing the backlog) is outside the measured time. Writes
results/bench-scale.json.
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
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from rich.console import Console

from syncer.testbed import ClusterSpec, Testbed
from syncer.testbed.bed import free_port
from tests.bench.peers import cpu_seconds
from tests.bench.scale_probe import Timeline, new_timeline, probe
from tests.bench.scale_report import (
    IDLE_S,
    RECORDS_PER_PARTITION,
    SETTLE_S,
    Case,
    Member,
    report,
)
from tests.bench.scale_trace import describe, owned_topics, trace

TOPICS_PER_CREATE = 100  # topics per CreateTopics request
# 10,000 partitions on one broker: the default 512 MiB heap holds them; more I/O threads so
# creating topics and the many small writes of the backlog do not queue behind one another
BROKER = {"num.io.threads": "8", "num.network.threads": "4"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topics", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--members", type=int, default=3, help="of the group case (0: skip it)")
    parser.add_argument(
        "--no-single", action="store_true", help="skip the one-process case (while iterating)"
    )
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--verbose", action="store_true", help="syncer -v, logs kept")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="stop once all are in sync: no settling or idle window (while iterating)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="py-spy each process over the idle window (collapsed stacks into this folder;"
        " sampling costs the process some CPU, so its idle figure is not the one to quote)",
    )
    args = parser.parse_args()
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="syncer-bench-scale-"))
    bed = Testbed(work / "bed")
    console = Console(width=120)
    topics = [f"scale.t{i:03d}" for i in range(args.topics)]
    cases: dict[str, Case] = {}
    try:
        bed.up([ClusterSpec("local", properties=BROKER), ClusterSpec("east", properties=BROKER)])
        east = bed.clusters["east"].bootstrap
        total = args.topics * args.partitions
        console.print(f"creating {total} partitions on east with a small backlog each ...")
        setup = time.monotonic()
        remote = asyncio.run(fill(east, topics, args.partitions))
        console.print(
            f"  set up in {time.monotonic() - setup:.0f} s; its {total} partitions"
            f" led {remote['led_s']:.1f} s and answering {remote['answering_s']:.1f} s"
            " after the first CreateTopics; its longest silence to the probe"
            f" {remote['silence_s']:.1f} s"
        )
        if not args.no_single:
            console.print("syncer run, one process ...")
            local = bed.clusters["local"].bootstrap
            cases["1 process"] = run_case(work, local, east, topics, args, 1)
        if args.members > 1:
            bed.clusters["local"].stop()  # its idle load is not the group's
            bed.up([ClusterSpec("group", properties=BROKER)])
            label = f"{args.members} in a group"
            console.print(f"syncer run, {label}, on a fresh local cluster ...")
            local = bed.clusters["group"].bootstrap
            cases[label] = run_case(work, local, east, topics, args, args.members)
        report(console, args, cases, remote)
    finally:
        bed.down()
        if args.verbose:
            console.print(f"logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


async def fill(bootstrap: str, topics: list[str], partitions: int) -> dict[str, float]:
    """The topics, created in batches, and RECORDS_PER_PARTITION records in each partition.
    Returns how long the broker took to create them, from the first CreateTopics (the same
    broker build and settings as the local one, in the same run): every partition led in
    the metadata ("led_s"), every partition answering ListOffsets ("answering_s")."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=300_000)
    await admin.start()
    started = time.monotonic()
    timeline = new_timeline(topics, partitions, 0)
    try:
        watch = asyncio.create_task(
            probe(
                bootstrap, timeline, started, lambda t: t.latest(lambda x: x.answering) is not None
            )
        )
        for i in range(0, len(topics), TOPICS_PER_CREATE):
            batch = topics[i : i + TOPICS_PER_CREATE]
            await admin.create_topics([NewTopic(t, partitions, 1) for t in batch], 300_000)
        await watch
    finally:
        await admin.close()
    created = {
        "led_s": timeline.latest(lambda t: t.led) or 0.0,
        "answering_s": timeline.latest(lambda t: t.answering) or 0.0,
        "silence_s": timeline.longest_silence(),
    }
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        linger_ms=50,
        max_batch_size=64 * 1024,
        request_timeout_ms=120_000,
    )
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
    return created


def run_case(
    work: Path, local: str, east: str, topics: list[str], args: argparse.Namespace, members: int
) -> Case:
    """``members`` syncer processes launched together; measured until all partitions are in
    sync, then SETTLE_S and IDLE_S more."""
    ports = [free_port() for _ in range(members)]
    procs = [
        launch(work, local, east, port, members, n, args.verbose) for n, port in enumerate(ports)
    ]
    started = time.monotonic()
    launched = datetime.datetime.now(datetime.UTC)  # the logs' clock, at ``started``
    if args.verbose:
        at = launched.isoformat(timespec="milliseconds")
        print(f"  launched {members} at {at} (logs in {work})", flush=True)
    try:
        timeline = asyncio.run(follow(procs, local, topics, args.partitions, started))
        if args.verbose and members > 1:  # from assignment to the first record, per member
            logs = [work / f"syncer-{members}-{n}.log" for n in range(members)]
            traces = [
                trace(f"m{n}", log, launched, owned_topics(port), timeline)
                for n, (log, port) in enumerate(zip(logs, ports, strict=True))
            ]
            print("\n".join(describe(traces)), flush=True)
        rebalanced = [rebalances(port) for port in ports]
        if args.quick:
            measured = [
                Member(f"m{n}", owned(port), rss_mib(p.pid), 0.0, 0.0, count)
                for n, (p, port, count) in enumerate(zip(procs, ports, rebalanced, strict=True))
            ]
            return Case(measured, len(topics) * args.partitions, timeline)
        time.sleep(3)  # the copiers see the last write answered and turn idle
        settling = [cpu_seconds(p.pid) for p in procs]
        time.sleep(SETTLE_S)
        before = [cpu_seconds(p.pid) for p in procs]
        settled = [(b - s) / SETTLE_S for s, b in zip(settling, before, strict=True)]
        spies = [spy(p.pid, args.profile, f"idle-{members}-{n}.txt") for n, p in enumerate(procs)]
        time.sleep(IDLE_S)
        for spied in spies:
            if spied is not None:
                spied.wait(30)
        idle = [(cpu_seconds(p.pid) - b) / IDLE_S for p, b in zip(procs, before, strict=True)]
        measured = [
            Member(f"m{n}", owned(port), rss_mib(p.pid), settle, cpu, count)
            for n, (p, port, settle, cpu, count) in enumerate(
                zip(procs, ports, settled, idle, rebalanced, strict=True)
            )
        ]
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(120)
    return Case(measured, len(topics) * args.partitions, timeline)


def spy(pid: int, folder: Path | None, name: str) -> subprocess.Popen[bytes] | None:
    """py-spy recording process ``pid`` for IDLE_S into ``folder`` (None: no profile)."""
    if folder is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / name
    command = [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid)]
    options = ["--duration", str(int(IDLE_S)), "--format", "raw", "--output", str(out)]
    return subprocess.Popen([*command, *options, "--nonblocking"], stdout=subprocess.DEVNULL)


def launch(
    work: Path, local: str, east: str, port: int, members: int, n: int, verbose: bool
) -> subprocess.Popen[bytes]:
    settings: dict[str, Any] = {
        "local": {"bootstrap_servers": local},
        "remotes": [{"name": "east", "bootstrap_servers": east}],
        "topics": {"include": ["scale[.].*"]},
        "http": {"listen": f"127.0.0.1:{port}"},
    }
    if members > 1:
        settings["coordination"] = {"group": "scale-bench", "instance_id": f"m{n}"}
    config = work / f"scale-{members}-{n}.yaml"
    config.write_text(yaml.safe_dump(settings))
    with (work / f"syncer-{members}-{n}.log").open("w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "syncer", *(["-v"] * verbose), "run", "-c", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )


async def follow(
    procs: list[subprocess.Popen[bytes]],
    local: str,
    topics: list[str],
    partitions: int,
    started: float,
) -> Timeline:
    """The local cluster's timeline (scale_probe), from ``started``, until every record is
    copied."""

    def alive() -> None:
        if any(proc.poll() is not None for proc in procs):
            raise RuntimeError("syncer exited")

    timeline = new_timeline(topics, partitions, RECORDS_PER_PARTITION)
    return await probe(
        local, timeline, started, lambda t: t.latest(lambda x: x.done) is not None, alive
    )


def owned(port: int) -> int:
    """How many partitions the process at ``port`` copies, from its /status."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=30) as answer:
        return len(json.load(answer)["partitions"])


def rebalances(port: int) -> int:
    """How many assignments the process at ``port`` received from its group (its /metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("syncer_rebalances_total "):
                return int(float(line.split()[1]))
    return 0


def rss_mib(pid: int) -> float:
    """The peak resident set of running process ``pid`` so far."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


if __name__ == "__main__":
    main()
