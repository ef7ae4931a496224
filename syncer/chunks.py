"""The gap of one partition as chunks fetched in parallel from any remote that holds them,
and a bounded reorder buffer that hands them back strictly in offset order. What to fetch,
from where, and what is ready is decided by ``chunk_plan.ChunkPlan``; this module owns the
fetches: one per chunk the plan launches, each answer or failure fed back to it. A fetch is
the fetcher's own future, no task of ours around it (a task per chunk cost a creation and
two steps of the loop per answer, ahead of the copier's write). The copier waits on one
future that the fetcher sets as it hands an answer back (``answered``), not on
``asyncio.wait``: it writes the records in the next loop turn, not three turns on."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

from syncer.brokers import BrokerFailed
from syncer.budget import ByteBudget
from syncer.chunk_plan import Chunk, ChunkPlan, Fetched
from syncer.chunk_sizes import chunk_size
from syncer.clusters import TP, FetchedPartition
from syncer.config import CopierConfig
from syncer.errors import PartitionHalted, TransientClusterError
from syncer.fetch_wants import Taken
from syncer.holes import RemoteEnds
from syncer.hop_trace import TRACE
from syncer.lanes import Lanes
from syncer.partition import PartitionSources
from syncer.sources import Verdict, judge
from syncer.tasks import cancel_and_wait
from syncer.waits import RECORDER, ChunkWaits
from syncer.wire import FetchOutcome

__all__ = ["Chunk", "ChunkScheduler", "Fetched", "chunk_size"]

log = logging.getLogger(__name__)

# how long the fetcher may hold the empty polls of a caught-up partition with one remote (it
# has no other to turn to), so that at 10,000 idle partitions their copiers seldom wake; with
# several, the fetcher's own bound (the chunk timeout): one that stalls gives way sooner
ONE_SOURCE_HOLD_S = 300.0


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Take a thrown-away fetch's outcome, so that none goes unretrieved."""
    if task.done() and not task.cancelled():
        task.exception()


