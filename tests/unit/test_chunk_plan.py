"""The chunk plan driven through random histories with no task and no broker: remotes with
different ends, answers that cover random amounts, failures, a remote dropped mid-way, the
process's byte budget full. Whatever happens, what ``take`` hands out continues the log at
the frontier in offset order, no range is forgotten, nothing of a dropped remote is handed
out, the reorder buffer stays bounded, and every byte reserved comes back."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from syncer import sources
from syncer.budget import ByteBudget, Ticket
from syncer.chunk_plan import Chunk, ChunkPlan, Fetched
from syncer.chunk_sizes import BatchShape
from syncer.chunks import ChunkScheduler
from syncer.clusters import TP, FetchedPartition
from syncer.config import CopierConfig
from syncer.holes import RemoteEnds
from syncer.partition import PartitionSources
from syncer.protocol.common import NOT_LEADER_OR_FOLLOWER
from syncer.sources import SourceHealth, Verdict, judge, usable_sources
from syncer.wire import FetchOutcome
from tests.unit.test_batches import build

FETCH_BYTES = {"east": 300, "west": 900, "north": 150}
# a shape known from the start that cuts chunks of one record (as the histories found by the
# property test below were cut), instead of one chunk going out alone to learn it
ONE_RECORD_CHUNKS = BatchShape(1, 1 << 20)


@dataclass
class Log:
    """The batches of the partition (with gaps between some), as (base, next, raw)."""

    batches: list[tuple[int, int, bytes]]

    @classmethod
    def of(cls, layout: list[tuple[int, int]]) -> Log:
        batches, offset = [], 0
        for gap, records in layout:
            offset += gap
            raw = build(offset, [(b"k", b"v%d" % (offset + i)) for i in range(records)])
            batches.append((offset, offset + records, raw))
            offset += records
        return cls(batches)

    def answer(self, start: int, end: int, count: int) -> FetchedPartition:
        """What a remote whose log ends at ``end`` answers a fetch from ``start``: whole
        batches from the one holding ``start`` (or the next), ``count`` of them at most."""
        held = [raw for base, nxt, raw in self.batches if nxt > start and nxt <= end]
        return FetchedPartition(0, end, end, 0, (), b"".join(held[:count]))


@dataclass
class History:
    """The plan and what the copier around it would have seen."""

    plan: ChunkPlan
    log: Log
    memory: ByteBudget
    health: dict[str, SourceHealth]
    ends: dict[str, RemoteEnds]
    excluded: dict[str, str]
    other: Ticket  # what another partition holds of the budget
    frontier: int = 0
    now: float = 0.0
    writing: list[Ticket] = field(default_factory=list)  # of chunks written, not answered
    dropped_any: bool = False
    tails: int = 0  # answers taken by ``tail``

    @property
    def target(self) -> int:
        return max(e.end for n, e in self.ends.items() if n not in self.excluded)

    def launch(self) -> None:
        plan = self.plan
        plan.discard_excluded()  # as the scheduler does before every launch
        before = len(plan.inflight) + len(plan.ready)
        launched = plan.launches(self.frontier, self.target, self.now)
        after = len(plan.inflight) + len(plan.ready)
        assert after == before + len(launched)
        # the reorder buffer grows past its budget by the frontier's chunk only
        beyond = after - max(before, plan.chunk_budget)
        assert beyond <= 1, (before, after, plan.chunk_budget)
        if beyond == 1:
            assert launched[-1].start == self.frontier
        for chunk in launched:
            assert chunk.remote not in self.excluded
            assert chunk.end is None or chunk.start < chunk.end
            assert self.ends[chunk.remote].start <= chunk.start
        if plan.starved:
            assert not plan.inflight and not plan.ready and not self.memory.has_room()
        elif self.frontier < self.target and self.holders(self.frontier):
            # the chunk every write waits for is fetched, however full the buffer is, or
            # the chunk in flight just past it will bring it
            assert self.covered(self.frontier) or self.brought_by_next(self.frontier), (
                self.frontier,
                plan.inflight,
                plan.ready,
            )

    def brought_by_next(self, offset: int) -> bool:
        """A chunk in flight that answers at once (no long poll) starts less than a batch's
        span past ``offset``: its answer begins at the batch holding ``offset``, or shows that
        it does not (then ``offset`` is fetched at the next launch)."""
        plan = self.plan
        span = plan.sizes.shape.records if plan.sizes.shape else 0
        return any(
            offset < c.start < offset + span and not plan.polls(c) for c in plan.inflight.values()
        )

    def holders(self, offset: int) -> list[str]:
        return usable_sources(offset, self.ends, self.health, self.excluded, self.now)

    def covered(self, offset: int) -> bool:
        plan = self.plan
        return any(
            c.start <= offset and (c.end is None or offset < c.end) for c in plan.inflight.values()
        ) or any(
            min(g.chunk.start, g.first_offset) <= offset < g.covered_end
            or (g.chunk.end is None and g.chunk.start == offset)
            for g in plan.ready.values()
        )

    def answer(self, chunk: Chunk, count: int) -> None:
        if chunk.remote in self.excluded:  # as the scheduler does for a dropped remote
            self.plan.failed(chunk)
            return
        fetched = self.log.answer(chunk.fetch_offset, self.ends[chunk.remote].end, count)
        got = self.plan.answered(chunk, fetched)
        assert got.ticket.nbytes == len(fetched.records)  # settled to what came
        assert got.covered_end >= chunk.start

    def tail(self, chunk: Chunk, count: int) -> None:
        """The copier's step in the fetcher's turn (``ChunkScheduler._take_tail``): a poll's
        answer written as it came, where the plan takes it so, and the same fetch polling on
        from where it ended; else the answer goes the usual way (``answer``)."""
        if chunk.remote in self.excluded:
            return self.answer(chunk, count)
        fetched = self.log.answer(chunk.fetch_offset, self.ends[chunk.remote].end, count)
        got = self.plan.tail_answer(chunk, fetched) if fetched.records else None
        if got is None or chunk.start != self.frontier or got.first_offset > self.frontier:
            return self.answer(chunk, count)
        assert got.covered_end == self.target  # it reached every remote's end
        got.ticket.settle(got.size)
        polling = self.plan.advance_tail(got, self.now)
        assert (polling.number, polling.start, polling.end) == (chunk.number, self.target, None)
        assert list(self.plan.inflight.values()) == [polling] and not self.plan.ready
        assert self.plan.writing is got
        self.frontier = got.covered_end
        self.writing.append(got.ticket)  # released when its writes are answered
        self.tails += 1
        return None

    def fail(self, chunk: Chunk) -> None:
        self.health[chunk.remote].failed(self.now, "link cut", chunk.launched)
        self.plan.failed(chunk)

    def take(self, written: bool) -> Fetched | None:
        got = self.plan.take(self.frontier)
        if got is None:
            return None
        assert got.remote not in self.excluded  # never a dropped remote's records
        assert not got.ticket.released
        # it continues the log exactly at the frontier: nothing skipped, nothing before it
        assert min(got.chunk.start, got.first_offset) <= self.frontier
        assert got.covered_end > self.frontier or (
            got.chunk.end is None and got.chunk.start == self.frontier
        )
        starts = [b.base_offset for b in got.batches]
        assert starts == sorted(starts)
        if not written:  # its check failed: the copier starts over at the same frontier
            self.plan.restart(self.frontier)
            assert got.ticket.released
            return got
        self.frontier = max(self.frontier, got.covered_end)
        self.writing.append(got.ticket)  # released when its writes are answered
        return got

    def answered_writes(self) -> None:
        for ticket in self.writing:
            ticket.release()
        self.writing.clear()

    def check(self) -> None:
        plan = self.plan
        tickets = [c.ticket for c in plan.inflight.values()]
        tickets += [got.ticket for got in plan.ready.values()]
        if plan.writing is not None:
            tickets.append(plan.writing.ticket)
        tickets += [self.other, *self.writing]
        held = sum(t.nbytes for t in {id(t): t for t in tickets}.values() if not t.released)
        assert self.memory.used == held  # every byte reserved is held by exactly one ticket
        # what every partition's choice of remote sees: this plan's closed chunks in flight
        for name, health in self.health.items():
            closed = [c for c in plan.inflight.values() if c.remote == name and c.end is not None]
            assert health.chunks == len(closed), (name, health.chunks, plan.inflight)
        if not self.dropped_any:
            self.check_nothing_forgotten()

    def check_nothing_forgotten(self) -> None:
        """Every offset from the frontier to the target is in flight, fetched, to be fetched
        again, or not reached yet by the next fetch."""
        plan = self.plan
        spans = [(c.start, c.end if c.end is not None else 1 << 62) for c in plan.inflight.values()]
        spans += [(min(g.chunk.start, g.first_offset), g.covered_end) for g in plan.ready.values()]
        spans += plan.todo
        spans.append((plan.next_fetch, 1 << 62))
        spans.sort()
        reached = self.frontier
        for low, high in spans:
            if low > reached:
                break
            reached = max(reached, high)
        assert reached >= self.target, (self.frontier, spans, self.target)

    def finish(self) -> None:
        """Every remote healthy, every answer whole, the other partition's bytes written: the
        frontier reaches the target."""
        self.now += 1_000
        self.other.release()
        for _ in range(200):
            self.answered_writes()
            if self.frontier >= self.target:
                break
            self.launch()
            assert self.plan.inflight or self.plan.ready, "nothing fetched"
            for chunk in list(self.plan.inflight.values()):
                self.answer(chunk, 3)
            while self.take(written=True) is not None:
                pass
            self.check()
        assert self.frontier >= self.target, "a range was never fetched"
        assert self.frontier == self.log_end_within(self.target)
        self.plan.clear()
        self.answered_writes()
        assert self.memory.used == 0  # every byte reserved came back
        assert all(h.chunks == 0 for h in self.health.values())  # and every chunk counted

    def log_end_within(self, target: int) -> int:
        return max(nxt for _b, nxt, _r in self.log.batches if nxt <= target)


LAYOUTS = st.lists(
    st.tuples(st.sampled_from([0, 0, 0, 1, 3]), st.integers(1, 12)), min_size=3, max_size=30
)
ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(
            ["launch", "answer", "answer", "tail", "fail", "take", "drop", "free", "tick"]
        ),
        st.integers(0, 1_000),
    ),
    min_size=20,
    max_size=80,
)


def history(
    layout: list[tuple[int, int]],
    remotes: list[str],
    cuts: list[int],
    limit: int,
    full: bool,
    shape: BatchShape | None = None,
) -> History:
    log = Log.of(layout)
    ends = {}
    for name, cut in zip(remotes, cuts, strict=False):
        ends[name] = RemoteEnds(0, log.batches[max(1, cut % len(log.batches))][1])
    ends[remotes[0]] = RemoteEnds(0, log.batches[-1][1])  # one remote holds it all
    health = {n: SourceHealth(n, rank, lanes=1 + rank % 2) for rank, n in enumerate(remotes)}
    memory = ByteBudget(limit)
    excluded: dict[str, str] = {}
    plan = ChunkPlan(health, ends, excluded, FETCH_BYTES.__getitem__, 4, memory)
    plan.sizes.shape = shape  # None: learned from the first answer
    other = memory.ticket(limit if full else 0)
    return History(plan, log, memory, health, ends, excluded, other)


@settings(
    max_examples=int(os.environ.get("SYNCER_EXAMPLES", "400")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@example(
    # found: west dropped with its chunks in flight; the frontier's rest (one offset) waits
    # for east's chunk just past it
    layout=[(0, 2), (0, 1), (0, 1), (0, 3), (0, 2), (0, 1)],
    remotes=["east", "west"],
    cuts=[0, 40, 0],
    limit=3000,
    full=False,
    actions=[("launch", 0)] * 13
    + [("answer", 1), ("take", 0), ("launch", 0), ("drop", 0), ("launch", 0)]
    + [("answer", 104), ("take", 1)],
)
@given(
    layout=LAYOUTS,
    remotes=st.sampled_from([["east"], ["east", "west"], ["west", "east", "north"]]),
    cuts=st.lists(st.integers(0, 100), min_size=3, max_size=3),
    limit=st.sampled_from([1, 3_000, 20_000, 1 << 30]),
    full=st.booleans(),
    actions=ACTIONS,
)
def test_any_history_hands_out_the_log_in_order_and_gives_every_byte_back(
    layout: list[tuple[int, int]],
    remotes: list[str],
    cuts: list[int],
    limit: int,
    full: bool,
    actions: list[tuple[str, int]],
) -> None:
    run = history(layout, remotes, cuts, limit, full)
    for action, pick in actions:
        inflight = sorted(run.plan.inflight.values(), key=lambda c: c.number)
        if action == "launch":
            run.launch()
        elif action == "answer" and inflight:
            run.answer(inflight[pick % len(inflight)], pick % 5)  # 0: an empty answer
        elif action == "tail" and inflight:
            run.tail(inflight[pick % len(inflight)], 1 + pick % 100)
        elif action == "fail" and inflight:
            run.fail(inflight[pick % len(inflight)])
        elif action == "take":
            run.take(written=pick % 4 != 0)
        elif action == "drop" and len(remotes) - len(run.excluded) > 1:
            # a remote other than the one that holds it all disagreed: dropped
            name = remotes[1 + pick % (len(remotes) - 1)]
            run.excluded[name] = "records differ"
            run.dropped_any = True
        elif action == "free":
            run.answered_writes()
            if pick % 2:
                run.other.release()  # the other partition wrote what it held
        elif action == "tick":
            run.now += pick / 100
        run.check()
    run.finish()


def chunk_at(run: History, start: int) -> Chunk:
    (chunk,) = (c for c in run.plan.inflight.values() if c.start == start)
    return chunk


def test_the_chunk_holding_the_frontier_is_handed_out_past_an_empty_answer_before_it() -> None:
    """Found by the property above: the frontier's chunk failed, the chunk after it came
    back empty, and the one after that holds the frontier in its first batch. It must be
    handed out (it stalled the partition once the reorder buffer was full)."""
    run = history(
        [(0, 4), (0, 3), (0, 1)], ["west", "east"], [0, 0, 0], 1 << 30, False, ONE_RECORD_CHUNKS
    )
    run.launch()
    assert [(c.start, c.end) for c in run.plan.inflight.values()][:4] == [
        (0, 1),
        (1, 2),
        (2, 3),
        (3, 4),
    ]
    run.fail(chunk_at(run, 0))
    run.answer(chunk_at(run, 1), 0)  # nothing came back
    run.answer(chunk_at(run, 3), 1)  # the batch [0, 4)
    got = run.take(written=True)
    assert got is not None and got.chunk.start == 3 and run.frontier == 4
    run.check()


def test_a_range_the_next_chunk_does_not_hold_is_fetched_again() -> None:
    run = history([(0, 1)] * 8, ["west", "east"], [0, 0, 0], 1 << 30, False, ONE_RECORD_CHUNKS)
    run.launch()
    run.answer(chunk_at(run, 1), 0)  # nothing came back: [1, 2) to fetch again
    run.answer(chunk_at(run, 2), 3)  # its first batch begins at 2, not before
    again = run.plan.launches(0, 8, run.now)  # the frontier's chunk is still in flight
    assert (1, 2) in [(c.start, c.end) for c in again]


def test_a_rest_shorter_than_a_batch_is_not_left_to_a_long_poll_after_it() -> None:
    """The frontier's answer fell short of its chunk's end by less than a batch, and what
    is in flight from that end is a long poll at the remote's end: it answers only when the
    remote grows, from that end on, so the rest is fetched now (it waited for the poll)."""
    run = history([(0, 4), (0, 4)], ["west"], [0, 0, 0], 1 << 30, False, BatchShape(4, 1 << 20))
    poll = run.plan.launches(8, 8, run.now)  # caught up: a poll at the tail
    assert [(c.start, c.end) for c in poll] == [(8, None)] and run.plan.polls(poll[0])
    run.plan.todo.append((6, 8))  # the frontier's answer ended at 6 of [4, 8)
    launched = run.plan.launches(6, 8, run.now)
    assert [(c.start, c.end) for c in launched] == [(6, 8)]


def test_an_open_fetch_goes_on_where_the_last_answer_ended() -> None:
    run = history([(0, 4), (0, 3), (0, 1)], ["west"], [0, 0, 0], 1 << 30, False)
    run.launch()
    (first,) = run.plan.inflight.values()
    assert (first.start, first.end) == (0, None)  # one remote, one lane: one open fetch
    run.answer(first, 1)
    (second,) = run.plan.launches(0, 8, run.now)
    assert (second.start, second.end) == (4, None)  # not again from 0


def test_a_chunk_taken_and_not_written_gives_its_bytes_back_when_the_next_is_taken() -> None:
    run = history([(0, 4), (0, 3), (0, 1)], ["west"], [0, 0, 0], 1 << 30, False)
    run.launch()
    run.answer(next(iter(run.plan.inflight.values())), 1)
    first = run.plan.take(0)
    run.plan.launches(4, 8, run.now)
    run.answer(next(iter(run.plan.inflight.values())), 2)
    second = run.plan.take(4)
    assert first is not None and second is not None
    assert first.ticket.released and not second.ticket.released
    second.ticket.release()
    assert run.memory.used == 0


def test_of_two_chunks_at_one_offset_the_one_that_reaches_further_stays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by the property above: an open fetch at 4 was in flight when a second lane came
    to hold the gap, so a chunk [4, 5) went out too; its short answer, arriving second,
    replaced the open fetch's (which held up to the end) and [6, 7) was fetched by nobody
    until the frontier got there. (The history as found: chunks spread by score alone.)"""
    monkeypatch.setattr(sources, "SAME_SOURCE_SHARE", 2.0)
    run = history(
        [(0, 2), (0, 3), (0, 1), (0, 1)],
        ["east", "west"],
        [0, 0, 0],
        3000,
        False,
        ONE_RECORD_CHUNKS,
    )
    for _ in range(18):
        run.launch()
    run.fail(sorted(run.plan.inflight.values(), key=lambda c: c.number)[0])
    run.launch()
    run.now += 1_000  # the remote that failed is healthy again: two lanes hold the gap
    run.other.release()
    run.launch()
    open_fetch = next(c for c in run.plan.inflight.values() if c.start == 4 and c.end is None)
    cut = next(c for c in run.plan.inflight.values() if c.start == 4 and c.end == 5)
    run.answer(open_fetch, 3)  # [2, 7): to the end
    run.answer(cut, 3)  # [2, 5) only
    assert run.plan.ready[4].covered_end == 7
    run.check()


