"""Benchmark (not a test): backlog drain on loopback, one case after another in one run. Each
case (partitions × record size × compression) writes >= 1 GiB of records to the remote, then
measures, in turn on the same data:

- L_raw, the brokers' own limit (``tests.bench.raw``): (a) the remote serving the backlog as
  raw fetches, bytes discarded, and (b) the local broker appending the same batches stamped
  as syncer stamps them, fed from memory, each with syncer's parallelism; L_raw = min(a, b);
- with ``--perf-limit`` also the old L: kafka-producer-perf-test writing the same records to
  the local cluster while kafka-consumer-perf-test reads the remote's (the Java clients
  decode and encode records, so it measured them more than the brokers: off by default);
- syncer catch-up;
- syncer catch-up of the same records into a second local cluster whose brokers forget a
  producer after 1 s (``producer.id.expiration.ms``): there the backlog is older than the
  expiry, as in a migration of records older than a day, so every partition writes one
  batch at a time (the broker may hold no producer state to fence a pipelined write);
- MirrorMaker 2 (dedicated mode, same jars, its producer compressing like the source).

Ratios come from the same case. Topics are deleted after each case (disk).

    make bench-catchup    # or: python -m tests.bench.catchup [--cases 8:1024:none,...]
        [--gib 1.0] [--tasks 8] [--out results] [--raw-procs 4] [--perf-limit]

Writes results/bench-catchup.json and results/bench-catchup.png.
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
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from syncer.testbed import ClusterSpec, Testbed
from syncer.testbed.jars import KafkaJars
from syncer.testbed.tools import perf_consume_command, perf_produce, perf_produce_command
from syncer.writer import WRITE_CONNECTIONS
from tests.bench import raw
from tests.bench.peers import (
    Measured,
    axes,
    cpu_by_thread,
    cpu_seconds,
    local_total,
    machine_busy,
    pressure,
    run_mm2,
    run_syncer,
    save,
)
from tests.kafka_helpers import create_topic

DEFAULT_CASES = ",".join(
    f"{p}:{size}:{codec}"
    for p in (8, 64)
    for size in (1024, 100)
    for codec in ("none", "lz4", "zstd")
)


SOURCE_BATCH_BYTES = 262_144  # the source producer's batch.size unless a case says


@dataclass(frozen=True)
class Case:
    partitions: int
    record_size: int
    compression: str
    # the source producer's batch.size: one at or below the record size puts each record in
    # a batch of its own, as a producer with linger.ms=0 writes a slow stream
    batch_bytes: int = SOURCE_BATCH_BYTES

    @classmethod
    def parse(cls, text: str) -> Case:
        partitions, size, codec, *batch = text.split(":")
        return cls(int(partitions), int(size), codec, *(int(b) for b in batch[:1]))

    @property
    def name(self) -> str:
        name = f"{self.partitions}p-{self.record_size}B-{self.compression}"
        return name if self.batch_bytes == SOURCE_BATCH_BYTES else f"{name}-b{self.batch_bytes}"

    def records(self, gib: float) -> int:
        return -(-int(gib * 2**30) // self.record_size)


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


FORGETFUL_MS = 1000  # the backlog, written before the copy, is older than this


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--cases",
        default=DEFAULT_CASES,
        help="PARTITIONS:RECORD_BYTES:CODEC[:SOURCE_BATCH_BYTES],...",
    )
    parser.add_argument("--gib", type=float, default=1.0, help="uncompressed backlog per case")
    parser.add_argument("--tasks", type=int, default=8, help="MirrorMaker 2 tasks.max")
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument(
        "--raw-procs",
        type=int,
        # syncer's writer spreads the partitions over this many connections to a broker,
        # each with max_in_flight requests: L_raw's appends get the same parallelism
        default=len(WRITE_CONNECTIONS),
        help="processes (connections) of the L_raw tool",
    )
    parser.add_argument(
        "--raw-repeats", type=int, default=2, help="runs of each L_raw phase (the best counts)"
    )
    parser.add_argument("--perf-limit", action="store_true", help="also the Java perf tools' L")
    parser.add_argument(
        "--no-together",
        action="store_true",
        help="skip raw serve and append at once (what any copier could reach on these cores)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="py-spy samples each syncer catch-up (not old)"
    )
    parser.add_argument(
        "--ab",
        type=Path,
        help="a checkout (e.g. of main) to run syncer from as A, against this tree as B, in"
        " turns after L_raw; the other copiers are not run",
    )
    parser.add_argument("--rounds", type=int, default=2, help="A/B pairs with --ab")
    parser.add_argument(
        "--append-caps",
        default="",
        help="with --ab: raw append runs more, each request at most K batches (K,K,...)",
    )
    parser.add_argument(
        "--broker-props",
        default="",
        help="KEY=VALUE,... for every broker (e.g. log.cleaner.dedupe.buffer.size=16777216)",
    )
    parser.add_argument(
        "--b-copier", default="", help="with --ab: copier settings of B only (KEY=INT,...)"
    )
    parser.add_argument(
        "--together", action="store_true", help="with --ab: raw serve and append at once too"
    )
    parser.add_argument(
        "--gc-log", action="store_true", help="the local broker logs its GCs to OUT/local-gc.log"
    )
    args = parser.parse_args()
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # probes of starting brokers
    args.out.mkdir(parents=True, exist_ok=True)
    cases = [Case.parse(c) for c in args.cases.split(",")]
    work = Path(tempfile.mkdtemp(prefix="syncer-bench-"))
    bed = Testbed(work / "bed")
    console = Console(width=200)
    results: list[dict[str, object]] = []
    try:
        console.print(f"starting clusters under {work} ...")
        extra = dict(kv.split("=", 1) for kv in args.broker_props.split(",") if kv)
        forgetful = {"producer.id.expiration.ms": str(FORGETFUL_MS), **extra}
        bed.up(
            [
                ClusterSpec("local", properties=extra),
                ClusterSpec("east", properties=extra),
                ClusterSpec("old", properties=forgetful),
            ]
        )
        if args.gc_log:
            gc_log(bed.clusters["local"].pid, args.out / "local-gc.log")
        for case in cases:
            results.append(run_case(console, bed, work, case, args))
            write(args, results)
        if args.ab is None:
            report(console, args, results)
    finally:
        bed.down()
        shutil.rmtree(work, ignore_errors=True)


def run_case(
    console: Console, bed: Testbed, work: Path, case: Case, args: argparse.Namespace
) -> dict[str, object]:
    local, east = bed.clusters["local"].bootstrap, bed.clusters["east"].bootstrap
    topic = f"bench.{case.name}"
    records = case.records(args.gib)
    size = records * case.record_size
    codec = {"compression.type": case.compression}
    asyncio.run(create_topic(east, topic, case.partitions))
    console.print(f"[{case.name}] writing {records:,} records to east ...")
    perf_produce(
        east,
        topic,
        records=records,
        record_size=case.record_size,
        jars=bed.jars,
        producer_props={**codec, "batch.size": str(case.batch_bytes), "linger.ms": "20"},
    )
    assert asyncio.run(local_total(east, topic, case.partitions)) == records
    console.print(
        f"[{case.name}] {_clock()} L_raw: raw fetches from east, then raw appends to local ..."
    )
    brokers = broker_clock(bed, ["east", "local"])
    limit_raw = raw.measure(
        east,
        local,
        topic,
        case.partitions,
        size,
        procs=args.raw_procs,
        repeats=args.raw_repeats,
        brokers=brokers,
    )
    together = None  # the same batches served and appended at once, no copier
    if not args.no_together and args.ab is None:
        console.print(f"[{case.name}] {_clock()} raw serve and raw append at once ...")
        together = min(
            (
                raw.measure_together(east, local, topic, case.partitions, brokers)
                for _ in range(args.raw_repeats)
            ),
            key=lambda phase: phase.seconds,
        )
    both = size / 1e6 / together.seconds if together else None
    l_raw = effective_l_raw(limit_raw, both)
    limit = None
    if args.perf_limit:
        console.print(f"[{case.name}] L: perf producer to local while perf consumer reads east")
        limit = measure_limit(bed.jars, local, east, topic, case, records, size)
    if args.ab is not None:
        return run_ab(console, bed, work, case, args, limit_raw, brokers)
    console.print(f"[{case.name}] syncer catch-up ...")
    profile = args.out / f"profile-catchup-{case.name}.txt" if args.profile else None
    ours = run_syncer(
        work,
        local,
        east,
        topic,
        records,
        size,
        partitions=case.partitions,
        profile=profile,
        brokers=brokers,
    )
    assert asyncio.run(local_total(local, topic, case.partitions)) == records
    console.print(f"[{case.name}] syncer catch-up of records older than the producer expiry ...")
    old_local = bed.clusters["old"].bootstrap
    old = run_syncer(
        work, old_local, east, topic, records, size, partitions=case.partitions, label="old"
    )
    assert asyncio.run(local_total(old_local, topic, case.partitions)) == records
    asyncio.run(delete_topics(old_local, [topic]))
    console.print(f"[{case.name}] MirrorMaker 2 (tasks.max={args.tasks}) ...")
    producer = "" if case.compression == "none" else case.compression
    peer = run_mm2(
        work,
        bed.jars,
        local,
        east,
        topic,
        records,
        size,
        case.partitions,
        args.tasks,
        extra=f"local.producer.compression.type = {producer or 'none'}\n",
    )
    doomed = [topic, f"east.{topic}", f"limit.{topic}"]
    asyncio.run(delete_topics(local, doomed))
    asyncio.run(delete_topics(east, [topic]))
    row: dict[str, object] = {
        "case": case.name,
        "partitions": case.partitions,
        "record_size": case.record_size,
        "compression": case.compression,
        "records": records,
        "bytes": size,
        "limit_mb_per_s": limit,  # the Java perf tools' L, with --perf-limit only
        "raw_limit": limit_raw.as_dict(),
        # both brokers' raw work at once, no copier: what any copier could reach here
        "raw_together_mb_per_s": both,
        "l_raw_mb_per_s": l_raw,
        "cpu_budget": cpu_budget(limit_raw, ours, rate=l_raw),
        "syncer": _row(ours),
        "syncer_old_records": _row(old),
        "mm2": _row(peer),
        "ratios": {
            "throughput_vs_mm2": ours.mb_per_s / peer.mb_per_s,
            "throughput_vs_limit": ours.mb_per_s / limit if limit else None,
            "throughput_vs_raw_limit": ours.mb_per_s / l_raw,
            "old_records_vs_mm2": old.mb_per_s / peer.mb_per_s,
            "old_records_vs_syncer": old.mb_per_s / ours.mb_per_s,
            "cpu_per_gib_vs_mm2": ours.cpu_s_per_gib / peer.cpu_s_per_gib,
            "rss_vs_mm2": ours.peak_rss_mib / peer.peak_rss_mib,
        },
    }
    row["verdict"] = verdict(
        ours.mb_per_s,
        l_raw,
        row["raw_together_mb_per_s"],  # type: ignore[arg-type]
        row["cpu_budget"],  # type: ignore[arg-type]
    )
    console.print(f"[{case.name}] {budget_line(row['cpu_budget'])}")  # type: ignore[arg-type]
    console.print(f"[{case.name}] 0.85 x L_raw: {row['verdict']}")
    for line in waits_lines(ours.waits, limit_raw.as_dict()):
        console.print(f"[{case.name}] {line}")
    if profile is not None and profile.exists():
        row["syncer_profile"] = profile_summary(profile, ours.seconds)
        console.print(f"[{case.name}] syncer profile: {row['syncer_profile']}")
    console.print(
        f"[{case.name}] syncer {ours.mb_per_s:.1f} MB/s (old records {old.mb_per_s:.1f}),"
        f" MM2 {peer.mb_per_s:.1f} MB/s,"
        f" L_raw {l_raw:.1f} MB/s (serve {limit_raw.serve_mb_per_s:.1f},"
        f" append {limit_raw.append_mb_per_s:.1f}; tool CPU at most"
        f" {max(limit_raw.serve.max_cpu_share, limit_raw.append.max_cpu_share):.0%} of a core),"
        f" syncer / L_raw {ours.mb_per_s / l_raw:.2f}"
        f" (syncer core use {core_use(ours) or 0:.2f});"
        f" syncer RSS {ours.peak_rss_mib:.0f} MiB" + (f"; L {limit:.1f} MB/s" if limit else "")
    )
    return row


def run_ab(
    console: Console,
    bed: Testbed,
    work: Path,
    case: Case,
    args: argparse.Namespace,
    limit_raw: raw.RawLimit,
    brokers: raw.BrokerClock,
) -> dict[str, object]:
    """syncer from ``args.ab`` (A) and from this tree (B) in turns, each into an empty local
    topic: a change's effect in one sitting, beside this case's L_raw."""
    local, east = bed.clusters["local"].bootstrap, bed.clusters["east"].bootstrap
    topic = f"bench.{case.name}"
    records = case.records(args.gib)
    size = records * case.record_size
    runs: list[dict[str, object]] = []
    lim = limit_raw.as_dict()
    b_copier = {k: int(v) for k, v in (kv.split("=") for kv in args.b_copier.split(",") if kv)}
    console.print(
        f"[{case.name}] L_raw {limit_raw.mb_per_s:.1f} MB/s: serve runs"
        f" {[round(x) for x in lim['serve_runs_mb_per_s']]}, append runs"  # type: ignore[attr-defined]
        f" {[round(x) for x in lim['append_runs_mb_per_s']]}; CPU s/GB appending"  # type: ignore[attr-defined]
        f" { ({k: round(v, 2) for k, v in lim['append_broker_cpu_s_per_gb'].items()}) }"  # type: ignore[attr-defined]
    )
    capped_appends(console, case, args, east, local, size, brokers)
    if args.together:
        both = raw.measure_together(east, local, topic, case.partitions, brokers)
        gb = size / 1e9
        console.print(
            f"[{case.name}] {_clock()} raw serve and append at once: done in {both.seconds:.2f} s"
            f" ({gb * 1e3 / both.seconds:.1f} MB/s), CPU s/GB"
            f" { ({k: round(v / gb, 2) for k, v in both.broker_cpu_s.items()}) }"
        )
    for round_ in range(args.rounds):
        for side, tree in (("A", args.ab), ("B", None)):
            asyncio.run(delete_topics(local, [topic], wait=True))
            m = run_syncer(
                work,
                local,
                east,
                topic,
                records,
                size,
                partitions=case.partitions,
                brokers=brokers,
                tree=tree.resolve() if tree is not None else None,
                copier=b_copier if side == "B" else None,
                label=f"syncer-{side}",
            )
            assert asyncio.run(local_total(local, topic, case.partitions)) == records
            ratio = m.mb_per_s / limit_raw.mb_per_s
            busy = sum(whole(m.window_cpu_s).values()) / m.seconds
            machine = m.window_cpu_s.get("machine/busy", 0.0) / m.seconds
            per_gb = {k: round(v / (size / 1e9), 2) for k, v in m.window_cpu_s.items()}
            console.print(
                f"[{case.name}] {_clock()} round {round_ + 1} {side}: {m.mb_per_s:.1f} MB/s,"
                f" syncer / L_raw"
                f" {ratio:.2f}, syncer core use {core_use(m) or 0:.2f}, cores busy {busy:.2f}"
                f" (machine {machine:.2f}); CPU s/GB {per_gb}"
            )
            stalls = {
                k: round(v / m.seconds, 2)
                for k, v in m.window_cpu_s.items()
                if k.startswith("pressure/") or k.endswith("/runq")
            }
            console.print(f"[{case.name}]   waiting, per second of the copy: {stalls}")
            for line in waits_lines(m.waits, limit_raw.as_dict() if not runs else {}):
                console.print(f"[{case.name}]   {line}")
            console.print(f"[{case.name}]   {budget_line(cpu_budget(limit_raw, m))}")
            runs.append({"side": side, "round": round_ + 1, **_row(m), "ratio": ratio})
    capped_appends(console, case, args, east, local, size, brokers)  # the broker changed?
    if args.gc_log:
        heap_histogram(bed.clusters["local"].pid, args.out / f"local-heap-{case.name}.txt")
    asyncio.run(delete_topics(local, [topic]))
    asyncio.run(delete_topics(east, [topic]))
    return {"case": case.name, "raw_limit": limit_raw.as_dict(), "ab": runs}


def capped_appends(
    console: Console,
    case: Case,
    args: argparse.Namespace,
    east: str,
    local: str,
    size: int,
    brokers: raw.BrokerClock,
) -> None:
    """Raw append runs whose requests carry at most K batches (``--append-caps``): what the
    composition of syncer's requests costs the local broker, in the same sitting."""
    for cap in [int(k) for k in args.append_caps.split(",") if k]:
        phase = raw.measure_append(east, local, f"bench.{case.name}", case.partitions, cap, brokers)
        gb = size / 1e9
        console.print(
            f"[{case.name}] {_clock()} raw append, at most {cap} batches a request:"
            f" {gb * 1e3 / phase.seconds:.1f} MB/s, {phase.per_request()}, CPU s/GB"
            f" { ({k: round(v / gb, 2) for k, v in phase.broker_cpu_s.items()}) }"
        )