class ChunkScheduler:
    """Per partition: the fetches of the chunks its plan launches. Each fetch is timed once,
    by the fetcher (from when its request goes out; its wait in the queue is bounded there
    too), so a chunk's fetch always ends."""

    def __init__(
        self,
        tp: TP,
        fetchers: Mapping[str, Lanes],
        sources: PartitionSources,
        config: CopierConfig,
        memory: ByteBudget | None = None,
    ) -> None:
        self.tp = tp
        self.memory = memory or ByteBudget(config.buffer_bytes)
        self.fetchers = fetchers
        self.sources = sources
        self.config = config
        self.plan = ChunkPlan(
            sources.healths,
            sources.ends,
            sources.dropped,
            lambda remote: self.fetchers[remote].config.partition_fetch_max_bytes,
            config.max_chunks,
            self.memory,
        )
        # each chunk's fetch, by number: the fetcher's future (or a task, where a lane must
        # learn the leader first)
        self._tasks: dict[int, asyncio.Future[FetchedPartition]] = {}
        self._stopping = False
        # what ``next_ready`` waits on: a fetch task ending, or a stop
        self._wake: asyncio.Future[None] | None = None
        # the last answer was empty: the copier knows it is caught up, so the fetcher may
        # hold the next empty poll (else that one comes back at once and says so)
        self._quiet = False
        # for ``waits`` (the benchmark's counts): what ``next_ready`` last handed back, when
        self._handed: tuple[bool, float] | None = None  # (a chunk, or a want of budget)
        self._wakes = 0
        # the copier's step taken in the fetcher's turn as an answer comes, while the copier
        # waits in ``next_ready`` (``PartitionCopier._step_now``); None: the copier wakes
        self.tail: Callable[[], None] | None = None
        # the copier's step on a chunk taken as its poll's answer comes, in the fetcher's turn
        # (``_take_tail``): if it wrote it all, what is left of it to run once the next poll
        # is out (None: nothing of it done that the copier's task does not do again); None:
        # every answer goes the usual way
        self.step: Callable[[Fetched], Callable[[], None] | None] | None = None
        # the offset the copier waits at: ``next_ready``'s, moved on by the steps ``tail`` takes
        self.frontier = 0
        # what ``tail`` left to the copier's task: a chunk it took and could not write
        # without a wait, or what it raised; ``next_ready`` returns or raises it
        self._left: tuple[Fetched | None, Exception | None] | None = None

    def __repr__(self) -> str:
        plan = self.plan
        return (
            f"<ChunkScheduler {self.tp.topic}[{self.tp.partition}] [in flight:"
            f" {len(plan.inflight)}, ready: {len(plan.ready)}, todo: {len(plan.todo)}]>"
        )

    @property
    def starved(self) -> bool:
        """Does the frontier's fetch wait for room in the byte budget?"""
        return self.plan.starved

    def _holds(self) -> bool:
        """May the fetcher keep an empty poll answer and poll again? Not when stopping, and
        not the first after records came: the copier learns from it that it caught up (held,
        it would say "copying" for a whole hold, up to the chunk timeout)."""
        return self._quiet and not self._stopping

    def stop_polling(self) -> None:
        """The copier is stopping: ``next_ready`` returns None now, polls held empty come
        back, and no more are held."""
        self._stopping = True
        self._wake_copier()
        for fetcher in self.fetchers.values():
            fetcher.release(self.tp)

    async def reset(self, frontier: int) -> None:
        await self.close()
        self.plan.restart(frontier)

    async def close(self) -> None:
        self.plan.clear()
        tasks = list(self._tasks.values())
        self._tasks.clear()
        # their outcomes (cancelled, or an error) are not needed; a cancellation of the
        # caller itself (the copier's) is raised, not swallowed
        await cancel_and_wait(*tasks)

    def launch(self, frontier: int, target: int) -> None:
        """Start the fetches the plan launches now (see ``ChunkPlan.launches``)."""
        self._drop_excluded()
        for chunk in self.plan.launches(frontier, target, time.monotonic()):
            answer = self._ask(chunk, self.plan.ask_bytes(chunk), self.plan.polls(chunk))
            fetch = asyncio.ensure_future(answer)  # a future already, but for a coroutine
            # a failure, or a stop, wakes the copier too (an answer woke it as it was set)
            fetch.add_done_callback(partial(self._ended, chunk.number))
            self._tasks[chunk.number] = fetch
            log.debug(
                "%s[%d]: chunk %s..%s from %s (lead %d)",
                self.tp.topic,
                self.tp.partition,
                chunk.start,
                chunk.end,
                chunk.remote,
                chunk.lead,
            )

    def _wake_copier(self) -> None:
        """A fetch was answered, failed or ended, or the copier stops: ``next_ready`` looks."""
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def _ask(self, chunk: Chunk, limit: int | None, poll: bool) -> Awaitable[FetchedPartition]:
        """One chunk's fetch, queued at the fetcher now, in the copier's loop turn (a
        caught-up partition's next poll joins the pass the fetcher makes in this same turn),
        waking the copier as it is answered: the fetcher calls ``answered`` right after it
        hands the answer back, so the chunk's task and then the copier run in the next loop
        turn (a task's done callbacks would take a turn more, ``asyncio.wait``'s two)."""
        hold_s = ONE_SOURCE_HOLD_S if len(self.fetchers) == 1 else None
        take = partial(self._take_tail, chunk.number) if poll and self.step else None
        return self.fetchers[chunk.remote].fetch(
            self.tp,
            chunk.fetch_offset,
            limit,
            poll=poll,
            hold=self._holds,
            hold_s=hold_s,
            answered=self._answered,
            take=take,
        )

    def _take_tail(self, number: int, fetched: FetchedPartition) -> Taken | None:
        """The poll of chunk ``number`` brought ``fetched`` (records), in the fetcher's turn,
        its future not set yet: if the copier waits for it and it is all this partition has
        in flight and continues at the frontier up to the remote's end
        (``ChunkPlan.tail_answer``), the copier's step is taken on it now (``step``) and the
        same fetch polls on from where it ended, with no future, task or fetch of its own,
        the answer never fed to the plan and taken from it: the offset it polls on from,
        and what the fetcher calls once that poll is out, before anything else runs
        (``_tail_taken``: the rest of the step, and the plan's chunk moved on). None:
        nothing done that the answer's usual way (its future set, ``_answered``) does not do
        again; what the step raised is left to the copier's task, as ``_step_now`` leaves
        it."""
        chunk = self.plan.inflight.get(number)
        if chunk is None or self.step is None or not self.parked or self._stopping:
            return None
        if chunk.start != self.frontier or fetched.outcome is not FetchOutcome.OK:
            return None
        if chunk.remote in self.sources.dropped:
            return None
        try:
            ends = RemoteEnds(fetched.log_start_offset, fetched.stable_end)
            self._learned_end(chunk.remote, ends)
            got = self.plan.tail_answer(chunk, fetched)  # from the chunk's start: the frontier
            if got is None:
                return None
            got.ticket.settle(got.size)  # as ``answered`` does (again there: no change)
        except Exception:
            return None  # the usual way meets it again, and says what it is
        try:
            written = self.step(got)
        except Exception as exc:
            self.leave(None, exc)  # raised in the copier's task
            return None
        if written is None:
            return None
        return got.covered_end, partial(self._tail_taken, got, written)

    def _tail_taken(self, got: Fetched, written: Callable[[], None]) -> None:
        """``got``, taken by ``_take_tail``, was written and its fetch polls on from its end:
        the rest of the copier's step (``written``) run, and the plan's open chunk is the
        poll from there (``ChunkPlan.advance_tail``)."""
        try:
            written()
        except Exception as exc:  # a bug: raised in the copier's task, as the step's would be
            self.leave(None, exc)
        chunk, now = got.chunk, time.monotonic()
        self._quiet = False
        self.plan.advance_tail(got, now)
        self.sources.health(chunk.remote).succeeded(got.size, now - chunk.launched)
        if TRACE is not None:
            TRACE.note("taken", self.tp.topic, self.tp.partition, chunk.start, got.covered_end)

    def _answered(self) -> bool:
        """A fetch was answered (in the fetcher's turn): the copier's step is taken now if
        the copier waits for one (``tail``), else the copier wakes. Whether it woke (False:
        the step took the answer and the copier waits on)."""
        if self.parked and self.tail is not None and not self._stopping:
            self.tail()
        else:
            self._wake_copier()
        return not self.parked

    def ready_now(self) -> Fetched | None:
        """What the copier would take at ``frontier`` if it woke now, without waking it: the
        fetches that ended fed to the plan and the chunk that continues at the frontier
        taken; if none is here yet, the next fetches launched (else the copier's step
        launches them, behind its writes, or ``leave`` does)."""
        self._collect()
        found = self._take()
        if found is None:
            self.launch(self.frontier, self.plan.target)
        return found

    def take_now(self) -> Fetched | None:
        """A chunk fetched already that continues at ``frontier``, taken."""
        return self._take() if self.plan.ready else None

    @property
    def fetching(self) -> bool:
        return bool(self._tasks)

    @property
    def parked(self) -> bool:
        """The copier waits in ``next_ready`` for a fetch to end."""
        return self._wake is not None and not self._wake.done()

    def leave(self, got: Fetched | None, error: Exception | None = None) -> None:
        """Wake the copier with ``got`` (a chunk ``ready_now`` took: ``next_ready`` returns
        it, the next fetches launched first, as when it wakes, from where ``got`` ends: the
        copier holds it, and its task launches from its own frontier after the write,
        where it wrote less), or ``error`` (raised there), or nothing (it looks again).
        Launched from the frontier, the chunk was fetched a second time: at every step of
        a catch-up, and for a backlog's chunks whose writes had to wait."""
        self._left = (got, error)
        try:
            if got is not None and error is None and not self._stopping:
                self.launch(max(self.frontier, got.usable_end), self.plan.target)
        finally:
            self._wake_copier()

    def _ended(self, number: int, fetch: asyncio.Future[FetchedPartition]) -> None:
        """Chunk ``number``'s fetch ended: the copier looks, unless it took the outcome
        already (woken by ``answered``, it may wait for another fetch by now)."""
        if self._tasks.get(number) is fetch:
            self._wake_copier()

    async def next_ready(self, frontier: int) -> Fetched | None:
        """``_next_ready``, timed for ``waits`` when that counts."""
        if RECORDER is None:
            return await self._next_ready(frontier)
        return await self._counted_next_ready(frontier, RECORDER.chunks)

    async def _counted_next_ready(self, frontier: int, waits: ChunkWaits) -> Fetched | None:
        """The time since the copier took its last chunk (its checks and writes) or was
        told to wait for budget, and this ask's wait for a fetch answer."""
        asked = time.monotonic()
        if self._handed is not None:
            chunk, at = self._handed
            (waits.writing_s if chunk else waits.starved_s).add(asked - at)
        wakes = self._wakes
        got = await self._next_ready(frontier)
        now = time.monotonic()
        if self._wakes == wakes:
            waits.ready_at_once += 1
        else:
            waits.fetch_wait_s.add(now - asked)
        self._handed = (True, now) if got is not None else (False, now) if self.starved else None
        return got

    async def _next_ready(self, frontier: int) -> Fetched | None:
        """The fetched chunk that continues at ``frontier``, waiting for it if it is in
        flight; None if nothing that could continue there is in flight, or if the copier is
        stopping (it need not wait for a long poll to end). Its ``ticket`` holds its bytes in
        the budget: the copier releases it once its writes are answered. While it waits,
        ``tail`` may take steps of the copier's and move ``frontier`` on."""
        self.frontier = frontier
        while True:
            found = self._take()
            if found is not None:
                return found
            if not self._tasks or self._stopping:
                return None
            if not any(task.done() for task in self._tasks.values()):
                self._wake = asyncio.get_running_loop().create_future()
                self._wakes += 1
                try:
                    await self._wake
                finally:
                    left, self._left = self._left, None
                if left is not None:
                    got, error = left
                    if error is not None:
                        raise error
                    if got is not None:
                        return got
            self._collect()
            self.launch(self.frontier, self.plan.target)

    def _take(self) -> Fetched | None:
        self._drop_excluded()
        found = self.plan.take(self.frontier)
        if found is not None and TRACE is not None:
            tp, end = self.tp, found.covered_end
            TRACE.note("taken", tp.topic, tp.partition, self.frontier, end)
        return found

    def _collect(self) -> None:
        """Feed the fetches that ended to the plan."""
        for number, task in list(self._tasks.items()):
            if task.done():
                del self._tasks[number]
                self._complete(task, self.plan.inflight[number])

    def _drop_excluded(self) -> None:
        """Cancel the fetches of remotes dropped for this partition (the plan throws away
        what they fetched and fetches their ranges again from the others)."""
        for chunk in self.plan.discard_excluded():
            task = self._tasks.pop(chunk.number)
            task.cancel()
            task.add_done_callback(_retrieve)

    def _complete(self, task: asyncio.Future[FetchedPartition], chunk: Chunk) -> None:
        """A chunk's fetch ended (answered, failed, or cancelled by a stop): fed to the plan,
        or the partition halts (raised)."""
        if chunk.remote in self.sources.dropped:  # dropped while it was in flight
            _retrieve(task)
            self.plan.failed(chunk)
            return
        try:
            fetched = task.result()
            seconds = time.monotonic() - chunk.launched  # the copier's step follows the answer
            self._counted(fetched, seconds)
            verdict = self._judge(chunk, fetched)
        except (TransientClusterError, TimeoutError, OSError) as exc:
            self._remote_failed(chunk, exc)
            return
        except BaseException:
            self.plan.failed(chunk, again=False)
            raise
        if verdict is Verdict.ASK_AGAIN:
            self._leader_moved(chunk, fetched)
            return
        try:
            got = self.plan.answered(chunk, fetched)
        except PartitionHalted as exc:  # its records are not well-formed batches: say whose
            raise PartitionHalted(f"from remote {chunk.remote}: {exc}") from exc
        self._learned_end(chunk.remote, RemoteEnds(fetched.log_start_offset, fetched.stable_end))
        self.sources.health(chunk.remote).succeeded(got.size, seconds)
        log.debug(
            "%s[%d]: chunk %s..%s from %s covered to %d (%d bytes)",
            self.tp.topic,
            self.tp.partition,
            chunk.start,
            chunk.end,
            chunk.remote,
            got.covered_end,
            got.size,
        )

    def _counted(self, fetched: FetchedPartition, seconds: float) -> None:
        """An answer came: the next empty poll may be held (``_holds``) if it brought none."""
        self._quiet = not fetched.records
        if RECORDER is not None:
            RECORDER.chunks.fetch_s.add(seconds)
            RECORDER.chunks.fetch_bytes.add(len(fetched.records))

    def _leader_moved(self, chunk: Chunk, fetched: FetchedPartition) -> None:
        """Fetched again at once: the fetcher holds it until the metadata refresh the answer
        started has ended, and sends it to the new leader."""
        where = f"{self.tp.topic}[{self.tp.partition}]"
        error = fetched.error(f"{where}: fetch from remote {chunk.remote} at {chunk.start}")
        self.sources.health(chunk.remote).leader_moved(str(error))
        log.info("%s: the leader moved; fetching again on new metadata", error)
        self.plan.failed(chunk)

    def _remote_failed(self, chunk: Chunk, exc: BaseException) -> None:
        """The remote backs off; another one, or it after that, fetches the chunk again. A
        failure of one broker of the partition's only usable remote backs off only that
        broker, in the fetcher: the chunk goes again once that broker's back-off ends or a
        new leader is known. With another remote usable, the remote backs off as a whole
        and the others take its chunks (a dead leader has none until the controller moves
        it, which takes seconds; the other remote has the records now)."""
        health = self.sources.health(chunk.remote)
        others = self._others_usable(chunk.remote)
        if isinstance(exc, BrokerFailed) and not others:
            health.broker_failed(str(exc))
            log.info("%s[%d]: %s; fetching again", self.tp.topic, self.tp.partition, exc)
            self.plan.failed(chunk)
            return
        health.failed(time.monotonic(), f"{type(exc).__name__}: {exc}", chunk.launched)
        log.info(
            "%s[%d]: remote %s failed a fetch at %d (%s); others take its chunks",
            self.tp.topic,
            self.tp.partition,
            chunk.remote,
            chunk.start,
            exc,
        )
        self.plan.failed(chunk)

    def _learned_end(self, remote: str, ends: RemoteEnds) -> None:
        """A fetch answer told ``remote``'s ends for this partition."""
        self.sources.update_end(remote, ends)

    def _others_usable(self, remote: str) -> bool:
        """Is a remote other than ``remote`` usable for this partition?"""
        return any(n != remote for n in self.sources.usable())

    def _judge(self, chunk: Chunk, fetched: FetchedPartition) -> Verdict:
        """The verdict on an answer (``chunk_plan.judge``); raise for one that brought an
        error the remote is blamed for: transient (another remote takes the chunk, or this
        one again after its back-off), or the partition halts if its only remote can never
        serve the offset."""
        others = partial(self._others_usable, chunk.remote)
        verdict = judge(fetched.outcome, others)
        if verdict in (Verdict.READY, Verdict.ASK_AGAIN):
            return verdict
        where = f"{self.tp.topic}[{self.tp.partition}]"
        error = fetched.error(f"{where}: fetch from remote {chunk.remote} at {chunk.start}")
        if fetched.outcome is FetchOutcome.OUT_OF_RANGE:
            # its log starts above the offset or ends below it: the copier lists its ends
            # and halts naming them (``Agreement.check_ends``, ``PartitionSources.stuck``)
            self.sources.out_of_range(chunk.remote, chunk.start)
        if verdict is Verdict.REMOTE_FAILED:
            raise TransientClusterError(str(error))
        raise PartitionHalted(str(error))
