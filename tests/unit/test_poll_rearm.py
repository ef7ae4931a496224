"""A caught-up partition's next poll is queued in the loop turn its copier takes the last
answer (issue 23, the hop): ``Fetcher.fetch`` queues before it returns, and the chunk's task
only awaits the answer, so the fetcher's pass of that same turn sends it and the request is
written in the next. Queued by the task's first step, it went out three turns on, and records
that reached the remote meanwhile waited for it. A chunk's task cancelled before it ever ran
gives its queued fetch up (it is no longer counted in its lane's load)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from syncer.chunks import ChunkScheduler
from syncer.clusters import TP, FetchedPartition
from syncer.config import CopierConfig
from syncer.errors import TransientClusterError
from syncer.fetcher import Fetcher
from syncer.holes import RemoteEnds
from syncer.lanes import Lanes
from syncer.partition import PartitionSources
from syncer.sources import SourceHealth
from tests.unit.test_chunk_wakeup import records
from tests.unit.test_fetcher import B, Broker, C, fetcher

A = TP("t", 0)
TAIL = 10  # the remote's end: the copier is caught up, its chunk a long poll


class Turns:
    """Counts the event loop's turns: one callback that schedules itself again."""

    def __init__(self) -> None:
        self.count = 0
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_soon(self._tick)

    def _tick(self) -> None:
        self.count += 1
        self._handle = self._loop.call_soon(self._tick)

    def stop(self) -> None:
        self._handle.cancel()


@dataclass
class TailingBroker(Broker):
    """Answers with real record batches, and notes the turn each request is written in."""

    turns: Turns | None = None
    written: list[tuple[int, int]] = field(default_factory=list)  # (offset asked of A, turn)

    async def fetch(self, node: int, wants: Mapping[TP, tuple[int, int]], **kw: Any) -> Any:
        if A in wants:
            self.written.append((wants[A][0], self.turns.count if self.turns else -1))
        offsets = {tp: offset for tp, (offset, _limit) in wants.items()}
        self.requests.append((kw["connection"], offsets, kw["max_wait_ms"]))
        await self.wait(offsets, kw["max_wait_ms"])
        end = self.ends.get(A, 0)
        got = records(wants[A][0], end - wants[A][0]) if end > wants[A][0] else b""
        return {A: FetchedPartition(0, end, end, 0, (), got)}


def scheduler_over(lanes: Lanes) -> ChunkScheduler:
    health = {"east": SourceHealth("east", 0)}
    sources = PartitionSources(A, health, {"east": RemoteEnds(0, TAIL)})
    config = CopierConfig(partition_fetch_max_bytes=1024 * 1024, max_chunks=8)
    return ChunkScheduler(A, {"east": lanes}, sources, config)


async def test_the_next_poll_is_written_the_turn_after_the_copier_takes_the_answer() -> None:
    broker = TailingBroker(ends={A: TAIL})
    f = fetcher(broker, wait_ms=5_000, timeout_ms=10_000)
    scheduler = scheduler_over(Lanes([f]))
    taken: list[int] = []
    turns = Turns()

    async def copier() -> Any:
        got = await scheduler.next_ready(TAIL)
        taken.append(turns.count)
        return got

    try:
        scheduler.launch(TAIL, TAIL)
        task = asyncio.create_task(copier())
        for _ in range(5):
            await asyncio.sleep(0)
        assert [offset for offset, _turn in broker.written] == [TAIL]  # the poll is out
        broker.turns = turns
        broker.append(A, 3)
        got = await asyncio.wait_for(task, 1)
        assert got is not None and got.chunk.start == TAIL
        for _ in range(5):
            await asyncio.sleep(0)
        assert [offset for offset, _turn in broker.written] == [TAIL, TAIL + 3]
        (_offset, written), (took,) = broker.written[-1], taken
        assert written - took <= 1  # queued in the copier's turn, written in the next
    finally:
        turns.stop()
        await scheduler.close()
        await f.stop()


async def test_a_fetch_is_counted_in_its_lanes_load_as_it_is_asked() -> None:
    f = fetcher(Broker(ends={A: TAIL}))
    try:
        answer = f.fetch(A, TAIL, 1000, poll=True)
        assert f.pending == {A: 1} and f.pending_bytes == 1000  # before any turn
        answer.cancel()  # given up by its caller
        await asyncio.sleep(0)
        assert f.pending == {} and f.pending_bytes == 0
    finally:
        await f.stop()


