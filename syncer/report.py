"""Per-partition ends for ``plan`` and ``status``, gathered from the clusters and the daemons'
``/status`` into rows (``syncer.tables`` shows them)."""

from __future__ import annotations

import http.client
import json
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from syncer.alignment import StateClock
from syncer.batches import split_batches
from syncer.clusters import READ_COMMITTED, TP
from syncer.coordination import group_owners
from syncer.holes import RemoteEnds, choose_remote, scan
from syncer.syncer import Syncer


@dataclass
class PartitionRow:
    topic: str
    partition: int
    local_end: int
    remote_ends: dict[str, int]
    lag: int
    source: str | None
    state: str
    hole: str | None = None
    owner: str | None = None
    remote_starts: dict[str, int] = field(default_factory=dict)
    served: dict[str, int] = field(default_factory=dict)  # live: bytes written from each remote
    dropped: dict[str, str] = field(default_factory=dict)  # live: remotes no longer used, why
    first_timestamp: int | None = None  # plan: max timestamp of the first batch to copy


@dataclass
class RemoteRow:
    """One remote as ``status`` shows it: ends from the cluster, the rest from the daemons."""

    name: str
    reachable: bool
    error: str | None = None
    partitions: int = 0  # mirrored partitions it holds
    ahead: int = 0  # records it holds that local does not, summed over partitions
    served_bytes: int | None = None  # the rest: live, from the daemons that answered
    served_records: int | None = None
    health: str | None = None
    errors: int | None = None
    dropped: int | None = None
    rate: float | None = None  # record bytes per second fetched now
    cap: float | None = None  # its bandwidth cap (0: none)


def remote_rows(
    names: list[str], rows: list[PartitionRow], down: dict[str, str], live: list[dict[str, Any]]
) -> list[RemoteRow]:
    out = []
    for name in names:
        row = RemoteRow(name, name not in down, down.get(name))
        for p in rows:
            if name in p.remote_ends:
                row.partitions += 1
                row.ahead += max(0, p.remote_ends[name] - p.local_end)
        reports = [r for doc in live for r in doc.get("remotes", ()) if r.get("name") == name]
        if reports:
            row.served_bytes = sum(r["served_bytes"] for r in reports)
            row.served_records = sum(r["served_records"] for r in reports)
            row.errors = sum(r["errors"] for r in reports)
            row.dropped = sum(r["dropped_partitions"] for r in reports)
            row.rate = sum(r.get("rate_bytes_per_s", 0) for r in reports)
            row.cap = sum(r.get("max_bytes_per_s", 0) for r in reports)
            sick = [r for r in reports if r["state"] != "healthy"]
            row.health = f"{sick[0]['state']}: {sick[0]['last_error']}" if sick else "healthy"
        out.append(row)
    return out


def merge_live(rows: list[PartitionRow], live: list[dict[str, Any]]) -> None:
    """Show the copier's own state where a daemon reports the partition: halted and why, the
    remotes it no longer uses, why its writes wait."""
    by_tp = {(p["topic"], p["partition"]): p for doc in live for p in doc.get("partitions", ())}
    for row in rows:
        found = by_tp.get((row.topic, row.partition))
        if found is None:
            continue
        row.served = dict(found["served"])
        row.dropped = dict(found["dropped"])
        if found["state"] == "halted":
            row.state = f"halted: {found['error']}"
            continue
        if found["dropped"]:
            row.state += " (dropped: " + ", ".join(sorted(found["dropped"])) + ")"
        if found.get("waiting"):  # absent from the /status of a daemon before it
            row.state += f" (waiting: {found['waiting']})"


def topic_notes(live: list[dict[str, Any]]) -> list[str]:
    """One line per topic whose copied settings a daemon synced or held back, or that was
    deleted at a remote, or is not copied from one any more (from each ``/status``; a daemon
    before them reports none)."""
    notes = []
    for doc in live:
        topics = doc.get("topics", {})
        for topic, count in topics.get("configs_synced", {}).items():
            last = topics.get("last_config_sync", {}).get(topic, {})
            notes.append(
                f"topic {topic}: settings synced {count}x, last: {last.get('changes', '?')}"
            )
        for topic, held in topics.get("configs_held", {}).items():
            notes += [f"topic {topic}: {key} not synced: {why}" for key, why in held.items()]
        for topic, where in topics.get("gone_at_remote", {}).items():
            notes.append(
                f"topic {topic}: deleted on the {' and '.join(where)} cluster (kept locally)"
            )
        for topic, dropped in topics.get("remotes_dropped", {}).items():
            notes += [
                f"topic {topic}: remote {name} not used: {why}" for name, why in dropped.items()
            ]
    return notes


