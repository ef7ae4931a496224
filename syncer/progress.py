"""A progress bar for catch-up: records, bytes, rate and ETA across every partition."""

from __future__ import annotations

import asyncio
from types import TracebackType

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from syncer.syncer import Syncer


class CatchUpProgress:
    """``with CatchUpProgress(syncer): await syncer.catch_up()`` redraws a bar twice a second."""

    def __init__(self, syncer: Syncer, *, enabled: bool = True) -> None:
        self.syncer = syncer
        self.enabled = enabled
        self._progress = Progress(
            TextColumn("catch-up"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("records ◆ {task.fields[mb]:.1f} MB ◆ {task.fields[rate]:.0f} rec/s"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            transient=False,
        )
        self._task: asyncio.Task[None] | None = None
        self._bar: TaskID | None = None

    def __enter__(self) -> CatchUpProgress:
        if self.enabled:
            self._progress.start()
            self._bar = self._progress.add_task("catch-up", total=None, mb=0.0, rate=0.0)
            self._task = asyncio.get_running_loop().create_task(self._redraw())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            self._update()
            self._progress.stop()

    async def _redraw(self) -> None:
        while True:
            self._update()
            await asyncio.sleep(0.5)

    def _update(self) -> None:
        if self._bar is None:
            return
        statuses = self.syncer.statuses()
        copied = sum(s.records_copied for s in statuses)
        total = copied + sum(s.lag for s in statuses)
        elapsed = self._progress.tasks[0].elapsed or 0.0
        self._progress.update(
            self._bar,
            completed=copied,
            total=total or None,
            mb=sum(s.bytes_copied for s in statuses) / 1e6,
            rate=copied / elapsed if elapsed > 0 else 0.0,
        )