def broker_clock(bed: Testbed, names: list[str]) -> raw.BrokerClock:
    """Each named one-node cluster's broker JVM: its CPU seconds so far (/proc/PID/stat),
    and as parts ("local/gc", "local/requests", ...: ``peers.cpu_by_thread``), and the whole
    machine's busy seconds ("machine/busy"). Keys with a "/" are parts, not summed."""
    pids = {name: bed.clusters[name].pid for name in names}

    def now() -> dict[str, float]:
        out = {"machine/busy": machine_busy()}
        out |= {f"pressure/{k}": v for k, v in pressure().items()}
        for name, pid in pids.items():
            if pid is not None:
                out[name] = cpu_seconds(pid)
                out |= {f"{name}/{g}": s for g, s in cpu_by_thread(pid).items()}
        return out

    return now


def gc_log(pid: int | None, path: Path) -> None:
    """Have JVM ``pid`` log each garbage collection, with its cause, pause and wall time, to
    ``path`` from now on (``jcmd VM.log``: no restart, so the bench's clusters stay as
    they are): whether a copy's requests cost the broker more collections than L_raw's."""
    path.unlink(missing_ok=True)
    command = ["jcmd", str(pid), "VM.log", f"output={path.resolve()}", "what=gc=info"]
    subprocess.run([*command, "decorators=time"], check=True, capture_output=True)