# an answer's verdict ---------------------------------------------------------------------------


def _never() -> bool:
    raise AssertionError("the other remotes were looked for an answer that brought records")


def test_a_moved_leader_is_asked_again_and_only_a_remote_that_failed_backs_off() -> None:
    assert judge(FetchOutcome.OK, others=_never) is Verdict.READY  # not asked
    for others in (False, True):
        assert judge(FetchOutcome.LEADER_MOVED, lambda o=others: o) is Verdict.ASK_AGAIN
        assert judge(FetchOutcome.RETRY, lambda o=others: o) is Verdict.REMOTE_FAILED
    assert judge(FetchOutcome.OUT_OF_RANGE, others=lambda: True) is Verdict.REMOTE_FAILED
    # no halt on the answer itself: the copier halts naming the remote's ends
    assert judge(FetchOutcome.OUT_OF_RANGE, others=lambda: False) is Verdict.REMOTE_FAILED
    assert judge(FetchOutcome.FAILED, others=lambda: False) is Verdict.HALT
    assert judge(FetchOutcome.FAILED, others=lambda: True) is Verdict.REMOTE_FAILED


class LeaderMovesOnce:
    """A remote whose first fetch answers NOT_LEADER_OR_FOLLOWER (the leader moved) and
    whose next ones bring the log."""

    config = CopierConfig(partition_fetch_max_bytes=1 << 20)

    def __init__(self, log: Log) -> None:
        self.log = log
        self.asked: list[int] = []

    async def fetch(self, tp: TP, offset: int, max_bytes: int | None = None, **_: object) -> Any:
        self.asked.append(offset)
        if len(self.asked) == 1:
            return FetchedPartition(NOT_LEADER_OR_FOLLOWER, -1, -1, -1, (), b"")
        return self.log.answer(offset, self.log.batches[-1][1], 100)


