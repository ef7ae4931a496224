"""Raw fetches from one remote, coalesced: every partition that wants data joins the next
fetch request to its leader.

Two kinds of request, on two connections to each broker, so that neither waits behind the
other (a broker answers the requests of one connection in order):
- data: offsets known to hold records, asked with no wait, two requests in flight so the
  link does not idle for a round trip between them;
- polls: partitions caught up with the remote, long-polled (``fetch_max_wait_ms``), one
  request at a time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections import defaultdict
from collections.abc import Callable

from syncer.clusters import TP, Cluster, FetchedPartition
from syncer.config import CopierConfig
from syncer.errors import SyncerError, TransientClusterError
from syncer.loops import RequestLoop

log = logging.getLogger(__name__)

# fetch requests in flight per broker connection: the second is queued at the broker while
# the first is answered, so a long link does not sit idle for a round trip between them
PIPELINE = 2


class Fetcher(RequestLoop):
    """Owns one background task; ``await fetch(tp, offset)`` from any number of copiers."""

    def __init__(
        self,
        cluster: Cluster,
        config: CopierConfig,
        observe: Callable[[float], None] = lambda seconds: None,
    ) -> None:
        super().__init__(f"fetcher-{cluster.name}")
        self.cluster = cluster
        self.observe = observe  # each fetch request's seconds, send to answer
        self.config = config
        # several chunks of one partition may wait; each request carries one per partition,
        # the lowest offset first (the one the partition's writes wait for)
        self._wants: dict[TP, list[tuple[int, int, int, bool, asyncio.Future[FetchedPartition]]]]
        self._wants = {}
        self._order = itertools.count()
        self._busy: dict[tuple[int, bool], int] = defaultdict(int)  # (node, poll) → in flight
        self._peeked: dict[TP, int] = {}  # the offset each partition last looked at unpolled
        self.fetches = 0
        self.pending_bytes = 0  # asked for and not answered yet: how loaded this lane is
        self.pending: dict[TP, int] = {}  # fetches waiting or in flight, per partition

    def __repr__(self) -> str:
        return (
            f"<Fetcher {self.cluster.name} [wants: {len(self._wants)},"
            f" in flight: {sum(self._busy.values())}]>"
        )

    def _cancel_waiting(self) -> None:
        for queue in self._wants.values():
            for *_want, future in queue:
                future.cancel()
        self._wants.clear()

    async def fetch(
        self, tp: TP, offset: int, max_bytes: int | None = None, *, poll: bool = False
    ) -> FetchedPartition:
        """Records of ``tp`` from ``offset`` (raw), about ``max_bytes`` of them (whole
        batches, at least one). ``poll``: the partition is caught up, so wait up to
        ``fetch_max_wait_ms`` for records to arrive; otherwise answer at once."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[FetchedPartition] = loop.create_future()
        limit = min(
            max_bytes or self.config.partition_fetch_max_bytes,
            self.config.partition_fetch_max_bytes,
        )
        want = (offset, next(self._order), max(1, limit), poll, future)
        heapq.heappush(self._wants.setdefault(tp, []), want)
        self._wakeup.set()
        self.pending_bytes += limit
        self.pending[tp] = self.pending.get(tp, 0) + 1
        try:
            return await future
        finally:
            self.pending_bytes -= limit
            self.pending[tp] -= 1
            if not self.pending[tp]:
                del self.pending[tp]

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._dispatch():
                pass  # a partition's next want may go out in the pipeline's next request

    def _dispatch(self) -> bool:
        """One request per broker and kind with room in its pipeline, the lowest offset of
        every partition that waits; whether any went out."""
        Wants = dict[TP, tuple[tuple[int, int], asyncio.Future[FetchedPartition]]]
        by_node: dict[tuple[int, bool], Wants] = defaultdict(dict)
        for tp, queue in list(self._wants.items()):
            while queue and queue[0][4].done():
                heapq.heappop(queue)
            if not queue:
                del self._wants[tp]
                continue
            try:
                node = self.cluster.leader(tp)
            except SyncerError as exc:
                for *_want, future in self._wants.pop(tp):
                    if not future.done():
                        future.set_exception(exc)
                continue
            offset, poll = queue[0][0], queue[0][3]
            # a poll is out already and this one would wait behind it: look once without
            # waiting (records may have come since this partition's last answer)
            behind_a_poll = poll and self._busy[(node, True)] and self._peeked.get(tp) != offset
            if behind_a_poll and self._busy[(node, False)] < PIPELINE:
                self._peeked[tp] = offset
                poll = False
            if self._busy[(node, poll)] < (1 if poll else PIPELINE):
                offset, _n, limit, _poll, future = heapq.heappop(queue)
                by_node[(node, poll)][tp] = ((offset, limit), future)
        for key, wants in by_node.items():
            self._busy[key] += 1
            self._spawn(self._fetch(key, wants))
        return bool(by_node)

    async def _fetch(
        self,
        key: tuple[int, bool],
        wants: dict[TP, tuple[tuple[int, int], asyncio.Future[FetchedPartition]]],
    ) -> None:
        node, poll = key
        try:
            offsets = {tp: offset for tp, (offset, _f) in wants.items()}
            # the chunk timeout runs from here, when the request goes out, not from when a
            # chunk joined the queue: on a thin link a chunk may wait behind another
            sent = time.monotonic()
            result = await asyncio.wait_for(
                self.cluster.fetch(
                    node,
                    offsets,
                    max_wait_ms=self.config.fetch_max_wait_ms if poll else 0,
                    max_bytes=self.config.fetch_max_bytes,
                    partition_max_bytes=self.config.partition_fetch_max_bytes,
                    side=not poll,  # data on the second connection, polls on the first
                ),
                self.config.chunk_timeout_ms / 1000,
            )
            self.fetches += 1
            self.observe(time.monotonic() - sent)
            log.debug(
                "fetch from %s node %d: %d partitions, %d bytes",
                self.cluster.name,
                node,
                len(result),
                sum(len(p.records) for p in result.values()),
            )
            for tp, (_offset, future) in wants.items():
                if future.done():
                    continue
                if tp in result:
                    future.set_result(result[tp])
                else:
                    future.set_exception(TransientClusterError(f"{tp} missing from fetch"))
        except Exception as exc:
            for _offset, future in wants.values():
                if not future.done():
                    future.set_exception(exc)
        finally:
            self._busy[key] -= 1
            self._wakeup.set()


class Lanes:
    """One remote read over several lanes: independent clients, each with its own TCP
    connections and its own Fetcher. A fetch goes to the lane with nothing pending for that
    partition, then the fewest bytes pending, so the chunks of one hot partition and the
    partitions of a remote spread over every connection. Same interface as a Fetcher."""

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

    def start(self) -> None:
        for fetcher in self.lanes:
            fetcher.start()

    async def stop(self) -> None:
        for fetcher in self.lanes:
            await fetcher.stop()

    async def fetch(
        self, tp: TP, offset: int, max_bytes: int | None = None, *, poll: bool = False
    ) -> FetchedPartition:
        lane = min(self.lanes, key=lambda f: (f.pending.get(tp, 0), f.pending_bytes))
        return await lane.fetch(tp, offset, max_bytes, poll=poll)