def heap_histogram(pid: int | None, path: Path, top: int = 25) -> None:
    """What JVM ``pid``'s heap holds (live objects, after a full collection: so only once
    every timed part is over), its ``top`` classes by bytes."""
    out = subprocess.run(
        ["jcmd", str(pid), "GC.class_histogram"], check=True, capture_output=True, text=True
    )
    path.write_text("\n".join(out.stdout.splitlines()[: top + 3]) + "\n")


def whole(cpu: dict[str, float]) -> dict[str, float]:
    """The processes of a ``broker_clock`` reading, without its parts."""
    return {name: s for name, s in cpu.items() if "/" not in name}


def effective_l_raw(limit: raw.RawLimit, both: float | None) -> float:
    """L_raw = min(serve, append), where a run of both at once that appended faster than the
    append phase alone shows that phase short of the broker's best (its JIT still warming at
    small sizes: seen at 0.25 GiB, both at once 1.15x the append phase): then the faster
    counts as what the local broker can append, a stricter yardstick, never a looser one."""
    append = max(limit.append_mb_per_s, both or 0.0)
    return min(limit.serve_mb_per_s, append)


def cpu_budget(
    limit: raw.RawLimit, ours: Measured, target: float = 0.85, rate: float | None = None
) -> dict[str, object]:
    """Can this machine's cores carry the target at all? CPU seconds per GB of payload: the
    brokers' in L_raw's counted phases (east serving, local appending: the least they spent
    on these bytes), and syncer's and the brokers' from syncer's first record copied to its
    last; the cores the target rate (``target`` x L_raw) needs at those costs, against the
    machine's cores."""
    gb = ours.bytes / 1e9
    serve = limit.per_gb(limit.serve).get("east", 0.0)
    append = limit.per_gb(limit.append).get("local", 0.0)
    copy = {name: cpu / gb for name, cpu in whole(ours.window_cpu_s).items()}
    syncer = copy.get("syncer", ours.cpu_seconds / gb)
    gb_per_s = target * (rate or limit.mb_per_s) / 1000
    floor = gb_per_s * (serve + append + syncer)  # brokers as cheap as in L_raw's phases
    as_copied = gb_per_s * sum(copy.values())  # brokers as they worked for syncer
    cores = os.cpu_count() or 1
    return {
        "east_serve_cpu_s_per_gb": serve,
        "local_append_cpu_s_per_gb": append,
        "copy_cpu_s_per_gb": copy,  # syncer's and each broker's while syncer copied
        "cores_busy_while_copying": sum(whole(ours.window_cpu_s).values()) / ours.seconds,
        "machine_busy_while_copying": ours.window_cpu_s.get("machine/busy", 0.0) / ours.seconds,
        "cores_at_target_floor": floor,
        "cores_at_target_as_copied": as_copied,
        "cores": cores,
        "target_fits": floor <= cores,
    }


