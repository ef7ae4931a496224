"""The tables of ``plan``, ``status`` and ``verify``: rows in, rich tables (or JSON) out.
Nothing here talks to a cluster."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from syncer.report import PartitionRow, RemoteRow
from syncer.verify import Verdict


def print_report(
    rows: list[PartitionRow],
    remotes: list[RemoteRow],
    *,
    as_json: bool,
    title: str,
    holes: bool,
    notes: list[str],
) -> None:
    if as_json:
        document = {
            "partitions": [asdict(r) for r in rows],
            "remotes": [asdict(r) for r in remotes],
            "notes": notes,
        }
        print(json.dumps(document, indent=2))
        return
    # piped output is not cut to 80 columns: a script or a pager reads it whole
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(render(rows, remotes, title=title, holes=holes, notes=notes))


def render(
    rows: list[PartitionRow],
    remotes: list[RemoteRow],
    *,
    title: str,
    holes: bool,
    notes: list[str],
    rates: dict[tuple[str, int], float] | None = None,
) -> Group:
    """The partitions table, the remotes table and the notes, for printing or a live view;
    ``rates``: records/s per (topic, partition), shown as a column when given."""
    parts: list[Table | Text] = [
        rows_table(rows, title=title, holes=holes, rates=rates),
        remotes_table(remotes),
    ]
    parts += [Text(note, style="dim") for note in notes]
    return Group(*parts)


def remotes_table(remotes: list[RemoteRow]) -> Table:
    live = any(r.health is not None for r in remotes)
    table = Table(title="remotes")
    columns = ["remote", "reachable", "partitions", "ahead of local"]
    if live:
        columns += ["served MB", "records", "MB/s (cap)", "health", "errors", "dropped for"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("remote", "health") else "right")
    for r in remotes:
        cells = [
            r.name,
            "yes" if r.reachable else f"no: {r.error}",
            str(r.partitions),
            str(r.ahead),
        ]
        if live:
            cells += [
                "-" if r.served_bytes is None else f"{r.served_bytes / 1e6:.1f}",
                "-" if r.served_records is None else str(r.served_records),
                _rate(r.rate, r.cap),
                r.health or "-",
                "-" if r.errors is None else str(r.errors),
                "-" if r.dropped is None else f"{r.dropped} partitions",
            ]
        table.add_row(*cells)
    return table


def _rate(rate: float | None, cap: float | None) -> str:
    """A remote's rate now, and its bandwidth cap if it has one: ``4.9 (5.0)``."""
    if rate is None:
        return "-"
    return f"{rate / 1e6:.1f}" + (f" ({cap / 1e6:.1f})" if cap else "")


def rows_table(
    rows: list[PartitionRow],
    *,
    title: str,
    holes: bool,
    rates: dict[tuple[str, int], float] | None = None,
) -> Table:
    remotes = sorted({n for r in rows for n in r.remote_ends})
    owners = any(r.owner for r in rows)
    table = Table(title=title)
    cells = [_cells(r, remotes, holes=holes, owners=owners) for r in rows]
    if rates is not None:
        for r, cell in zip(rows, cells, strict=True):
            rate = rates.get((r.topic, r.partition))
            cell["records/s"] = "-" if rate is None else f"{rate:,.0f}"
    columns = list(cells[0]) if cells else ["topic"]
    for column in columns:
        numeric = column.endswith("end") or column in ("lag", "partition", "records/s")
        table.add_column(column, justify="right" if numeric else "left")
    for row in cells:
        table.add_row(*row.values())
    return table


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


def print_verdicts(verdicts: list[Verdict], *, as_json: bool) -> None:
    """``syncer verify``'s answer: one row per partition and remote."""
    if as_json:
        document = [
            {
                "topic": v.tp.topic,
                "partition": v.tp.partition,
                "remote": v.remote,
                "from": v.low,
                "to": v.high,
                "identical": v.divergence is None,
                "divergent_offset": v.divergence.offset if v.divergence else None,
                "local": v.divergence.local if v.divergence else None,
                "remote_record": v.divergence.remote if v.divergence else None,
                "rounds": v.rounds,
                "fetches": v.fetches,
            }
            for v in verdicts
        ]
        print(json.dumps(document, indent=2))
        return
    table = Table(title="verify: local against each remote")
    for column in ("topic", "partition", "remote", "range", "result", "rounds", "fetches"):
        table.add_column(column, justify="right" if column in ("rounds", "fetches") else "left")
    for v in verdicts:
        if v.divergence is None:
            result = Text("identical" if v.high > v.low else "nothing to compare", style="green")
        else:
            d = v.divergence
            result = Text(
                f"differs at offset {d.offset}: local {d.local}; remote {d.remote}", style="red"
            )
        table.add_row(
            v.tp.topic,
            str(v.tp.partition),
            v.remote,
            f"{v.low}..{v.high}",
            result,
            str(v.rounds),
            str(v.fetches),
        )
    Console(width=None if sys.stdout.isatty() else 200).print(table)
