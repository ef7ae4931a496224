"""Partitions copied from several remotes at once, their chunk plans sharing the remotes'
health as in one process, each remote a link that answers its chunks one after the other at
a fixed rate. No task and no broker: a clock in a heap."""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from syncer.budget import ByteBudget
from syncer.chunk_plan import Chunk, ChunkPlan
from syncer.chunk_sizes import BatchShape
from syncer.holes import RemoteEnds
from syncer.sources import SourceHealth
from syncer.wire import FetchedPartition
from tests.unit.test_chunk_plan import alike, answer_by_bytes

RATE = 1e6  # bytes per second, every remote's link
FETCH = 100_000  # bytes a fetch may bring: about 9 batches of 10 records of 1 KiB


@dataclass
class Copy:
    """What a copy of equal partitions did: per partition, the remote each chunk handed out
    came from, in offset order; the bytes every answer brought; when the last one came."""

    log_bytes: int
    fetched: int = 0
    done_s: float = 0.0
    handed: list[list[tuple[int, str, int]]] = field(default_factory=list)  # start, remote, lead

    @property
    def leads(self) -> int:
        return sum(1 for chunks in self.handed for _s, _r, lead in chunks if lead)

    def switches(self) -> int:
        """Chunks handed out whose remote is not that of the chunk before them."""
        return sum(
            1
            for chunks in self.handed
            for (_s, before, _l), (_t, remote, _m) in itertools.pairwise(chunks)
            if remote != before
        )


def copy(partitions: int, remotes: list[str], batches: int = 160, short_every: int = 0) -> Copy:
    """Copy ``partitions`` partitions of ``batches`` batches each from every one of
    ``remotes``: a partition launches its chunks at the start and each time one of its own
    fetches is answered (as its copier wakes), and writes what continues its log at once.
    ``short_every``: every so many batches one of 3 records (a producer's linger ran out),
    so that chunks cut by the usual shape end off the batches' borders now and then."""
    log = alike([(0, 3 if short_every and i % short_every == 7 else 10) for i in range(batches)])
    end = log.batches[-1][1]
    health = {n: SourceHealth(n, rank, bytes_per_s=RATE) for rank, n in enumerate(remotes)}
    plans = []
    for _ in range(partitions):
        ends = {n: RemoteEnds(0, end) for n in remotes}
        plan = ChunkPlan(health, ends, {}, lambda _: FETCH, 8, ByteBudget(1 << 40))
        plan.sizes.shape = BatchShape(10, len(log.batches[0][2]))  # no probe: cut at once
        plans.append(plan)
    result = Copy(partitions * len(b"".join(raw for _b, _n, raw in log.batches)))
    result.handed = [[] for _ in plans]
    frontiers = [0] * partitions
    free_at = dict.fromkeys(remotes, 0.0)  # when each link has sent what it was asked
    answers: list[tuple[float, int, int, Chunk, FetchedPartition]] = []
    order = itertools.count()

    def launch(p: int, now: float) -> None:
        if frontiers[p] >= end:
            return
        for chunk in plans[p].launches(frontiers[p], end, now):
            if chunk.start >= end:  # the long poll at the tail: nothing comes, it waits
                continue
            ask = min(plans[p].ask_bytes(chunk) or FETCH, FETCH)
            got = answer_by_bytes(log, chunk.fetch_offset, end, ask)
            free_at[chunk.remote] = max(now, free_at[chunk.remote]) + len(got.records) / RATE
            heapq.heappush(answers, (free_at[chunk.remote], next(order), p, chunk, got))

    for p in range(partitions):
        launch(p, 0.0)
    while answers:
        now, _, p, chunk, got = heapq.heappop(answers)
        fetched = plans[p].answered(chunk, got)
        result.fetched += fetched.size
        while (ready := plans[p].take(frontiers[p])) is not None:
            if ready.covered_end > frontiers[p]:
                result.handed[p].append((ready.chunk.start, ready.remote, ready.chunk.lead))
                result.done_s = max(result.done_s, now)
            frontiers[p] = max(frontiers[p], ready.covered_end)
        launch(p, now)
    assert frontiers == [end] * partitions
    for plan in plans:
        plan.clear()  # the polls at the tail
    assert all(h.chunks == 0 for h in health.values())  # every chunk counted out again
    return result


