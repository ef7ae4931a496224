"""One remote read over several lanes (``remotes[].connections``): independent clients, each
with its own TCP connections and its own ``Fetcher``, so one long, lossy link carries several
windows of data at once."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Self

from syncer.clusters import TP, FetchedPartition
from syncer.config import ClusterConfig, CopierConfig
from syncer.errors import SyncerError
from syncer.fetch_wants import hold_always
from syncer.fetcher import Fetcher


class Lanes:
    """One remote read over several lanes: independent clients, each with its own TCP
    connections and its own Fetcher. A fetch goes to the lane with nothing pending for that
    partition, then the fewest bytes pending, so the chunks of one hot partition and the
    partitions of a remote spread over every connection. Same interface as a Fetcher,
    lifecycle included: ``async with lanes:`` or ``start()``/``stop()``."""

    def __init__(self, fetchers: list[Fetcher]) -> None:
        assert fetchers
        self.lanes = fetchers
        self.config = fetchers[0].config
        self.name = fetchers[0].cluster.name

    def __repr__(self) -> str:
        return f"<Lanes {self.name} x{len(self.lanes)}>"

    def __len__(self) -> int:
        return len(self.lanes)

    @property
    def fetches(self) -> int:
        return sum(f.fetches for f in self.lanes)

    async def __aenter__(self) -> Self:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def start(self) -> None:
        for fetcher in self.lanes:
            fetcher.start()

    async def stop(self) -> None:
        """Stop every lane's fetcher, each even if another's stop fails; idempotent."""
        async with contextlib.AsyncExitStack() as stack:
            for fetcher in self.lanes:
                stack.push_async_callback(fetcher.stop)

    async def fetch(
        self,
        tp: TP,
        offset: int,
        max_bytes: int | None = None,
        *,
        poll: bool = False,
        hold: Callable[[], bool] = hold_always,
        hold_s: float | None = None,
    ) -> FetchedPartition:
        lane = min(
            self.lanes,
            key=lambda f: (not knows_leader(f, tp), f.pending.get(tp, 0), f.pending_bytes),
        )
        return await lane.fetch(tp, offset, max_bytes, poll=poll, hold=hold, hold_s=hold_s)

    def release(self, tp: TP) -> None:
        for fetcher in self.lanes:
            fetcher.release(tp)


def knows_leader(fetcher: Fetcher, tp: TP) -> bool:
    """Does this lane's metadata name a leader for ``tp`` yet? Lanes learn metadata each on
    their own; a fetch sent to one that has not fails with "no leader known" and backs the
    whole remote off (64 lanes: 241 such failures, the copy at 5% of the link)."""
    try:
        fetcher.cluster.fetch_node(tp)
    except SyncerError:
        return False
    return True


def fetch_sizes(copier: CopierConfig, remote: ClusterConfig) -> CopierConfig:
    """The copier settings a remote's fetchers use: its own fetch sizes where it sets them."""
    return dataclasses.replace(
        copier,
        fetch_max_bytes=remote.fetch_max_bytes or copier.fetch_max_bytes,
        partition_fetch_max_bytes=(
            remote.partition_fetch_max_bytes or copier.partition_fetch_max_bytes
        ),
    )
