"""Benchmark (not a test): steady state. A producer writes a fixed 5 MB/s (1 KiB records) into
the remote while a copier that is already running keeps local in step; a consumer on the local
cluster measures each record's end-to-end latency (its CreateTime at the producer to its
arrival from the local cluster; every copier keeps the source's timestamps). syncer (`run`)
first, then the floor making syncer's checks (`floor+checks`), then the hop's floor
(`tests/bench/floor.py`: the least a one-threaded asyncio copier can do, no checks), then
MirrorMaker 2, each on its own topic; then (``--order abba``, the
default) each again in the reverse order, so that every copier is measured once early and
once late and what the order does falls on all alike (measured once, first, syncer's hop p50
came out 2.5-10.3 ms where last it was 1.3-1.4). Each copier's rows pool its two rounds.
Records of the first 25 s of a round do not count: on brokers just started, the first copier
measured would otherwise pay for their JIT warm-up (syncer's p99 was 50-100 ms in its first
20 s and 9 ms after).

    make bench-steady     # or: python -m tests.bench.steady [--seconds 60] [--out results]

Writes results/bench-steady.json and results/bench-steady.png (latency distributions).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import gc
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from aiokafka import AIOKafkaConsumer
from rich.console import Console
from rich.table import Table

from syncer.clusters import Cluster
from syncer.config import ClusterConfig
from syncer.hop_trace import ENV as HOP_TRACE
from syncer.testbed import ClusterSpec, Testbed
from syncer.testbed.bed import log4j_properties
from syncer.testbed.tools import perf_produce_command
from tests.bench.catchup import machine
from tests.bench.peers import MM2_HEAP, MM2_PROPERTIES, axes, cpu_seconds, save
from tests.kafka_helpers import create_topic

PARTITIONS = 8
RECORD_SIZE = 1024
RATE_BYTES = 5_000_000
WARMUP_TOPIC = "steady.warmup"
WARMUP_S = 25.0  # the brokers and both copiers warm up (JIT) before records count
# a copy nobody counts before the first round (``--warmup``): whoever went first had the
# run's worst tail (2026-12-05: syncer first, hop p99 30.1 and 36.3 ms; 3.4 after 120 s of
# the floor)
WARMUP_COPY_S = 120.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0, help="producing time per copier")
    parser.add_argument("--tasks", type=int, default=8, help="MirrorMaker 2 tasks.max")
    parser.add_argument(
        "--warmup",
        type=float,
        default=WARMUP_COPY_S,
        help="seconds of a copy that is not counted, before the first copier (0: none)",
    )
    parser.add_argument(
        "--warmup-copier", default="floor", help="the copier of the warm-up: syncer, floor, mm2"
    )
    parser.add_argument(
        "--order",
        choices=("abba", "once"),
        default="abba",
        help="abba: the copiers in order, then again in reverse (each measured early and late);"
        " once: each once, in order",
    )
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument(
        "--data",
        type=Path,
        help="where the brokers keep their logs (default: the temp dir), e.g. /dev/shm: on"
        " disk, the kernel's writeback of the rounds before (300 MB at once) falls on one"
        " copier's round or another's; on tmpfs there is none, and the p99s came out no"
        " steadier (2026-12-04 16:33)",
    )
    parser.add_argument(
        "--timeline",
        action="store_true",
        help="syncer notes each step of its copy (SYNCER_HOP_TRACE), the floor its answers and"
        " writes (floor.py --notes), and the readers' arrivals are kept: all go to"
        " OUT/steady-timeline-*.json (tests/bench/hop_timeline.py reads them)",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=RATE_BYTES / 1e6,
        help="MB/s into the remote (below 5 the two cores are not both busy)",
    )
    parser.add_argument(
        "--copiers",
        default="syncer,floor+checks,floor,mm2",
        help="which to run, comma-separated: syncer, floor (tests/bench/floor.py: the least a"
        " one-threaded asyncio copier can do, the hop's floor for one of syncer's kind), mm2;"
        " floor+N: the floor with N µs of busy Python before each answer's writes; floor+postN:"
        " with N µs as each produce answer is read (both: floor+N+postM); floor+gapN: with N"
        " µs between an answer's writes and its next poll; floor+pollfirst: its next poll"
        " written before the writes; floor+checks:"
        " the floor making syncer's checks of each answer and write (floor.py --checks); syncer*N:"
        " N syncer processes in one group (no --timeline notes), their CPU added up",
    )
    args = parser.parse_args()
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="syncer-bench-steady-", dir=args.data))
    bed = Testbed(work / "bed")
    console = Console(width=120)
    results: dict[str, Latencies] = {}  # by round: "syncer", then "syncer #2"
    cpu: dict[str, float] = {}  # round → CPU while measured, fraction of a core
    try:
        bed.up([ClusterSpec("local"), ClusterSpec("east")])
        local, east = bed.clusters["local"].bootstrap, bed.clusters["east"].bootstrap
        # --warmup: a copy nobody counts before the first copier. Syncer's hop came out
        # slower measured first than last (2026-12-02: p50 2.5-10.3 ms in seven runs first,
        # 1.3 and 1.4 ms in two last); a 60 s warm-up, by the floor or by syncer, did not
        # change it (3.9, 6.7 ms), nor one of 90 s by MirrorMaker 2 (2026-12-04: syncer's
        # p99 32.2 ms first, 15.2 last), and MirrorMaker 2 run first is as slow there (29.9
        # first, 8.4 last): it was off unless asked for. Part of the cause was the brokers'
        # heaps growing from 128 MiB through a bed's first minutes; the bed fixes them now
        # (2026-12-04 21:11, ABBA: syncer 0.9 / 8.2 first, 0.9 / 8.4 last; but at 21:35
        # 1.2 / 24.8 first, that round's source read p99 15.3 ms against 4.3-6.1 after).
        # With the heaps fixed, both runs given a warm-up had a first round like the rest
        # (2026-12-04 12:47, 300 s; 2026-12-05 06:29, 120 s: syncer 0.8 / 3.4 first and
        # 0.7 / 3.6 last), and the two of that morning without one did not (syncer's first
        # round p99 30.1 and 36.3 ms, its last 4.1 and 4.3): on by default since
        warmup = [("", args.warmup_copier, WARMUP_TOPIC)] if args.warmup > 0 else []
        for name, copier, topic in warmup + rounds_of(args.copiers.split(","), args.order):
            counted = topic != WARMUP_TOPIC
            seconds = args.seconds if counted else args.warmup
            asyncio.run(create_topic(east, topic, PARTITIONS))
            what = name if counted else f"warm-up ({copier}, not counted)"
            console.print(f"{what}: starting ...")
            trace = args.out / timeline_file(name) if args.timeline else None
            procs, target = start_copier(copier, work, bed, local, east, topic, args.tasks, trace)
            try:
                asyncio.run(wait_for_topic(local, target))
                if len(procs) > 1:  # a group: measured once its partitions are shared out
                    wait_for_group([work / f"{copier}-{i}.log" for i in range(len(procs))])
                console.print(f"{what}: producing {args.rate:g} MB/s for {seconds:.0f} s")
                cpu_before, started = cpu_of(procs), time.monotonic()
                kept = args.out / timeline_file(name, "readers")
                kept = kept if args.timeline and counted else None
                with no_collector_pauses():
                    latencies = asyncio.run(
                        measure(bed, east, local, topic, target, seconds, kept, args.rate * 1e6)
                    )
                if counted:
                    results[name] = latencies
                    used = cpu_of(procs) - cpu_before
                    cpu[name] = used / (time.monotonic() - started)
            except Exception:
                tail = (work / f"{copier}.log").read_text().splitlines()[-20:]
                console.print(f"{copier} failed; the end of its log:", *tail, sep="\n")
                raise
            finally:
                for proc in procs:
                    proc.send_signal(signal.SIGTERM)
                for proc in procs:
                    try:
                        proc.wait(30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
        report(console, args, results, cpu)
    finally:
        bed.down()
        shutil.rmtree(work, ignore_errors=True)


def logs_in(args: argparse.Namespace) -> str:
    return str(args.data) if args.data is not None else tempfile.gettempdir()


@contextlib.contextmanager
def no_collector_pauses() -> Iterator[None]:
    """No cyclic garbage collection in this process while it measures: its two readers keep
    an arrival per record (350,000 a round), and collecting them stopped both readers for
    56-127 ms at a time (gen 2, 7 times in a run; gen 1 up to 23 ms), which a record that
    had reached one reader and not the other counted as its hop."""
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()
        gc.collect()


def rounds_of(copiers: list[str], order: str) -> list[tuple[str, str, str]]:
    """(round's name, copier, topic) in the order they run: ``abba`` runs the copiers, then
    again in reverse, the second round of each named ``<copier> #2`` on a topic of its own."""
    topic = lambda copier: "steady." + copier.replace("+", "-").replace("*", "-x")  # noqa: E731
    rounds = [(copier, copier, topic(copier)) for copier in copiers]
    if order == "abba":
        rounds += [(f"{c} #2", c, f"{topic(c)}.2") for c in reversed(copiers)]
    return rounds


def timeline_file(round_name: str, part: str = "") -> str:
    """Where ``--timeline`` keeps a round's notes (``part`` "readers": its readers')."""
    stem = "-".join(["steady-timeline", round_name.replace(" #", "-"), *([part] if part else [])])
    return f"{stem}.json"


def pooled(results: dict[str, Latencies]) -> dict[str, Latencies]:
    """Each copier's rounds as one: "syncer" and "syncer #2" pooled under "syncer"."""
    out: dict[str, Latencies] = {}
    for name, latencies in results.items():
        into = out.setdefault(name.split(" #")[0], Latencies())
        into.end_to_end += latencies.end_to_end
        into.source += latencies.source
        into.hop += latencies.hop
        into.unmatched += latencies.unmatched
    return out


def start_copier(
    copier: str,
    work: Path,
    bed: Testbed,
    local: str,
    east: str,
    topic: str,
    tasks: int,
    trace: Path | None = None,
) -> tuple[list[subprocess.Popen[bytes]], str]:
    """The copier's processes (several for ``syncer*N``) and the local topic it writes."""
    log = (work / f"{copier}.log").open("w")
    if copier.split("*")[0] == "syncer":
        members = int(copier.split("*")[1]) if "*" in copier else 1
        config = work / f"{copier}.yaml"
        config.write_text(yaml.safe_dump(syncer_config(local, east, topic, members)))
        cmd = [sys.executable, "-m", "syncer", "run", "-c", str(config)]
        if members == 1:
            env = {**os.environ, **({HOP_TRACE: str(trace.resolve())} if trace else {})}
            return [subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)], topic
        # -v: the group leader's plan is an INFO line (``wait_for_group`` waits for it)
        cmd.insert(cmd.index("run"), "-v")
        logs = [(work / f"{copier}-{i}.log").open("w") for i in range(members)]
        return [subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT) for out in logs], topic
    if copier.split("+")[0] == "floor":  # the hop's floor for a one-threaded asyncio copier
        # (floor.py); floor+N: with N µs of busy Python before each answer's writes;
        # floor+postN: as each produce answer is read; floor+gapN: between an answer's
        # writes and its next poll; floor+pollfirst: the poll before the writes;
        # floor+checks: syncer's checks
        asyncio.run(create_topic(local, topic, PARTITIONS))
        cmd = [sys.executable, "-m", "tests.bench.floor", "--remote", east, "--local", local]
        for extra in copier.split("+")[1:]:
            if extra == "checks":
                cmd += ["--checks"]
            elif extra == "pollfirst":
                cmd += ["--poll-first"]
            elif extra.startswith("post"):
                cmd += ["--post-us", extra.removeprefix("post")]
            elif extra.startswith("gap"):
                cmd += ["--gap-us", extra.removeprefix("gap")]
            else:
                cmd += ["--work-us", extra]
        cmd += ["--topic", topic, "--partitions", str(PARTITIONS)]
        cmd += ["--notes", str(trace.resolve())] if trace else []
        return [subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)], topic
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
    return [subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)], f"east.{topic}"