def verdict(
    syncer_mb_per_s: float,
    l_raw_mb_per_s: float,
    together_mb_per_s: float | None,
    budget: dict[str, Any],
    target: float = 0.85,
) -> str:
    """Issue 23's target for one case: met, out of reach on this machine (the two brokers'
    raw work done at once, with no copier at all, stays under the target; or the cores the
    target needs at the measured costs exceed the machine's), or not met."""
    if syncer_mb_per_s >= target * l_raw_mb_per_s:
        return "met"
    if together_mb_per_s is not None and together_mb_per_s < target * l_raw_mb_per_s:
        return (
            f"out of reach here: both brokers at once, no copier, {together_mb_per_s:.0f} MB/s"
            f" = {together_mb_per_s / l_raw_mb_per_s:.2f} x L_raw"
        )
    if not budget["target_fits"]:
        return (
            f"out of reach here: needs {budget['cores_at_target_floor']:.2f} cores"
            f" of {budget['cores']}"
        )
    return "not met"


def budget_line(b: dict[str, Any]) -> str:
    copy = ", ".join(f"{k} {v:.2f}" for k, v in b["copy_cpu_s_per_gb"].items())
    return (
        f"CPU s/GB: east serving {b['east_serve_cpu_s_per_gb']:.2f}, local appending"
        f" {b['local_append_cpu_s_per_gb']:.2f} (L_raw phases); while syncer copied: {copy}"
        f" ({b['cores_busy_while_copying']:.2f} cores busy); 0.85 x L_raw needs"
        f" {b['cores_at_target_floor']:.2f} cores at the phases' broker cost"
        f" ({b['cores_at_target_as_copied']:.2f} as copied) of {b['cores']}"
        + ("" if b["target_fits"] else ": out of reach on this machine")
    )