def fetch_live(urls: list[str], timeout: float = 5.0) -> tuple[list[dict[str, Any]], list[str]]:
    """``/status`` of each daemon: (the documents, one line per daemon that did not answer)."""
    docs, problems = [], []
    for url in urls:
        target = url if "://" in url else f"http://{url}"
        try:
            with urllib.request.urlopen(f"{target.rstrip('/')}/status", timeout=timeout) as r:
                doc = json.loads(r.read())
        except http.client.HTTPException as exc:
            problems.append(f"no live figures from {target}: not an HTTP answer ({exc!r})")
            continue
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            problems.append(f"no live figures from {target}: {reason}")
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("partitions", []), list):
            problems.append(f"no live figures from {target}: not a syncer daemon's /status")
            continue
        docs.append(doc)
    return docs, problems


async def gather_rows(syncer: Syncer, *, look_for_holes: bool) -> list[PartitionRow]:
    """Ends of every selected partition without writing anything."""
    plan = await syncer.plan()
    tps = [TP(t, p) for t, n in sorted(plan.mirror.items()) for p in range(n)]
    local_known = [tp for tp in tps if tp.topic not in plan.create]
    local_ends = await syncer.local.latest(local_known) if local_known else {}
    remote: dict[TP, dict[str, RemoteEnds]] = {}
    for name, cluster in syncer.remotes.items():
        mine = [tp for tp in tps if name in plan.sources[tp.topic]]
        if mine:
            for tp, (start, end) in (await cluster.ends(mine, isolation=READ_COMMITTED)).items():
                remote.setdefault(tp, {})[name] = RemoteEnds(start, end)
    owners = await group_owners(syncer.config) if syncer.config.coordination.enabled else {}
    rows = []
    for tp in tps:
        local_end = local_ends.get(tp, 0)
        ends = remote.get(tp, {})
        choice = choose_remote(local_end, ends)
        row = PartitionRow(
            tp.topic,
            tp.partition,
            local_end,
            {n: e.end for n, e in ends.items()},
            choice.gap,
            choice.remote,
            _state(choice.gap, choice.lost_below),
            remote_starts={n: e.start for n, e in ends.items()},
            owner=owners.get(tp),
        )
        if look_for_holes and choice.remote is not None:
            row.hole, row.first_timestamp = await _first_look(
                syncer, tp, choice.remote, local_end, choice.target
            )
        rows.append(row)
    rows.extend(
        PartitionRow(topic, -1, -1, {}, 0, None, f"refused: {reason}")
        for topic, reason in sorted(plan.refused.items())
    )
    return rows


def _state(gap: int, lost_below: int | None) -> str:
    if lost_below is not None:
        return f"data lost at source below {lost_below}"
    return "behind" if gap else "in sync"


async def _first_look(
    syncer: Syncer, tp: TP, remote: str, start: int, target: int
) -> tuple[str | None, int | None]:
    """Scan the first fetch of the gap for a hole (a full scan is what catch-up does); the
    hole, and the max timestamp of the first batch to copy."""
    cluster = syncer.remotes[remote]
    fetched = (
        await cluster.fetch(
            await cluster.leader_for(tp),
            {tp: start},
            max_wait_ms=0,
            max_bytes=syncer.config.copier.fetch_max_bytes,
            partition_max_bytes=syncer.config.copier.partition_fetch_max_bytes,
        )
    )[tp]
    found = scan(
        split_batches(fetched.records),
        start,
        limit=min(target, fetched.stable_end),
        aborted=fetched.aborted,
    )
    batches = split_batches(fetched.records)
    first = next((b.max_timestamp for b in batches if b.next_offset > start), None)
    return (found.hole.describe() if found.hole else None), first


def producer_state_note(clock: StateClock, rows: list[PartitionRow], now_ms: int) -> str:
    """What the local brokers' producer.id.expiration.ms means for this copy: data older
    than it is written one batch at a time (the broker may hold no producer state)."""
    if clock.expiration_ms <= 0:
        return (
            "producer.id.expiration.ms of the local brokers is unknown: every partition"
            " writes one batch at a time"
        )
    old = [
        r
        for r in rows
        if r.first_timestamp is not None and not clock.fresh(r.first_timestamp, now_ms)
    ]
    text = f"local brokers keep producer state for {clock.expiration_ms} ms"
    if not old:
        return text + " (producer.id.expiration.ms); no data to copy is older"
    return (
        text + f" (producer.id.expiration.ms): {len(old)} partitions start with records older"
        " than that, written one batch at a time until newer ones"
    )