async def test_a_chunk_task_cancelled_before_it_ran_gives_its_fetch_up() -> None:
    f = fetcher(Broker(ends={A: TAIL}), wait_ms=5_000, timeout_ms=10_000)
    scheduler = scheduler_over(Lanes([f]))
    try:
        scheduler.launch(TAIL, TAIL)
        assert f.pending == {A: 1}  # queued at once, before its task ran
        await scheduler.close()  # cancels the task before its first step
        for _ in range(3):
            await asyncio.sleep(0)
        assert f.pending == {} and f.pending_bytes == 0
    finally:
        await f.stop()


@dataclass
class WritingBroker(TailingBroker):
    """Fetches by topic id, written as ``fetch_by_id_then`` is called (its connection is
    open): ``written`` notes each at once, with the turn; the answer comes as ``fetch``'s,
    handed to the request's ``then`` in the callback that brings it (``hooked_in`` notes
    the turn), as a real connection read by ``syncer.frames`` does."""

    hooked_in: list[int] = field(default_factory=list)

    def fetch_by_id_then(
        self, node: int, offsets: Mapping[TP, tuple[int, int]], topic_ids: Any, then: Any, **kw: Any
    ) -> Any:
        if A in offsets:
            self.written.append((offsets[A][0], self.turns.count if self.turns else -1))
        answer = asyncio.ensure_future(self._answer(dict(offsets), kw))

        def arrived(task: asyncio.Future[Any]) -> None:  # the read callback
            if task.cancelled():  # given up
                return
            self.hooked_in.append(self.turns.count if self.turns else -1)
            then(task.exception() or task.result())

        answer.add_done_callback(arrived)
        return answer.cancel  # gives it up

    async def _answer(self, wants: dict[TP, tuple[int, int]], kw: Any) -> Any:
        offsets = {tp: offset for tp, (offset, _limit) in wants.items()}
        self.requests.append((kw["connection"], offsets, kw["max_wait_ms"]))
        await self.wait(offsets, kw["max_wait_ms"])
        out = {}
        for tp, offset in offsets.items():
            end = self.ends.get(tp, 0)
            got = records(offset, end - offset) if end > offset else b""
            out[tp] = FetchedPartition(0, end, end, 0, (), got)
        return out


async def test_a_caught_up_partitions_next_poll_is_written_right_after_its_copiers_step() -> None:
    """The hop (issue 23): the next poll, written by syncer on the open connection, goes
    out in the loop turn the copier takes the answer, in the fetcher's pass right after the
    copier's step: behind the copier's write of the records it brought, not ahead of it."""
    broker = WritingBroker(ends={A: TAIL})
    config = CopierConfig(fetch_max_wait_ms=5_000, chunk_timeout_ms=10_000)
    f = Fetcher(broker, config, topic_ids={"t": uuid.uuid4()})  # type: ignore[arg-type]
    f.start()
    scheduler = scheduler_over(Lanes([f]))
    turns = Turns()
    at_take: list[tuple[int, list[int]]] = []

    async def copier() -> Any:
        got = await scheduler.next_ready(TAIL)
        at_take.append((turns.count, [offset for offset, _turn in broker.written]))
        return got

    try:
        scheduler.launch(TAIL, TAIL)
        task = asyncio.create_task(copier())
        for _ in range(5):
            await asyncio.sleep(0)
        assert [offset for offset, _turn in broker.written] == [TAIL]
        broker.turns = turns
        broker.append(A, 3)
        got = await asyncio.wait_for(task, 1)
        assert got is not None and got.chunk.start == TAIL
        (took, written_then), (offset, written) = at_take[0], broker.written[-1]
        assert written_then == [TAIL]  # not ahead of what the copier does in its step
        assert (offset, written) == (TAIL + 3, took)  # but in that same turn
    finally:
        turns.stop()
        await scheduler.close()
        await f.stop()


async def test_polls_asked_in_one_turn_after_the_first_go_out_in_the_pass_each_alone() -> None:
    """To an idle fetcher the first poll is written at once; the others of that turn wait
    for the fetcher's pass, which gives each its own request while poll connections are
    free: a partition polled alone is answered as its own records come, and its copier's
    step waits for no other partition's (in one request, 2.6 partitions a poll against 1.2,
    stepped one after another, and coupled for good: each answer re-armed them together)."""
    broker = WritingBroker()
    config = CopierConfig(fetch_max_wait_ms=5_000, chunk_timeout_ms=10_000)
    f = Fetcher(broker, config, topic_ids={"t": uuid.uuid4()})  # type: ignore[arg-type]
    f.start()
    try:
        await asyncio.sleep(0)  # the fetcher's loop waits for work
        polls = [f.fetch(tp, 0, poll=True) for tp in (A, B, C)]
        assert [offset for offset, _turn in broker.written] == [0]  # A's, written at once
        for _ in range(5):
            await asyncio.sleep(0)
        assert [sorted(o) for _c, o, _w in broker.requests] == [[A], [B], [C]]
        assert len({c for c, _o, _w in broker.requests}) == 3  # on three connections
        for poll in polls:
            poll.cancel()
    finally:
        await f.stop()