async def test_a_chunk_whose_leader_moved_is_fetched_again_at_once_with_no_back_off() -> None:
    log = Log.of([(0, 5), (0, 5)])
    remote = LeaderMovesOnce(log)
    health = {"east": SourceHealth("east", 0)}
    sources = PartitionSources(TP("t", 0), health, {"east": RemoteEnds(0, 10)})
    config = CopierConfig(max_chunks=4)
    scheduler = ChunkScheduler(TP("t", 0), {"east": remote}, sources, config)  # type: ignore[dict-item]
    scheduler.launch(0, 10)
    got = await asyncio.wait_for(scheduler.next_ready(0), 1)
    assert got is not None and got.covered_end == 10
    assert remote.asked[:2] == [0, 0]  # the same chunk again, from the same remote
    east = health["east"]
    assert east.failures_in_row == 0 and east.healthy(time.monotonic())  # no back-off
    # but counted: the partitions compare its records again before writing from it
    assert east.errors == 1 and "NotLeaderForPartition" in (east.last_error or "")
    await scheduler.close()


# chunks of whole batches ----------------------------------------------------------------------


def answer_by_bytes(log: Log, start: int, end: int, limit: int) -> FetchedPartition:
    """What a broker answers a fetch from ``start`` of at most ``limit`` bytes: whole batches
    from the one holding ``start``, at least one (the cut one past them is dropped)."""
    held, size = [], 0
    for _base, nxt, raw in log.batches:
        if nxt <= start or nxt > end:
            continue
        if held and size + len(raw) > limit:
            break  # a broker stops at the first batch that does not fit, it skips none
        held.append(raw)
        size += len(raw)
    return FetchedPartition(0, end, end, 0, (), b"".join(held))


