"""Raw fetches from one remote, coalesced: every partition that wants data joins the next
fetch request to its leader. Two kinds, on separate connections (``fetch_connections``):
data (offsets known to hold records, asked with no wait) and polls (partitions caught up
with the remote, long-polled for ``fetch_max_wait_ms``, one request per connection on a
few: a partition that catches up while a poll is out gets a poll of its own at once).

An empty poll answer (nothing new, no error) is not handed back: the partition is polled
again, for up to ``HOLD_S``, so no copier wakes for an idle partition. Partitions that
brought nothing for ``QUIET_S`` are polled apart, with a wait of ``QUIET_WAIT_MS``, in a
fetch session where they stay between polls (``quiet_polls``): thousands of quiet
partitions cost one request per broker every few seconds and nothing per partition."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from functools import partial

from syncer.broker_watch import BrokerWatch
from syncer.cap_gate import CapGate
from syncer.clusters import TP, Cluster, FetchedPartition
from syncer.config import CopierConfig
from syncer.deadlines import Deadlines
from syncer.errors import SyncerError, TransientClusterError
from syncer.fetch_connections import DATA_CONNECTION, QUIET_CONNECTION, FetchConnections
from syncer.fetch_requests import FetchRequests
from syncer.fetch_wants import (
    RequestKind,
    SentRequest,
    Take,
    Taken,
    Want,
    failed_answer,
    hold_always,
    holds,
    unknown_id,
)
from syncer.hop_trace import TRACE, fetch_answered
from syncer.loops import RequestLoop
from syncer.quiet_polls import QuietPolls
from syncer.ratelimit import ByteRate
from syncer.sources import MAX_BUSY
from syncer.wire import FetchOutcome

log = logging.getLogger(__name__)

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
        self._gate = CapGate(caps, self._wakeup.set)
        self.cluster = cluster
        # the ids remembered for this remote's topics (the owner adds to it): a topic with
        # one is fetched by id, so a topic recreated under its name answers UNKNOWN_TOPIC_ID
        # instead of the new log's records
        self._requests_of = FetchRequests(cluster, config, caps, topic_ids)
        self.topic_ids: Mapping[str, uuid.UUID] = self._requests_of.topic_ids
        self.observe = observe  # each fetch request's seconds, send to answer
        self.config = config
        # several chunks of one partition may wait; each request carries one per partition,
        # the lowest offset first (the one the partition's writes wait for)
        self._wants: dict[TP, list[Want]] = {}
        self._order = itertools.count()
        self.quiet = QuietPolls(self.topic_ids)  # each broker's quiet partitions, parked
        self.connections = FetchConnections(self.quiet.out)
        self._peeked: dict[TP, int] = {}  # the offset each partition last looked at unpolled
        self._hold_s = min(HOLD_S, config.chunk_timeout_ms / 1000)
        # a fetch's wait to be sent is bounded: one queued this long fails
        self._deadlines = Deadlines(QUEUED_REQUESTS * config.chunk_timeout_ms / 1000, self._expire)
        # within the chunk timeout with room to spare, never shorter than a poll's wait
        self._quiet_wait_ms = max(
            config.fetch_max_wait_ms, min(QUIET_WAIT_MS, config.chunk_timeout_ms // 3)
        )
        self._brought: dict[TP, float] = {}  # when each partition's fetch last held records
        # answers are being handed back: the polls the copiers' steps ask for meanwhile go
        # out right after (``_send_now``), not one by one ahead of the steps still to come
        self._handing = False
        # a bug met in a pass or writing a taken poll's next (``_died_of``): the task dies of
        # it (at its next wake-up if met outside it), every fetch waiting is failed with why,
        # and nothing more is sent
        self._bug: Exception | None = None
        self.fetches = 0
        self.pending_bytes = 0  # asked for and not answered yet: how loaded this lane is
        self.pending: dict[TP, int] = {}  # fetches waiting or in flight, per partition
        # brokers whose last request failed: their partitions wait, the others go on
        self.brokers = BrokerWatch(cluster, self._wakeup.set)
        cluster.leaders.listen(self._rerouted)  # the fetches waiting for new leaders go

    def __repr__(self) -> str:
        flying = self.connections.in_flight()
        return f"<Fetcher {self.cluster.name} [wants: {len(self._wants)}, in flight: {flying}]>"

    def _cancel_waiting(self) -> None:
        for request in list(self._answering):
            self._given_up(request)
        self.brokers.close()
        self._gate.close()
        self._deadlines.close()
        for want in self._waiting():
            want.future.cancel()

    def _fail_waiting(self, error: Exception) -> None:
        for want in self._waiting():
            if not want.future.done():
                want.future.set_exception(error)

    def _waiting(self) -> list[Want]:
        """Every fetch queued or parked, taken from the queue."""
        queued, self._wants = [w for queue in self._wants.values() for w in queue], {}
        return queued + self.quiet.everything()

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
    ) -> asyncio.Future[FetchedPartition]:
        """Records of ``tp`` from ``offset`` (raw), about ``max_bytes`` of them (whole
        batches, at least one). ``poll``: the partition is caught up, so wait for records to
        arrive, polling again while ``hold()`` says so, up to ``hold_s`` (None: ``HOLD_S`` or
        the chunk timeout); else answer at once. ``answered()``: called as it is answered;
        False: it took the answer then and woke no task (no loop pass is made for it).
        ``take(answer)``: a poll's answer that brought records is offered to it first; an
        offset back says it was taken (written) and the same fetch polls on from there, its
        future still unset (no new fetch per answer: ``ChunkScheduler._take_tail``).
        Queued before this returns, the first poll of a loop turn sent too (``_idle``).
        Await the future for the answer; cancel it to give the fetch up."""
        future: asyncio.Future[FetchedPartition] = asyncio.get_running_loop().create_future()
        if self.dead is not None:
            future.set_exception(self.dead)
            return future
        full = self.config.partition_fetch_max_bytes
        limit = max(1, min(max_bytes or full, full))
        hold_s, since = self._hold_s if hold_s is None else hold_s, future.get_loop().time()
        want = Want(offset, next(self._order), limit, poll, future, since, hold, hold_s)
        want.answered, want.take = answered, take
        at_once = poll and self._idle()
        self._queue(tp, want)
        self.pending_bytes += limit
        self.pending[tp] = self.pending.get(tp, 0) + 1
        future.add_done_callback(lambda _: self._done(tp, want))
        if at_once:
            self._send_now()
        return future

    def _idle(self) -> bool:
        """Nothing to gather a poll with: the loop runs, has no pass to make, no other fetch
        waits and no answer is being handed back. Then a partition's poll is written at
        once, in its copier's turn; else in the loop's pass, with the others. A caught-up
        partition's next poll goes behind its copier's write of what the last one brought
        (written first, the poll put its own syscall ahead of every record's produce): asked
        by the copier's step as the answer is handed back, it goes right after the steps of
        that answer (``_send_now``); asked in the copier's task, in the pass the freed poll
        connection wakes, right after the task's step."""
        running = self._task is not None and not self._task.done()
        return running and not self._wakeup.is_set() and not self._wants and not self._handing

    def _send_now(self) -> None:
        """The loop's pass, made now (a pass more only while fetches wait: with none queued,
        it would find the brokers' quiet polls it just sent, or held ones still held); none
        once a bug was met (the loop dies of it)."""
        if self._bug is not None:
            return
        try:
            while self._dispatch() and self._wants:
                pass
        except Exception:  # a bug: the loop's pass dies of it (``_dispatch`` failed what
            self._wakeup.set()  # it took from the queue and noted it), or meets it again

    def _done(self, tp: TP, want: Want) -> None:
        """``want`` was answered, failed, or given up by its caller (its future cancelled)."""
        want.dequeued()
        self.quiet.unpark(tp, want)
        self.pending_bytes -= want.limit
        self.pending[tp] -= 1
        if not self.pending[tp]:
            del self.pending[tp]

    def _queue(self, tp: TP, want: Want) -> None:
        """Queue ``want`` for the next request of its kind. Only the request is timed once it
        goes out; here the wait for it to go out is bounded. A loop dead of a bug, or about
        to die of one met outside its task, fails it at once: an answer to a request still
        in flight (a held poll, a taken one's next) polls on through no dead fetcher."""
        if self._bug is not None or self.dead is not None:
            if not want.future.done():
                want.future.set_exception(self._why_dead())
            return
        heapq.heappush(self._wants.setdefault(tp, []), want)
        want.expiry = self._deadlines.add((tp, want))
        if not self._handing:  # else the pass that follows the handing back sends it
            self._wakeup.set()

    def _rerouted(self) -> None:
        """Leaders were refreshed: the fetches that wait go, parked ones that moved too."""
        for tp, want in self.quiet.rerouted(self.cluster.fetch_node):
            self._queue(tp, want)
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
        parked = self.quiet.held(tp)
        for want in [*self._wants.get(tp, ()), *([parked] if parked else [])]:
            if want.empty is not None and not want.future.done():
                want.future.set_result(want.empty)

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if self._bug is not None:
                raise self._bug
            while self._dispatch():
                pass  # a partition's next want may go out in the pipeline's next request

    def _dispatch(self) -> bool:
        """One request per broker and kind (data, poll, quiet poll) with room for it, the
        lowest offset of every partition that waits; whether any went out. A bug met in the
        pass fails every fetch it took from the queue (no one else would fail those not sent
        yet: they are neither queued nor in flight), and the loop dies of it (``_died_of``)."""
        if self._gate.closed():
            return False
        by_node: dict[tuple[int, RequestKind], dict[TP, Want]] = defaultdict(dict)
        try:
            return self._gathered(by_node)
        except Exception as exc:
            self._died_of(exc, [want for wants in by_node.values() for want in wants.values()])
            raise

    def _gathered(self, by_node: dict[tuple[int, RequestKind], dict[TP, Want]]) -> bool:
        """``_dispatch``'s pass, the fetches it takes from the queue gathered in
        ``by_node``."""
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
            if self.connections.has_room(node, kind, (node, kind) in by_node):
                by_node[(node, kind)][tp] = heapq.heappop(queue).dequeued()
                if not queue:  # gone now: ``_send_now`` makes no pass more to find it empty
                    del self._wants[tp]
        for node in list(self.quiet.due()):  # the parked ones are polled again
            if not self.brokers.holds(node, now):
                by_node.setdefault((node, RequestKind.QUIET), {})
        for (node, kind), wants in by_node.items():
            wait_ms = self._wait_ms(kind)
            for part in self._requests_of_kind(node, kind, wants):
                self._send(node, self.connections.take(node, kind), part, wait_ms)
        return bool(by_node)

    def _wait_ms(self, kind: RequestKind) -> int:
        if kind is RequestKind.DATA:
            return 0
        if kind is RequestKind.QUIET:
            return self._quiet_wait_ms
        return self.config.fetch_max_wait_ms

    def _requests_of_kind(
        self, node: int, kind: RequestKind, wants: dict[TP, Want]
    ) -> list[dict[TP, Want]]:
        """The requests ``wants`` go in: polls spread over the free poll connections (a
        partition polled alone is answered alone, as its records come, and its copier's step
        waits for no other's), the rest in one. A broker fills an answer in the request's
        order until its max_bytes is spent: in a data request, the partitions that brought
        records longest ago go first."""
        if kind is RequestKind.DATA:
            return [dict(sorted(wants.items(), key=lambda w: self._brought.get(w[0], 0.0)))]
        if kind is not RequestKind.POLL or len(wants) < 2:
            return [wants]
        parts: list[dict[TP, Want]] = [{} for _ in range(self.connections.free_polls(node))]
        parts = parts[: len(wants)] or [{}]
        for i, (tp, want) in enumerate(wants.items()):
            parts[i % len(parts)][tp] = want
        return parts

    def _kind(self, tp: TP, want: Want, node: int, quiet_since: float) -> RequestKind:
        poll = want.poll
        polls_full = self.connections.polls_full(node)
        # every poll connection is busy and this one would wait for one: look once
        # without waiting (records may have come since this partition's last answer)
        fresh = want.empty is None and self._peeked.get(tp) != want.offset
        if poll and polls_full and fresh and self.connections.data_room(node):
            self._peeked[tp] = want.offset
            poll = False
        if not poll:
            return RequestKind.DATA
        quiet = want.empty is not None and self._brought.get(tp, 0.0) < quiet_since
        # one quiet poll per broker, in its session (by topic id), one fetch of a partition
        # in it at a time: while it is out, the next waits for it (polled in the meantime,
        # they kept thousands of quiet partitions out of it)
        quiet = quiet and self._requests_of.by_id and bool(self.topic_ids) and tp not in self.quiet
        return RequestKind.QUIET if quiet else RequestKind.POLL

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

    def _send(self, node: int, connection: int, wants: dict[TP, Want], wait_ms: int) -> None:
        """One request of ``wants``, written now where it can be (``FetchRequests.ask_then``):
        its answer concludes it as it is read, with no task (a timer keeps the chunk
        timeout); else a task sends it and awaits its answer. A quiet poll's join the
        session of ``node`` and stay parked there while its answers leave them out: only what
        an answer names is looked at, so an idle partition costs nothing per poll
        (``quiet_polls``)."""
        quiet = connection == QUIET_CONNECTION
        out = self.quiet.parked[node] if quiet else wants  # the fetches this request is for
        offsets = self.quiet.park(node, wants) if quiet else {t: w.ask for t, w in wants.items()}
        # the chunk timeout runs from here, when the request goes out, not from when a chunk
        # joined the queue: on a thin link a chunk may wait behind another
        sent = time.monotonic()
        seen = self.brokers.sent(node, sent, out)
        request = SentRequest(node, connection, out, offsets, wait_ms, sent, seen)
        answer: Awaitable[dict[TP, FetchedPartition]] | None = None
        if not quiet:
            then = partial(self._conclude, request, wants)
            try:
                request.give_up = self._requests_of.ask_then(
                    node, connection, offsets, wait_ms, then
                )
            except TransientClusterError as exc:  # its connection broke as it was written
                answer = failed_answer(exc)
            if request.give_up is not None:  # written: its answer concludes it, no task
                timeout_s = self.config.chunk_timeout_ms / 1000
                loop = asyncio.get_running_loop()
                request.timer = loop.call_later(timeout_s, self._timed_out, request, wants)
                self._answering.add(request)
                return
        self._spawn(self._fetch(request, wants, answer))

    def _timed_out(self, request: SentRequest, wants: dict[TP, Want]) -> None:
        """A request written at once went unanswered for the chunk timeout."""
        if request.give_up is not None:
            request.give_up()
        self._conclude(request, wants, TimeoutError())

    def _given_up(self, request: SentRequest) -> None:
        """The fetcher stops with ``request`` out: its fetches stay as they are."""
        if not self._first_outcome(request):
            return
        if request.give_up is not None:
            request.give_up()
        self.brokers.done(request.node, request.out)
        self._free(request.node, request.connection)

    async def _fetch(
        self,
        request: SentRequest,
        wants: dict[TP, Want],
        answer: Awaitable[dict[TP, FetchedPartition]] | None,
    ) -> None:
        """Send ``request`` and await its answer (``answer``: the failure of one that broke
        as it was written), within the chunk timeout, and hand it back, or fail its
        fetches."""
        outcome: dict[TP, FetchedPartition] | Exception
        try:
            outcome = await self._request(request, answer)
        except Exception as exc:
            outcome = exc
        except BaseException:  # cancelled (the fetcher stops)
            self._given_up(request)
            raise
        finally:
            if isinstance(answer, Coroutine):
                answer.close()  # never awaited if the task was cancelled before it began
        self._conclude(request, wants, outcome)

    def _conclude(
        self,
        request: SentRequest,
        wants: dict[TP, Want],
        outcome: dict[TP, FetchedPartition] | Exception,
    ) -> None:
        """``request``'s answer handed back, or its fetches failed; once, whichever comes
        first: its answer as it arrives (in the read callback), its chunk timeout, or its
        task."""
        if not self._first_outcome(request):
            return
        node, connection, out = request.node, request.connection, request.out
        quiet = connection == QUIET_CONNECTION
        done = False
        try:
            if isinstance(outcome, Exception):
                raise outcome
            if TRACE is not None:
                fetch_answered(TRACE, self.cluster._client, request, outcome, DATA_CONNECTION)
            # free before the answers are handed back: a caught-up partition's copier writes
            # what its poll brought as it is handed back and asks its next poll, which goes
            # out at once on a free connection (held, it waited for a pass and shared one
            # request with the other partitions re-armed meanwhile: 2.6 partitions a poll
            # against 1.2, each answer's partitions stepped one after another)
            done = True
            self.connections.free(node, connection)
            self._handing, answered_at = True, time.monotonic()
            try:
                woke = self._answered(request, out, outcome)
            finally:
                self._handing = False
                # counted once the copiers' steps wrote what it brought (counted first, it
                # stood between a caught-up partition's answer and its write), before the
                # pass below sends the polls those steps asked for
                self.brokers.done(node, out)
                self._counted(request, outcome, answered_at)
            self._send_now()  # the polls the copiers' steps asked for, behind their writes
            # and the loop's pass after the copiers this woke (their polls go behind their
            # steps' writes: asked while it is due, a poll waits for it), and for what waits
            # still; with none of either, no pass (a caught-up partition's step took its
            # answer and its poll went out: a pass of the loop's task per answer for nothing)
            if woke or self._wants:
                self._wakeup.set()
        except Exception as exc:
            error = self.brokers.failed(node, out, exc, request.sent, request.seen)
            for want in self.quiet.fail(node) if quiet else wants.values():
                if not want.future.done():
                    want.future.set_exception(error)
        finally:
            if not done:
                self.brokers.done(node, out)
                self._free(node, connection)

    def _answered(
        self, request: SentRequest, wants: Mapping[TP, Want], result: dict[TP, FetchedPartition]
    ) -> bool:
        """Each fetch's answer to ``request`` handed back, or the fetch held: queued again,
        or left parked in its session (a quiet poll: ``wants`` are the parked ones, and only
        the partitions the answer names changed). Whether a caller's task was woken: by a
        failure, a hold that ran out, or an answer whose ``answered`` did not return False
        (False: the caller took the answer at once, in this turn, and its task sleeps on)."""
        woke = False
        quiet = request.connection == QUIET_CONNECTION
        # a request of one partition: a poll whose answer is taken polls on at once, there
        alone_at = None if quiet or len(wants) != 1 else request.node
        now = asyncio.get_running_loop().time()
        answers: list[tuple[TP, Want | None, FetchedPartition | None]]
        if quiet:
            answers = [(tp, wants.get(tp), got) for tp, got in result.items()]
        else:
            answers = [(tp, want, result.get(tp)) for tp, want in wants.items()]
        for tp, want, got in answers:
            if got is not None and got.records:
                self._brought[tp] = now
            if want is None or want.future.done():
                continue  # a quiet one that left while the poll was out, or given up
            if got is not None and holds(want, got, now):
                want.empty = got
                if not quiet:  # a parked one stays in its session
                    self._queue(tp, want)
                continue
            self.quiet.unpark(tp, want)
            if got is None:
                want.future.set_exception(TransientClusterError(f"{tp} missing from fetch"))
                woke = True
            elif got.outcome is FetchOutcome.TOPIC_GONE:
                gone = unknown_id(self.cluster.name, self.topic_ids, tp)
                want.future.set_exception(TransientClusterError(gone))
                woke = True
            elif got.outcome is FetchOutcome.REROUTED:  # a read replica named, or failed
                self._queue(tp, want)
            elif want.take is not None and got.records and (taken := want.take(got)) is not None:
                self._taken(tp, want, taken, now, alone_at)
            else:
                want.future.set_result(got)
                # the caller's own waiter wakes in the same turn as it, or takes it now
                woke = want.answered() is not False or woke
        for want in self.quiet.overdue(now) if quiet else ():
            if not want.future.done() and want.empty is not None:
                want.future.set_result(want.empty)  # its hold ran out
                woke = True
        return woke

    def _taken(self, tp: TP, want: Want, taken: Taken, now: float, node: int | None) -> None:
        """``want``'s answer was taken (written in this turn): it polls again from where
        that ended, before the taker's bookkeeping (``taken``'s second part): at once where
        it can (``_poll_on``; ``node``: the answer's request was this partition's alone),
        else queued for the pass."""
        (want.offset, settle), want.empty, want.since = taken, None, now
        try:
            if node is None or not self._poll_on(tp, want, node):
                self._queue(tp, want)
        except Exception as exc:  # a bug: this fetch fails with it, and the loop dies of it
            self._died_of(exc, [want])
        finally:
            settle()

    def _died_of(self, exc: Exception, wants: list[Want]) -> None:
        """A bug met with ``wants`` out of the queue (in a pass, or writing a taken poll's
        next): they fail with it, and the loop's task dies of it (met in its own pass, now;
        met outside it, at its next wake-up), failing every fetch still waiting; what is
        queued meanwhile fails at once (``_queue``)."""
        self._fail_all((want.future for want in wants), exc)
        self._bug = exc
        self._wakeup.set()

    def _why_dead(self) -> TransientClusterError:
        """What a fetch of this dead loop (or of one about to die of a bug met outside its
        task) fails with."""
        if self.dead is not None:
            return self.dead
        assert self._bug is not None, "the loop runs"
        return self._stopped_by(self._bug)

    def _poll_on(self, tp: TP, want: Want, node: int) -> bool:
        """A caught-up partition's poll, its answer just taken (written), polled on now, in
        a request of its own on the poll connection that answer freed, with no pass: the
        remote's next records, which mostly come within a millisecond of the last (the
        producer's next request), wait for a poll only while none is out. The floor of
        ``make bench-steady`` with 250 µs between its writes and its next poll had a hop
        0.26 ms longer, p50 0.58 → 0.84 ms (``docs/benchmarks.md``). Whether it went; False
        where the pass must decide (a cap to obey, any fetch queued, the leader moved or
        being refreshed, a broker backing off, no poll connection free): it is queued as
        usual. With fetches queued (every poll connection was busy), the pass puts them in
        one request with it on the connection its answer freed; sent alone, the partitions
        that bring records kept the connections to themselves and the others waited."""
        if self._gate.limited or self._wants or self._bug is not None or self.dead is not None:
            return False  # the pass decides, or the loop is dead (``_queue`` fails it)
        if self.cluster.leaders.refreshing(tp.topic) or self.brokers.holds(node, time.monotonic()):
            return False
        try:
            if self.cluster.fetch_node(tp) != node:
                return False
        except SyncerError:
            return False  # no leader known: the pass fails the fetch with why
        if not self.connections.has_room(node, RequestKind.POLL, False):
            return False
        connection = self.connections.take(node, RequestKind.POLL)
        self._send(node, connection, {tp: want}, self._wait_ms(RequestKind.POLL))
        return True

    async def _request(
        self, request: SentRequest, answer: Awaitable[dict[TP, FetchedPartition]] | None
    ) -> dict[TP, FetchedPartition]:
        """One request's answer (``answer``, or asked now), cut off after the chunk timeout
        (not by wait_for: on 3.11 its task costs a loop turn before the write, two after)."""
        node, connection = request.node, request.connection
        async with asyncio.timeout(self.config.chunk_timeout_ms / 1000):
            if answer is not None:
                return await answer
            session = self.quiet.sessions[node] if connection == QUIET_CONNECTION else None
            return await self._requests_of.ask(
                node, connection, request.offsets, request.wait_ms, session
            )

    def _counted(self, request: SentRequest, result: dict[TP, FetchedPartition], at: float) -> None:
        """An answer came at ``at``: counted, its broker known to answer, its bytes paid
        for."""
        node = request.node
        self.fetches += 1
        self.brokers.answered(node)
        self.observe(at - request.sent)
        size = sum(len(p.records) for p in result.values())
        self._gate.paid(size)
        log.debug("fetch from %s node %d: %d bytes", self.cluster.name, node, size)

    def _free(self, node: int, connection: int) -> None:
        """A request on ``connection`` of ``node`` is done: the next may go out."""
        self.connections.free(node, connection)
        self._wakeup.set()