async def test_more_polls_than_free_connections_share_them_evenly() -> None:
    broker = WritingBroker()
    config = CopierConfig(fetch_max_wait_ms=5_000, chunk_timeout_ms=10_000)
    f = Fetcher(broker, config, topic_ids={"t": uuid.uuid4()})  # type: ignore[arg-type]
    f.start()
    try:
        await asyncio.sleep(0)
        polls = [f.fetch(TP("t", p), 0, poll=True) for p in range(20)]
        for _ in range(5):
            await asyncio.sleep(0)
        sizes = sorted(len(o) for _c, o, _w in broker.requests)
        assert sizes == [1, 2, 2, 3, 3, 3, 3, 3]  # the first alone, 19 over the 7 left
        assert sum(sizes) == 20 and len({c for c, _o, _w in broker.requests}) == 8
        for poll in polls:
            poll.cancel()
    finally:
        await f.stop()


async def test_a_poll_answer_is_handed_back_in_the_callback_that_brings_it() -> None:
    """The answer is handed back as it arrives (syncer.frames reads it in the socket's read
    callback), with no task for the request: a task woke a loop turn after the answer and
    cost as much CPU as the rest of the step."""
    broker = WritingBroker(ends={A: TAIL})
    config = CopierConfig(fetch_max_wait_ms=5_000, chunk_timeout_ms=10_000)
    f = Fetcher(broker, config, topic_ids={"t": uuid.uuid4()})  # type: ignore[arg-type]
    f.start()
    turns = Turns()
    broker.turns = turns
    try:
        await asyncio.sleep(0)
        handed_in: list[int] = []
        poll = f.fetch(A, TAIL, poll=True, answered=lambda: handed_in.append(turns.count))
        for _ in range(5):
            await asyncio.sleep(0)
        broker.append(A, 3)
        assert not f._requests  # no task awaits the poll
        got = await asyncio.wait_for(poll, 1)
        assert got.records and handed_in == broker.hooked_in  # in the very same turn
        for _ in range(5):
            await asyncio.sleep(0)
        assert f.fetches == 1  # concluded once
        assert f.connections.in_flight() == 0
    finally:
        turns.stop()
        await f.stop()


async def test_a_poll_answer_is_handed_back_before_it_is_counted() -> None:
    """The copier's step, and so its write, comes first; the answer's bookkeeping (its
    seconds observed, its broker known to answer, its bytes paid) follows in the same
    callback, before the pass that sends the polls the step asked for: counted first, it
    stood between a caught-up partition's answer and its write (about 20 of the ~370 µs
    there in a steady run, 2026-12-05)."""
    broker = WritingBroker(ends={A: TAIL})
    config = CopierConfig(fetch_max_wait_ms=5_000, chunk_timeout_ms=10_000)
    observed: list[float] = []
    f = Fetcher(broker, config, observed.append, topic_ids={"t": uuid.uuid4()})  # type: ignore[arg-type]
    f.start()
    try:
        await asyncio.sleep(0)
        at_hand: list[tuple[int, int]] = []
        poll = f.fetch(
            A, TAIL, poll=True, answered=lambda: at_hand.append((f.fetches, len(observed)))
        )
        for _ in range(5):
            await asyncio.sleep(0)
        broker.append(A, 3)
        got = await asyncio.wait_for(poll, 1)
        assert got.records
        assert at_hand == [(0, 0)]  # handed back before it was counted
        assert (f.fetches, len(observed)) == (1, 1)  # and counted once, right after
    finally:
        await f.stop()


