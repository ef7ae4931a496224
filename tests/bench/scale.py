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
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.structs import TopicPartition
from rich.console import Console
from rich.table import Table

from syncer.clusters import Cluster
from syncer.config import ClusterConfig
from syncer.errors import SyncerError
from syncer.fetcher import QUIET_S
from syncer.testbed import ClusterSpec, Testbed
from syncer.testbed.bed import free_port
from tests.bench.catchup import machine
from tests.bench.peers import cpu_seconds

RECORDS_PER_PARTITION = 20
LATEST = -1  # ListOffsets: the end of the log
IDLE_S = 60.0  # two topic refreshes (every 30 s by default): a fair share of their cost
# after the last write, partitions still polled as busy until they turn quiet (QUIET_S):
# measured on its own, before the idle window, so each figure says what it is
SETTLE_S = QUIET_S + 2.0
TOPICS_PER_CREATE = 100  # topics per CreateTopics request
# the targets of issue 23, item 3
FIRST_S, IN_SYNC_S, RSS_MIB, IDLE_CPU, MAX_SHARE = 30.0, 60.0, 300.0, 0.03, 0.40
# 10,000 partitions on one broker: the default 512 MiB heap holds them; more I/O threads so
# creating topics and the many small writes of the backlog do not queue behind one another
BROKER = {"num.io.threads": "8", "num.network.threads": "4"}


@dataclass(frozen=True)
class Member:
    """One syncer process of a case, measured."""

    name: str
    partitions: int  # in its /status once all were in sync
    peak_rss_mib: float
    settling_cpu: float  # fraction of a core over SETTLE_S, from 3 s after all in sync
    idle_cpu: float  # fraction of a core over IDLE_S once settled
    rebalances: int  # assignments it received, from its /metrics, once all were in sync


