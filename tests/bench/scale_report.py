"""bench-scale's tables and results files: each case's figures, and beside them the
bound measured in the same run (the brokers creating the partitions)."""

from __future__ import annotations

import argparse
import datetime
import json
from dataclasses import asdict, dataclass

from rich.console import Console
from rich.table import Table

from syncer.fetcher import QUIET_S
from tests.bench.catchup import machine
from tests.bench.scale_probe import Timeline

RECORDS_PER_PARTITION = 20
IDLE_S = 60.0  # two topic refreshes (every 30 s by default): a fair share of their cost
# after the last write, partitions still polled as busy until they turn quiet (QUIET_S):
# measured on its own, before the idle window, so each figure says what it is
SETTLE_S = QUIET_S + 2.0
# the targets of issue 23, item 3
FIRST_S, IN_SYNC_S, RSS_MIB, IDLE_CPU, MAX_SHARE = 30.0, 60.0, 300.0, 0.03, 0.40


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
    timeline: Timeline  # the local cluster's topics, seconds after launch (scale_probe)

    @property
    def first_s(self) -> float:
        """Launch → the first record copied."""
        return self.timeline.earliest(lambda t: t.first) or 0.0

    @property
    def in_sync_s(self) -> float:
        """Launch → every partition in sync."""
        return self.timeline.latest(lambda t: t.done) or 0.0

    @property
    def led_s(self) -> float:
        """Launch → every local partition led, by the metadata: the broker's creation done."""
        return self.timeline.latest(lambda t: t.led) or 0.0

    @property
    def answering_s(self) -> float:
        """Launch → every local partition answering ListOffsets."""
        return self.timeline.latest(lambda t: t.answering) or 0.0

    @property
    def max_share(self) -> float:
        return max(m.partitions for m in self.members) / self.partitions

    @property
    def peak_rss_mib(self) -> float:
        return max(m.peak_rss_mib for m in self.members)

    @property
    def idle_cpu(self) -> float:
        return max(m.idle_cpu for m in self.members)


def _mark(value: float, target: float) -> str:
    return f"{'✓' if value <= target else '✗'}"


def report(
    console: Console, args: argparse.Namespace, cases: dict[str, Case], remote: dict[str, float]
) -> None:
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
    console.print(bound_table(cases, remote))
    document = {
        "benchmark": "scale",
        "date": when,
        "machine": machine(),
        "partitions": total,
        "topics": args.topics,
        "records_per_partition": RECORDS_PER_PARTITION,
        "settling_window_s": SETTLE_S,
        "idle_window_s": IDLE_S,
        # the remote's test-bed creation, seconds from its first CreateTopics
        "remote_creation": remote,
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
                "in_sync_s": case.in_sync_s,
                "local_all_led_s": case.led_s,
                "local_all_answering_s": case.answering_s,
                "in_sync_minus_local_led_s": case.in_sync_s - case.led_s,
                "local": case.timeline.summary(),
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
    per_topic = {label: topic_rows(case.timeline) for label, case in cases.items()}
    (args.out / "bench-scale-topics.json").write_text(json.dumps(per_topic) + "\n")
    console.print(f"wrote {args.out / 'bench-scale-topics.json'} (each topic's timeline)")


def bound_table(cases: dict[str, Case], remote: dict[str, float]) -> Table:
    """The figures beside the bound measured in the same run: the local broker creating
    the partitions (from launch: syncer sends CreateTopics within its first seconds), and
    the remote's creating the same number in set-up (from its first CreateTopics)."""
    table = Table(
        title=f"the broker's creation, same run (remote's in set-up: led {remote['led_s']:.1f} s,"
        f" answering {remote['answering_s']:.1f} s, silent ≤{remote['silence_s']:.1f} s)"
    )
    columns = (
        "case",
        "first local topic seen s",
        "all local led s",
        "all local answering s",
        "first record s",
        "in sync s",
        "in sync − all led s",
        "topic led → in sync p50 / max s",
        "broker silent s (longest)",
    )
    for column in columns:
        table.add_column(column, justify="right")
    for label, case in cases.items():
        summary = case.timeline.summary()
        table.add_row(
            label,
            _s(summary["first_topic_seen_s"]),
            _s(case.led_s),
            _s(case.answering_s),
            _s(case.first_s),
            _s(case.in_sync_s),
            _s(case.in_sync_s - case.led_s),
            f"{_s(summary['topic_led_to_in_sync_p50_s'])} / "
            f"{_s(summary['topic_led_to_in_sync_max_s'])}",
            _s(summary["longest_silence_s"]),
        )
    return table


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def topic_rows(timeline: Timeline) -> dict[str, list[float | None]]:
    """Topic → [seen, led, answering, first record, in sync], seconds after launch."""
    return {
        topic: [t.seen, t.led, t.answering, t.first, t.done]
        for topic, t in sorted(timeline.topics.items())
    }
