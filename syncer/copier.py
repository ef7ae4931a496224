"""The per-partition task: read the local end, fetch from a remote that is ahead, check for
holes, write each batch at its own offset, verify, repeat. The local log is the checkpoint:
after any error the copier starts over from the local end it reads back."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

from syncer.agreement import Agreement, CheckFailed, SourceDropped
from syncer.alignment import Outcome, StateClock, Verdict, judge
from syncer.batches import Batch, fill_around, filler_batches, rewrite_for_local, trim_for_local
from syncer.budget import ByteBudget
from syncer.chunks import ChunkScheduler, Fetched
from syncer.clusters import TP, Cluster, ProduceResult, error_for, is_retriable
from syncer.config import CopierConfig
from syncer.errors import (
    ForeignWrite,
    HoleFound,
    MisalignedWrite,
    PartitionHalted,
    SourceDataLost,
    TransientClusterError,
)
from syncer.fetcher import Lanes
from syncer.identity import WriterIdentity
from syncer.landed import check_landed
from syncer.planner import Filler, HoleKind, RemoteEnds, choose_remote, scan
from syncer.sources import SourceHealth
from syncer.status import PartitionStatus, State
from syncer.writer import Writer

log = logging.getLogger(__name__)

# a refusal at the same local end twice is a foreign producer only once the end has stood
# still this long: after a write that timed out, the high watermark (what we read as the
# end) trails the log end until the followers fetch it, and a follower may lag up to
# replica.lag.time.max.ms (30 s by default) before the leader drops it from the ISR
SETTLE_S = 35.0
SETTLE_POLL_S = 0.5
# reading the local end again before a shrunken log is believed (a new leader's first
# answers may trail)
SHRINK_READS = 3

# the value of a filler's header: why the offset holds no record of the source
FILLER_REASONS = {
    HoleKind.MISSING_OFFSETS: "missing",
    HoleKind.COMPACTED_BATCH: "compacted",
    HoleKind.CONTROL_BATCH: "marker",
    HoleKind.ABORTED_DATA: "aborted",
}


def _consume(future: asyncio.Future[ProduceResult]) -> None:
    if not future.cancelled():
        future.exception()


class _Resync(Exception):
    """The local end moved under us (another writer, a retried write): read it again.
    ``refused_at`` is set when the broker refused our sequence for that offset."""

    def __init__(self, message: str, refused_at: int | None = None) -> None:
        super().__init__(message)
        self.refused_at = refused_at


@dataclass(frozen=True, slots=True)
class _Sent:
    base_offset: int
    next_offset: int
    records: int
    size: int
    remote: str
    max_timestamp: int
    filled: int = 0  # of its records, fillers


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
        remote_ends: Mapping[str, RemoteEnds] | None = None,
        health: Mapping[str, SourceHealth] | None = None,
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
        self.status = PartitionStatus(tp, remote_ends=dict(remote_ends or {}))
        for name in fetchers:
            self.status.remote_ends.setdefault(name, RemoteEnds(0, 0))
        self.health = health or {
            name: SourceHealth(name, rank) for rank, name in enumerate(fetchers)
        }
        ends, dropped = self.status.remote_ends, self.status.dropped
        self.chunks = ChunkScheduler(tp, fetchers, self.health, ends, dropped, config, memory)
        self.agreement = Agreement(tp, local, fetchers, self.health, ends, dropped)
        self._stopping = False
        self._pending: deque[tuple[_Sent, asyncio.Future[ProduceResult]]] = deque()
        self._refused_at: int | None = None
        # the local end up to which every offset is known to hold the source's record: the
        # end found at start, moved by writes that landed where they should and by checks
        # of what landed without a clean answer (None until the local end is first read)
        self._confirmed: int | None = None
        # the max timestamp of the last write answered as landed since the last resync:
        # proof that the broker holds our producer state (None: not proven)
        self._proven_at: int | None = None

    def __repr__(self) -> str:
        s = self.status
        return (
            f"<PartitionCopier {self.tp.topic}[{self.tp.partition}] {s.state.value}"
            f" [local end: {s.local_end}, remote end: {s.remote_end}]>"
        )

    def request_stop(self) -> None:
        """Finish the writes in flight, then return from ``run``."""
        self._stopping = True
        self.chunks.stop_polling()

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
        backoff = self.config.retry_backoff_ms / 1000
        while not self._stopping:
            copied = self.status.records_copied
            try:
                await self._copy(until)
                break
            except PartitionHalted as exc:
                await self._halt(exc)
                return
            except (TransientClusterError, _Resync) as exc:
                if isinstance(exc, _Resync) and exc.refused_at is not None:
                    if exc.refused_at == self._refused_at and await self._settled(exc.refused_at):
                        await self._halt(ForeignWrite(self._foreign_write_message(exc.refused_at)))
                        return
                    self._refused_at = exc.refused_at
                self.status.retries += 1
                self._count("resync" if isinstance(exc, _Resync) else "transient")
                self.status.state = State.RETRYING
                log.info(
                    "%s[%d]: %s; resuming from the local end", self.tp.topic, self.tp.partition, exc
                )
                try:
                    await self._settle_pending()
                except PartitionHalted as halted:
                    await self._halt(halted)
                    return
                await asyncio.sleep(backoff)
                if self.status.records_copied > copied:
                    backoff = self.config.retry_backoff_ms / 1000  # it was moving: start over
                else:
                    backoff = min(backoff * 2, self.config.retry_backoff_max_ms / 1000)
            except Exception as exc:  # a bug: halt visibly rather than die unseen
                log.exception("%s[%d]: internal error", self.tp.topic, self.tp.partition)
                error = PartitionHalted(f"internal error: {type(exc).__name__}: {exc}")
                await self._halt(error, "internal")
                return
        self.status.state = State.STOPPED if self._stopping else State.CAUGHT_UP

    async def _settled(self, offset: int) -> bool:
        """Does the local end stand still at ``offset`` for ``SETTLE_S``? (False: it moved,
        so the refusal was a write of ours the end had not shown yet, not a foreign one.)"""
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline and not self._stopping:
            if (await self.local.latest([self.tp]))[self.tp] != offset:
                return False
            await asyncio.sleep(SETTLE_POLL_S)
        return True

    def _count(self, kind: str) -> None:
        self.status.errors[kind] = self.status.errors.get(kind, 0) + 1

    def _foreign_write_message(self, offset: int) -> str:
        return (
            f"{self.tp.topic}[{self.tp.partition}]: the broker refuses our sequence at local end"
            f" {offset} twice: the records before it were not written by this deployment"
            " (a foreign producer writes into this partition)"
        )

    async def _settle_pending(self) -> None:
        """After an error: nothing still queued goes out, and every write already sent is
        answered and judged before the local end is read again. A write sent behind one
        that failed may have landed where it should (the local end moves past it) or, had
        the broker lost our producer state, at another offset: that halts here."""
        self.writer.forget(self.tp)  # queued, never sent: cancelled
        pending = list(self._pending)
        self._pending.clear()
        futures = [future for _sent, future in pending]
        if futures:
            await asyncio.wait(futures)  # not cancelled with us: the writer answers each
        for sent, future in pending:
            if future.cancelled() or future.exception() is not None:
                continue  # never sent, or unknown: the local end read next is checked
            verdict = self._judge(sent, future.result())
            if verdict.outcome is Outcome.MISPLACED:
                raise self._misplaced(verdict)
            if verdict.landed:
                self._confirm(sent)

    async def _halt(self, exc: PartitionHalted, kind: str | None = None) -> None:
        try:
            await self._settle_pending()
        except PartitionHalted as misplaced:
            exc = misplaced  # a write that landed at another offset says more
        self._count(kind or type(exc).__name__)
        self.status.state = State.HALTED
        self.status.error = str(exc)
        log.error("%s[%d] halted: %s", self.tp.topic, self.tp.partition, exc)

    async def _copy(self, until: int | None) -> None:
        self._proven_at = None  # whatever happened before, the next write goes alone
        frontier = await self._checked_local_end()
        self.status.local_end = frontier
        await self.chunks.reset(frontier)
        try:
            while not self._stopping:
                target = self.status.remote_end
                if until is not None:
                    target = min(until, target)
                if until is not None and frontier >= target:
                    break
                self.chunks.launch(frontier, target)
                got = await self.chunks.next_ready(frontier)
                self._check_done()
                if got is None and self._stopping:
                    break
                if got is None and self.chunks.starved:
                    await self.chunks.memory.room()  # other partitions hold the budget
                    continue
                if got is None and (start := self._start_to_align(frontier)) is not None:
                    frontier = await self._align_start(start)
                    await self.chunks.reset(frontier)
                    continue
                if got is None:
                    self._no_source(frontier)
                    await asyncio.sleep(self.config.retry_backoff_ms / 1000)
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
                frontier = await self._write(got, frontier)
                self.agreement.written(got)
                self._release_when_answered(self.chunks.written(got))
                del got  # the next fetch must not wait on its memory
        finally:
            await self.chunks.close()
        await self._drain(0)

    async def _checked_local_end(self) -> int:
        """The local end, once what lies between the confirmed end and it is known to be the
        source's records: writes whose answers were lost (a timeout, a cut connection) or
        refused may have landed, and anything that landed wrong halts before more is
        written behind it."""
        end = (await self.local.latest([self.tp]))[self.tp]
        confirmed = self._confirmed
        if confirmed is None:
            self._confirmed = end  # the end found at start (the agreement checks below it)
            return end
        for _ in range(SHRINK_READS):
            if end >= confirmed:
                break
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
            end = (await self.local.latest([self.tp]))[self.tp]
        else:
            raise PartitionHalted(
                f"{self.tp.topic}[{self.tp.partition}]: the local end went back from"
                f" {confirmed} to {end}: records written and acknowledged are gone locally"
                " (an unclean leader election, or the local topic deleted and recreated)"
            )
        if end > confirmed:
            await self._check_landed(confirmed, end)
            self._confirmed = end
        return end

    async def _check_landed(self, low: int, high: int) -> None:
        """Compare local ``[low, high)`` with a remote that holds it; halt on a difference."""
        usable = [n for n in self.fetchers if n not in self.status.dropped] or list(self.fetchers)
        name = max(usable, key=lambda n: self.status.remote_ends[n].end)
        source = self.fetchers[name].lanes[0].cluster
        found = await check_landed(self.local, source, self.tp, low, high)
        log.info(
            "%s[%d]: checked local %d..%d against remote %s: %s",
            self.tp.topic,
            self.tp.partition,
            low,
            high - 1,
            name,
            "identical" if found is None else found.describe(),
        )
        if found is not None:
            raise MisalignedWrite(f"{self.tp.topic}[{self.tp.partition}]: {found.describe()}")

    def _release_when_answered(self, size: int) -> None:
        """Keep ``size`` bytes in the process's budget until the last write sent for them is
        answered (one partition's writes are answered in order): the budget bounds what is
        fetched and what is being written together."""
        last = self._pending[-1][1] if self._pending else None
        self.chunks.memory.release_when_done(size, last)

    def _start_to_align(self, frontier: int) -> int | None:
        """With ``align_start``, a local partition still empty (end 0) whose remotes all
        start above 0: the start to align it to."""
        if not self.align_start or frontier != 0 or self.status.local_end != 0:
            return None
        usable = {n: e for n, e in self.status.remote_ends.items() if n not in self.status.dropped}
        return choose_remote(0, usable).lost_below

    async def _align_start(self, start: int) -> int:
        """Fill offsets ``[0, start)`` and delete them, so the local partition starts where
        the remotes do; the new local end (``start``)."""
        log.info(
            "%s[%d]: aligning the empty local partition to the remote start %d",
            self.tp.topic,
            self.tp.partition,
            start,
        )
        pid, epoch = self.identity.producer_id, self.identity.producer_epoch
        now_ms = int(time.time() * 1000)
        for base, end, raw in filler_batches(0, start, now_ms, "below-start", pid, epoch):
            await self._room_for_write()
            self._submit(_Sent(base, end, end - base, len(raw), "", now_ms, end - base), raw)
        await self._drain(0)
        local_start = await self.local.delete_records(self.tp, start)
        if local_start != start:
            raise PartitionHalted(
                f"{self.tp.topic}[{self.tp.partition}]: aligning the start: local start is"
                f" {local_start} after deleting records below {start}"
            )
        return start

    def _no_source(self, frontier: int) -> None:
        """Nothing can continue at ``frontier``: data lost at the source, or every source is
        dropped or backing off (then the caller waits and tries again)."""
        usable = {n: e for n, e in self.status.remote_ends.items() if n not in self.status.dropped}
        choice = choose_remote(frontier, usable)
        if choice.lost_below is not None:
            raise SourceDataLost(
                f"{self.tp.topic}[{self.tp.partition}]: records {frontier}.."
                f"{choice.lost_below - 1} are gone at every remote (start {choice.lost_below}"
                f" is beyond the local end {frontier})"
            )
        if not usable:
            raise PartitionHalted(
                f"{self.tp.topic}[{self.tp.partition}]: every remote was dropped as a source: "
                + "; ".join(f"{n}: {r}" for n, r in self.status.dropped.items())
            )

    async def _write(self, got: Fetched, frontier: int) -> int:
        found = scan(
            got.batches,
            frontier,
            limit=got.fetched.stable_end,
            aborted=got.fetched.aborted,
            fill=self.fill_holes,
        )
        for item in found.writable:
            await self._room_for_write()
            if isinstance(item, Filler):
                await self._fill(item, got.remote)
                continue
            trim = found.trim_first if item is found.writable[0] else None
            self._send(item, got.remote, trim)
        if found.hole is not None:
            await self._drain(0)
            raise HoleFound(
                f"{self.tp.topic}[{self.tp.partition}]: {found.hole.describe()}"
                f" (remote {got.remote}); policy is halt (topics.on_hole, topics.fill)"
            )
        if not found.writable:
            self.status.state = State.CAUGHT_UP
        return found.next_offset

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
                await self._room_for_write()
            filled = end - base if hole.around is None else fillers
            self._submit(
                _Sent(base, end, end - base, len(raw), remote, hole.timestamp, filled), raw
            )

    def _send(self, batch: Batch, remote: str, trim_first: int | None) -> None:
        pid, epoch = self.identity.producer_id, self.identity.producer_epoch
        if trim_first is not None:
            raw = trim_for_local(batch, trim_first, pid, epoch)
            base, records = trim_first, batch.next_offset - trim_first
        else:
            raw = rewrite_for_local(batch, pid, epoch)
            base, records = batch.base_offset, batch.record_count
        self._submit(
            _Sent(base, batch.next_offset, records, len(raw), remote, batch.max_timestamp), raw
        )

    def _submit(self, sent: _Sent, raw: bytes) -> None:
        future = self.writer.submit(self.tp, raw)
        future.add_done_callback(partial(self._landed, sent))
        self._pending.append((sent, future))
        self.status.state = State.COPYING

    def _landed(self, sent: _Sent, future: asyncio.Future[ProduceResult]) -> None:
        """As soon as a write is answered, a clean one moves the local end that status and
        metrics show; everything else about the answer is checked in order by ``_verify``."""
        if future.cancelled() or future.exception() is not None:
            return
        result = future.result()
        if result.error_code or result.base_offset != sent.base_offset:
            return
        self.status.local_end = max(self.status.local_end, sent.next_offset)
        self.status.newest_timestamp_ms = max(self.status.newest_timestamp_ms, sent.max_timestamp)
        now_ms = int(time.time() * 1000)
        self.status.older_than_producer_expiry = not self.state_clock.fresh(
            self.status.newest_timestamp_ms, now_ms
        )
        self.status.records_copied += sent.records
        self.status.filled += sent.filled
        self.status.bytes_copied += sent.size
        if sent.remote:  # not for the fillers that align a partition's start
            self.status.served[sent.remote] = self.status.served.get(sent.remote, 0) + sent.size
        health = self.health.get(sent.remote)
        if health is not None:
            health.served_bytes += sent.size
            health.served_records += sent.records

    def _check_done(self) -> None:
        while self._pending and self._pending[0][1].done():
            sent, future = self._pending.popleft()
            self._verify(sent, future.result())

    async def _drain(self, keep: int) -> None:
        while len(self._pending) > keep:
            sent, future = self._pending[0]
            result = await future
            self._pending.popleft()
            self._verify(sent, result)

    async def _room_for_write(self) -> None:
        """Wait until the next write may be sent: behind the ones in flight only while the
        broker is known to hold our producer state and will still hold it should one of them
        be refused (alignment.StateClock); otherwise once every earlier write is answered."""
        now_ms = int(time.time() * 1000)
        in_flight = [sent.max_timestamp for sent, _future in self._pending]
        pipelined = self.state_clock.may_pipeline(self._proven_at, in_flight, now_ms)
        self.status.one_at_a_time = not pipelined
        await self._drain(self.config.max_in_flight - 1 if pipelined else 0)

    def _judge(self, sent: _Sent, result: ProduceResult) -> Verdict:
        code = result.error_code
        return judge(sent.base_offset, code, result.base_offset, code != 0 and is_retriable(code))

    def _confirm(self, sent: _Sent) -> None:
        self._confirmed = max(self._confirmed or 0, sent.next_offset)
        self._proven_at = sent.max_timestamp
        self._refused_at = None  # a clean write: ``_landed`` counted it when it was answered

    def _misplaced(self, verdict: Verdict) -> MisalignedWrite:
        return MisalignedWrite(
            f"{self.tp.topic}[{self.tp.partition}]: record from remote offset"
            f" {verdict.expected} landed at local offset {verdict.landed_at}; another producer"
            " writes into this partition, or the broker had lost our producer state"
        )

    def _verify(self, sent: _Sent, result: ProduceResult) -> None:
        """Judge one answer, in order: a write that landed where it should moves the
        confirmed end; anything else stops the writes behind it (invariants 1 and 3)."""
        where = f"{self.tp.topic}[{self.tp.partition}]"
        verdict = self._judge(sent, result)
        outcome = verdict.outcome
        if outcome is Outcome.LANDED:
            self._confirm(sent)
            return
        if outcome is Outcome.MISPLACED:
            raise self._misplaced(verdict)
        if outcome is Outcome.REFUSED_SEQUENCE:
            raise _Resync(
                f"sequence refused at offset {sent.base_offset}: the partition moved",
                refused_at=sent.base_offset,
            )
        if outcome is Outcome.DUPLICATE:
            raise _Resync(f"duplicate sequence at offset {sent.base_offset}")
        if outcome is Outcome.TOO_LARGE:
            raise PartitionHalted(
                f"{where}: batch at offset {sent.base_offset} ({sent.size} bytes) is larger than"
                " the local topic's max.message.bytes allows"
            )
        error = error_for(result.error_code, f"write at offset {sent.base_offset}")
        if outcome in (Outcome.NOT_LANDED, Outcome.UNKNOWN):
            # logged with the partition's name as it is retried; what landed is checked
            raise TransientClusterError(str(error))
        raise PartitionHalted(f"{where}: {error}")

    def halt(self, exc: PartitionHalted) -> None:
        """Halt from outside (the topic was recreated): nothing still queued goes out, and
        the copier stops (its owner cancels its task)."""
        self.request_stop()
        self.writer.forget(self.tp)
        self._count(type(exc).__name__)
        self.status.state = State.HALTED
        self.status.error = str(exc)
        log.error("%s[%d] halted: %s", self.tp.topic, self.tp.partition, exc)
