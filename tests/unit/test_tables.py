"""Rendering rows needs no cluster: what the plan and status tables show."""

from __future__ import annotations

import io

from rich.console import Console

from syncer.report import PartitionRow, RemoteRow
from syncer.tables import render


def text(rows: list[PartitionRow], remotes: list[RemoteRow], *, holes: bool) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(render(rows, remotes, title="plan", holes=holes, notes=["a note"]))
    return console.export_text()


def test_rows_remotes_and_notes_are_shown() -> None:
    rows = [
        PartitionRow("orders", 0, 5, {"east": 9}, 4, "east", "behind", hole="compacted at 6"),
        PartitionRow("wide", -1, -1, {}, 0, None, "refused: partition counts differ"),
    ]
    shown = text(rows, [RemoteRow("east", True, partitions=1, ahead=4)], holes=True)
    assert "first hole" in shown and "compacted at 6" in shown
    assert "refused: partition counts differ" in shown
    assert "east end" in shown and "ahead of local" in shown and "a note" in shown
    assert "health" not in shown  # no daemon answered: no live columns


def test_live_figures_add_columns() -> None:
    remote = RemoteRow("east", True, served_bytes=2_000_000, health="healthy", dropped=1)
    shown = text([], [remote], holes=False)
    assert "served MB" in shown and "2.0" in shown and "1 partitions" in shown