def alike(layout: list[tuple[int, int]]) -> Log:
    """A log of batches of ``records`` records of 1 KiB after ``gap`` offsets each: batches of
    one count are alike to a few bytes, as a producer that fills its batches writes them."""
    batches, offset = [], 0
    for gap, records in layout:
        offset += gap
        rows = [(b"k", b"%08d" % (offset + i) + bytes(1016)) for i in range(records)]
        batches.append((offset, offset + records, build(offset, rows)))
        offset += records
    return Log(batches)


@pytest.mark.parametrize(
    ("layout", "frontier"),
    [
        ([(0, 10)] * 40, 0),
        ([(0, 3)] + [(0, 10)] * 40, 0),
        ([(0, 10)] * 40, 5),
        ([(0, 10)] * 10 + [(0, 7)] + [(0, 10)] * 30 + [(0, 4)] + [(0, 10)] * 30, 0),
    ],
    ids=["alike", "one odd batch first", "frontier inside a batch", "odd batches later"],
)
def test_chunks_cut_to_whole_batches_fetch_no_batch_twice(
    layout: list[tuple[int, int]], frontier: int
) -> None:
    """A producer that fills its batches writes them alike: once the first answer shows
    their shape, every chunk ends where a batch ends and asks for its batches' bytes, so no
    answer brings a batch another brings too (cut anywhere, each chunk's answer brought the
    batch its start fell in again: 1.6x the backlog at 16 lanes of 64 KiB batches). An odd
    batch puts the cuts off the borders: the answer that falls short puts them back."""
    log = alike(layout)
    end = log.batches[-1][1]
    health = {"east": SourceHealth("east", 0, lanes=4)}
    fetch = 40_000
    plan = ChunkPlan(
        health, {"east": RemoteEnds(0, end)}, {}, lambda _: fetch, 4, ByteBudget(1 << 30)
    )
    brought: list[int] = []  # the base offsets of the batches every answer brought
    while frontier < end:
        plan.launches(frontier, end, 0.0)
        for chunk in sorted(plan.inflight.values(), key=lambda c: c.start):
            ask = min(plan.ask_bytes(chunk) or fetch, fetch)
            got = plan.answered(chunk, answer_by_bytes(log, chunk.fetch_offset, end, ask))
            brought += [b.base_offset for b in got.batches]
        while (got := plan.take(frontier)) is not None:
            frontier = max(frontier, got.covered_end)
    assert plan.sizes.shape is not None and plan.sizes.shape.records == 10
    assert sorted(brought) == sorted(set(brought))  # no batch twice
    assert brought and max(brought) == log.batches[-1][0]