def test_partitions_stay_on_their_remotes_while_every_remote_has_partitions_of_its_own() -> None:
    """Six partitions over three remotes: a partition's chunks stay on one remote (a chunk
    from another remote than the one before it carries a batch more, its lead), moving only
    where a link would idle (at the start, while the first chunks spread, and at the tail),
    and every link stays busy: the copy takes about the backlog over the links' rate. Each
    partition spreading its own chunks over every remote, about 3 chunks in 4 changed remote,
    1.11x the backlog crossed the links and the copy took 1.14x as long."""
    done = copy(6, ["east", "west", "north"])
    chunks = sum(map(len, done.handed))
    assert done.switches() <= chunks // 10 and done.leads <= chunks // 10
    assert done.fetched <= 1.02 * done.log_bytes
    assert done.done_s <= 1.03 * done.log_bytes / (3 * RATE)


def test_batches_off_the_usual_shape_cross_the_links_little_more_than_once() -> None:
    """A short batch now and then (a producer's linger ran out) shifts the borders, so
    chunks cut by the usual shape end inside batches; with each partition's chunks on one
    remote, the rest of such a chunk waited behind the next chunk on the same link and was
    fetched on its own all the same: 1.23x the backlog, the copy 1.24x the links' time."""
    done = copy(6, ["east", "west", "north"], short_every=20)
    assert done.fetched <= 1.04 * done.log_bytes
    assert done.done_s <= 1.06 * done.log_bytes / (3 * RATE)


def test_a_remote_whose_own_partitions_are_done_takes_chunks_of_the_others() -> None:
    """Four partitions over three remotes: one remote is home to two, the others to one
    each; once theirs are done, their links would idle, so a partition at home on the busy
    one moves its next chunks to them (a lead each), and the copy still ends about when the
    links' rate says (each partition on its home alone: 1.5x as long)."""
    done = copy(4, ["east", "west", "north"])
    moved = [p for p, chunks in enumerate(done.handed) if len({r for _s, r, _l in chunks}) > 1]
    assert moved and done.switches() <= sum(map(len, done.handed)) // 5
    assert done.fetched <= 1.03 * done.log_bytes
    assert done.done_s <= 1.04 * done.log_bytes / (3 * RATE)


def test_one_partition_alone_uses_every_remote() -> None:
    """With no other partition to keep them busy, one partition's chunks go to every remote
    (their links would idle otherwise): about three times one remote's rate."""
    alone = copy(1, ["east"])
    spread = copy(1, ["east", "west", "north"])
    assert {remote for _s, remote, _l in spread.handed[0]} == {"east", "west", "north"}
    assert spread.done_s <= 0.45 * alone.done_s


def test_a_rest_short_of_a_batch_is_left_to_the_next_chunk_in_flight() -> None:
    """A chunk cut by the usual shape ends inside a batch where the borders have shifted
    (a short batch before it): its answer stops at the batch holding its end, and that
    batch begins the next chunk's answer. The frontier waits for that answer instead of
    fetching the batch on its own, which brought it twice."""
    log = alike([(0, 5)] + [(0, 10)] * 40)
    end = log.batches[-1][1]
    health = {n: SourceHealth(n, rank) for rank, n in enumerate(["east", "west"])}
    ends = {n: RemoteEnds(0, end) for n in health}
    plan = ChunkPlan(health, ends, {}, lambda _: FETCH, 8, ByteBudget(1 << 30))
    plan.sizes.shape = BatchShape(10, len(log.batches[1][2]))
    launched = plan.launches(0, end, 0.0)
    first = launched[0]
    after = next(c for c in launched if c.start == first.end)
    assert first.end is not None and after.remote == first.remote  # the same link
    got = plan.answered(first, answer_by_bytes(log, 0, end, plan.ask_bytes(first) or FETCH))
    assert first.end - 10 < got.covered_end < first.end  # short, inside the batch at its end
    assert plan.take(0) is got
    frontier = got.covered_end
    assert all(c.start > frontier for c in plan.launches(frontier, end, 0.0))
    ask = plan.ask_bytes(after) or FETCH
    brought = plan.answered(after, answer_by_bytes(log, after.fetch_offset, end, ask))
    assert brought.first_offset == frontier  # the batch holding the frontier came with it
    assert plan.take(frontier) is brought