def waits_lines(waits: dict[str, Any], lim: dict[str, Any]) -> list[str]:
    """syncer's own counts of what its copy waited on (``syncer.waits``), beside the raw
    append phase's requests: the writer's requests in flight and its idle share, what one
    request carries, how long a ready batch waited for its request; the copiers' waits for
    fetch answers against their time writing (mostly room among their own writes)."""
    lines = []
    raw = lim.get("append_per_request") or {}
    if raw:
        lines.append(
            f"raw append: {raw['requests']:.0f} requests, {raw['batches']:.1f} batches and"
            f" {raw['bytes'] / 1e3:.0f} kB each, {raw['request_s'] * 1e3:.1f} ms written to"
            f" answered, {raw['in_flight']:.2f} in flight on average"
        )
    for name, w in waits.get("writers", {}).items():
        flight, batches, nbytes = w["in_flight"], w["request_batches"], w["request_bytes"]
        rtt, queued = w["request_s"], w["batch_queued_s"]
        idle = flight["share_at"].get("0", 0.0)
        lines.append(
            f"syncer {name}: {batches['count']} requests, {batches['mean']:.1f} batches and"
            f" {nbytes['mean'] / 1e3:.0f} kB each, {rtt['mean'] * 1e3:.1f} ms written to"
            f" answered (p90 {rtt['p90'] * 1e3:.1f}), {flight['mean']:.2f} in flight on average"
            f" over {flight['span_s']:.2f} s, idle {idle:.0%}, share at each: {flight['share_at']};"
            f" a ready batch waited p50 {queued['p50'] * 1e3:.2f} / p90 {queued['p90'] * 1e3:.2f}"
            f" / p99 {queued['p99'] * 1e3:.2f} ms"
        )
    c = waits.get("chunks")
    if c:
        fw, wr, st, fs = c["fetch_wait_s"], c["writing_s"], c["starved_s"], c["fetch_s"]
        lines.append(
            f"syncer copiers: waited for a fetch answer {fw.get('total', 0):.2f} s in"
            f" {fw['count']} asks (p50 {fw.get('p50', 0) * 1e3:.1f} ms), {c['ready_at_once']}"
            f" asks found a chunk ready; between chunks (checks, writes, room among their own"
            f" writes) {wr.get('total', 0):.2f} s (p50 {wr.get('p50', 0) * 1e3:.1f} ms); for"
            f" budget {st.get('total', 0):.2f} s in {st['count']}; fetches {fs['count']},"
            f" p50 {fs.get('p50', 0) * 1e3:.1f} ms,"
            f" {c['fetch_bytes'].get('mean', 0) / 1e3:.0f} kB each"
        )
    return lines