def test_until_the_batches_shape_is_known_one_chunk_goes_out_alone() -> None:
    log = alike([(0, 10)] * 200)
    health = {"east": SourceHealth("east", 0, lanes=8)}
    plan = ChunkPlan(
        health, {"east": RemoteEnds(0, 2000)}, {}, lambda _: 4000, 4, ByteBudget(1 << 30)
    )
    (probe,) = plan.launches(0, 2000, 0.0)  # the other lanes wait for its answer
    assert plan.launches(0, 2000, 0.0) == []
    plan.answered(probe, answer_by_bytes(log, 0, 2000, plan.ask_bytes(probe) or 40_000))
    cut = plan.launches(0, 2000, 0.0)
    assert len(cut) >= 8  # every lane busy now
    assert all(c.end is not None and (c.end - c.start) % 10 == 0 for c in cut[:-1])


def test_a_chunk_after_another_remotes_brings_the_batch_below_its_start() -> None:
    """Where a chunk's remote differs from the one of the chunk before it, the agreement
    check compares the records just below its start with what was written: its fetch starts
    one offset lower so its answer carries that batch (chunks of whole batches do not
    overlap: the check fetched it on its own, a round trip the writes waited for). The batch
    is asked for on top of the chunk's, so the answer still reaches the chunk's end; and a
    chunk after its own remote's brings nothing twice."""
    log = alike([(0, 10)] * 120)
    end = log.batches[-1][1]
    names = ["east", "west", "north"]
    health = {n: SourceHealth(n, rank) for rank, n in enumerate(names)}
    fetch = 40_000
    plan = ChunkPlan(
        health, {n: RemoteEnds(0, end) for n in names}, {}, lambda _: fetch, 4, ByteBudget(1 << 30)
    )
    remotes: dict[int, str] = {}  # the remote each offset was handed out from
    answers: dict[int, Fetched] = {}
    frontier = 0
    while frontier < end:
        plan.launches(frontier, end, 0.0)
        for chunk in sorted(plan.inflight.values(), key=lambda c: c.start):
            ask = min(plan.ask_bytes(chunk) or fetch, fetch)
            got = plan.answered(chunk, answer_by_bytes(log, chunk.fetch_offset, end, ask))
            if chunk.start < end:  # not the long poll at the tail
                answers[chunk.start] = got
            if chunk.end is not None:
                assert got.covered_end >= chunk.end  # the lead's batch cost no remainder
        while (got := plan.take(frontier)) is not None:
            remotes.update({o: got.remote for o in range(frontier, got.covered_end)})
            frontier = max(frontier, got.covered_end)
    switches = [s for s, got in answers.items() if s and remotes[s - 1] != got.remote]
    assert len(switches) > 5  # the three remotes took turns
    for start in switches:
        got = answers[start]
        assert got.chunk.lead == 1 and got.first_offset < start  # the batch below came along
    same = [s for s, got in answers.items() if s and remotes[s - 1] == got.remote]
    assert all(answers[s].chunk.lead == 0 and answers[s].first_offset == s for s in same)