def syncer_config(local: str, east: str, topic: str, members: int) -> dict[str, object]:
    """syncer's configuration for a round; with ``members`` > 1, one group of that many
    processes on the local cluster sharing the partitions (one per core: the scale-out)."""
    config: dict[str, object] = {
        "local": {"bootstrap_servers": local},
        "remotes": [{"name": "east", "bootstrap_servers": east}],
        "topics": {"include": [topic], "refresh_interval_s": 2},
        "http": {"listen": "127.0.0.1:0"},
    }
    if members > 1:
        config["coordination"] = {"group": f"bench-{topic}"}
    return config


def cpu_of(procs: list[subprocess.Popen[bytes]]) -> float:
    """CPU seconds used so far by all of a copier's processes."""
    return sum(cpu_seconds(proc.pid) for proc in procs)


def wait_for_group(logs: list[Path], timeout: float = 120.0, settle_s: float = 3.0) -> None:
    """Until the group's leader logged a plan for all of its members (those that joined
    first copied every partition until the rest came), then a moment for them to start."""
    plan = f"partitions to {len(logs)} members"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(plan in log.read_text() for log in logs if log.exists()):
            time.sleep(settle_s)
            return
        time.sleep(0.5)
    raise RuntimeError(f"the group of {len(logs)} syncer processes never shared its partitions")


