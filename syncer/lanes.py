"""One remote read over several lanes (``remotes[].connections``): independent clients, each
with its own TCP connections and its own ``Fetcher``, so one long, lossy link carries several
windows of data at once."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from functools import partial
from typing import Any, Self

from syncer.clusters import TP, FetchedPartition
from syncer.config import ClusterConfig, CopierConfig
from syncer.errors import SyncerError
from syncer.fetch_connections import DATA_CONNECTION
from syncer.fetch_wants import Take, hold_always
from syncer.fetcher import Fetcher


class Lanes:
    """One remote read over several lanes: independent clients, each with its own TCP
    connections and its own Fetcher. A fetch goes to the lane with nothing pending for that
    partition, then the fewest bytes pending, so the chunks of one hot partition and the
    partitions of a remote spread over every connection. Same interface as a Fetcher,
    lifecycle included: ``async with lanes:`` or ``start()``/``stop()``.

    ``wanted``: the topics this process may copy (the selection), whose leaders every lane
    connects to as it starts."""

    def __init__(
        self, fetchers: list[Fetcher], wanted: Callable[[str], bool] = lambda topic: True
    ) -> None:
        assert fetchers
        self.lanes = fetchers
        self.wanted = wanted
        # per lane, one metadata refresh at a time, and the fetches waiting for it (counted
        # as its pending ones and bytes, so the next fetches spread over the other lanes)
        self._learning = [asyncio.Lock() for _ in fetchers]
        self._waiting: Counter[tuple[int, TP]] = Counter()
        self._waiting_bytes = [0] * len(fetchers)
        self._warming: set[asyncio.Task[None]] = set()
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
        """Start every lane's fetcher and, with several lanes, get each ready (``_ready``)."""
        for fetcher in self.lanes:
            fetcher.start()
        if len(self.lanes) > 1:
            for number in range(len(self.lanes)):
                self._spawn(self._ready(number))

    async def _ready(self, number: int) -> None:
        """Lane ``number`` learns the leaders and opens its data connection to each broker
        that leads a wanted partition, while the copy is still being set up (local topics
        created, ends read: over a second). Left to the first fetch, a lane spends three
        round trips (a metadata connection, its answer, the data connection) before that
        fetch goes: 64 lanes over a 100 ms link began with 1-2 lanes busy for ~0.4 s. One
        lane is left as it was: it learns the leaders with the topics, and a metadata read of
        every topic more (10,000 partitions) would cost more than the round trip it saves.
        A failure here is no failure: the lane's first fetch learns and connects as before."""
        cluster = self.lanes[number].cluster
        async with self._learning[number]:  # a fetch that comes meanwhile waits for this
            try:
                counts = await cluster.partition_counts()
            except SyncerError:
                return
        nodes = fetch_nodes(counts, self.wanted, partial(node_of, self.lanes[number]))
        # side by side (each connection opens under its own lock); one not opened here is
        # opened by the lane's first fetch to that broker, or fails it
        await asyncio.gather(
            *(cluster.connect(node, connection=DATA_CONNECTION) for node in sorted(nodes)),
            return_exceptions=True,
        )

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._warming.add(task)
        task.add_done_callback(self._warming.discard)

    async def stop(self) -> None:
        """Stop every lane's fetcher, each even if another's stop fails; idempotent."""
        for task in self._warming:
            task.cancel()
        async with contextlib.AsyncExitStack() as stack:
            for fetcher in self.lanes:
                stack.push_async_callback(fetcher.stop)

    def fetch(
        self,
        tp: TP,
        offset: int,
        max_bytes: int | None = None,
        *,
        poll: bool = False,
        hold: Callable[[], bool] = hold_always,
        hold_s: float | None = None,
        answered: Callable[[], bool | None] = lambda: None,
        take: Take | None = None,
    ) -> Awaitable[FetchedPartition]:
        """``Fetcher.fetch`` on the least loaded lane: queued before this returns if that
        lane knows ``tp``'s leader; else a coroutine that chooses as it runs and waits for
        the lane it chose to learn the leader first."""
        lane = self.lanes[0] if len(self.lanes) == 1 else self.lanes[self._least_loaded(tp)]
        if knows_leader(lane, tp):
            return lane.fetch(
                tp,
                offset,
                max_bytes,
                poll=poll,
                hold=hold,
                hold_s=hold_s,
                answered=answered,
                take=take,
            )
        how = partial(_fetch_of, tp, offset, max_bytes, poll, hold, hold_s, answered, take)
        return self._learned_first(tp, max_bytes, how)

    def _least_loaded(self, tp: TP) -> int:
        return min(
            range(len(self.lanes)),
            key=lambda i: (
                self.lanes[i].pending.get(tp, 0) + self._waiting[i, tp],
                self.lanes[i].pending_bytes + self._waiting_bytes[i],
            ),
        )

    async def _learned_first(
        self,
        tp: TP,
        max_bytes: int | None,
        fetch: Callable[[Fetcher], Awaitable[FetchedPartition]],
    ) -> FetchedPartition:
        number = self._least_loaded(tp)
        lane = self.lanes[number]
        if not knows_leader(lane, tp):
            self._warm(tp)
            await self._learn(number, tp, max_bytes or self.config.partition_fetch_max_bytes)
        return await fetch(lane)

    async def _learn(self, number: int, tp: TP, size: int) -> None:
        """Lane ``number`` learns ``tp``'s leader before its fetch goes: lanes learn metadata
        each on their own, and a fetch sent to one that has not fails with "no leader known"
        and backs the whole remote off (64 lanes: 241 such failures, the copy at 5% of the
        link). Preferring the lanes that know starved the others instead: they learn only
        when asked (16 lanes: 6 ever fetched, 8% of the link). Its ``size`` bytes count in
        the lane's load meanwhile: uncounted, the first fetches of 7 partitions all went to
        the one idle lane that was learning, and their answers crossed its one connection in
        turn (the last 1.3 s late). If the refresh fails, the fetch fails as it would have."""
        self._waiting[number, tp] += 1
        self._waiting_bytes[number] += size
        try:
            await self._refresh(number, tp)
        finally:
            self._waiting_bytes[number] -= size
            self._waiting[number, tp] -= 1
            if not self._waiting[number, tp]:
                del self._waiting[number, tp]

    def _warm(self, tp: TP) -> None:
        """Every lane that knows no leader for ``tp`` starts learning it now, not when a
        fetch comes to it: the first fetch of a partition goes out alone (it shows the
        batches' shape), and meanwhile the other lanes get ready for the chunks after it."""
        for number, lane in enumerate(self.lanes):
            if not self._learning[number].locked() and not knows_leader(lane, tp):
                self._spawn(self._refresh(number, tp))

    async def _refresh(self, number: int, tp: TP) -> None:
        async with self._learning[number]:
            if not knows_leader(self.lanes[number], tp):
                with contextlib.suppress(SyncerError):
                    await self.lanes[number].cluster.leader_for(tp)

    def release(self, tp: TP) -> None:
        for fetcher in self.lanes:
            fetcher.release(tp)