def test_an_open_fetch_has_no_lead() -> None:
    """A long poll at the tail fetched from below it would come back at once."""
    health = {n: SourceHealth(n, rank) for rank, n in enumerate(["east", "west"])}
    ends = {"east": RemoteEnds(0, 100), "west": RemoteEnds(0, 100)}
    plan = ChunkPlan(health, ends, {}, lambda _: 40_000, 4, ByteBudget(1 << 30))
    (poll,) = plan.launches(100, 100, 0.0)
    assert poll.end is None and poll.lead == 0 and plan.polls(poll)


def test_a_range_fetched_again_goes_to_the_remote_of_the_chunk_before_it() -> None:
    """What an answer fell short of is fetched again from the remote that brought the records
    below it while that one is about as fast: from another, it carries the batch below its
    start too (a lead), and the chunk after it, launched without one, would need the batch
    below its own start fetched alone for the agreement check (3 remotes: the copy's last
    answers were such fetches)."""
    log = alike([(0, 10)] * 60)
    end = log.batches[-1][1]
    health = {n: SourceHealth(n, rank) for rank, n in enumerate(["east", "west"])}
    ends = {n: RemoteEnds(0, end) for n in health}
    plan = ChunkPlan(health, ends, {}, lambda _: 40_000, 8, ByteBudget(1 << 30))
    plan.sizes.shape = BatchShape(10, len(log.batches[0][2]))
    launched = plan.launches(0, end, 0.0)
    first = launched[0]
    after = next(c for c in launched if c.start == first.end)
    other = next(n for n in health if n != first.remote)
    health[first.remote].bytes_per_s, health[other].bytes_per_s = 1e6, 1.5e6
    plan.answered(first, answer_by_bytes(log, 0, end, len(log.batches[0][2])))  # one batch
    for chunk in [after, *(c for c in launched if c.remote == other)]:  # the other is idle
        plan.answered(chunk, answer_by_bytes(log, chunk.fetch_offset, end, 40_000))
    again = plan.launches(10, end, 0.0)[0]
    assert (again.start, again.end) == (10, first.end)
    assert again.remote == first.remote and again.lead == 0