async def wait_for_topic(local: str, topic: str, timeout: float = 120.0) -> None:
    async with Cluster(ClusterConfig(local, name="bench"), role="bench") as cluster:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (await cluster.partition_counts()).get(topic) == PARTITIONS:
                await asyncio.sleep(5)  # let the copier settle on the new topic
                return
            await asyncio.sleep(0.5)
    raise RuntimeError(f"copier never created {topic} on local")


@dataclass
class Latencies:
    """Per record counted, in ms: ``end_to_end`` (CreateTime to arrival from local),
    ``source`` (CreateTime to arrival from the remote, read directly: what no copier can beat)
    and ``hop`` (arrival from local minus arrival from the remote, matched by partition and
    offset: what the copier itself adds)."""

    end_to_end: list[float] = field(default_factory=list)
    source: list[float] = field(default_factory=list)
    hop: list[float] = field(default_factory=list)
    unmatched: int = 0  # local records whose offset held another record at the remote


async def arrivals(
    bootstrap: str, topic: str, expected: int, seconds: float
) -> dict[tuple[int, int], tuple[float, int]]:
    """(partition, offset) → (arrival in ms, CreateTime) of ``expected`` new records."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=20
    )
    await consumer.start()
    seen: dict[tuple[int, int], tuple[float, int]] = {}
    try:
        await consumer.getmany(timeout_ms=1000)  # positions at the end before producing
        deadline = time.monotonic() + seconds + 60
        while len(seen) < expected and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=200)
            now_ms = time.time() * 1000
            for tp, messages in batches.items():
                for message in messages:
                    seen[(tp.partition, message.offset)] = (now_ms, message.timestamp)
    finally:
        await consumer.stop()
    return seen


async def measure(
    bed: Testbed,
    east: str,
    local: str,
    topic: str,
    target: str,
    seconds: float,
    kept: Path | None = None,
    rate: float = RATE_BYTES,
) -> Latencies:
    """Latencies of every record produced after the warm-up, read from both clusters; with
    ``kept``, every arrival goes there as JSON too."""
    records = int(rate / RECORD_SIZE * seconds)
    readers = [
        asyncio.create_task(arrivals(local, target, records, seconds)),
        asyncio.create_task(arrivals(east, topic, records, seconds)),
    ]
    await asyncio.sleep(3)  # both readers at the end of their topic
    producer = await asyncio.create_subprocess_exec(
        *perf_produce_command(
            east,
            topic,
            records=records,
            record_size=RECORD_SIZE,
            jars=bed.jars,
            producer_props={"linger.ms": "0", "batch.size": "16384", "acks": "all"},
            throughput=int(rate / RECORD_SIZE),
        ),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    counted_from = time.time() * 1000 + WARMUP_S * 1000
    try:
        at_local, at_remote = await asyncio.gather(*readers)
    finally:
        await producer.wait()
    if kept is not None:
        sides = {"local": at_local, "remote": at_remote, "counted_from_ms": counted_from}
        kept.write_text(json.dumps({k: _rows(v) for k, v in sides.items()}) + "\n")
    if len(at_local) < records:
        raise RuntimeError(f"only {len(at_local)} of {records} records reached local")
    result = Latencies()
    for key, (arrived, created) in at_local.items():
        if created < counted_from:
            continue
        result.end_to_end.append(arrived - created)
        remote = at_remote.get(key)
        if remote is None or remote[1] != created:
            result.unmatched += 1
            continue
        result.source.append(remote[0] - created)
        result.hop.append(arrived - remote[0])
    return result


def _rows(arrived: object) -> object:
    """Arrivals as JSON rows: [partition, offset, arrival ms, CreateTime]."""
    if isinstance(arrived, dict):
        return [[p, o, at, created] for (p, o), (at, created) in arrived.items()]
    return arrived


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def row_of(latencies: Latencies, cpu: float) -> dict[str, float]:
    e2e, source, hop = latencies.end_to_end, latencies.source, latencies.hop
    return {
        "records": len(e2e),
        "p50_ms": percentile(e2e, 0.50),
        "p99_ms": percentile(e2e, 0.99),
        "max_ms": max(e2e),
        "source_p50_ms": percentile(source, 0.50),
        "source_p99_ms": percentile(source, 0.99),
        "hop_p50_ms": percentile(hop, 0.50),
        "hop_p99_ms": percentile(hop, 0.99),
        "hop_max_ms": max(hop),
        "unmatched": latencies.unmatched,
        "cpu_fraction_of_a_core": cpu,
    }


def ratios_of(rows: dict[str, dict[str, float]]) -> dict[str, float]:
    """Each pair's p50 / p99 ratios, of the copiers in ``rows``: every copier's to MirrorMaker
    2's (``syncer*2``, ``floor+100`` too), and syncer's to the floor's."""
    pairs = [(c, "mm2", f"{c} / MM2") for c in rows if c != "mm2"]
    pairs += [("syncer", "floor", "syncer / floor")]
    ratios = {}
    for a, b, name in pairs:
        if a not in rows or b not in rows:
            continue
        x, y = rows[a], rows[b]
        if name == "syncer / MM2":
            ratios |= {
                f"p50 ({name})": x["p50_ms"] / y["p50_ms"],
                f"p99 ({name})": x["p99_ms"] / y["p99_ms"],
            }
        ratios |= {
            f"hop p50 ({name})": x["hop_p50_ms"] / y["hop_p50_ms"],
            f"hop p99 ({name})": x["hop_p99_ms"] / y["hop_p99_ms"],
            f"CPU ({name})": x["cpu_fraction_of_a_core"] / y["cpu_fraction_of_a_core"],
        }
    return ratios