@dataclass(frozen=True)
class Case:
    members: list[Member]
    partitions: int  # all of them
    first_s: float  # launch → the first record copied
    first_complete_s: float  # launch → records seen with every known partition answering
    in_sync_s: float  # launch → every partition in sync

    @property
    def max_share(self) -> float:
        return max(m.partitions for m in self.members) / self.partitions

    @property
    def peak_rss_mib(self) -> float:
        return max(m.peak_rss_mib for m in self.members)

    @property
    def idle_cpu(self) -> float:
        return max(m.idle_cpu for m in self.members)


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
        asyncio.run(fill(east, topics, args.partitions))
        console.print(f"  set up in {time.monotonic() - setup:.0f} s")
        if not args.no_single:
            console.print("syncer run, one process ...")
            local = bed.clusters["local"].bootstrap
            cases["1 process"] = run_case(work, local, east, topics, args, 1)
            console.print(f"  {cases['1 process']}")
        if args.members > 1:
            bed.clusters["local"].stop()  # its idle load is not the group's
            bed.up([ClusterSpec("group", properties=BROKER)])
            label = f"{args.members} in a group"
            console.print(f"syncer run, {label}, on a fresh local cluster ...")
            local = bed.clusters["group"].bootstrap
            cases[label] = run_case(work, local, east, topics, args, args.members)
            console.print(f"  {cases[label]}")
        report(console, args, cases)
    finally:
        bed.down()
        if args.verbose:
            console.print(f"logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


async def fill(bootstrap: str, topics: list[str], partitions: int) -> None:
    """The topics, created in batches, and RECORDS_PER_PARTITION records in each partition."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=300_000)
    await admin.start()
    try:
        for i in range(0, len(topics), TOPICS_PER_CREATE):
            batch = topics[i : i + TOPICS_PER_CREATE]
            await admin.create_topics([NewTopic(t, partitions, 1) for t in batch], 300_000)
    finally:
        await admin.close()
    await asyncio.sleep(2)
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
    if args.verbose:  # the logs' clock: their times minus this are seconds after launch
        launched = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
        print(f"  launched {members} at {launched} (logs in {work})", flush=True)
    try:
        first, complete, synced = asyncio.run(
            follow(procs, local, topics, args.partitions, started)
        )
        rebalanced = [rebalances(port) for port in ports]
        if args.quick:
            measured = [
                Member(f"m{n}", owned(port), rss_mib(p.pid), 0.0, 0.0, count)
                for n, (p, port, count) in enumerate(zip(procs, ports, rebalanced, strict=True))
            ]
            return Case(measured, len(topics) * args.partitions, first, complete, synced)
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
    return Case(measured, len(topics) * args.partitions, first, complete, synced)


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
) -> tuple[float, float, float]:
    """(seconds to the first copied record, seconds to the first look at which every known
    partition answered with records among them, seconds until all are copied), from
    ``started``. Twice a second; the metadata only while a topic or a leader is missing (at
    10,000 partitions the watching would take a good part of a core from the copiers)."""
    want = len(topics) * partitions * RECORDS_PER_PARTITION
    tps = [TopicPartition(t, p) for t in topics for p in range(partitions)]
    wanted = set(topics)
    first = first_complete = 0.0
    complete = False
    async with Cluster(ClusterConfig(local, name="bench"), role="bench") as cluster:
        while time.monotonic() - started < 600:
            if any(proc.poll() is not None for proc in procs):
                raise RuntimeError("syncer exited")
            try:
                if not complete or not cluster._client.cluster.topics() >= wanted:
                    await cluster.refresh_metadata()
                copied, complete = await landed(cluster, tps)
            except SyncerError:
                copied, complete = 0, False
            now = time.monotonic() - started
            if copied and not first:
                first = now
            if copied and complete and not first_complete:
                first_complete = now
            if copied >= want:
                return first, first_complete, now
            await asyncio.sleep(0.5)
    raise RuntimeError("not in sync after 600 s")


async def landed(cluster: Cluster, tps: list[TopicPartition]) -> tuple[int, bool]:
    """(records on the local cluster in ``tps`` now, whether every partition of the topics
    known there answered: the figure this bench took for the first record before). A
    partition of a topic still being created (not known, no leader yet, its leader not
    ready) counts 0 rather than failing the count: until 2026-12-01 one such partition made
    the whole count 0, so the first record was seen only at a moment when every topic
    created so far was led."""
    metadata = cluster._client.cluster
    by_leader: dict[int, dict[str, list[tuple[int, int]]]] = defaultdict(lambda: defaultdict(list))
    complete = True
    known = metadata.topics()
    for tp in tps:
        node = metadata.leader_for_partition(tp)
        if node is None or node < 0:
            complete = complete and tp.topic not in known  # a topic not created yet: fine
            continue
        by_leader[node][tp.topic].append((tp.partition, LATEST))
    total = 0
    for node, asked in by_leader.items():
        answer = await cluster.send(node, OffsetRequest(-1, 0, list(asked.items())))
        for _topic, answered in answer.topics:
            for _partition, code, *rest in answered:
                if code:
                    complete = False
                else:
                    total += int(rest[-1])
    return total, complete


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


def _mark(value: float, target: float) -> str:
    return f"{'✓' if value <= target else '✗'}"


def report(console: Console, args: argparse.Namespace, cases: dict[str, Case]) -> None:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    total = args.topics * args.partitions
    table = Table(title=f"{args.topics} topics × {args.partitions} partitions, loopback · {when}")
    columns = (
        "case",
        "member",
        "partitions",
        "share",
        f"first record s (≤{FIRST_S:.0f})",
        f"all in sync s (≤{IN_SYNC_S:.0f})",
        f"peak RSS MiB (≤{RSS_MIB:.0f})",
        f"settling CPU ({SETTLE_S:.0f} s)",
        f"idle CPU (≤{IDLE_CPU:.0%})",
        "rebalances",
    )
    for column in columns:
        table.add_column(column, justify="right")
    for label, case in cases.items():
        for n, m in enumerate(case.members):
            timing = ("", "")
            if n == 0:
                timing = (
                    f"{case.first_s:.1f} {_mark(case.first_s, FIRST_S)}",
                    f"{case.in_sync_s:.1f} {_mark(case.in_sync_s, IN_SYNC_S)}",
                )
            share = m.partitions / total
            table.add_row(
                label if n == 0 else "",
                m.name,
                str(m.partitions),
                f"{share:.0%} {_mark(share, MAX_SHARE) if len(case.members) > 1 else ''}",
                *timing,
                f"{m.peak_rss_mib:.0f} {_mark(m.peak_rss_mib, RSS_MIB)}",
                f"{m.settling_cpu:.1%}",
                f"{m.idle_cpu:.1%} {_mark(m.idle_cpu, IDLE_CPU)}",
                str(m.rebalances),
            )
    console.print(table)
    document = {
        "benchmark": "scale",
        "date": when,
        "machine": machine(),
        "partitions": total,
        "topics": args.topics,
        "records_per_partition": RECORDS_PER_PARTITION,
        "settling_window_s": SETTLE_S,
        "idle_window_s": IDLE_S,
        "targets": {
            "first_record_s": FIRST_S,
            "in_sync_s": IN_SYNC_S,
            "peak_rss_mib": RSS_MIB,
            "idle_cpu_fraction_of_a_core": IDLE_CPU,
            "max_member_share": MAX_SHARE,
        },
        "cases": {
            label: {
                "first_record_s": case.first_s,
                "first_record_all_answering_s": case.first_complete_s,
                "in_sync_s": case.in_sync_s,
                "peak_rss_mib": case.peak_rss_mib,
                "idle_cpu_fraction_of_a_core": case.idle_cpu,
                "max_member_share": case.max_share,
                "members": [asdict(m) for m in case.members],
            }
            for label, case in cases.items()
        },
    }
    (args.out / "bench-scale.json").write_text(json.dumps(document, indent=2) + "\n")
    console.print(f"wrote {args.out / 'bench-scale.json'}")


if __name__ == "__main__":
    main()