def test_a_lead_that_left_no_room_for_the_chunk_is_not_asked_again() -> None:
    """A fetch whose limit holds one batch brings only the batch below a chunk's start when
    the chunk carries a lead: asked again the same way, it brings that batch again, for
    ever (a remote killed mid-copy, 8 KiB partition fetches of 16 KiB batches: the other
    remote's chunk came back covering nothing, thousands of times). The range is fetched
    again without a lead (the agreement check reads the batch below on its own)."""
    log = alike([(0, 10)] * 20)
    end = log.batches[-1][1]
    health = {n: SourceHealth(n, rank) for rank, n in enumerate(["east", "west"])}
    one_batch = len(log.batches[0][2]) // 2  # below a batch: one per answer
    ends = {n: RemoteEnds(0, end) for n in health}
    plan = ChunkPlan(health, ends, {}, lambda _: one_batch, 4, ByteBudget(1 << 30))
    plan.sizes.shape = BatchShape(10, len(log.batches[0][2]))
    first = plan._start(Chunk(0, 10, "east"), 0.0)
    plan.answered(first, answer_by_bytes(log, 0, end, one_batch))
    assert plan.take(0) is not None  # written from east: what comes next from west is led
    plan.failed(plan._start(Chunk(10, 20, "east"), 0.0))  # east is killed with it in flight
    health["east"].failed(0.0, "killed")
    leads = []
    for _ in range(2):
        again = next(c for c in plan.launches(10, end, 0.0) if (c.start, c.end) == (10, 20))
        leads.append(again.lead)
        got = plan.answered(again, answer_by_bytes(log, again.fetch_offset, end, one_batch))
        if got.covered_end > 10:
            break
        assert plan.take(10) is None  # nothing to write: thrown away before the next launch
    assert leads == [1, 0] and got.covered_end == 20  # then without it: the chunk's batch


def test_the_rest_of_a_chunk_the_copier_wrote_a_part_of_is_fetched_again() -> None:
    """The copier wrote a taken chunk up to the remote's stable end only (an answer may hold
    records past it): what it did not write is fetched from where it stopped, or the
    partition waits for it for ever (the chunk it took does not count as holding it)."""
    run = history([(0, 4)] * 10, ["west"], [0, 0, 0], 1 << 30, False, BatchShape(4, 1 << 20))
    run.launch()
    (chunk,) = run.plan.inflight.values()
    run.answer(chunk, 5)
    got = run.plan.take(0)
    assert got is not None and got.covered_end == 20
    launched = run.plan.launches(12, run.target, run.now)  # written up to 12 of it
    assert (12, None) in [(c.start, c.end) for c in launched]


