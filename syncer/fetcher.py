"""Raw fetches from one remote, coalesced: every partition that wants data joins the next
fetch request to its leader.

Two kinds of request, on separate connections to each broker, so that neither waits behind
the other (a broker answers the requests of one connection in order):
- data: offsets known to hold records, asked with no wait, two requests in flight on one
  connection so the link does not idle for a round trip between them;
- polls: partitions caught up with the remote, long-polled (``fetch_max_wait_ms``), one
  request per connection on a few connections: a partition that catches up while a poll is
  out goes out in a poll of its own at once instead of waiting for that one to come back.

An empty poll answer (nothing new, no error) is not handed back: the partition is polled
again in the next request, for up to ``HOLD_S``, so no copier wakes for an idle partition.
Partitions that brought nothing for ``QUIET_S`` are polled apart from the others, with a wait
of ``QUIET_WAIT_MS``: thousands of quiet partitions cost one request per broker every few
seconds (records still come back the moment they arrive).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping

from syncer.broker_watch import BrokerWatch
from syncer.clusters import TP, Cluster, FetchedPartition
from syncer.config import CopierConfig
from syncer.deadlines import Deadlines
from syncer.errors import SyncerError, TransientClusterError
from syncer.fetch_session import FetchSession
from syncer.fetch_wants import RequestKind, Want, hold_always
from syncer.loops import RequestLoop
from syncer.ratelimit import ByteRate, request_bytes, wait_s
from syncer.sources import MAX_BUSY
from syncer.wire import FetchOutcome

log = logging.getLogger(__name__)

# fetch requests in flight on a broker's data connection: the second is queued at the broker
# while the first is answered, so a long link does not sit idle for a round trip between them
PIPELINE = 2
DATA_CONNECTION = 1
# one long poll in flight on each; with three, 5 MB/s over 8 partitions showed p99 20 ms
# (partitions catching up waited for a free one), with eight 9 ms
POLL_CONNECTIONS = (0, 2, 3, 4, 5, 6, 7, 8)
QUIET_CONNECTION = 9  # the quiet partitions' one poll, in a fetch session (``fetch_session``)
# an idle partition's copier hears from its poll at least this often (or the chunk timeout)
HOLD_S = 30.0
QUIET_S = 10.0  # a partition that brought no records for this long is quiet
QUIET_WAIT_MS = 5_000  # the wait of a poll for quiet partitions only
# a fetch waits in the queue behind at most MAX_BUSY requests of its partition, each cut off
# after the chunk timeout: one that waits longer fails, not left waiting for a lost slot
QUEUED_REQUESTS = MAX_BUSY


class Fetcher(RequestLoop):
    """Owns one background task; ``await fetch(tp, offset)`` from any number of copiers."""

    def __init__(
        self,
        cluster: Cluster,
        config: CopierConfig,
        observe: Callable[[float], None] = lambda seconds: None,
        topic_ids: Mapping[str, uuid.UUID] | None = None,
        caps: tuple[ByteRate, ...] = (),
    ) -> None:
        super().__init__(f"fetcher-{cluster.name}")
        # bandwidth caps (this remote's, the process's): while one is overdrawn, no request
        # goes out; each answer's bytes are paid when it arrives
        self.caps = caps
        self._capped: asyncio.TimerHandle | None = None
        self.cluster = cluster
        # the ids remembered for this remote's topics (the owner adds to it): a topic with
        # one is fetched by id, so a topic recreated under its name answers UNKNOWN_TOPIC_ID
        # instead of the new log's records
        self.topic_ids: Mapping[str, uuid.UUID] = topic_ids if topic_ids is not None else {}
        self._by_id = topic_ids is not None
        self.observe = observe  # each fetch request's seconds, send to answer
        self.config = config
        # several chunks of one partition may wait; each request carries one per partition,
        # the lowest offset first (the one the partition's writes wait for)
        self._wants: dict[TP, list[Want]] = {}
        self._order = itertools.count()
        self._data_busy: dict[int, int] = defaultdict(int)  # node → data requests in flight
        self._polling: dict[int, set[int]] = defaultdict(set)  # node → poll connections busy
        self._sessions: dict[int, FetchSession] = defaultdict(FetchSession)  # node → quiet's
        self._quiet: set[int] = set()  # nodes whose quiet poll is out
        self._peeked: dict[TP, int] = {}  # the offset each partition last looked at unpolled
        self._hold_s = min(HOLD_S, config.chunk_timeout_ms / 1000)
        # a fetch's wait to be sent is bounded: one queued this long fails
        self._deadlines = Deadlines(QUEUED_REQUESTS * config.chunk_timeout_ms / 1000, self._expire)
        # within the chunk timeout with room to spare, never shorter than a poll's wait
        self._quiet_wait_ms = max(
            config.fetch_max_wait_ms, min(QUIET_WAIT_MS, config.chunk_timeout_ms // 3)
        )
        self._brought: dict[TP, float] = {}  # when each partition's fetch last held records
        self.fetches = 0
        self.pending_bytes = 0  # asked for and not answered yet: how loaded this lane is
        self.pending: dict[TP, int] = {}  # fetches waiting or in flight, per partition
        # brokers whose last request failed: their partitions wait, the others go on
        self.brokers = BrokerWatch(cluster, self._wakeup.set)
        # fetches of a topic whose leaders are being refreshed wait for the new leader
        cluster.leaders.listen(self._wakeup.set)

    def __repr__(self) -> str:
        flying = sum(self._data_busy.values()) + sum(map(len, self._polling.values()))
        return f"<Fetcher {self.cluster.name} [wants: {len(self._wants)}, in flight: {flying}]>"

    def _cancel_waiting(self) -> None:
        self.brokers.close()
        if self._capped is not None:
            self._capped.cancel()
        self._deadlines.close()
        for queue in self._wants.values():
            for want in queue:
                want.future.cancel()
        self._wants.clear()

    def _fail_waiting(self, error: Exception) -> None:
        for queue in self._wants.values():
            for want in queue:
                if not want.future.done():
                    want.future.set_exception(error)
        self._wants.clear()

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
        """Records of ``tp`` from ``offset`` (raw), about ``max_bytes`` of them (whole
        batches, at least one). ``poll``: the partition is caught up, so wait for records to
        arrive, polling again while ``hold()`` says so, up to ``hold_s`` (None: ``HOLD_S``
        or the chunk timeout); otherwise answer at once."""
        if self.dead is not None:
            raise self.dead
        loop = asyncio.get_running_loop()
        future: asyncio.Future[FetchedPartition] = loop.create_future()
        full = self.config.partition_fetch_max_bytes
        limit = min(max_bytes or full, full)
        hold_s = self._hold_s if hold_s is None else hold_s
        want = Want(
            offset, next(self._order), max(1, limit), poll, future, loop.time(), hold, hold_s
        )
        self._queue(tp, want)
        self.pending_bytes += limit
        self.pending[tp] = self.pending.get(tp, 0) + 1
        try:
            return await future
        finally:
            want.dequeued()  # answered, failed, or given up by its caller
            self.pending_bytes -= limit
            self.pending[tp] -= 1
            if not self.pending[tp]:
                del self.pending[tp]

    def _queue(self, tp: TP, want: Want) -> None:
        """Queue ``want`` for the next request of its kind. Only the request is timed once it
        goes out; here the wait for it to go out is bounded (a dead loop fails it at once)."""
        heapq.heappush(self._wants.setdefault(tp, []), want)
        want.expiry = self._deadlines.add((tp, want))
        self._wakeup.set()

    def _expire(self, queued: tuple[TP, Want]) -> None:
        tp, want = queued
        if not want.future.done():
            want.future.set_exception(
                TimeoutError(f"{tp.topic}[{tp.partition}]: fetch at {want.offset} never sent")
            )
            self._wakeup.set()  # the loop drops the failed want from the queue

    def release(self, tp: TP) -> None:
        """Hand ``tp``'s held polls back now (its copier is stopping)."""
        for want in self._wants.get(tp, ()):
            if want.empty is not None and not want.future.done():
                want.future.set_result(want.empty)

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._dispatch():
                pass  # a partition's next want may go out in the pipeline's next request

    def _dispatch(self) -> bool:
        """One request per broker and kind (data, poll, quiet poll) with room for it, the
        lowest offset of every partition that waits; whether any went out."""
        if self._over_cap():
            return False
        by_node: dict[tuple[int, RequestKind], dict[TP, Want]] = defaultdict(dict)
        quiet_since = asyncio.get_running_loop().time() - QUIET_S
        now = time.monotonic()
        for tp, queue in list(self._wants.items()):
            while queue and queue[0].future.done():
                heapq.heappop(queue)
            if not queue:
                del self._wants[tp]
                continue
            node = self._leader(tp)
            if node is None:
                continue
            if self.brokers.holds(node, now):  # it failed a moment ago: after the back-off
                continue
            kind = self._kind(tp, queue[0], node, quiet_since)
            if self._has_room(node, kind, by_node):
                by_node[(node, kind)][tp] = heapq.heappop(queue).dequeued()
        for (node, kind), wants in by_node.items():
            if kind is RequestKind.DATA:
                # a broker fills an answer in the request's order until its max_bytes is
                # spent: the partitions that brought records longest ago go first
                wants = dict(sorted(wants.items(), key=lambda w: self._brought.get(w[0], 0.0)))
                connection = DATA_CONNECTION
                self._data_busy[node] += 1
                wait_ms = 0
            elif kind is RequestKind.QUIET:
                connection = QUIET_CONNECTION
                self._quiet.add(node)
                wait_ms = self._quiet_wait_ms
            else:
                connection = min(set(POLL_CONNECTIONS) - self._polling[node])
                self._polling[node].add(connection)
                wait_ms = self.config.fetch_max_wait_ms
            self._spawn(self._fetch(node, connection, wants, wait_ms))
        return bool(by_node)

    def _kind(self, tp: TP, want: Want, node: int, quiet_since: float) -> RequestKind:
        poll = want.poll
        polls_full = len(self._polling[node]) >= len(POLL_CONNECTIONS)
        # every poll connection is busy and this one would wait for one: look once
        # without waiting (records may have come since this partition's last answer)
        fresh = want.empty is None and self._peeked.get(tp) != want.offset
        if poll and polls_full and fresh and self._data_busy[node] < PIPELINE:
            self._peeked[tp] = want.offset
            poll = False
        if not poll:
            return RequestKind.DATA
        quiet = want.empty is not None and self._brought.get(tp, 0.0) < quiet_since
        # one quiet poll per broker, in its session: while it is out, the next waits for it
        # (polled in the meantime, they kept thousands of quiet partitions out of it)
        return RequestKind.QUIET if quiet else RequestKind.POLL

    def _over_cap(self) -> bool:
        """Is a bandwidth cap overdrawn? Then the loop wakes again when it is paid back."""
        if self._capped is not None:
            return True  # a wake-up is set for when it is
        hold = wait_s(self.caps, time.monotonic())
        if hold > 0:

            def resume() -> None:
                self._capped = None
                self._wakeup.set()

            self._capped = asyncio.get_running_loop().call_later(hold, resume)
        return hold > 0

    def _leader(self, tp: TP) -> int | None:
        """Where ``tp``'s next fetch goes; None while its leader is being refreshed (it waits
        for the new one) or if no leader is known (its fetches fail)."""
        if self.cluster.leaders.refreshing(tp.topic):
            return None
        try:
            return self.cluster.fetch_node(tp)  # with a rack, maybe a follower near us
        except SyncerError as exc:
            for want in self._wants.pop(tp):
                if not want.future.done():
                    want.future.set_exception(exc)
            return None

    def _has_room(
        self, node: int, kind: RequestKind, going: dict[tuple[int, RequestKind], dict[TP, Want]]
    ) -> bool:
        if kind is RequestKind.DATA:
            return self._data_busy[node] < PIPELINE
        if kind is RequestKind.QUIET:
            return node not in self._quiet  # one at a time: the session's
        return (node, kind) in going or len(self._polling[node]) < len(POLL_CONNECTIONS)

    async def _fetch(self, node: int, connection: int, wants: dict[TP, Want], wait_ms: int) -> None:
        # the chunk timeout runs from here, when the request goes out, not from when a chunk
        # joined the queue: on a thin link a chunk may wait behind another
        sent = time.monotonic()
        seen = self.brokers.sent(node, sent, wants)
        try:
            offsets = {tp: (want.offset, want.limit) for tp, want in wants.items()}
            # not wait_for: on 3.11 it runs the request in a task of its own (a loop turn
            # before it is written, two after its answer)
            async with asyncio.timeout(self.config.chunk_timeout_ms / 1000):
                result = await self._ask(node, connection, offsets, wait_ms)
            self.fetches += 1
            self.brokers.answered(node)
            self.observe(time.monotonic() - sent)
            size = sum(len(p.records) for p in result.values())
            for cap in self.caps:
                cap.take(size, time.monotonic())
            log.debug("fetch from %s node %d: %d bytes", self.cluster.name, node, size)
            now = asyncio.get_running_loop().time()
            for tp, want in wants.items():
                got = result.get(tp)
                if got is not None and got.records:
                    self._brought[tp] = now
                if want.future.done():
                    continue
                if got is None:
                    want.future.set_exception(TransientClusterError(f"{tp} missing from fetch"))
                elif got.outcome is FetchOutcome.TOPIC_GONE:
                    want.future.set_exception(TransientClusterError(self._unknown_id(tp)))
                elif got.outcome is FetchOutcome.REROUTED:  # a read replica named, or failed
                    self._queue(tp, want)
                elif self._holds(want, got, now):
                    want.empty = got
                    self._queue(tp, want)
                else:
                    want.future.set_result(got)
        except Exception as exc:
            error = self.brokers.failed(node, wants, exc, sent, seen)
            for want in wants.values():
                if not want.future.done():
                    want.future.set_exception(error)
        finally:
            self.brokers.done(node, wants)
            self._free(node, connection)

    def _free(self, node: int, connection: int) -> None:
        """A request on ``connection`` of ``node`` is done: the next may go out."""
        if connection == QUIET_CONNECTION:
            self._quiet.discard(node)
        elif connection == DATA_CONNECTION:
            self._data_busy[node] -= 1
        else:
            self._polling[node].discard(connection)
        self._wakeup.set()

    async def _ask(
        self, node: int, connection: int, offsets: dict[TP, tuple[int, int]], wait_ms: int
    ) -> dict[TP, FetchedPartition]:
        """One fetch request: by topic id where the remote reports ids, else by name."""
        sizes = {
            "max_wait_ms": wait_ms,
            "max_bytes": request_bytes(
                self.config.fetch_max_bytes, self.config.partition_fetch_max_bytes, self.caps
            ),
            "partition_max_bytes": self.config.partition_fetch_max_bytes,
            "connection": connection,
        }
        if self._by_id and self.topic_ids:
            try:
                session = self._sessions[node] if connection == QUIET_CONNECTION else None
                return await self.cluster.fetch_by_id(
                    node, offsets, self.topic_ids, nearest=True, session=session, **sizes
                )
            except NotImplementedError:  # the broker has no Fetch v13 (Kafka before 3.1)
                log.warning(
                    "remote %s cannot fetch by topic id (Kafka 3.1+ can): a topic recreated"
                    " there is told only by the topic refresh and the record comparison",
                    self.cluster.name,
                )
                self._by_id = False
        return await self.cluster.fetch(node, offsets, nearest=True, **sizes)

    def _unknown_id(self, tp: TP) -> str:
        topic_id = self.topic_ids.get(tp.topic)
        if topic_id is None:
            return f"{tp.topic}[{tp.partition}]: remote {self.cluster.name}: topic id not known"
        return (
            f"{tp.topic}[{tp.partition}]: remote {self.cluster.name} no longer holds topic id"
            f" {topic_id} (the topic was deleted, or recreated under its name)"
        )

    def _holds(self, want: Want, got: FetchedPartition, now: float) -> bool:
        """Keep an empty answer to a poll from its copier and poll again?"""
        nothing_new = (
            got.outcome is FetchOutcome.OK and not got.records and got.stable_end == want.offset
        )
        return want.poll and nothing_new and now - want.since < want.hold_s and want.hold()
