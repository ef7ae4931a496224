"""The decisions of one partition's chunked fetch, over plain values: which chunks to fetch
now and from which remote, what a fetch answer covered and what must be fetched again, and
which fetched chunk continues the local log at the frontier. No tasks, no I/O: the time comes
in as a value. ``chunks.ChunkScheduler`` runs one fetch task per chunk this plan launches and
feeds each answer or failure back.

What the plan holds: chunks in flight, chunks fetched and ready (a bounded reorder buffer),
ranges to fetch again, the next offset to fetch and an estimate of a record's size. Each
chunk holds a ``Ticket`` of the process's byte budget, from its launch until its writes are
answered (or it is thrown away)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping

from syncer.batches import CONTROL_BIT, split_batches
from syncer.budget import ByteBudget
from syncer.chunk_sizes import Sizes, fitted_fetch_bytes
from syncer.chunk_types import Chunk as Chunk
from syncer.chunk_types import Fetched as Fetched
from syncer.holes import RemoteEnds
from syncer.sources import (
    MAX_BUSY,
    SourceHealth,
    lead_for,
    pick_source,
    tail_source,
    usable_sources,
)
from syncer.wire import FetchedPartition


class ChunkPlan:
    """Per partition: chunks in flight, what came back, what must be fetched again.
    ``fetch_bytes(remote)`` is what one fetch from ``remote`` may bring."""

    def __init__(
        self,
        health: Mapping[str, SourceHealth],
        ends: Mapping[str, RemoteEnds],
        excluded: Mapping[str, str],
        fetch_bytes: Callable[[str], int],
        max_chunks: int,
        memory: ByteBudget,
    ) -> None:
        self.health = health
        self.ends = ends
        self.excluded = excluded
        self.fetch_bytes = fetch_bytes
        self.max_chunks = max_chunks
        self.memory = memory
        self.inflight: dict[int, Chunk] = {}  # by number
        self.ready: dict[int, Fetched] = {}  # by the chunk's start
        self.todo: list[tuple[int, int]] = []  # ranges to fetch again, in order
        self.next_fetch = 0
        self.target = 0
        self.sizes = Sizes()  # learned from the answers
        self.starved = False  # the frontier's fetch waits for room in the byte budget
        self.writing: Fetched | None = None  # taken by the copier, its ticket with it
        self._numbers = itertools.count(1)
        # chunk starts whose fetch with a lead brought the batch below and nothing more (a
        # fetch that carries one batch, its limit below a batch's size): fetched again
        # without a lead, or each try would bring that batch alone, for ever
        self._leadless: set[int] = set()

    def __repr__(self) -> str:
        return (
            f"<ChunkPlan [in flight: {len(self.inflight)}, ready: {len(self.ready)},"
            f" todo: {len(self.todo)}, next: {self.next_fetch}]>"
        )

    def busy(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for chunk in self.inflight.values():
            counts[chunk.remote] = counts.get(chunk.remote, 0) + 1
        return counts

    def chunk_records(self, remote: str, lead: bool = False) -> int:
        """Records that fill one fetch of ``remote`` (its own partition_fetch_max_bytes, cut
        so that each of its lanes can keep its requests in flight inside the byte budget),
        with ``lead`` the batch below the chunk's start included."""
        fetch = fitted_fetch_bytes(
            self.fetch_bytes(remote), self.memory.limit, self.health[remote].lanes
        )
        return self.sizes.full(fetch, lead)

    @property
    def chunk_budget(self) -> int:
        """Chunks fetched or waiting to be written at once: ``max_chunks``, but at least
        enough to keep every lane of the partition's remotes busy."""
        lanes = sum(h.lanes for n, h in self.health.items() if n not in self.excluded)
        return max(self.max_chunks, MAX_BUSY * lanes)

    # launching ------------------------------------------------------------------------------

    def launches(self, frontier: int, target: int, now: float) -> list[Chunk]:
        """The chunks to fetch now, each holding its ticket: while the reorder budget and
        the byte budget allow, re-fetches first, then new chunks up to ``target``, else
        (caught up) one long poll at the tail; and the chunk at ``frontier`` if none holds
        it, unless the chunk in flight just past it will bring it (``_brought_after``).
        Call ``discard_excluded`` first."""
        self.target = target
        self.next_fetch = max(self.next_fetch, frontier)
        if self._leadless:  # (each step at the tail comes here: none to look at, mostly)
            self._leadless = {start for start in self._leadless if start >= frontier}
        if self.todo:
            self.todo = [(s, e) for s, e in self.todo if s < target and e > frontier]
        started: list[Chunk] = []
        budget = self.chunk_budget
        while len(self.inflight) + len(self.ready) < budget and self.memory.has_room():
            chunk = self._next_chunk(frontier, target, now)
            if chunk is None:
                break
            started.append(self._start(chunk, now))
        self.starved = False
        if not self._covers(frontier):
            # the chunk everything waits for goes out even when the reorder buffer is full,
            # and past the process's byte budget when this partition holds some of it (what
            # it holds is freed only by writing from the frontier on); one that holds none
            # waits for room, so the budget bounds how many partitions fetch at once
            if self.inflight or self.ready or self.memory.has_room():
                chunk = self._gap_chunk(frontier, now)
                if chunk is not None:
                    started.append(self._start(chunk, now))
            else:
                self.starved = True
        return started

    def _start(self, chunk: Chunk, now: float) -> Chunk:
        start, end, remote = chunk.start, chunk.end, chunk.remote
        # an open fetch (a poll at the tail) never carries a lead: none looked for
        lead = 0 if end is None or start in self._leadless else self._lead(start, end, remote, now)
        ticket = self.memory.ticket(self._expected_bytes(start, end, remote, lead))
        number = next(self._numbers)
        chunk = Chunk(start, end, remote, now, ticket, number, lead)  # not ``replace``: 2x slower
        self.inflight[number] = chunk
        self._count(chunk, 1)
        return chunk

    def _count(self, chunk: Chunk, change: int) -> None:
        """A closed chunk joins (1) or leaves (-1) the chunks in flight on its remote that
        every partition's choice of remote sees (``SourceHealth.chunks``); the open ones are
        polls at the tail, or a lone remote's one fetch, no chunk another partition weighs."""
        if chunk.end is not None:
            self.health[chunk.remote].chunks += change

    def _ended(self, chunk: Chunk) -> None:
        """``chunk`` is in flight no more (answered or failed)."""
        del self.inflight[chunk.number]
        self._count(chunk, -1)

    def _expected_bytes(self, start: int, end: int | None, remote: str, lead: int) -> int:
        """What a fetch of the chunk from ``start`` to ``end`` of ``remote`` may bring,
        reserved in the budget until its size is known: a chunk's records, or up to the
        target for an open fetch. A long poll at the tail reserves nothing: caught-up
        partitions mostly get nothing back, and thousands of them must not hold the budget
        that partitions with a backlog wait for (what a poll does bring is counted when it
        arrives)."""
        if end is None and self._at_tail(start, remote):
            return 0
        end = self.target if end is None else end
        expected = self.sizes.ask(max(0, end - start), lead > 0)
        return min(self.fetch_bytes(remote), expected)

    def polls(self, chunk: Chunk) -> bool:
        """An open fetch at or past the remote's end as last seen: a long poll."""
        return chunk.end is None and self._at_tail(chunk.start, chunk.remote)

    def _at_tail(self, start: int, remote: str) -> bool:
        """Is ``start`` at or past ``remote``'s end as last seen (or is its end unknown)?"""
        known = self.ends.get(remote)
        return known is None or start >= known.end

    def ask_bytes(self, chunk: Chunk) -> int | None:
        """The bytes to ask for: about the chunk's records (the broker cannot stop at an
        offset, and what it sends past the chunk's end another remote is fetching already);
        None for an open fetch (as much as one fetch brings)."""
        if chunk.end is None:
            return None
        return self.sizes.ask(chunk.end - chunk.start, chunk.lead > 0)

    def _lead(self, start: int, end: int | None, remote: str, now: float) -> int:
        """``lead_for`` a chunk from ``start`` to ``end`` of ``remote``; none for an open
        one (a long poll from below the tail would come back at once, with that batch)."""
        holders = usable_sources(start, self.ends, self.health, self.excluded, now)
        others, known = any(n != remote for n in holders), self.ends.get(remote)
        lead = lead_for(start, remote, self._before(start), others, known.start if known else 0)
        return 0 if end is None else lead

    def _before(self, start: int) -> str | None:
        """The remote of the chunk whose records end at ``start`` (in flight, fetched or
        taken to be written), if one is known."""
        ending = [c.remote for c in self.inflight.values() if c.end == start]
        fetched = [*self.ready.values(), *([self.writing] if self.writing else [])]
        ending += [g.remote for g in fetched if start in (g.covered_end, g.chunk.end)]
        return ending[0] if ending else None

    def _covers(self, frontier: int) -> bool:
        """Is the chunk holding ``frontier`` in flight or fetched already? (Not one taken by
        the copier: it may write only a part of it, up to the remote's stable end, and the
        rest is fetched again from where it stopped.)"""
        for chunk in self.inflight.values():
            if chunk.start <= frontier and (chunk.end is None or frontier < chunk.end):
                return True
        return any(
            min(got.chunk.start, got.first_offset) <= frontier < got.covered_end
            or (got.chunk.end is None and got.chunk.start == frontier)
            for got in self.ready.values()
        )

    def _gap_chunk(self, frontier: int, now: float) -> Chunk | None:
        """The chunk at ``frontier``: the range to fetch again that holds it (unless the
        chunk after it, in flight, will bring it: ``_brought_after``), else open up to the
        next fetched chunk."""
        before = self._before(frontier)
        remote = pick_source(frontier, self.ends, self.health, {}, self.excluded, now, before)
        for start, end in self.todo:
            if start <= frontier < end:
                if remote is None or self._brought_after(frontier, end):
                    return None
                self.todo.remove((start, end))
                return Chunk(frontier, end, remote)
        later = [s for s in self.ready if s > frontier]
        if remote is None:
            return None
        return Chunk(frontier, min(later) if later else None, remote)

    def _next_chunk(self, frontier: int, target: int, now: float) -> Chunk | None:
        """Re-fetches first; then, while several remotes or lanes hold the next offsets, a
        chunk cut to size for the best of them; otherwise one open-ended fetch at a time (a
        single connection gains nothing from cutting, and the tail is long-polled this way)."""
        for start, end in list(self.todo):
            waiting = self._successor_covers(start, end)
            if waiting is not False:
                if waiting is True:
                    self.todo.remove((start, end))  # the next chunk brought it already
                continue
            before = self._before(start)
            busy = self.busy()
            remote = pick_source(start, self.ends, self.health, busy, self.excluded, now, before)
            if remote is None:
                return None
            self.todo.remove((start, end))
            return Chunk(start, end, remote)
        start = self.next_fetch
        open_one = any(chunk.end is None for chunk in self.inflight.values())
        if start >= target and (open_one or len(self.ready) > 1):
            return None  # as below, without looking for holders (each step at the tail)
        holders = usable_sources(start, self.ends, self.health, self.excluded, now)
        lanes = sum(self.health[n].lanes for n in holders)
        if start < target and lanes > 1:
            if self.sizes.shape is None and (self.inflight or self.ready):
                return None  # the first answer shows the batches' shape: then cut the rest
            before = self._before(start)
            busy = self.busy()
            remote = pick_source(start, self.ends, self.health, busy, self.excluded, now, before)
            if remote is None:
                return None
            lead = self._lead(start, target, remote, now) > 0
            full = self.chunk_records(remote, lead)
            size = self.sizes.next_chunk(target - start, lanes, full, lead)
            end = min(target, start + size)
            self.next_fetch = end
            return Chunk(start, end, remote)
        if open_one or len(self.ready) > 1:
            return None  # one open-ended fetch at a time, at most two fetched ahead
        if holders:
            return Chunk(start, None, holders[0])
        ends = {n: e for n, e in self.ends.items() if n not in self.excluded}
        if any(e.start <= start < e.end for e in ends.values()):
            # every remote seen holding ``start`` backs off (a dead or paused broker): one
            # seen ending exactly there is long-polled, as at the tail. Its end was last seen
            # when it was last fetched from, maybe long ago (a partition polls one remote at
            # its tail): it may hold the records by now. Without this the partition waited
            # for the dead remote while another had them (2026-12-06). One seen ending below
            # ``start`` is not asked: an offset past its end is answered out of range, and
            # that backs the remote off for every partition; the copier lists its ends
            # instead (``PartitionSources.behind``), and then it holds ``start`` or not.
            return self._poll_at(start, {n: e for n, e in ends.items() if e.end == start}, now)
        if any(e.end > start for e in ends.values()):
            return None  # ahead, but its records from ``start`` are gone: the copier says why
        # at the tail: a remote seen ending at ``start`` is polled; while every such one
        # backs off, the others, seen ending below, are not fetched from past their ends
        # (out of range: backed off for every partition) but listed by the copier
        # (``PartitionSources.behind``). Only where none was seen at ``start`` (the local log
        # ahead of every remote) is the furthest polled, and an out-of-range answer tells
        # whether it lost records copied from it.
        at = {n: e for n, e in ends.items() if e.end == start}
        return self._poll_at(start, at or ends, now)

    def _poll_at(self, start: int, ends: Mapping[str, RemoteEnds], now: float) -> Chunk | None:
        """A long poll at ``start`` on the healthy remote of ``ends`` furthest ahead (None
        while every one backs off)."""
        remote = tail_source(ends, self.health, self.excluded, now)
        return None if remote is None else Chunk(start, None, remote)

    def _brought_after(self, start: int, end: int) -> bool:
        """Will the chunk in flight from ``end`` bring ``[start, end)`` too? Where that is
        less than a batch's span, an answer fell short of ``end`` in the batch holding it,
        and the next chunk's answer begins at that batch. Fetched at once, it came after that
        answer on the same link (a partition's chunks stay on one remote): a traced copy
        from 3 remotes brought such batches twice."""
        span = self.sizes.shape.records if self.sizes.shape else 0
        if end - start >= span or self._successor_covers(start, end) is not None:
            return False
        # not behind a long poll: it answers only when the remote grows, from ``end`` on
        return not any(c.start == end and self.polls(c) for c in self.inflight.values())

    def _successor_covers(self, start: int, end: int) -> bool | None:
        """Does the chunk that starts at ``end`` also hold ``[start, end)``? Its first batch
        usually begins before its start, so a short remainder needs no fetch of its own.
        None: that chunk is still in flight, so wait and see."""
        after = self.ready.get(end)
        if after is not None:
            return after.first_offset <= start
        if any(chunk.start == end for chunk in self.inflight.values()):
            return None
        return False

    # answers --------------------------------------------------------------------------------

    def answered(self, chunk: Chunk, fetched: FetchedPartition) -> Fetched:
        """``chunk``'s fetch brought ``fetched`` (no error): it is ready, holding the bytes it
        brought; what it fell short of is fetched again."""
        batches = split_batches(fetched.records)  # a halt here leaves it in flight: released
        self._ended(chunk)
        size = len(fetched.records)
        chunk.ticket.settle(size)
        # one pass over the batches (each answer of a steady copy comes here, before its write)
        covered, first, records = chunk.start, None, 0
        shapes: list[tuple[int, int]] = []
        for b in batches:
            end = b.base_offset + b.last_offset_delta + 1
            covered = max(covered, end)
            if first is None or b.base_offset < first:
                first = b.base_offset
            records += b.record_count
            if not b.attributes & CONTROL_BIT:
                shapes.append((end - b.base_offset, len(b.raw)))
        self.sizes.learn(size, records, shapes)
        if chunk.lead and covered <= chunk.start:
            self._leadless.add(chunk.start)
        got = Fetched(chunk, fetched, batches, covered, chunk.start if first is None else first)
        usable = got.usable_end  # the rest, past the stable end told, is fetched again
        if chunk.end is not None and usable < chunk.end:
            self._fell_short(usable, chunk.end)
        self.next_fetch = max(self.next_fetch, usable)
        # two chunks may start at one offset (an open fetch in flight when more lanes came
        # to hold it): the one that reaches further stays, or what only it holds is lost
        other = self.ready.get(chunk.start)
        if other is not None and other.covered_end > covered:
            got.ticket.release()
            return got
        if other is not None:
            other.ticket.release()
        self.ready[chunk.start] = got
        return got

    def tail_answer(self, chunk: Chunk, fetched: FetchedPartition) -> Fetched | None:
        """``fetched`` (records, no error), the answer to ``chunk``, the one fetch of a
        caught-up partition: what ``answered`` would make ready, if it continues at the
        chunk's start and reaches the remote's end, and no remote is known to end further
        (so that the partition's next fetch is a poll from where it ends: ``advance_tail``);
        else None. Nothing changes here; its ticket is not settled."""
        if chunk.end is not None or chunk.lead or self.ready or self.todo or self.excluded:
            return None
        if len(self.inflight) != 1 or self.inflight.get(chunk.number) is not chunk:
            return None
        batches = split_batches(fetched.records)
        if not batches:
            return None
        covered, first = chunk.start, batches[0].base_offset
        for b in batches:
            covered = max(covered, b.base_offset + b.last_offset_delta + 1)
            first = min(first, b.base_offset)
        if first > chunk.start or covered <= chunk.start or covered != fetched.stable_end:
            return None  # not from the start, nothing new, or more to fetch than one poll
        if any(ends.end > covered for ends in self.ends.values()):
            return None  # another remote is ahead: the usual launches fetch from it
        return Fetched(chunk, fetched, batches, covered, first)

    def advance_tail(self, got: Fetched, now: float) -> Chunk:
        """``got`` (from ``tail_answer``) was written as it came: what ``answered`` and
        ``take`` do for it, and its chunk's fetch polls on from where it ended, as the
        plan's open chunk there (same number: the same fetch; no bytes held, as a poll at
        the tail holds none). Its ticket, settled, goes with ``got``. The new chunk."""
        chunk = got.chunk
        self._ended(chunk)
        records, shapes = 0, []
        for b in got.batches:
            records += b.record_count
            if not b.attributes & CONTROL_BIT:
                shapes.append((b.last_offset_delta + 1, len(b.raw)))
        self.sizes.learn(got.size, records, shapes)
        self.next_fetch = max(self.next_fetch, got.covered_end)
        if self.writing is not None:
            self.writing.ticket.release()  # once only: the copier's release stands
        self.writing = got
        start, remote = got.covered_end, chunk.remote
        ticket = self.memory.ticket(self._expected_bytes(start, None, remote, 0))
        polling = Chunk(start, None, remote, now, ticket, chunk.number, 0)
        self.inflight[chunk.number] = polling
        return polling

    def _fell_short(self, covered: int, end: int) -> None:
        """An answer ended at ``covered``, short of ``end`` (a chunk cut by the learned shape
        ends inside a batch when the real borders lie elsewhere). If nothing was launched
        from ``end`` on, the next chunk starts at ``covered``, a border, so the cuts after it
        end at borders again (fetched alone, the rest's batch came twice and every later cut
        stayed off: 3 remotes, answers of 63 offsets bringing 34 new); else fetched again."""
        launched = end in self.ready or any(c.start == end for c in self.inflight.values())
        if end == self.next_fetch and not launched:
            self.next_fetch = covered
        else:
            self._refetch(covered, end)

    def failed(self, chunk: Chunk, *, again: bool = True) -> None:
        """``chunk``'s fetch failed (or its remote was dropped): its bytes go back to the
        budget and its range is fetched again (not when the partition stops: ``again``)."""
        self._ended(chunk)
        chunk.ticket.release()
        if again:
            self._refetch(chunk.start, chunk.end)

    def _refetch(self, start: int, end: int | None) -> None:
        if end is not None and end > start:
            self.todo.append((start, end))
            self.todo.sort()

    def discard_excluded(self) -> list[Chunk]:
        """Throw away what remotes dropped for this partition fetched or are fetching: none
        of it may be written. Their ranges are fetched again from the others. The chunks
        returned were in flight: their fetches are not wanted any more."""
        if not self.excluded:  # every step asks: none dropped, nothing to look at
            return []
        self._discard_ready_excluded()
        dropped = [c for c in self.inflight.values() if c.remote in self.excluded]
        for chunk in dropped:
            self.failed(chunk)
        return dropped

    def _discard_ready_excluded(self) -> None:
        if not self.excluded:
            return
        for start, got in list(self.ready.items()):
            if got.remote in self.excluded:
                del self.ready[start]
                got.ticket.release()
                self._refetch(start, got.chunk.end)

    # handing out ----------------------------------------------------------------------------

    def take(self, frontier: int) -> Fetched | None:
        """The fetched chunk that continues the local log at ``frontier``, if it is here;
        chunks the frontier has passed are thrown away, and so are those of dropped remotes
        (the fetches of dropped remotes still in flight are for ``discard_excluded``). Its
        ticket goes with it."""
        self._discard_ready_excluded()
        for start in sorted(self.ready):
            got = self.ready[start]
            if min(start, got.first_offset) > frontier:
                # not this one, but a later chunk may begin below it: one whose first batch
                # holds the frontier, past an answer that came back empty
                continue
            del self.ready[start]
            if got.covered_end > frontier or (got.chunk.end is None and start == frontier):
                if self.writing is not None:
                    self.writing.ticket.release()  # once only: the copier's release stands
                self.writing = got
                return got
            got.ticket.release()  # not needed: the frontier is past it
        return None

    def clear(self) -> list[Chunk]:
        """Forget every chunk, giving back the bytes of those in flight, ready, or taken and
        not handed to a write; the ones in flight are returned (their fetches are not
        wanted). What is to be fetched again stays to do."""
        for chunk in self.inflight.values():
            chunk.ticket.release()
            self._count(chunk, -1)
        for got in self.ready.values():
            got.ticket.release()
        if self.writing is not None:
            self.writing.ticket.release()
            self.writing = None
        dropped = list(self.inflight.values())
        self.inflight.clear()
        self.ready.clear()
        return dropped

    def restart(self, frontier: int) -> list[Chunk]:
        """Start over at ``frontier``: nothing in flight, ready, or to fetch again."""
        dropped = self.clear()
        self.todo.clear()
        self.next_fetch = frontier
        return dropped
