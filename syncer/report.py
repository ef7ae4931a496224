"""Per-partition ends for ``plan`` and ``status``: read from the clusters, shown as a table
or JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from rich.console import Console
from rich.table import Table

from syncer.batches import split_batches
from syncer.clusters import READ_COMMITTED, TP
from syncer.coordination import group_owners
from syncer.planner import RemoteEnds, choose_remote, scan
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
            row.hole = await _first_hole(syncer, tp, choice.remote, local_end, choice.target)
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


async def _first_hole(syncer: Syncer, tp: TP, remote: str, start: int, target: int) -> str | None:
    """Scan the first fetch of the gap for a hole (a full scan is what catch-up does)."""
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
    return found.hole.describe() if found.hole else None


def print_rows(rows: list[PartitionRow], *, as_json: bool, title: str, holes: bool) -> None:
    if as_json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return
    remotes = sorted({n for r in rows for n in r.remote_ends})
    owners = any(r.owner for r in rows)
    table = Table(title=title)
    cells = [_cells(r, remotes, holes=holes, owners=owners) for r in rows]
    columns = list(cells[0]) if cells else ["topic"]
    for column in columns:
        numeric = column.endswith("end") or column in ("lag", "partition")
        table.add_column(column, justify="right" if numeric else "left")
    for row in cells:
        table.add_row(*row.values())
    Console().print(table)


def _cells(r: PartitionRow, remotes: list[str], *, holes: bool, owners: bool) -> dict[str, str]:
    refused = r.partition < 0
    cells = {
        "topic": r.topic,
        "partition": "-" if refused else str(r.partition),
        "local end": "-" if refused else str(r.local_end),
        **{f"{n} end": str(r.remote_ends.get(n, "-")) for n in remotes},
        "lag": "-" if refused else str(r.lag),
        "source": r.source or "-",
        "state": r.state,
    }
    if owners:
        cells["owner"] = r.owner or "-"
    if holes:
        cells["first hole"] = r.hole or "-"
    return cells