def test_what_an_answer_brought_past_the_stable_end_it_told_is_fetched_again_from_there() -> None:
    """The broker takes a partition's ends before it reads, so an answer's records may run
    past the stable end it tells: they may not be written from it, and the next fetch goes
    from that end (the remote holds the rest by now), not from past the records, which a
    poll at the tail would wait at until the remote grew again."""
    run = history([(0, 4)] * 10, ["west"], [0, 0, 0], 1 << 30, False, BatchShape(4, 1 << 20))
    run.launch()
    (chunk,) = run.plan.inflight.values()
    records = run.log.answer(0, 20, 5).records  # 0..19, told an end of 12
    got = run.plan.answered(chunk, FetchedPartition(0, 12, 12, 0, (), records))
    assert (got.covered_end, got.usable_end) == (20, 12)
    assert run.plan.take(0) is got
    launched = run.plan.launches(12, 12, run.now)  # written up to 12
    assert [(c.start, c.end) for c in launched] == [(12, None)]
    # a closed chunk: the next one begins at that end
    run = history([(0, 4)] * 10, ["west"], [0, 0, 0], 1 << 30, False, BatchShape(4, 1 << 20))
    run.plan.next_fetch, run.plan.target = 24, 40
    closed = run.plan._start(Chunk(8, 24, "west"), run.now)
    records = run.log.answer(8, 40, 4).records  # 8..23, told an end of 16
    got = run.plan.answered(closed, FetchedPartition(0, 16, 16, 0, (), records))
    assert got.usable_end == 16 and run.plan.take(8) is got
    launched = run.plan.launches(16, 40, run.now)  # written up to 16
    assert launched[0].start == 16


def test_a_healthy_remote_seen_behind_is_polled_while_the_ones_ahead_back_off() -> None:
    """east was seen ahead (to 10) and fails; west was last seen at 5, when the partition
    polled east at its tail. With east backing off, west is long-polled at the local end (it
    may hold the records by now: its end is stale), not left unasked until east comes back;
    once east is healthy again, it serves; where east's records from 5 are gone, nothing;
    nor where west was seen ending below 5."""
    health = {n: SourceHealth(n, rank) for rank, n in enumerate(["east", "west"])}
    ends = {"east": RemoteEnds(0, 10), "west": RemoteEnds(0, 5)}
    health["east"].failed(0.0, "RequestTimedOutError")
    plan = ChunkPlan(health, ends, {}, lambda _: 40_000, 4, ByteBudget(1 << 30))
    (poll,) = plan.launches(5, 10, 0.0)
    assert (poll.start, poll.end, poll.remote) == (5, None, "west")
    assert plan.polls(poll)

    later = health["east"].unhealthy_until + 1
    plan = ChunkPlan(health, ends, {}, lambda _: 40_000, 4, ByteBudget(1 << 30))
    (fetch,) = plan.launches(5, 10, later)
    assert fetch.remote == "east"

    gone = {"east": RemoteEnds(8, 10), "west": RemoteEnds(0, 5)}
    plan = ChunkPlan(health, gone, {}, lambda _: 40_000, 4, ByteBudget(1 << 30))
    assert plan.launches(5, 10, later) == []

    # seen ending below 5: a fetch at 5 would be answered out of range (and back west off
    # for every partition), so it is not asked
    behind = {"east": RemoteEnds(0, 10), "west": RemoteEnds(0, 3)}
    plan = ChunkPlan(health, behind, {}, lambda _: 40_000, 4, ByteBudget(1 << 30))
    assert plan.launches(5, 10, 0.0) == []


def test_at_the_tail_a_remote_seen_behind_is_not_polled_past_its_end() -> None:
    """Caught up with east at 10: while east backs off, west, last seen ending at 6, is not
    polled at 10 (answered out of range, it would back off for every partition; the copier
    lists its ends instead). Seen ending at 10 it is; and where no remote was ever seen at
    the local end (the local log ahead of all), the furthest is polled as before, its
    out-of-range answer telling whether it lost records copied from it."""
    health = {n: SourceHealth(n, rank) for rank, n in enumerate(["east", "west"])}
    health["east"].failed(0.0, "RequestTimedOutError")

    def launched(ends: dict[str, RemoteEnds]) -> list[tuple[int, int | None, str]]:
        plan = ChunkPlan(health, ends, {}, lambda _: 40_000, 4, ByteBudget(1 << 30))
        return [(c.start, c.end, c.remote) for c in plan.launches(10, 10, 0.0)]

    assert launched({"east": RemoteEnds(0, 10), "west": RemoteEnds(0, 6)}) == []
    assert launched({"east": RemoteEnds(0, 10), "west": RemoteEnds(0, 10)}) == [(10, None, "west")]
    assert launched({"east": RemoteEnds(0, 8), "west": RemoteEnds(0, 6)}) == [(10, None, "west")]
    health["east"].unhealthy_until = 0.0
    assert launched({"east": RemoteEnds(0, 10), "west": RemoteEnds(0, 6)}) == [(10, None, "east")]
