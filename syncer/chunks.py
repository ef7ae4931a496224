"""The gap of one partition as chunks fetched in parallel from any remote that holds them,
and a bounded reorder buffer that hands them back strictly in offset order."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from syncer.batches import Batch, split_batches
from syncer.budget import ByteBudget
from syncer.clusters import OFFSET_OUT_OF_RANGE, TP, FetchedPartition, error_for
from syncer.config import CopierConfig
from syncer.errors import PartitionHalted, TransientClusterError
from syncer.fetcher import Lanes
from syncer.holes import RemoteEnds
from syncer.sources import MAX_BUSY, SourceHealth, pick_source, tail_source, usable_sources

log = logging.getLogger(__name__)

DEFAULT_RECORD_BYTES = 1024
# the last chunks of a gap shrink down to this fraction of a full fetch
TAIL_SPLIT_FLOOR = 16


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Take a thrown-away fetch's outcome, so that none goes unretrieved."""
    if task.done() and not task.cancelled():
        task.exception()


def chunk_size(remaining: int, holders: int, full: int) -> int:
    """Records in the next chunk: a ``full`` fetch, but near the end of the gap a share of
    what is left, halving down to a floor, so every remote finishes at about the same time
    instead of the others waiting for one that took a big last chunk."""
    floor = max(1, full // TAIL_SPLIT_FLOOR)
    return min(full, remaining, max(floor, -(-remaining // (2 * holders))))


@dataclass(frozen=True, slots=True)
class Chunk:
    start: int
    end: int | None  # None: the open tail, long-polled when caught up
    remote: str
    launched: float = field(default=0.0, compare=False)
    reserved: int = field(default=0, compare=False)  # bytes held in the process's budget


@dataclass(frozen=True, slots=True)
class Fetched:
    chunk: Chunk
    fetched: FetchedPartition
    batches: list[Batch]
    covered_end: int  # one past the last offset the batches hold (chunk.start if none)
    first_offset: int  # where its first batch begins: often before the chunk's start

    @property
    def remote(self) -> str:
        return self.chunk.remote

    @property
    def size(self) -> int:
        return len(self.fetched.records)


class ChunkScheduler:
    """Per partition: chunks in flight, what came back, what must be fetched again."""

    def __init__(
        self,
        tp: TP,
        fetchers: Mapping[str, Lanes],
        health: Mapping[str, SourceHealth],
        ends: dict[str, RemoteEnds],
        excluded: Mapping[str, str],
        config: CopierConfig,
        memory: ByteBudget | None = None,
    ) -> None:
        self.tp = tp
        self.memory = memory or ByteBudget(config.buffer_bytes)
        self.fetchers = fetchers
        self.health = health
        self.ends = ends
        self.excluded = excluded
        self.config = config
        self._inflight: dict[asyncio.Task[tuple[FetchedPartition, float]], Chunk] = {}
        self._ready: dict[int, Fetched] = {}
        self._todo: list[tuple[int, int]] = []
        self._next_fetch = 0
        self._target = 0
        self._record_bytes = float(DEFAULT_RECORD_BYTES)
        self.starved = False  # the frontier's fetch waits for room in the byte budget
        self._writing: Fetched | None = None  # taken by the copier, not yet written
        self._stopping = False
        self._stopped: asyncio.Future[None] | None = None  # wakes ``next_ready`` at a stop

    def __repr__(self) -> str:
        return (
            f"<ChunkScheduler {self.tp.topic}[{self.tp.partition}] [in flight:"
            f" {len(self._inflight)}, ready: {len(self._ready)}, todo: {len(self._todo)}]>"
        )

    def busy(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for chunk in self._inflight.values():
            counts[chunk.remote] = counts.get(chunk.remote, 0) + 1
        return counts

    def _holds(self) -> bool:
        """May the fetcher keep an empty poll answer and poll again (not when stopping)?"""
        return not self._stopping

    def stop_polling(self) -> None:
        """The copier is stopping: ``next_ready`` returns None now, polls held empty come
        back, and no more are held."""
        self._stopping = True
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result(None)
        for fetcher in self.fetchers.values():
            fetcher.release(self.tp)

    async def reset(self, frontier: int) -> None:
        await self.close()
        self._todo.clear()
        self._next_fetch = frontier

    async def close(self) -> None:
        tasks = list(self._inflight)
        for chunk in self._inflight.values():
            self.memory.release(chunk.reserved)
        for got in self._ready.values():
            self.memory.release(got.size)
        if self._writing is not None:
            self.memory.release(self._writing.size)
            self._writing = None
        self._inflight.clear()
        self._ready.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            # their outcomes (cancelled, or an error) are retrieved here and not needed; a
            # cancellation of the caller itself (the copier's) is raised, not swallowed
            await asyncio.gather(*tasks, return_exceptions=True)

    def chunk_records(self, remote: str) -> int:
        """Records that fill one fetch of ``remote`` (its own partition_fetch_max_bytes)."""
        limit = self.fetchers[remote].config.partition_fetch_max_bytes
        return max(1, int(limit / self._record_bytes))

    @property
    def chunk_budget(self) -> int:
        """Chunks fetched or waiting to be written at once: ``max_chunks``, but at least
        enough to keep every lane of the partition's remotes busy."""
        lanes = sum(h.lanes for n, h in self.health.items() if n not in self.excluded)
        return max(self.config.max_chunks, MAX_BUSY * lanes)

    def launch(self, frontier: int, target: int) -> None:
        """Start fetches while the reorder budget allows: re-fetches first, then new chunks
        up to ``target``, else (caught up) one long poll at the tail."""
        self._discard_excluded()
        self._target = target
        self._next_fetch = max(self._next_fetch, frontier)
        self._todo = [(s, e) for s, e in self._todo if s < target and e > frontier]
        now = time.monotonic()
        while len(self._inflight) + len(self._ready) < self.chunk_budget and self.memory.has_room():
            chunk = self._next_chunk(frontier, target, now)
            if chunk is None:
                break
            self._start(chunk)
        self.starved = False
        if not self._covers(frontier):
            # the chunk everything waits for goes out even when the reorder buffer is full,
            # and past the process's byte budget when this partition holds some of it (what
            # it holds is freed only by writing from the frontier on); one that holds none
            # waits for room, so the budget bounds how many partitions fetch at once
            if self._inflight or self._ready or self.memory.has_room():
                self._start(self._gap_chunk(frontier, now))
            else:
                self.starved = True

    def _start(self, chunk: Chunk | None) -> None:
        if chunk is not None:
            reserved = self.memory.reserve(self._expected_bytes(chunk))
            chunk = dataclasses.replace(chunk, launched=time.monotonic(), reserved=reserved)
            task = asyncio.create_task(self._fetch(chunk))
            self._inflight[task] = chunk
            log.debug(
                "%s[%d]: chunk %s..%s from %s",
                self.tp.topic,
                self.tp.partition,
                chunk.start,
                chunk.end,
                chunk.remote,
            )

    def _expected_bytes(self, chunk: Chunk) -> int:
        """What a fetch may bring, reserved in the budget until its size is known: a chunk's
        records, or up to the target for an open fetch. A long poll at the tail reserves
        nothing: caught-up partitions mostly get nothing back, and thousands of them must
        not hold the budget that partitions with a backlog wait for (what a poll does bring
        is counted when it arrives)."""
        if self._polls(chunk):
            return 0
        limit = self.fetchers[chunk.remote].config.partition_fetch_max_bytes
        end = self._target if chunk.end is None else chunk.end
        expected = int(max(0, end - chunk.start) * self._record_bytes * 1.05) + 1
        return min(limit, expected)

    def _polls(self, chunk: Chunk) -> bool:
        """An open fetch at or past the remote's end as last seen: a long poll."""
        known = self.ends.get(chunk.remote)
        return chunk.end is None and (known is None or chunk.start >= known.end)

    def _covers(self, frontier: int) -> bool:
        """Is the chunk holding ``frontier`` in flight or fetched already?"""
        for chunk in self._inflight.values():
            if chunk.start <= frontier and (chunk.end is None or frontier < chunk.end):
                return True
        return any(
            min(got.chunk.start, got.first_offset) <= frontier < got.covered_end
            or (got.chunk.end is None and got.chunk.start == frontier)
            for got in self._ready.values()
        )

    def _gap_chunk(self, frontier: int, now: float) -> Chunk | None:
        for start, end in self._todo:
            if start <= frontier < end:
                remote = pick_source(frontier, self.ends, self.health, {}, self.excluded, now)
                if remote is not None:
                    self._todo.remove((start, end))
                    return Chunk(frontier, end, remote)
                return None
        later = [s for s in self._ready if s > frontier]
        remote = pick_source(frontier, self.ends, self.health, {}, self.excluded, now)
        if remote is None:
            return None
        return Chunk(frontier, min(later) if later else None, remote)

    def _next_chunk(self, frontier: int, target: int, now: float) -> Chunk | None:
        """Re-fetches first; then, while several remotes or lanes hold the next offsets, a
        chunk cut to size for the best of them; otherwise one open-ended fetch at a time (a
        single connection gains nothing from cutting, and the tail is long-polled this way)."""
        busy = self.busy()
        for start, end in list(self._todo):
            waiting = self._successor_covers(start, end)
            if waiting is not False:
                if waiting is True:
                    self._todo.remove((start, end))  # the next chunk brought it already
                continue
            remote = pick_source(start, self.ends, self.health, busy, self.excluded, now)
            if remote is None:
                return None
            self._todo.remove((start, end))
            return Chunk(start, end, remote)
        start = self._next_fetch
        holders = usable_sources(start, self.ends, self.health, self.excluded, now)
        lanes = sum(self.health[n].lanes for n in holders)
        if start < target and lanes > 1:
            remote = pick_source(start, self.ends, self.health, busy, self.excluded, now)
            if remote is None:
                return None
            end = min(target, start + chunk_size(target - start, lanes, self.chunk_records(remote)))
            self._next_fetch = end
            return Chunk(start, end, remote)
        if any(chunk.end is None for chunk in self._inflight.values()) or len(self._ready) > 1:
            return None  # one open-ended fetch at a time, at most two fetched ahead
        if holders:
            return Chunk(start, None, holders[0])
        if any(e.end > start for n, e in self.ends.items() if n not in self.excluded):
            return None  # ahead, but none holds ``start`` now: the copier says why
        remote = tail_source(self.ends, self.health, self.excluded, now)
        return None if remote is None else Chunk(start, None, remote)

    def _successor_covers(self, start: int, end: int) -> bool | None:
        """Does the chunk that starts at ``end`` also hold ``[start, end)``? Its first batch
        usually begins before its start, so a short remainder needs no fetch of its own.
        None: that chunk is still in flight, so wait and see."""
        after = self._ready.get(end)
        if after is not None:
            return after.first_offset <= start
        if any(chunk.start == end for chunk in self._inflight.values()):
            return None
        return False

    async def _fetch(self, chunk: Chunk) -> tuple[FetchedPartition, float]:
        started = time.monotonic()
        # the fetcher times each request out after chunk_timeout_ms; this bounds the wait in
        # its queue too (one chunk ahead per lane and partition), should a request never end
        timeout = self.config.chunk_timeout_ms / 1000 * (MAX_BUSY + 1)
        # ask for about the chunk's bytes: the broker cannot stop at an offset, and what it
        # sends past the chunk's end is what another remote is fetching already
        limit = None
        if chunk.end is not None:
            limit = int((chunk.end - chunk.start) * self._record_bytes * 1.05) + 1
        fetcher = self.fetchers[chunk.remote]
        fetched = await asyncio.wait_for(
            fetcher.fetch(self.tp, chunk.start, limit, poll=self._polls(chunk), hold=self._holds),
            timeout,
        )
        return fetched, time.monotonic() - started

    async def next_ready(self, frontier: int) -> Fetched | None:
        """The fetched chunk that continues at ``frontier``, waiting for it if it is in
        flight; None if nothing that could continue there is in flight, or if the copier is
        stopping (it need not wait for a long poll to end)."""
        if self._stopped is None:
            self._stopped = asyncio.get_running_loop().create_future()
        while True:
            found = self._take(frontier)
            if found is not None:
                return found
            if not self._inflight or self._stopping:
                return None
            waiting: set[asyncio.Future[Any]] = {*self._inflight, self._stopped}
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            for task in self._inflight.keys() & done:
                self._complete(task, self._inflight.pop(task))
            self.launch(frontier, self._target)

    def _discard_excluded(self) -> None:
        """Throw away what remotes dropped for this partition fetched or are fetching: none
        of it may be written. Their ranges are fetched again from the others."""
        for start, got in list(self._ready.items()):
            if got.remote in self.excluded:
                del self._ready[start]
                self.memory.release(got.size)
                self._refetch(start, got.chunk.end)
        for task, chunk in list(self._inflight.items()):
            if chunk.remote in self.excluded:
                del self._inflight[task]
                task.cancel()
                task.add_done_callback(_retrieve)
                self.memory.release(chunk.reserved)
                self._refetch(chunk.start, chunk.end)

    def _take(self, frontier: int) -> Fetched | None:
        self._discard_excluded()
        for start in sorted(self._ready):
            got = self._ready[start]
            if min(start, got.first_offset) > frontier:
                return None
            del self._ready[start]
            if got.covered_end > frontier or (got.chunk.end is None and start == frontier):
                self._writing = got  # in the budget until written (``written``)
                return got
            self.memory.release(got.size)  # not needed: the frontier is past it
        return None

    def written(self, got: Fetched) -> int:
        """The copier has handed ``got``'s batches to the writer: the bytes it holds in the
        budget are the copier's from now on, to release when those writes are answered
        (their copies are in produce requests until then)."""
        if self._writing is got:
            self._writing = None
            return got.size
        return 0

    def _complete(self, task: asyncio.Task[tuple[FetchedPartition, float]], chunk: Chunk) -> None:
        health = self.health[chunk.remote]
        if chunk.remote in self.excluded:  # dropped while it was in flight
            _retrieve(task)
            self.memory.release(chunk.reserved)
            self._refetch(chunk.start, chunk.end)
            return
        try:
            fetched, seconds = task.result()
            self._check(chunk, fetched)
        except (TransientClusterError, TimeoutError, OSError) as exc:
            health.failed(time.monotonic(), f"{type(exc).__name__}: {exc}", chunk.launched)
            log.info(
                "%s[%d]: remote %s failed a fetch at %d (%s); others take its chunks",
                self.tp.topic,
                self.tp.partition,
                chunk.remote,
                chunk.start,
                exc,
            )
            self.memory.release(chunk.reserved)
            self._refetch(chunk.start, chunk.end)
            return
        except BaseException:
            self.memory.release(chunk.reserved)
            raise
        self.memory.settle(chunk.reserved, len(fetched.records))
        self.ends[chunk.remote] = RemoteEnds(fetched.log_start_offset, fetched.stable_end)
        batches = split_batches(fetched.records)
        covered = max((b.next_offset for b in batches), default=chunk.start)
        covered = max(covered, chunk.start)
        size = len(fetched.records)
        health.succeeded(size, seconds)
        records = sum(b.record_count for b in batches)
        if records:
            self._record_bytes = 0.7 * self._record_bytes + 0.3 * (size / records)
        if chunk.end is not None and covered < chunk.end:
            self._refetch(covered, chunk.end)
        self._next_fetch = max(self._next_fetch, covered)
        first = min((b.base_offset for b in batches), default=chunk.start)
        self._ready[chunk.start] = Fetched(chunk, fetched, batches, covered, first)
        log.debug(
            "%s[%d]: chunk %s..%s from %s covered to %d (%d bytes)",
            self.tp.topic,
            self.tp.partition,
            chunk.start,
            chunk.end,
            chunk.remote,
            covered,
            size,
        )

    def _refetch(self, start: int, end: int | None) -> None:
        if end is not None and end > start:
            self._todo.append((start, end))
            self._todo.sort()

    def _check(self, chunk: Chunk, fetched: FetchedPartition) -> None:
        code = fetched.error_code
        if code == 0:
            return
        where = f"{self.tp.topic}[{self.tp.partition}]"
        others = [n for n in self.ends if n != chunk.remote and n not in self.excluded]
        error = error_for(code, f"{where}: fetch from remote {chunk.remote} at {chunk.start}")
        if isinstance(error, TransientClusterError) or others:
            raise TransientClusterError(str(error))
        if code == OFFSET_OUT_OF_RANGE:
            raise PartitionHalted(
                f"{where}: offset {chunk.start} is out of range at remote {chunk.remote}: the"
                " remote's log no longer holds it or ends before it (topic deleted and"
                " recreated?)"
            )
        raise PartitionHalted(str(error))
