"""bench-scale's trace of each group member (with --verbose): when its log says the group
gave it partitions, and when the first record of those partitions landed locally and when
all of them were in sync (from the probe's per-topic timeline). The time from an
assignment to the first record is what a member spends before copying."""

from __future__ import annotations

import datetime
import json
import re
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.bench.scale_probe import Timeline

OWNS = re.compile(r"^(\S+ \S+) INFO syncer\.coordination .* owns (\d+) partitions")


@dataclass(frozen=True)
class MemberTrace:
    """Seconds after launch (None: never)."""

    name: str
    assignments: list[tuple[float, int]]  # (when, partitions owned then), from its log
    first_record_s: float | None  # the first record in a topic it owns, at the end
    in_sync_s: float | None  # every topic it owns


def assignments(log: Path, launched: datetime.datetime) -> list[tuple[float, int]]:
    """(seconds after ``launched``, partitions owned) of each assignment the log tells."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        found = OWNS.match(line)
        if found:
            when = datetime.datetime.strptime(found[1], "%Y-%m-%d %H:%M:%S,%f")
            seconds = (when.replace(tzinfo=datetime.UTC) - launched).total_seconds()
            out.append((seconds, int(found[2])))
    return out


def owned_topics(port: int) -> set[str]:
    """The topics of the partitions the process at ``port`` copies (its /status)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=30) as answer:
        return {p["topic"] for p in json.load(answer)["partitions"]}


def trace(
    name: str, log: Path, launched: datetime.datetime, topics: set[str], timeline: Timeline
) -> MemberTrace:
    """One member's trace. A topic's partitions may be shared among members: its first
    record is the first of any of them, an approximation the per-member figures state."""
    mine = [t for topic, t in timeline.topics.items() if topic in topics]
    firsts = [t.first for t in mine if t.first is not None]
    dones = [t.done for t in mine]
    in_sync = None if not dones or None in dones else max(d for d in dones if d is not None)
    return MemberTrace(name, assignments(log, launched), min(firsts) if firsts else None, in_sync)


def describe(traces: list[MemberTrace]) -> list[str]:
    """One line per member: its assignments, then its first record and in-sync."""
    lines = []
    for m in traces:
        given = ", ".join(f"{n} at {s:.1f} s" for s, n in m.assignments) or "none"
        last = m.assignments[-1][0] if m.assignments else None
        first = "—" if m.first_record_s is None else f"{m.first_record_s:.1f} s"
        after = (
            ""
            if m.first_record_s is None or last is None
            else f" ({m.first_record_s - last:+.1f} s after its last assignment)"
        )
        done = "—" if m.in_sync_s is None else f"{m.in_sync_s:.1f} s"
        lines.append(f"  {m.name}: assigned {given}; first record {first}{after}; in sync {done}")
    return lines