def profile_summary(path: Path, seconds: float, top: int = 12) -> dict[str, object]:
    """py-spy's collapsed stacks (``frame;frame;... count``, idle not sampled): the share
    of samples each function is on top of the stack (self) and anywhere in it (total)."""
    own: dict[str, int] = {}
    total: dict[str, int] = {}
    samples = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        samples += n
        frames = [f.rsplit(":", 1)[0] + ")" if ":" in f else f for f in stack.split(";")]
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for frame in set(frames):
            total[frame] = total.get(frame, 0) + n

    def shares(counts: dict[str, int]) -> list[tuple[str, float]]:
        ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
        return [(name, round(100 * n / samples, 1)) for name, n in ranked]

    return {"samples": samples, "self_pct": shares(own), "total_pct": shares(total)}


def _clock() -> str:
    """The wall time, to find a phase in the broker's GC log."""
    return datetime.datetime.now(datetime.UTC).strftime("%H:%M:%S")


def _row(m: Measured) -> dict[str, object]:
    return asdict(m) | {
        "mb_per_s": m.mb_per_s,
        "records_per_s": m.records_per_s,
        "cpu_s_per_gib": m.cpu_s_per_gib,
        "core_use": core_use(m),
    }


def core_use(m: Measured) -> float | None:
    """The copier's CPU seconds per wall second from its first record copied to its last
    (1.0: one core busy all the time). syncer runs on one thread, so near 1.0 its own
    thread is the bottleneck and only less CPU per byte makes the copy faster; well below,
    it waits on something else. None where its CPU was not sampled in that window."""
    cpu = m.window_cpu_s.get("syncer")  # run_syncer samples its process under this name
    return cpu / m.seconds if cpu is not None and m.seconds > 0 else None