def _fetch_of(
    tp: TP,
    offset: int,
    max_bytes: int | None,
    poll: bool,
    hold: Callable[[], bool],
    hold_s: float | None,
    answered: Callable[[], bool | None],
    take: Take | None,
    lane: Fetcher,
) -> Awaitable[FetchedPartition]:
    return lane.fetch(
        tp, offset, max_bytes, poll=poll, hold=hold, hold_s=hold_s, answered=answered, take=take
    )


def knows_leader(fetcher: Fetcher, tp: TP) -> bool:
    """Does this lane's metadata name a leader for ``tp`` yet?"""
    return node_of(fetcher, tp) is not None


def node_of(fetcher: Fetcher, tp: TP) -> int | None:
    """The broker this lane's next fetch of ``tp`` goes to; None while it knows no leader."""
    try:
        return fetcher.cluster.fetch_node(tp)
    except SyncerError:
        return None


def fetch_nodes(
    counts: Mapping[str, int], wanted: Callable[[str], bool], node: Callable[[TP], int | None]
) -> set[int]:
    """The brokers a lane will fetch from: those that lead (``node``) a partition of a wanted
    topic, of the topics and partition counts of its metadata. Only those get a connection
    at start: one to every broker of a large remote would hold lanes × brokers idle sockets
    (and file descriptors) that no fetch uses."""
    nodes: set[int] = set()
    for topic, partitions in counts.items():
        if wanted(topic):
            for partition in range(partitions):
                found = node(TP(topic, partition))
                if found is not None:
                    nodes.add(found)
    return nodes


def fetch_sizes(copier: CopierConfig, remote: ClusterConfig) -> CopierConfig:
    """The copier settings a remote's fetchers use: its own fetch sizes where it sets them."""
    return dataclasses.replace(
        copier,
        fetch_max_bytes=remote.fetch_max_bytes or copier.fetch_max_bytes,
        partition_fetch_max_bytes=(
            remote.partition_fetch_max_bytes or copier.partition_fetch_max_bytes
        ),
    )