def report(
    console: Console,
    args: argparse.Namespace,
    results: dict[str, Latencies],
    cpu: dict[str, float],
) -> None:
    """A table of every round and, where each copier ran twice, of each copier's rounds
    pooled; the ratios are the pooled ones."""
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    table = Table(
        title=f"steady state: {args.rate:g} MB/s of {RECORD_SIZE} B records,"
        f" {PARTITIONS} partitions, {args.seconds:.0f} s, loopback, logs in {logs_in(args)}"
        f" · {when}"
    )
    columns = (
        "copier",
        "records",
        "end-to-end p50 / p99 / max ms",
        "source read p50 / p99",
        "hop p50 / p99 ms",
        "CPU % of a core",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "copier" else "right")
    by_round = {name: row_of(latencies, cpu[name]) for name, latencies in results.items()}
    rows = {}  # by copier, its rounds pooled
    for copier, latencies in pooled(results).items():
        cpus = [c for name, c in cpu.items() if name.split(" #")[0] == copier]
        rows[copier] = row_of(latencies, sum(cpus) / len(cpus))
    shown = list(by_round.items())
    if len(rows) < len(by_round):
        shown += [(f"{copier}, pooled", row) for copier, row in rows.items()]
    for name, r in shown:
        table.add_row(
            name,
            f"{r['records']:,}",
            f"{r['p50_ms']:.1f} / {r['p99_ms']:.1f} / {r['max_ms']:.0f}",
            f"{r['source_p50_ms']:.1f} / {r['source_p99_ms']:.1f}",
            f"{r['hop_p50_ms']:.1f} / {r['hop_p99_ms']:.1f}",
            f"{100 * r['cpu_fraction_of_a_core']:.0f}",
        )
    console.print(table)
    ratios = ratios_of(rows)
    for name, value in ratios.items():
        console.print(f"{name}: {value:.2f}x")
    document = {
        "benchmark": "steady",
        "date": when,
        "machine": machine(),
        "rate_bytes_per_s": args.rate * 1e6,
        "seconds": args.seconds,
        "order": args.order,
        "logs_in": logs_in(args),
        "rows": rows,
        "rounds": by_round,
        "ratios": ratios,
    }
    (args.out / "bench-steady.json").write_text(json.dumps(document, indent=2) + "\n")
    plot(pooled(results), args.out / "bench-steady.png", f"{args.rate:g} MB/s · {when}")
    console.print(f"wrote {args.out / 'bench-steady.json'} and {args.out / 'bench-steady.png'}")


def plot(results: dict[str, Latencies], path: Path, when: str) -> None:
    fig, ax = axes()
    for (copier, latencies), color in zip(
        results.items(), ("tab:blue", "tab:green", "tab:orange"), strict=False
    ):
        name = "MirrorMaker 2" if copier == "mm2" else copier
        for values, label, style in (
            (latencies.end_to_end, f"{name}, end to end", "-"),
            (latencies.hop, f"{name}, hop (remote to local)", ":"),
        ):
            ordered = sorted(values)
            ys = [i / len(ordered) for i in range(len(ordered))]
            ax.plot(ordered, ys, style, color=color, label=label)
    floor = sorted(v for latencies in results.values() for v in latencies.source)
    ys = [i / len(floor) for i in range(len(floor))]
    ax.plot(floor, ys, "--", color="grey", label="source read directly (no copier)")
    ax.set_xscale("log")
    ax.set_xlabel("latency, ms (log)")
    ax.set_ylabel("fraction of records")
    ax.set_title(f"steady state, {when}", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, path)


if __name__ == "__main__":
    main()