def measure_limit(
    jars: KafkaJars, local: str, east: str, topic: str, case: Case, records: int, size: int
) -> float:
    """MB/s the two brokers move together: the same records written to local by the perf
    producer while the perf consumer reads them from east; the slower of the two counts."""
    asyncio.run(create_topic(local, f"limit.{topic}", case.partitions))
    produce = perf_produce_command(
        local,
        f"limit.{topic}",
        records=records,
        record_size=case.record_size,
        jars=jars,
        producer_props={
            "compression.type": case.compression,
            "batch.size": "262144",
            "linger.ms": "20",
            "acks": "all",
        },
    )
    consume = perf_consume_command(east, topic, records=records, jars=jars)
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for cmd in (produce, consume)
    ]
    outputs = [proc.communicate(timeout=600)[0] for proc in procs]
    for proc in procs:
        if proc.returncode != 0:
            raise RuntimeError(f"{proc.args[5]} failed with {proc.returncode}")  # type: ignore[index]
    # each tool reports its own rate (MiB/s), without JVM start-up or group join
    return min(produced_mib_per_s(outputs[0]), consumed_mib_per_s(outputs[1])) * MIB / 1e6


MIB = 1024 * 1024


def produced_mib_per_s(output: str) -> float:
    line = [ln for ln in output.splitlines() if "records sent" in ln][-1]
    return float(line.split("(")[1].split()[0])


def consumed_mib_per_s(output: str) -> float:
    lines = [ln for ln in output.splitlines() if ln.count(",") >= 5]
    header = [h.strip() for h in lines[0].split(",")]
    values = [v.strip() for v in lines[-1].split(",")]
    column = "fetch.MB.sec" if "fetch.MB.sec" in header else "MB.sec"
    return float(values[header.index(column)])


