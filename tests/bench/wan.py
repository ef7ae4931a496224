"""Benchmark (not a test): a long, thin link. The remote sits behind the test bed's proxy
(100 ms round trip, 500 KB/s per connection and direction) and holds a backlog in two hot
partitions. syncer copies it over 1, 4 and 16 lanes, and over 64 lanes from 8 partitions (four
times the records, so the copy still lasts seconds); MirrorMaker 2 (dedicated mode, same
jars) over the same link with tasks.max 1 and 2 (two partitions: more tasks would idle).
Each run copies its own topic, so every copier starts from an empty local topic. Rates are
given as a share of what the connections can carry (lanes × the per-connection cap), beside
the proxy's own ceiling: a plain reader over as many connections through a proxy of the same
settings, with no Kafka behind it (what this machine's proxy can carry at all).

    python -m tests.bench.wan [--records N] [--rate BYTES_PER_S] [--latency-ms MS]
        [--cases 1x2,4x2,16x2,64x8] [--mm2 1,2] [--trace] [--copier NAME=INT] [--out results]

``--trace`` also copies each syncer case in this process with every lane's fetches timed:
per lane its bytes and busy time, the copy's start (first answer) and end (last answer), and
where its start-up goes (``startup``: first fetch, first answer, every partition's and every
lane's first answer).

Writes results/bench-wan.json and results/bench-wan.png (throughput against connections).
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
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from syncer.testbed import ClusterSpec, Testbed
from syncer.testbed.bed import free_port
from syncer.testbed.tools import perf_produce
from tests.bench.catchup import machine
from tests.bench.peers import Measured, axes, run_mm2, run_syncer, save, start_proxy
from tests.bench.wan_trace import Answer, Trace, proxy_ceiling, traced_copy
from tests.kafka_helpers import create_topic

PARTITIONS = 2  # MirrorMaker 2's cases
RECORD_SIZE = 1024
# chunks that cross the link in about a second per lane, so requests stay well inside the
# chunk timeout and the last chunks are small
CHUNK_BYTES = 524_288


@dataclass(frozen=True)
class Case:
    """One syncer run: lanes to the remote, partitions of the backlog, records in them."""

    lanes: int
    partitions: int
    records: int

    @property
    def topic(self) -> str:
        return f"wan.lanes{self.lanes}p{self.partitions}"

    @property
    def label(self) -> str:
        return f"syncer, {self.lanes} lanes, {self.partitions} partitions"


def parse_cases(text: str, records: int) -> list[Case]:
    """``1x2,64x8``: lanes x partitions; a case over 16 lanes gets records in proportion to
    its lanes over 16, so that it too lasts a few seconds at the cap."""
    cases = []
    for item in text.split(","):
        lanes, _, partitions = item.partition("x")
        n = int(lanes)
        cases.append(Case(n, int(partitions or PARTITIONS), records * max(1, n // 16)))
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--rate", type=int, default=500_000, help="bytes/s per connection")
    parser.add_argument("--latency-ms", type=float, default=100.0, help="added round trip")
    parser.add_argument("--cases", default="1x2,4x2,16x2,64x8", help="lanes x partitions")
    parser.add_argument("--mm2", default="1,2", help="MirrorMaker 2 tasks.max to run ('' none)")
    parser.add_argument("--trace", action="store_true", help="also time each lane in-process")
    parser.add_argument(
        "--copier", action="append", default=[], help="a copier setting, NAME=INT (repeatable)"
    )
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args()
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    args.out.mkdir(parents=True, exist_ok=True)
    cases = parse_cases(args.cases, args.records)
    mm2_tasks = [int(t) for t in args.mm2.split(",") if t]
    work = Path(tempfile.mkdtemp(prefix="syncer-bench-wan-"))
    console = Console(width=150)
    bed = Testbed(work / "bed")
    proxy: subprocess.Popen[bytes] | None = None
    rows: list[tuple[str, int, Measured]] = []
    traces: list[Trace] = []
    ceilings: dict[int, float] = {}
    try:
        for n in sorted({c.lanes for c in cases}):
            ceilings[n] = proxy_ceiling(n, args.rate, args.latency_ms)
            console.print(f"proxy ceiling, {n} connections: {ceilings[n] / 1e6:.2f} MB/s")
        port = free_port()
        bed.up([ClusterSpec("local"), ClusterSpec("far", advertised=f"127.0.0.1:{port}")])
        far, local = bed.clusters["far"], bed.clusters["local"].bootstrap
        proxy = start_proxy(port, far.listen, rate=args.rate, latency_ms=args.latency_ms)
        backlogs = [(c.topic, c.partitions, c.records) for c in cases]
        if args.trace:
            backlogs += [(c.topic + ".trace", c.partitions, c.records) for c in cases]
        backlogs += [(f"wan.mm2t{t}", PARTITIONS, args.records) for t in mm2_tasks]
        for topic, partitions, records in backlogs:
            asyncio.run(create_topic(far.direct, topic, partitions))
            perf_produce(far.direct, topic, records=records, record_size=RECORD_SIZE, jars=bed.jars)
        copier = {"partition_fetch_max_bytes": CHUNK_BYTES}
        for setting in args.copier:
            name, _, value = setting.partition("=")
            copier[name] = int(value)
        for case in cases:
            console.print(f"{case.label} ...")
            measured = run_syncer(
                work,
                local,
                {"far": far.bootstrap},
                case.topic,
                case.records,
                case.records * RECORD_SIZE,
                partitions=case.partitions,
                label=case.label,
                copier=copier,
                remote_settings={"connections": case.lanes},
            )
            rows.append(("syncer", case.lanes, measured))
            if args.trace:
                trace = traced_copy(
                    local,
                    far.bootstrap,
                    case.topic + ".trace",
                    case.lanes,
                    copier,
                    case.label,
                    case.records * RECORD_SIZE,
                )
                traces.append(trace)
                trace.print(console, args.rate)
                console.print(
                    "start-up, s from launch: "
                    + ", ".join(f"{k} {v:.2f}" for k, v in startup(trace.answers).items())
                )
        for tasks in mm2_tasks:
            console.print(f"MirrorMaker 2, tasks.max={tasks} ...")
            measured = run_mm2(
                work,
                bed.jars,
                local,
                far.bootstrap,
                f"wan.mm2t{tasks}",
                args.records,
                args.records * RECORD_SIZE,
                PARTITIONS,
                tasks,
            )
            rows.append(("mm2", tasks, measured))
        report(console, args, rows, ceilings, traces)
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.wait(10)
        bed.down()
        shutil.rmtree(work, ignore_errors=True)


def startup(answers: list[Answer]) -> dict[str, float]:
    """Where a traced copy's start goes, in seconds from launch: the first fetch asked, its
    answer, and the first answer of the last partition and of the last lane to get one. A
    partition or lane not ready when the copy begins (leaders being learned, connections
    opened, its first fetch queued behind others) shows as a gap after the first answer."""
    got = [a for a in answers if a.nbytes]

    def last_first(key: str) -> float:
        firsts: dict[int, float] = {}
        for a in got:
            firsts[getattr(a, key)] = min(firsts.get(getattr(a, key), a.answered), a.answered)
        return max(firsts.values())

    return {
        "first_fetch": min(a.queued for a in answers),
        "first_answer": min(a.answered for a in got),
        "every_partition_answered": last_first("partition"),
        "every_lane_answered": last_first("lane"),
    }


def share(m: Measured, connections: int, rate: int) -> tuple[float, float]:
    """The rate as a share of what ``connections`` capped connections carry: from the first
    record copied to the last, and from launch to the last."""
    cap = connections * rate
    return m.bytes / m.seconds / cap, m.bytes / m.launch_to_last_s / cap


def report(
    console: Console,
    args: argparse.Namespace,
    rows: list[tuple[str, int, Measured]],
    ceilings: dict[int, float],
    traces: list[Trace],
) -> None:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    table = Table(
        title=f"WAN: {RECORD_SIZE} B records over a proxy:"
        f" {args.rate / 1e3:.0f} KB/s per connection, +{args.latency_ms:.0f} ms · {when}"
    )
    columns = (
        "copier",
        "records",
        "copy s",
        "launch→done s",
        "MB/s",
        "% of cap",
        "% of cap launch→done",
        "proxy ceiling % of cap",
        "CPU s",
        "peak RSS MiB",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "copier" else "right")
    for _kind, n, m in rows:
        copy_share, launch_share = share(m, n, args.rate)
        ceiling = ceilings.get(n)
        table.add_row(
            m.copier,
            str(m.records),
            f"{m.seconds:.1f}",
            f"{m.launch_to_last_s:.1f}",
            f"{m.mb_per_s:.2f}",
            f"{100 * copy_share:.0f}%",
            f"{100 * launch_share:.0f}%",
            "" if ceiling is None else f"{100 * ceiling / (n * args.rate):.0f}%",
            f"{m.cpu_seconds:.1f}",
            f"{m.peak_rss_mib:.0f}",
        )
    console.print(table)
    syncer = {n: m for kind, n, m in rows if kind == "syncer"}
    mm2 = [m for kind, _n, m in rows if kind == "mm2"]
    ratios = {}
    if 1 in syncer:
        for n, m in syncer.items():
            if n != 1:
                ratios[f"syncer {n} lanes / 1 lane"] = m.mb_per_s / syncer[1].mb_per_s
    if mm2:
        best = max(mm2, key=lambda m: m.mb_per_s)
        for n, m in syncer.items():
            ratios[f"syncer {n} lanes / best MM2 ({best.copier})"] = m.mb_per_s / best.mb_per_s
    for name, value in ratios.items():
        console.print(f"{name}: {value:.2f}x")
    document = {
        "benchmark": "wan",
        "date": when,
        "machine": machine(),
        "record_size": RECORD_SIZE,
        "rate_per_connection": args.rate,
        "latency_ms": args.latency_ms,
        "proxy_ceiling_bytes_per_s": {str(n): c for n, c in ceilings.items()},
        "rows": [
            {
                "copier": m.copier,
                "connections": n,
                "records": m.records,
                "copy_seconds": m.seconds,
                "launch_to_last_s": m.launch_to_last_s,
                "mb_per_s": m.mb_per_s,
                "share_of_cap": share(m, n, args.rate)[0],
                "share_of_cap_launch_to_done": share(m, n, args.rate)[1],
                "cpu_seconds": m.cpu_seconds,
                "peak_rss_mib": m.peak_rss_mib,
            }
            for _kind, n, m in rows
        ],
        "traces": [t.summary(args.rate) for t in traces],
        "startup": {t.label: startup(t.answers) for t in traces},
        "answers": {t.label: [dataclasses.astuple(a) for a in t.answers] for t in traces},
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
    if theirs:
        ax.plot(
            [n for n, _ in theirs], [r for _, r in theirs], "s--", label="MirrorMaker 2 (tasks)"
        )
    most = max(n for _kind, n, _m in rows)
    ticks = [2**i for i in range(most.bit_length()) if 2**i <= most]
    ax.plot(ticks, [n * args.rate / 1e6 for n in ticks], ":", color="grey", label="link cap")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(n) for n in ticks])
    ax.set_xlabel("connections to the remote")
    ax.set_ylabel("MB/s copied")
    ax.set_title(
        f"{args.rate / 1e3:.0f} KB/s per connection, +{args.latency_ms:.0f} ms · {when}",
        fontsize=9,
    )
    ax.grid(True, alpha=0.3)
    ax.legend()
    save(fig, path)


if __name__ == "__main__":
    main()
