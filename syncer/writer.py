"""Raw produce requests to the local cluster. A batch goes out at once, in a request of its
own, while its connection has room for one more request; batches that find it full wait
and go together: one request per connection carries the next batch of every partition
waiting on it. Requests go out in order on one connection, so each partition's batches
reach the broker in offset order."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
import zlib
from collections import defaultdict, deque
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from syncer.clusters import TP, Cluster, ProduceResult
from syncer.errors import SyncerError, TransientClusterError
from syncer.hop_trace import TRACE
from syncer.loops import RequestLoop
from syncer.waits import RECORDER

log = logging.getLogger(__name__)

PRODUCE_TIMEOUT_MS = 30_000
# a broker reads a connection's next request only once it has answered the one before: with
# every partition's writes on one connection, a batch waited behind the others' produce
# requests (5 MB/s over 8 partitions: hop p99 ~25 ms on the produce side). Each partition
# writes on one of these, always the same (its batches reach the broker in offset order).
# Eight, as MirrorMaker 2 with 8 tasks has 8 producers: after a stall every partition's
# records come at once, one request per source batch, and a connection's requests are
# appended one after another (with 4, two partitions' bursts queued on each). 10 is the
# cluster's metadata connection, 1 its InitProducerId
WRITE_CONNECTIONS = (0, 11, 12, 13, 14, 15, 16, 17)


def write_connection(tp: TP) -> int:
    """The connection ``tp``'s writes go on, to whichever broker leads it."""
    spread = zlib.crc32(tp.topic.encode()) + tp.partition
    return WRITE_CONNECTIONS[spread % len(WRITE_CONNECTIONS)]


# a batch waiting for its request: its bytes, its result, and when it was submitted
Waiting = tuple[bytes | bytearray, asyncio.Future[ProduceResult], float]


@dataclass(eq=False, slots=True)
class Request:
    """One produce request: where it went, its batches, when, whether it waits for its
    connection to open (a task sends it), and the timeout of one written at once."""

    where: tuple[int, int]  # (node, connection)
    entries: dict[TP, Waiting]
    sent: float
    opening: bool
    timer: asyncio.Handle | None = None
    concluded: bool = False