async def delete_topics(bootstrap: str, topics: list[str], *, wait: bool = False) -> None:
    """``wait``: until the cluster no longer lists them (a copier started sooner could find
    a topic being deleted)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        doomed = [t for t in topics if t in existing]
        if doomed:
            await admin.delete_topics(doomed)
        for _ in range(120 if wait and doomed else 0):
            await asyncio.sleep(0.25)
            if not set(doomed) & set(await admin.list_topics()):
                await asyncio.sleep(1.0)  # the broker's log directories go after the name
                break
    finally:
        await admin.close()


def write(args: argparse.Namespace, results: list[dict[str, object]]) -> None:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    document = {"benchmark": "catch-up", "date": when, "machine": machine(), "cases": results}
    name = "bench-catchup-ab.json" if args.ab is not None else "bench-catchup.json"
    (args.out / name).write_text(json.dumps(document, indent=2) + "\n")


def report(console: Console, args: argparse.Namespace, results: list[dict[str, object]]) -> None:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    table = Table(title=f"backlog drain, >= {args.gib} GiB per case, loopback · {when}")
    perf = any(r["limit_mb_per_s"] for r in results)
    columns = (
        "case",
        "L_raw (a) serve MB/s",
        "L_raw (b) append MB/s",
        "L_raw MB/s",
        "syncer MB/s",
        "syncer / L_raw",
        "both at once / L_raw",
        "syncer / both at once",
        "0.85 x L_raw",
        *(("L MB/s", "vs L") if perf else ()),
        "old records MB/s",
        "MM2 MB/s",
        "vs MM2",
        "old vs MM2",
        "syncer CPU s/GiB",
        "syncer core use",
        "MM2 CPU s/GiB",
        "syncer RSS MiB",
        "MM2 RSS MiB",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "case" else "right")
    for r in results:
        ours, peer, ratios = r["syncer"], r["mm2"], r["ratios"]
        old, lim = r["syncer_old_records"], r["raw_limit"]
        assert isinstance(ours, dict) and isinstance(peer, dict) and isinstance(ratios, dict)
        assert isinstance(old, dict) and isinstance(lim, dict)
        perf_cells = (
            (f"{r['limit_mb_per_s'] or 0:.1f}", f"{ratios['throughput_vs_limit'] or 0:.2f}x")
            if perf
            else ()
        )
        table.add_row(
            str(r["case"]),
            f"{lim['serve_mb_per_s']:.1f}",
            f"{lim['append_mb_per_s']:.1f}",
            f"{r.get('l_raw_mb_per_s') or lim['l_raw_mb_per_s']:.1f}",
            f"{ours['mb_per_s']:.1f}",
            f"{ratios['throughput_vs_raw_limit']:.2f}x",
            *together_cells(r),
            str(r.get("verdict", "-")),
            *perf_cells,
            f"{old['mb_per_s']:.1f}",
            f"{peer['mb_per_s']:.1f}",
            f"{ratios['throughput_vs_mm2']:.2f}x",
            f"{ratios['old_records_vs_mm2']:.2f}x",
            f"{ours['cpu_s_per_gib']:.1f}",
            "-" if ours["core_use"] is None else f"{ours['core_use']:.2f}",
            f"{peer['cpu_s_per_gib']:.1f}",
            f"{ours['peak_rss_mib']:.0f}",
            f"{peer['peak_rss_mib']:.0f}",
        )
    console.print(table)
    write(args, results)
    plot(results, args.out / "bench-catchup.png", when)
    console.print(f"wrote {args.out / 'bench-catchup.json'} and {args.out / 'bench-catchup.png'}")


def together_cells(r: dict[str, Any]) -> tuple[str, str]:
    both = r.get("raw_together_mb_per_s")
    if not both:
        return ("-", "-")
    return (
        f"{both / (r.get('l_raw_mb_per_s') or r['raw_limit']['l_raw_mb_per_s']):.2f}x",
        f"{r['syncer']['mb_per_s'] / both:.2f}x",
    )


def plot(results: list[dict[str, object]], path: Path, when: str) -> None:
    names = [str(r["case"]) for r in results]
    series = {
        "L_raw (brokers' own limit)": [
            r.get("l_raw_mb_per_s") or r["raw_limit"]["l_raw_mb_per_s"]  # type: ignore[index]
            for r in results
        ],
        "syncer": [r["syncer"]["mb_per_s"] for r in results],  # type: ignore[index]
        "syncer, records older than the producer expiry": [
            r["syncer_old_records"]["mb_per_s"]  # type: ignore[index]
            for r in results
        ],
        "MirrorMaker 2": [r["mm2"]["mb_per_s"] for r in results],  # type: ignore[index]
    }
    fig, ax = axes(max(7, 1.1 * len(names)))
    width = 0.2
    for i, (label, values) in enumerate(series.items()):
        ax.bar([x + (i - 1.5) * width for x in range(len(names))], values, width, label=label)
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("MB/s (uncompressed payload)")
    ax.set_title(f"backlog drain on loopback · {when}", fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, path)


if __name__ == "__main__":
    main()