@contextlib.asynccontextmanager
async def polled_at_the_tail() -> AsyncIterator[tuple[WritingBroker, Fetcher, list[int], Any]]:
    """A fetcher with A's poll at the tail out, each answer that brings records taken (as a
    caught-up copier's step takes it): the broker, the fetcher, the ends of the answers
    taken as the taker's bookkeeping runs for each, and the poll's future."""
    broker = WritingBroker(ends={A: TAIL})
    config = CopierConfig(fetch_max_wait_ms=5_000, chunk_timeout_ms=10_000)
    f = Fetcher(broker, config, topic_ids={"t": uuid.uuid4()})  # type: ignore[arg-type]
    f.start()
    try:
        await asyncio.sleep(0)
        settled: list[int] = []

        def take(got: FetchedPartition) -> tuple[int, Any]:
            return got.stable_end, lambda: settled.append(got.stable_end)

        poll = f.fetch(A, TAIL, poll=True, take=take)
        yield broker, f, settled, poll
        poll.cancel()
    finally:
        await f.stop()


async def turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_taken_polls_next_poll_goes_with_those_waiting_for_a_connection() -> None:
    """Every poll connection busy, another partition's poll waits for one: the next poll of
    a caught-up partition whose answer was taken goes in the pass, in one request with the
    waiting poll on the connection the answer freed, not alone ahead of it (the partitions
    that bring records would keep the connections to themselves)."""
    async with polled_at_the_tail() as (broker, f, settled, _poll):
        polls = [f.fetch(TP("t", p), 0, poll=True) for p in range(1, 8)]
        await turns(5)
        assert len(f.connections.polling[1]) == 8  # every poll connection busy
        waiting = TP("t", 8)
        f._brought[waiting] = asyncio.get_running_loop().time()  # not quiet: it brought records
        polls.append(f.fetch(waiting, 0, poll=True))
        await turns(10)  # looked at once (a fetch with no wait), then queued
        assert waiting in f._wants
        broker.append(A, 3)
        await turns(10)
        assert settled == [TAIL + 3]
        _connection, offsets, _wait = broker.requests[-1]
        assert offsets == {A: TAIL + 3, waiting: 0}  # together, on the freed connection
        for poll in polls:
            poll.cancel()


async def test_a_bug_met_polling_on_at_once_stops_the_fetcher_with_why() -> None:
    """A bug met as a taken answer's next poll is written (outside the fetcher's task) is
    not taken for the answered request's failure: the fetcher dies of it, as of one met in
    its own pass, and the fetch fails with why; the taker's bookkeeping still ran."""
    async with polled_at_the_tail() as (broker, f, settled, poll):
        await turns(5)

        def broken(*_: Any) -> None:
            raise RuntimeError("a bug writing the poll")

        f._send = broken  # type: ignore[method-assign]
        broker.append(A, 3)
        with pytest.raises(TransientClusterError, match="a bug writing the poll"):
            await asyncio.wait_for(poll, 1)
        assert settled == [TAIL + 3]
        await turns(3)
        assert f.dead is not None and "a bug writing the poll" in str(f.dead)  # the loop died


async def test_a_poll_out_as_the_fetcher_died_polls_on_through_no_dead_fetcher() -> None:
    """The fetcher's loop died of a bug while a caught-up partition's poll was out: the
    poll is still answered and its answer taken, but its next poll does not go out through
    the dead fetcher; the fetch fails with why (its copier starts over)."""
    async with polled_at_the_tail() as (broker, f, settled, poll):
        await turns(5)
        send = f._send

        def broken(*_: Any) -> None:
            raise RuntimeError("a bug sending a fetch")

        f._send = broken  # type: ignore[method-assign]
        data = f.fetch(TP("t", 1), 0)  # the loop's pass meets the bug and dies of it
        with pytest.raises(TransientClusterError, match="a bug sending a fetch"):
            await asyncio.wait_for(data, 1)
        await turns(3)
        assert f.dead is not None
        f._send = send  # type: ignore[method-assign]
        asked = len(broker.requests)
        broker.append(A, 3)
        with pytest.raises(TransientClusterError, match="a bug sending a fetch"):
            await asyncio.wait_for(poll, 1)
        assert settled == [TAIL + 3]  # the answer was taken (written)
        assert len(broker.requests) == asked  # and no poll went out after it


async def test_a_taken_polls_next_poll_follows_a_moved_leader() -> None:
    """The leader moved while the poll was out (a metadata refresh said so): the next poll
    of its taken answer goes where the pass routes it, to the new leader, not back on the
    old one's freed connection."""
    async with polled_at_the_tail() as (broker, f, settled, _poll):
        await turns(5)
        assert len(f.connections.polling[1]) == 1
        broker.leader = lambda tp: 2  # type: ignore[method-assign]
        broker.append(A, 3)
        await turns(10)
        assert settled == [TAIL + 3]
        assert len(f.connections.polling[1]) == 0 and len(f.connections.polling[2]) == 1
        assert broker.requests[-1][1] == {A: TAIL + 3}
