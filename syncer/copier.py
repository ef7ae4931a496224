"""The per-partition task: read the local end, fetch from a remote that is ahead, check for
holes, write each batch at its own offset, verify, repeat. The local log is the checkpoint:
after any error the copier starts over from the local end it reads back."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from syncer.agreement import Agreement, CheckFailed, SourceDropped
from syncer.alignment import Disagreement, StateClock
from syncer.batches import (
    Batch,
    coalesce_for_local,
    coalesced_runs,
    fill_around,
    filler_batches,
    max_timestamp_of,
    rewrite_for_local,
    trim_for_local,
)
from syncer.budget import ByteBudget, Ticket
from syncer.chunks import ChunkScheduler, Fetched
from syncer.clusters import TP, Cluster
from syncer.config import CopierConfig
from syncer.errors import (
    ForeignWrite,
    HoleFound,
    LeaderMoved,
    MisalignedWrite,
    OffsetOutOfRange,
    PartitionHalted,
    TransientClusterError,
)
from syncer.holes import FILLER_REASONS, Filler, RemoteEnds, Scan, scan
from syncer.identity import WriterIdentity
from syncer.landed import check_landed
from syncer.lanes import Lanes
from syncer.partition import PartitionSources
from syncer.retry import next_backoff
from syncer.status import PartitionStatus, State
from syncer.waits import RECORDER
from syncer.wire import ENDS_GATHER_S, ENDS_LIST_TIMEOUT_S
from syncer.writer import Writer
from syncer.writes import PartitionWrites, Resync, Sent

log = logging.getLogger(__name__)

# a waiting partition lists the remotes last seen behind its local end at most this often
# (``_listed_ahead``); the listings of all partitions asking go out together
# (``WireRequests.stable_ends``)
LIST_BEHIND_S = 2.0
# the longest a partition waits for a listing: the gathering and the leaders' own time
LIST_WAIT_S = ENDS_GATHER_S + ENDS_LIST_TIMEOUT_S + 0.5


class PartitionCopier:
    """Copies one partition from the remotes to local, offset for offset."""

    def __init__(
        self,
        tp: TP,
        local: Cluster,
        writer: Writer,
        fetchers: Mapping[str, Lanes],
        identity: WriterIdentity,
        config: CopierConfig,
        sources: PartitionSources,
        memory: ByteBudget | None = None,
        *,
        fill_holes: bool = False,
        align_start: bool = False,
        state_clock: StateClock | None = None,
    ) -> None:
        self.tp = tp
        # when the broker may have dropped our producer state (0: never rely on it)
        self.state_clock = state_clock or StateClock(0)
        self.fill_holes = fill_holes
        self.align_start = align_start
        self.local = local
        self.writer = writer
        self.fetchers = fetchers
        self.identity = identity
        self.config = config
        # the remotes' ends, the dropped ones and their health: changed only through it
        self.sources = sources
        self.status = PartitionStatus(tp, remote_ends=sources.ends, dropped=sources.dropped)
        # the one seam left (issue 18): the scheduler still writes the ends it learns
        self.chunks = ChunkScheduler(tp, fetchers, sources, config, memory)
        self.agreement = Agreement(tp, local, fetchers, sources, identity.producer_id)
        self._stopping = False
        self._stop_requested = asyncio.Event()  # wakes a back-off when a stop is asked for
        # the offset the next write continues at: the local end, or past the writes sent
        self.frontier = 0
        self._until: int | None = None  # a catch-up's end: its steps are all the task's
        self._list_after = 0.0  # when ``_listed_ahead`` may list the remotes behind again
        if RECORDER is None:  # the benchmark's clocks time the task's steps
            self.chunks.tail = self._step_now
            self.chunks.step = self._step_whole
        self.writes = PartitionWrites(
            tp,
            local,
            writer,
            self.status,
            sources,
            self.state_clock,
            max_in_flight=config.max_in_flight,
            retry_backoff_s=config.retry_backoff_ms / 1000,
        )
        self.writes.answered = self._judge_parked

    def __repr__(self) -> str:
        s = self.status
        return (
            f"<PartitionCopier {self.tp.topic}[{self.tp.partition}] {s.state.value}"
            f" [local end: {s.local_end}, remote end: {self.sources.remote_end()}]>"
        )

    def use_state_clock(self, clock: StateClock) -> None:
        """The local brokers' producer state expiration changed: the next writes follow it."""
        self.state_clock = self.writes.state_clock = clock

    def request_stop(self) -> None:
        """Finish the writes in flight, then return from ``run``."""
        self._stopping = True
        self._stop_requested.set()
        self.chunks.stop_polling()

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if a stop is asked for: a revoked partition must not
        hold its group's rebalance (it waits for every revoked copier) for a back-off."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop_requested.wait(), seconds)

    async def run(self, until: int | None = None) -> PartitionStatus:
        """Copy until stopped, or until the local end reaches ``until`` (catch-up)."""
        try:
            await self._run(until)
        except asyncio.CancelledError:
            # cancelled at a shutdown or revocation timeout: what is still queued must not
            # go out after the partition has moved to another process
            self.writer.forget(self.tp)
            raise
        return self.status

    async def _run(self, until: int | None) -> None:
        backoff = 0.0  # the wait after the last error (none yet)
        while not self._stopping:
            copied = self.status.records_copied
            resumed = time.monotonic()
            try:
                await self._copy(until)
                break
            except PartitionHalted as exc:
                await self._halt(exc)
                return
            except (TransientClusterError, Resync) as exc:
                if isinstance(exc, Resync) and exc.refused_at is not None:
                    refused, self.writes.refused_at = self.writes.refused_at, exc.refused_at
                    if refused == exc.refused_at and await self._settled(refused):
                        await self._halt(ForeignWrite(self._foreign_write_message(refused)))
                        return
                backoff = next_backoff(
                    backoff,
                    self.status.records_copied > copied,
                    self.config,
                    healthy_s=time.monotonic() - resumed,
                    leader_moved=isinstance(exc, LeaderMoved),
                )
                self.status.retries += 1
                self._count("resync" if isinstance(exc, Resync) else "transient")
                self.status.state = State.RETRYING
                log.info(
                    "%s[%d]: %s; resuming from the local end", self.tp.topic, self.tp.partition, exc
                )
                try:
                    await self.writes.settle()
                except PartitionHalted as halted:
                    await self._halt(halted)
                    return
                await self._pause(backoff)
            except Exception as exc:  # a bug: halt visibly rather than die unseen
                log.exception("%s[%d]: internal error", self.tp.topic, self.tp.partition)
                error = PartitionHalted(f"internal error: {type(exc).__name__}: {exc}")
                await self._halt(error, "internal")
                return
        if self.status.state is not State.HALTED:  # halted from outside (``halt``) stays so
            self.status.state = State.STOPPED if self._stopping else State.CAUGHT_UP

    async def _settled(self, offset: int) -> bool:
        return await self.writes.settled(offset, self._is_stopping)

    def _is_stopping(self) -> bool:
        return self._stopping

    def _count(self, kind: str) -> None:
        self.status.errors[kind] = self.status.errors.get(kind, 0) + 1

    def _foreign_write_message(self, offset: int) -> str:
        return (
            f"{self.tp.topic}[{self.tp.partition}]: the broker refuses our sequence at local end"
            f" {offset} twice: the records before it were not written by this deployment"
            " (a foreign producer writes into this partition)"
        )

    async def _halt(self, exc: PartitionHalted, kind: str | None = None) -> None:
        try:
            await self.writes.settle()
        except PartitionHalted as misplaced:
            # a write that landed at another offset says more, unless the first one already
            # did: the writes behind a misplaced one follow it, one offset late each
            if not isinstance(exc, MisalignedWrite):
                exc = misplaced
        self._count(kind or type(exc).__name__)
        self.status.error = str(exc)  # before the state: the Halted event carries it
        self.status.state = State.HALTED
        log.error("%s[%d] halted: %s", self.tp.topic, self.tp.partition, exc)

    async def _copy(self, until: int | None) -> None:
        stopping = self._is_stopping
        self.frontier = await self.writes.checked_local_end(self._check_landed, stopping)
        if (start := await self._alignment_cut_short(self.frontier)) is not None:
            self.frontier = await self._align_start(self.frontier, start)
        self._until = until
        await self.chunks.reset(self.frontier)
        try:
            while not self._stopping:
                target = self.sources.remote_end()
                if until is not None:
                    target = min(until, target)
                if until is not None and self.frontier >= target:
                    break
                self.chunks.launch(self.frontier, target)
                got = await self.chunks.next_ready(self.frontier)
                frontier = self.frontier  # moved on by the steps taken as answers came
                self.writes.check_done()
                await self.agreement.check_ends(frontier)  # a remote that lost copied records
                if got is None and self._stopping:
                    break
                if got is None and self.chunks.starved:
                    await self.chunks.memory.room()  # other partitions hold the budget
                    continue
                if got is None and (start := self._start_to_align(frontier)) is not None:
                    self.frontier = await self._align_start(0, start)
                    await self.chunks.reset(self.frontier)
                    continue
                if got is None:
                    self._no_source(frontier)
                    if not await self._listed_ahead(frontier):
                        await self._pause(self.config.retry_backoff_ms / 1000)
                    continue
                try:
                    await self.agreement.check(got, frontier)
                except (SourceDropped, CheckFailed) as exc:
                    log.info(
                        "%s[%d]: %s; fetching again from %d",
                        self.tp.topic,
                        self.tp.partition,
                        exc,
                        frontier,
                    )
                    await self.chunks.reset(frontier)
                    continue
                self.frontier = await self._write(got, frontier)
                self._written(got)
                del got  # the next fetch must not wait on its memory
        finally:
            await self.chunks.close()
        await self.writes.drain(0)

    def _written(self, got: Fetched) -> None:
        if not self._stopping:  # a stopping copier may have sent only a part of it
            self.agreement.written(got)
        self._release_when_answered(got.ticket)

    def _step_now(self) -> None:
        """An answer came while the copier waits for one: its steps taken now, in the
        fetcher's turn, for as long as each continues at the frontier and needs no wait (a
        caught-up partition's records are written as they arrive, not a loop turn or more
        later, as a copier of the hop's floor does: ``tests/bench/floor.py``); the first
        that would wait is left to the copier's task, and so is what one raises."""
        try:
            got = self.chunks.ready_now()
            while got is not None:
                if not self._write_now(got):
                    self.chunks.leave(got)
                    return
                got = self.chunks.take_now()
            if not self.chunks.fetching:
                self.chunks.leave(None)  # nothing in flight: the copier looks why
        except Exception as exc:  # raised in the copier's task, as if it had taken the step
            self.chunks.leave(None, exc)

    def _judge_parked(self) -> None:
        """A write was answered: judged now if the copier waits for a fetch, so that one
        refused or failed is acted on at once. A caught-up partition's empty polls are held
        for up to ``ONE_SOURCE_HOLD_S`` (300 s): a write refused behind the last records
        (writes stopped while the group's lease lapsed) was judged, and the partition copied
        again, only when that poll ended (10,000 partitions in a group: 329 of one member's
        sat 5 minutes at local end 0). What judging raises is raised in the copier's task."""
        if self._stopping or not self.chunks.parked:
            return
        try:
            self.writes.check_done()
        except Exception as exc:
            self.chunks.leave(None, exc)

    def _write_now(self, got: Fetched) -> bool:
        """The copier's step for ``got`` (``_copy``'s loop), taken at once if nothing in it
        waits (``_step``), and the next fetches launched. False: nothing of it was done but
        what the copier's task does again."""
        if not self._step(got):
            return False
        self._written(got)
        self.chunks.launch(self.frontier, self.sources.remote_end())
        return True

    def _step_whole(self, got: Fetched) -> Callable[[], None] | None:
        """``_step``, only if it writes all of ``got``: a poll's answer taken as it comes,
        its fetch polling on from where it ends (``ChunkScheduler._take_tail``). What is
        left of the step (``_written``), run once that poll is out: nothing reads it before
        (the poll's answer comes in a later turn), and the hop pays for every microsecond
        between the writes and the poll as for one before them (``docs/benchmarks.md``);
        None: nothing of it was done."""
        return partial(self._written, got) if self._step(got, whole=True) else None

    def _step(self, got: Fetched, *, whole: bool = False) -> bool:
        """The copier's step for ``got`` (``_copy``'s loop) but the launches, taken if
        nothing in it waits: no remote's ends to list, no comparison to read, no hole, and
        room for every batch behind the writes in flight (``PartitionWrites.room_now``);
        ``whole``: and it continues the log up to ``got``'s end. False: nothing of it was
        done but what the copier's task does again (judging answered writes). True: the
        caller then runs ``_written``."""
        frontier = self.frontier
        if self._until is not None or self._stopping:
            return False
        self.writes.check_done()
        if not self.agreement.ends_hold(frontier):
            return False
        found = self._scan(got, frontier)
        batches = [item for item in found.writable if isinstance(item, Batch)]
        if found.hole is not None or len(batches) < len(found.writable):
            return False  # a hole: halted, or filled with writes of their own
        if whole and found.next_offset != got.covered_end:
            return False
        if found.trim_first is not None:
            return False  # its max timestamp, which room counts with, is known once rebuilt
        runs = self._runs(batches, None)
        if not self.writes.room_now([_max_timestamp(run) for run in runs]):
            return False
        if not self.agreement.check_now(got, frontier):
            return False
        for run in runs:
            self._send(run, got.remote, None)
        if not batches:
            self.status.state = State.CAUGHT_UP
        self.frontier = self.chunks.frontier = found.next_offset
        return True

    async def _check_landed(self, low: int, high: int) -> None:
        """Compare local ``[low, high)`` with a remote that holds it; where it differs (or
        no longer holds it), with the others seen holding it: records that are another
        remote's landed from a write of ours all the same (one whose answer was lost, the
        same offsets then sent from a remote with another history and answered as a repeat
        of it), and a reference that differs is dropped, as the agreement drops a remote
        that differs from the local log. Halt if none holds them (misplaced, or another
        producer's); try again later if one that might did not answer."""
        name = self.sources.landed_reference()
        try:
            found = await self._landed_against(name, low, high)
        except OffsetOutOfRange:
            found = None
            if not await self._landed_elsewhere(name, low, high, None):
                raise PartitionHalted(
                    f"{self.tp.topic}[{self.tp.partition}]: local {low}..{high - 1} landed"
                    " from writes whose answers were lost, and no remote holds those offsets"
                    " any more to compare them with (retention)"
                ) from None
        if found is not None and await self._landed_elsewhere(name, low, high, found):
            found = None
        if found is not None:
            raise MisalignedWrite(f"{self.tp.topic}[{self.tp.partition}]: {found.describe()}")
        self.agreement.local_checked()

    async def _landed_elsewhere(
        self, reference: str, low: int, high: int, found: Disagreement | None
    ) -> bool:
        """Do local ``[low, high)`` equal the records of a remote other than ``reference``
        (seen holding them)? Then ``reference`` is dropped if it differs (``found``). No
        answer from one that might hold them: tried again later."""
        usable = self.sources.usable()
        others = [
            n
            for n in self.sources.remotes
            if n != reference and n in usable and usable[n].start <= low and usable[n].end >= high
        ]
        failed: list[str] = []
        for other in others:
            try:
                if await self._landed_against(other, low, high) is None:
                    break
            except TransientClusterError as exc:
                failed.append(f"{other}: {exc}")
            except OffsetOutOfRange:
                continue  # it holds no such records now (its log starts or ends elsewhere)
        else:
            if failed:
                raise TransientClusterError(
                    f"{self.tp.topic}[{self.tp.partition}]: local {low}..{high - 1} not held"
                    f" as they are by remote {reference}; no answer from the others to compare"
                    f" with: {'; '.join(failed)}"
                )
            return False
        if found is not None:
            self.agreement.drop(
                reference,
                f"records differ from the local log's at {low}..{high - 1}, which are remote"
                f" {other}'s (written from it, the answer lost; {found.describe()})",
            )
        return True

    async def _landed_against(self, name: str, low: int, high: int) -> Disagreement | None:
        source = self.fetchers[name].lanes[0].cluster
        try:
            found = await check_landed(self.local, source, self.tp, low, high)
        except (TimeoutError, OSError) as exc:
            raise TransientClusterError(f"comparing with remote {name}: {exc}") from exc
        log.info(
            "%s[%d]: checked local %d..%d against remote %s: %s",
            self.tp.topic,
            self.tp.partition,
            low,
            high - 1,
            name,
            "identical" if found is None else found.describe(),
        )
        return found

    def _release_when_answered(self, ticket: Ticket) -> None:
        """Keep ``ticket``'s bytes in the process's budget until the last write sent for them
        is answered (one partition's writes are answered in order): the budget bounds what is
        fetched and what is being written together."""
        ticket.release_when_done(self.writes.last_future)

    def _start_to_align(self, frontier: int) -> int | None:
        """With ``align_start``, a local partition still empty (end 0) whose remotes all
        start above 0: the start to align it to."""
        if not self.align_start or frontier != 0 or self.status.local_end != 0:
            return None
        return self.sources.start_to_align()

    async def _alignment_cut_short(self, frontier: int) -> int | None:
        """With ``align_start``, an alignment cut short (a write failed or its answer was
        lost, DeleteRecords failed, the process stopped): the local log still starts at 0
        and holds nothing but fillers below ``frontier``, at or below the start every remote
        has moved past. The start to align it to (the fillers still missing written, then
        all below it deleted); None otherwise: a local log holding a real record below is
        never deleted (records gone at every remote halt it, as without ``align_start``).
        Without this, one cut short halted as data lost at every restart."""
        if not self.align_start or frontier == 0:
            return None
        start = self.sources.start_to_align()
        if start is None or frontier > start:
            return None
        local_start, _end = (await self.local.ends([self.tp]))[self.tp]
        if local_start != 0 or await self.agreement.holds_real_records_below(frontier):
            return None
        return start

    async def _align_start(self, first: int, start: int) -> int:
        """Fill offsets ``[first, start)`` (``first``: 0, or where fillers written before
        end) and delete all below ``start``, so the local partition starts where the
        remotes do; the new local end (``start``)."""
        log.info(
            "%s[%d]: aligning the local partition to the remote start %d (fillers from %d)",
            self.tp.topic,
            self.tp.partition,
            start,
            first,
        )
        pid, epoch = self.identity.producer_id, self.identity.producer_epoch
        now_ms = int(time.time() * 1000)
        for base, end, raw in filler_batches(first, start, now_ms, "below-start", pid, epoch):
            await self.writes.room()
            stamp = max_timestamp_of(raw)
            self._submit(Sent(base, end, end - base, len(raw), "", stamp, end - base), raw)
        await self.writes.drain(0)
        local_start = await self.local.delete_records(self.tp, start)
        if local_start != start:
            raise PartitionHalted(
                f"{self.tp.topic}[{self.tp.partition}]: aligning the start: local start is"
                f" {local_start} after deleting records below {start}"
            )
        return start

    async def _listed_ahead(self, frontier: int) -> bool:
        """Nothing continues at ``frontier``: list the ends of the healthy remotes last seen
        behind it or ending there (``PartitionSources.behind``), at most every
        ``LIST_BEHIND_S``. Whether one now holds records from ``frontier`` on (the copy goes
        on from it). Without this a partition whose remote died while ahead of it waited
        for that remote, however long, while another had the records (seen last when it was
        last fetched from: before it fell behind). A listing that shows a start above
        ``frontier`` is not taken: that remote cannot serve it, and taken, it would read as
        the records being gone everywhere while the remote that died may still hold them.
        One that fails or is not answered within ``LIST_WAIT_S`` tells nothing and backs
        nothing off (the partition left out, or its leader away: the fetches that remote
        serves tell its health)."""
        now = time.monotonic()
        names = self.sources.behind(frontier, now) if now >= self._list_after else []
        if not names:
            return False
        self._list_after = now + LIST_BEHIND_S
        listings = {
            name: asyncio.ensure_future(self.fetchers[name].lanes[0].cluster.stable_ends(self.tp))
            for name in names
        }
        stop = asyncio.ensure_future(self._stop_requested.wait())
        listed = asyncio.ensure_future(asyncio.wait(listings.values()))
        either: set[asyncio.Future[Any]] = {listed, stop}
        try:  # a stop asked for meanwhile, or a remote that does not answer, ends the wait
            await asyncio.wait(either, timeout=LIST_WAIT_S, return_when="FIRST_COMPLETED")
        finally:
            for future in (stop, listed, *listings.values()):
                future.cancel()
        ahead = False
        for name, listing in listings.items():
            if not listing.done() or listing.cancelled() or listing.exception() is not None:
                why = "no answer" if not listing.done() or listing.cancelled() else "left out"
                log.debug("%s[%d]: listing remote %s: %s", *self.tp, name, why)
                continue
            start, end = listing.result()
            if start > frontier:
                continue
            self.sources.update_end(name, RemoteEnds(start, end))
            if end > frontier:
                ahead = True
                log.info(
                    "%s[%d]: remote %s, last seen behind the local end %d, ends at %d now;"
                    " copying from it",
                    *self.tp,
                    name,
                    frontier,
                    end,
                )
        return ahead and not self._stopping

    def _no_source(self, frontier: int) -> None:
        """Nothing can continue at ``frontier``: data lost at the source, or every source is
        dropped or backing off (then the caller waits and tries again)."""
        halt = self.sources.stuck(frontier)
        if halt is not None:
            raise halt

    async def _write(self, got: Fetched, frontier: int) -> int:
        """Send ``got``'s batches from ``frontier`` on; the offset after the last one sent.
        A stop asked for meanwhile sends nothing more: only the writes in flight drain (the
        rest of a chunk written one batch at a time held a revoked partition, and with it
        its group's rebalance, for 22 to 33 s; the local end says where the next owner
        resumes)."""
        found = self._scan(got, frontier)
        for item in self._writes_of(found):
            await self.writes.room()
            if self._stopping:
                return max(
                    frontier, item.base_offset if isinstance(item, Filler) else item[0].base_offset
                )
            if isinstance(item, Filler):
                await self._fill(item, got.remote)
                continue
            trim = found.trim_first if item[0] is found.writable[0] else None
            self._send(item, got.remote, trim)
        if found.hole is not None:
            await self.writes.drain(0)
            raise HoleFound(
                f"{self.tp.topic}[{self.tp.partition}]: {found.hole.describe()}"
                f" (remote {got.remote}); policy is halt (topics.on_hole, topics.fill)"
            )
        if not found.writable:
            self.status.state = State.CAUGHT_UP
        return found.next_offset

    def _writes_of(self, found: Scan) -> list[Filler | list[Batch]]:
        """What ``found`` writes, in order: each filler, and the runs of batches between
        them (``_runs``)."""
        writes: list[Filler | list[Batch]] = []
        batches: list[Batch] = []
        for item in [*found.writable, None]:
            if isinstance(item, Batch):
                batches.append(item)
                continue
            trim = found.trim_first if batches and batches[0] is found.writable[0] else None
            writes += self._runs(batches, trim)
            batches = []
            if item is not None:
                writes.append(item)
        return writes

    def _runs(self, batches: list[Batch], trim_first: int | None) -> list[list[Batch]]:
        """``batches`` (consecutive) in the writes they go in: small ones coalesced
        (``batches.coalesced_runs``, up to ``coalesce_bytes``, unless the local topic refused
        such a write as too large); the first alone if it is trimmed at the local end."""
        if len(batches) < 2:  # a caught-up partition's usual answer
            return [batches] if batches else []
        limit = self.config.coalesce_bytes if self.writes.coalescing else 0
        if trim_first is not None:
            return [[batches[0]], *coalesced_runs(batches[1:], limit)]
        return coalesced_runs(batches, limit)

    def _scan(self, got: Fetched, frontier: int) -> Scan:
        fetched = got.fetched
        limit, aborted = fetched.stable_end, fetched.aborted
        return scan(got.batches, frontier, limit=limit, aborted=aborted, fill=self.fill_holes)

    async def _fill(self, hole: Filler, remote: str) -> None:
        """Write ``hole``'s offsets as filler records (around a compacted batch's records)."""
        pid, epoch = self.identity.producer_id, self.identity.producer_epoch
        log.debug(
            "%s[%d]: filling %d..%d (%s)",
            self.tp.topic,
            self.tp.partition,
            hole.base_offset,
            hole.next_offset - 1,
            hole.kind.value,
        )
        if hole.around is not None:
            raw, fillers = fill_around(hole.around, hole.base_offset, pid, epoch)
            pieces = [(hole.base_offset, hole.next_offset, raw)]
        else:
            fillers = hole.next_offset - hole.base_offset
            why = FILLER_REASONS[hole.kind]
            pieces = filler_batches(
                hole.base_offset, hole.next_offset, hole.timestamp, why, pid, epoch
            )
        for i, (base, end, raw) in enumerate(pieces):
            if i:
                await self.writes.room()
            filled = end - base if hole.around is None else fillers
            stamp = max_timestamp_of(raw)
            self._submit(Sent(base, end, end - base, len(raw), remote, stamp, filled), raw)

    def _send(self, run: list[Batch], remote: str, trim_first: int | None) -> None:
        """Write ``run``: one batch as it is (trimmed from ``trim_first``), or several small
        ones coalesced into one batch (``_runs``)."""
        pid, epoch = self.identity.producer_id, self.identity.producer_epoch
        batch, end = run[0], run[-1].next_offset
        raw: bytes | bytearray
        if len(run) > 1:
            raw = coalesce_for_local(run, pid, epoch)
            base, records = batch.base_offset, end - batch.base_offset
        elif trim_first is not None:
            raw = trim_for_local(batch, trim_first, pid, epoch)
            base, records = trim_first, end - trim_first
        else:
            raw = rewrite_for_local(batch, pid, epoch)
            base, records = batch.base_offset, batch.record_count
        # the written batch's own max: a trimmed one holds less than its source's
        stamp = max_timestamp_of(raw)
        sent = Sent(base, end, records, len(raw), remote, stamp, batches=len(run))
        self._submit(sent, raw)

    def _submit(self, sent: Sent, raw: bytes | bytearray) -> None:
        self.writes.submit(sent, raw)
        self.status.state = State.COPYING

    def halt(self, exc: PartitionHalted) -> None:
        """Halt from outside (the topic was recreated): nothing still queued goes out, and
        the copier stops (its owner cancels its task)."""
        self.request_stop()
        self.writer.forget(self.tp)
        self._count(type(exc).__name__)
        self.status.error = str(exc)  # before the state: the Halted event carries it
        self.status.state = State.HALTED
        log.error("%s[%d] halted: %s", self.tp.topic, self.tp.partition, exc)


def _max_timestamp(run: list[Batch]) -> int:
    return run[0].max_timestamp if len(run) == 1 else max(b.max_timestamp for b in run)