class Writer(RequestLoop):
    """Owns one background task; ``submit(tp, batch)`` returns a future for the result.
    Given ``topic_ids`` (each local topic's id as first seen, added to in place), batches are
    written naming their topic by that id where the brokers can: a local topic recreated
    since then refuses them (UNKNOWN_TOPIC_ID) instead of taking them at its offset 0."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        max_in_flight: int,
        may_write: Callable[[], bool] = lambda: True,
        observe: Callable[[float], None] = lambda seconds: None,
        topic_ids: Mapping[str, uuid.UUID] | None = None,
    ) -> None:
        super().__init__(f"writer-{cluster.name}")
        self.cluster = cluster
        self.topic_ids = topic_ids
        self.observe = observe  # each produce request's seconds, send to answer
        self.may_write = may_write
        self.max_in_flight = max_in_flight
        self._queues: dict[TP, deque[Waiting]] = {}
        self._connection_of: dict[TP, int] = {}  # ``write_connection``, computed once
        self._in_flight: dict[tuple[int, int], int] = defaultdict(int)  # by (node, connection)
        # (node, connection) → requests sent by a task (waiting for it to open)
        self._opening: dict[tuple[int, int], int] = defaultdict(int)
        self.requests_sent = 0
        # counted for the catch-up benchmark only (``waits``: off unless asked for)
        self.waits = RECORDER.writer(self.name) if RECORDER is not None else None
        # batches of a topic whose leaders are being refreshed wait for the new leader
        cluster.leaders.listen(self._wakeup.set)

    def __repr__(self) -> str:
        queued = sum(len(q) for q in self._queues.values())
        in_flight = sum(self._in_flight.values())
        return f"<Writer {self.cluster.name} [queued: {queued}, in flight: {in_flight}]>"

    def _cancel_waiting(self) -> None:
        for request in list(self._answering):  # stopped: given up, their timeouts too
            self._conclude(request, None)
        for queue in self._queues.values():
            for _batch, future, _at in queue:
                future.cancel()
        self._queues.clear()

    def _fail_waiting(self, error: Exception) -> None:
        for queue in self._queues.values():
            for _batch, future, _at in queue:
                if not future.done():
                    future.set_exception(error)
        self._queues.clear()

    def submit(self, tp: TP, batch: bytes | bytearray) -> asyncio.Future[ProduceResult]:
        """``batch`` written for ``tp`` now if it can go (``_room_alone``), else queued for
        the writer's next pass; the future of its result."""
        future: asyncio.Future[ProduceResult] = asyncio.get_running_loop().create_future()
        if self.dead is not None:
            future.set_exception(self.dead)
            return future
        waiting = (batch, future, time.monotonic())
        where = self._room_alone(tp) if tp not in self._queues else None
        if where is not None:  # written now; what ``_start`` raises is the caller's (a bug)
            self._in_flight[where] += 1
            self._start(*where, {tp: waiting})
            return future
        self._queues.setdefault(tp, deque()).append(waiting)
        self._wakeup.set()
        return future

    def _room_alone(self, tp: TP) -> tuple[int, int] | None:
        """Where ``tp``'s batch, with none of its queued before it, is written at once, in a
        request of its own, in the caller's turn of the loop: (node, connection), if that
        connection has room for one more request (as Kafka's producer with linger.ms=0 sends
        a batch at once while it has requests to spare): a caught-up partition's records go
        out as they arrive, not after the other callbacks of the turn. Batches that find
        their connection full wait for the pass, and go together in one request when an
        answer frees it. None: it is queued for the pass (which refuses it, waits for its
        leader, or fails it for want of one)."""
        try:
            running = self._task is not None and not self._task.done()
            node = self._current_leader(tp) if running and self.may_write() else None
        except Exception:  # no leader known (``SyncerError``: the pass fails the batch with
            return None  # it), or a bug (the loop's pass meets it again and dies of it)
        if node is None:
            return None
        where = (node, self._connection(tp))
        return where if self._in_flight[where] < self.max_in_flight else None

    def _current_leader(self, tp: TP) -> int | None:
        """The node leading ``tp``; None while its topic's leaders are being refreshed (its
        batches go once the refresh tells where to). Raises SyncerError if none is known."""
        if self.cluster.leaders.refreshing(tp.topic):
            return None
        return self.cluster.leader(tp)

    def _connection(self, tp: TP) -> int:
        """``write_connection(tp)``, computed once."""
        connection = self._connection_of.get(tp)
        if connection is None:
            connection = self._connection_of[tp] = write_connection(tp)
        return connection

    def forget(self, tp: TP) -> None:
        """Drop what ``tp`` still has queued (after an error, its copier starts over)."""
        for _batch, future, _at in self._queues.pop(tp, ()):
            future.cancel()

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            self._dispatch()
            await asyncio.sleep(0)

    def _dispatch(self) -> None:
        """Write one request per connection with room for one, carrying the next batch of
        every partition that waits for it. A bug met in the pass fails every batch it took
        from the queues (no one else would fail those not written yet: they are neither
        queued nor in flight), and the loop dies of it."""
        if not self.may_write():
            self._refuse_all()
            return
        by_request: dict[tuple[int, int], dict[TP, Waiting]] = defaultdict(dict)
        try:
            self._gathered(by_request)
        except Exception as exc:
            taken = [
                future for entries in by_request.values() for _b, future, _at in entries.values()
            ]
            self._fail_all(taken, exc)
            raise

    def _gathered(self, by_request: dict[tuple[int, int], dict[TP, Waiting]]) -> None:
        """``_dispatch``'s pass, the batches it takes from the queues gathered in
        ``by_request``."""
        for tp, queue in list(self._queues.items()):
            node = self._leader(tp, queue)
            if node is None:
                continue
            request = (node, self._connection(tp))
            if request not in by_request and self._in_flight[request] >= self.max_in_flight:
                continue
            by_request[request][tp] = queue.popleft()
            if not queue:
                del self._queues[tp]
        for (node, connection), entries in by_request.items():
            self._in_flight[(node, connection)] += 1
            self._start(node, connection, entries)
        if any(self._queues.values()) and by_request:
            self._wakeup.set()  # more batches wait behind the ones just sent

    def _leader(self, tp: TP, queue: deque[Waiting]) -> int | None:
        """Where ``tp``'s next batch goes; None if none waits (given up), its leader is being
        refreshed (it goes once the refresh tells where to), or no leader is known (its
        batches fail)."""
        while queue and queue[0][1].done():
            queue.popleft()
        if not queue:
            del self._queues[tp]
            return None
        try:
            return self._current_leader(tp)
        except SyncerError as exc:
            for _batch, future, _at in self._queues.pop(tp):
                if not future.done():
                    future.set_exception(exc)
            return None

    def _start(self, node: int, connection: int, entries: dict[TP, Waiting]) -> None:
        """Write the request now if ``connection`` to ``node`` is open, and no request on
        it still waits for it to open (requests reach a broker in the order they were made:
        each partition's batches in offset order): its answer concludes it as it is read
        (``produce_then``), with no task. Else a task sends it and awaits its answer."""
        batches = {tp: batch for tp, (batch, _f, _at) in entries.items()}
        sent = time.monotonic()
        if self.waits is not None:
            nbytes = sum(len(batch) for batch in batches.values())
            self.waits.sent(node, sent, [sent - at for _b, _f, at in entries.values()], nbytes)
        where = (node, connection)
        request = Request(where, entries, sent, opening=where in self._opening)
        timeout, ids = PRODUCE_TIMEOUT_MS, self.topic_ids
        answer: Coroutine[Any, Any, dict[TP, ProduceResult]] | None = None
        if not request.opening:
            then = partial(self._conclude, request)
            try:
                request.timer = self.cluster.produce_then(
                    node, batches, then, timeout_ms=timeout, topic_ids=ids, connection=connection
                )
            except Exception as exc:
                answer = _failed(exc)
            else:
                if request.timer is None:  # it cannot be written now: a task sends it
                    request.opening = True
        if request.opening:
            self._opening[where] += 1
            answer = self.cluster.produce(  # the lease asked again once it is open
                node,
                batches,
                timeout_ms=timeout,
                topic_ids=ids,
                connection=connection,
                may_send=self.may_write,
            )
        if TRACE is not None:
            for tp, batch in batches.items():
                base = int.from_bytes(batch[53:57], "big")  # its sequence: the offset
                TRACE.note("written", tp.topic, tp.partition, base, len(batch), request.opening)
        if answer is None:
            self._answering.add(request)
        else:
            self._spawn(self._produce(request, answer))

    def _refuse_all(self) -> None:
        error = TransientClusterError("not writing: this process may have lost its group")
        for queue in self._queues.values():
            for _batch, future, _at in queue:
                if not future.done():
                    future.set_exception(error)
        self._queues.clear()

    async def _produce(
        self, request: Request, answer: Coroutine[Any, Any, dict[TP, ProduceResult]]
    ) -> None:
        """Await the answer of a request a task sends (its connection was opening)."""
        outcome: dict[TP, ProduceResult] | Exception
        try:
            outcome = await answer
        except Exception as exc:
            outcome = exc
        except BaseException:  # stopped mid-request
            self._conclude(request, None)
            raise
        finally:
            answer.close()  # never awaited if the task was cancelled before it began
        self._conclude(request, outcome)

    def _conclude(
        self, request: Request, outcome: dict[TP, ProduceResult] | Exception | None
    ) -> None:
        """``request``'s results handed to the copiers, or its failure (None: given up, the
        writer stopped); once. Its connection then has room for the next request."""
        if not self._first_outcome(request):
            return
        try:
            self._hand_back(request, outcome)
        finally:
            # stopped mid-request: the copier must not wait for an answer that never comes
            # (nor hold its bytes in the budget); whether it landed, the local end tells
            for _batch, future, _at in request.entries.values():
                future.cancel()
            self._freed(request)

    def _hand_back(
        self, request: Request, outcome: dict[TP, ProduceResult] | Exception | None
    ) -> None:
        entries = request.entries
        try:
            if isinstance(outcome, Exception):
                raise outcome
            if outcome is None:
                return
            if TRACE is not None:
                for tp, (batch, _f, _at) in entries.items():
                    base = int.from_bytes(batch[53:57], "big")  # its sequence: the offset
                    TRACE.note("answered", tp.topic, tp.partition, base)
            self.observe(time.monotonic() - request.sent)
            self.requests_sent += 1
            for tp, (_batch, future, _at) in entries.items():
                if not future.done():
                    future.set_result(outcome.get(tp, ProduceResult(-1, -1, "missing")))
        except Exception as exc:
            for _batch, future, _at in entries.values():
                if not future.done():
                    future.set_exception(exc)

    def _freed(self, request: Request) -> None:
        """``request`` is done: its connection has room for the next."""
        where = request.where
        self._in_flight[where] -= 1
        if self.waits is not None:
            now = time.monotonic()
            self.waits.answered(where[0], now, now - request.sent)
        if request.opening:
            self._opening[where] -= 1
            if not self._opening[where]:
                del self._opening[where]
        if self._queues:  # batches wait for room: the pass sends them (with none, a pass of
            self._wakeup.set()  # the writer's task per answer found nothing to write)


async def _failed(exc: Exception) -> dict[TP, ProduceResult]:
    """The answer of a request that failed as it was written."""
    raise exc
