"""Raw fetches from one remote, coalesced: every partition that wants data joins the next
fetch request to its leader, so one long poll serves them all (a fetch holds its connection
until it is answered)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections import defaultdict

from syncer.clusters import TP, Cluster, FetchedPartition
from syncer.config import CopierConfig
from syncer.errors import SyncerError, TransientClusterError
from syncer.loops import RequestLoop

log = logging.getLogger(__name__)


class Fetcher(RequestLoop):
    """Owns one background task; ``await fetch(tp, offset)`` from any number of copiers."""

    def __init__(self, cluster: Cluster, config: CopierConfig) -> None:
        super().__init__(f"fetcher-{cluster.name}")
        self.cluster = cluster
        self.config = config
        # several chunks of one partition may wait; each request carries one per partition,
        # the lowest offset first (the one the partition's writes wait for)
        self._wants: dict[TP, list[tuple[int, int, int, asyncio.Future[FetchedPartition]]]] = {}
        self._order = itertools.count()
        self._busy: set[int] = set()
        self.fetches = 0

    def __repr__(self) -> str:
        return (
            f"<Fetcher {self.cluster.name} [wants: {len(self._wants)},"
            f" in flight: {len(self._busy)}]>"
        )

    def _cancel_waiting(self) -> None:
        for queue in self._wants.values():
            for *_want, future in queue:
                future.cancel()
        self._wants.clear()

    async def fetch(self, tp: TP, offset: int, max_bytes: int | None = None) -> FetchedPartition:
        """Records of ``tp`` from ``offset`` (raw), about ``max_bytes`` of them (whole
        batches, at least one); long-polls when none are there yet."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[FetchedPartition] = loop.create_future()
        limit = min(
            max_bytes or self.config.partition_fetch_max_bytes,
            self.config.partition_fetch_max_bytes,
        )
        want = (offset, next(self._order), max(1, limit), future)
        heapq.heappush(self._wants.setdefault(tp, []), want)
        self._wakeup.set()
        return await future

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            by_node: dict[int, dict[TP, tuple[tuple[int, int], asyncio.Future[FetchedPartition]]]]
            by_node = defaultdict(dict)
            for tp, queue in list(self._wants.items()):
                while queue and queue[0][3].done():
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
                if node not in self._busy:
                    offset, _n, limit, future = heapq.heappop(queue)
                    by_node[node][tp] = ((offset, limit), future)
            for node, wants in by_node.items():
                self._busy.add(node)
                self._spawn(self._fetch(node, wants))

    async def _fetch(
        self,
        node: int,
        wants: dict[TP, tuple[tuple[int, int], asyncio.Future[FetchedPartition]]],
    ) -> None:
        try:
            offsets = {tp: offset for tp, (offset, _f) in wants.items()}
            result = await self.cluster.fetch(
                node,
                offsets,
                max_wait_ms=self.config.fetch_max_wait_ms,
                max_bytes=self.config.fetch_max_bytes,
                partition_max_bytes=self.config.partition_fetch_max_bytes,
            )
            self.fetches += 1
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
            self._busy.discard(node)
            self._wakeup.set()
