"""The writes of one partition in flight, judged in order (invariants 1 and 3).

A write is sent behind unanswered ones only while the broker is known to hold our producer
state (``alignment.StateClock``); every answer is judged by ``alignment.judge``, the ones
still in flight after an error too; the local end read after an error is believed only once
what lies between the confirmed end and it was compared with the source."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import NamedTuple

from syncer.alignment import Outcome, StateClock, Verdict, judge, refusal_hint, waiting_for
from syncer.clusters import TP, Cluster, ProduceResult, error_for, is_retriable
from syncer.errors import ClusterError, MisalignedWrite, PartitionHalted, TransientClusterError
from syncer.partition import PartitionSources
from syncer.status import PartitionStatus
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
# a write unanswered this long shows in the status as what the partition waits for: an
# acks=all write is answered once every in-sync replica has it, and a leader whose ISR fell
# below min.insync.replicas holds the writes it had appended until the produce timeout
# (Kafka 4: the high watermark does not move under min ISR, KIP-966)
UNANSWERED_S = 5.0
TIMESTAMP_TYPE = "message.timestamp.type"
# answers that say a write of ours may sit above the high watermark: it may have landed
# (unknown), or the broker holds it already (a duplicate) or something of ours past it (a
# refused sequence)
MAYBE_ABOVE = frozenset({Outcome.UNKNOWN, Outcome.DUPLICATE, Outcome.REFUSED_SEQUENCE})


class Resync(Exception):
    """The local end moved under us (another writer, a retried write): read it again.
    ``refused_at`` is set when the broker refused our sequence for that offset."""

    def __init__(self, message: str, refused_at: int | None = None) -> None:
        super().__init__(message)
        self.refused_at = refused_at


class Sent(NamedTuple):
    """One write: the source offsets it carries and what status counts of it."""

    base_offset: int
    next_offset: int
    records: int
    size: int
    remote: str  # "" for the fillers that align a partition's start
    max_timestamp: int
    filled: int = 0  # of its records, fillers
    batches: int = 1  # source batches coalesced into it (``batches.coalesced_runs``)


# compares local [low, high) with the source; raises MisalignedWrite on a difference
LandedCheck = Callable[[int, int], Awaitable[None]]


def not_appended_as_sent(result: ProduceResult) -> bool:
    """Did the answer say the batch landed, but not as sent? A broker answers a batch it
    appended as sent to a CreateTime topic with -1 for the append time; any other time is
    either its clock, stamped in place of the records' timestamps (the topic turned
    LogAppendTime), or the max timestamp of a batch it took before with our producer id,
    epoch and sequences, answered as a repeat of it (``UnifiedLog.append``, the cached
    ``duplicate.timestamp``). It matches sequences, not records: a write whose answer was
    lost, sent again from a remote with another history at those offsets, is answered so
    while the first one's records stay. Either way the write moves nothing until what
    landed is known (``PartitionWrites.checked_local_end``). (A repeat of a batch with no
    timestamps, from a source of message format v0, is answered -1: it cannot be told.)"""
    return result.log_append_time != -1


def stamped_by_broker(sent: Sent, result: ProduceResult) -> bool:
    """Might the broker's clock have stamped the write (the topic turned LogAppendTime)?
    Not when the time is the write's own max timestamp: that answers a repeat. (A clock
    that stamped exactly our max timestamp, to the millisecond, is told by the next
    write.)"""
    return result.log_append_time not in (-1, sent.max_timestamp)


class PartitionWrites:
    """The writes of one partition: sent, answered, judged, and the confirmed end."""

    def __init__(
        self,
        tp: TP,
        local: Cluster,
        writer: Writer,
        status: PartitionStatus,
        sources: PartitionSources,
        state_clock: StateClock,
        *,
        max_in_flight: int,
        retry_backoff_s: float,
    ) -> None:
        self.tp = tp
        self.local = local
        self.writer = writer
        self.status = status
        self.sources = sources
        self.state_clock = state_clock
        self.max_in_flight = max_in_flight
        self.retry_backoff_s = retry_backoff_s
        self._pending: deque[tuple[Sent, asyncio.Future[ProduceResult]]] = deque()
        # the local end up to which every offset is known to hold the source's record: the
        # end found at start, moved by writes that landed where they should and by checks
        # of what landed without a clean answer (None until the local end is first read)
        self.confirmed: int | None = None
        # the max timestamp of the last write answered as landed since the last resync:
        # proof that the broker holds our producer state (None: not proven) ...
        self.proven_at: int | None = None
        # ... on this leader: another may have none (a replica restarted with nothing in
        # its log keeps no producer snapshot; one that fell behind the leader's start
        # drops its producers), so a leader change unproves it until a write lands again
        self.proven_on: int | None = None
        # the offset the broker last refused our sequence at, until a write lands again
        self.refused_at: int | None = None
        # since when the writes wait on a refusal of the local brokers (``status.waiting``)
        self.waiting_since: float | None = None
        # the batch refused as too large, until a write lands again
        self.too_large: Sent | None = None
        # small batches may be coalesced into one write: not after the local topic refused
        # such a write as too large (each of its source batches was taken by the remote)
        self.coalescing = True
        # told as each write is answered (``PartitionCopier`` judges it then if it waits)
        self.answered: Callable[[], None] = lambda: None
        # the oldest max timestamp of the writes whose answers were lost or say one of ours
        # may sit above the high watermark (``MAYBE_ABOVE``), kept until a write lands or
        # the high watermark was seen to cover the log end (``_under_watermark``); None: none
        self._unsure: int | None = None
        # a write answered as landed, not as sent, with a time that may be the broker's clock
        # (``stamped_by_broker``), until the topic's setting is read (``_stamped_or_repeated``)
        self._stamped: tuple[Sent, int] | None = None

    def __repr__(self) -> str:
        return (
            f"<PartitionWrites {self.tp.topic}[{self.tp.partition}] [in flight:"
            f" {len(self._pending)}, confirmed end: {self.confirmed}]>"
        )

    @property
    def where(self) -> str:
        return f"{self.tp.topic}[{self.tp.partition}]"

    # sending --------------------------------------------------------------------------

    async def room(self) -> None:
        """Wait until the next write may be sent: behind the ones in flight only while the
        broker is known to hold our producer state and will still hold it should one of them
        be refused; otherwise once every earlier write is answered. Resync if a write whose
        answer was lost may sit above the high watermark and the broker may have forgotten
        us since the local end was read (``_unfenced``)."""
        if self._unfenced():
            raise Resync("a lost write may sit above the high watermark, no longer fenced")
        await self.drain(self._in_flight_allowed(()))

    def room_now(self, max_timestamps: Sequence[int]) -> bool:
        """Could writes of these max timestamps all go out now, one after another, with no
        ``room`` among them waiting? (Each counted in flight for the next, as it would be.)"""
        if not max_timestamps:
            return True
        if self._unsure is not None and self._unfenced():
            return False  # ``room`` resyncs
        allowed = self._in_flight_allowed(max_timestamps[:-1])
        return len(self._pending) + len(max_timestamps) - 1 <= allowed

    def _in_flight_allowed(self, sending: Sequence[int]) -> int:
        """How many writes may be in flight as the next is sent, with writes of max
        timestamps ``sending`` sent first."""
        now_ms = int(time.time() * 1000)
        in_flight = [*(sent.max_timestamp for sent, _future in self._pending), *sending]
        proven = self.proven_at if self.local.known_leader(self.tp) == self.proven_on else None
        pipelined = self.state_clock.may_pipeline(proven, in_flight, now_ms)
        self.status.one_at_a_time = not pipelined
        return self.max_in_flight - 1 if pipelined else 0

    def submit(self, sent: Sent, raw: bytes | bytearray) -> None:
        future = self.writer.submit(self.tp, raw)
        future.add_done_callback(partial(self._landed, sent))
        self._pending.append((sent, future))

    @property
    def last_future(self) -> asyncio.Future[ProduceResult] | None:
        """The last write sent (one partition's writes are answered in order)."""
        return self._pending[-1][1] if self._pending else None

    def _landed(self, sent: Sent, future: asyncio.Future[ProduceResult]) -> None:
        """As soon as a write is answered, a clean one moves the local end that status and
        metrics show; everything else about the answer is judged in order by ``_verify``.
        Then ``answered`` is told (not for a write given up: cancelled)."""
        if future.cancelled():
            return
        if future.exception() is None:
            self._shown(sent, future.result())
        self.answered()

    def _shown(self, sent: Sent, result: ProduceResult) -> None:
        if result.error_code or result.base_offset != sent.base_offset:
            return
        if not_appended_as_sent(result):
            return  # what it carried may not be what landed: counted once read back
        s = self.status
        s.local_end = max(s.local_end, sent.next_offset)
        s.newest_timestamp_ms = max(s.newest_timestamp_ms, sent.max_timestamp)
        now_ms = int(time.time() * 1000)
        s.older_than_producer_expiry = not self.state_clock.fresh(s.newest_timestamp_ms, now_ms)
        s.filled += sent.filled
        if sent.batches > 1:
            s.coalesced += sent.batches
        s.bytes_copied += sent.size
        if sent.remote:  # not for the fillers that align a partition's start
            s.served[sent.remote] = s.served.get(sent.remote, 0) + sent.size
        self.sources.served(sent.remote, sent.size, sent.records)

    # judging --------------------------------------------------------------------------

    def check_done(self) -> None:
        """Judge the writes answered so far, in order."""
        while self._pending and self._pending[0][1].done():
            sent, future = self._pending.popleft()
            self._verify(sent, self._answer(sent, future))

    async def drain(self, keep: int) -> None:
        """Wait for and judge the oldest writes until ``keep`` are left in flight; one
        unanswered for ``UNANSWERED_S`` shows in the status as what the partition waits for."""
        while len(self._pending) > keep:
            sent, future = self._pending[0]
            if not future.done():
                await self._until_answered(sent, future)
            result = self._answer(sent, future)
            self._pending.popleft()
            self._verify(sent, result)

    async def _until_answered(self, sent: Sent, future: asyncio.Future[ProduceResult]) -> None:
        """Wait for ``future``, awaited itself: the task runs in the loop turn after the
        answer (``asyncio.wait`` took two, its own callback's and then the task's, for each
        batch of a poll that brought more than may be in flight). One unanswered for
        ``UNANSWERED_S`` shows in the status as what the partition waits for. A task
        cancelled meanwhile (a shutdown's or revocation's timeout) cancels the future with
        it: its answer then moves no status figure, and whoever copies the partition next
        reads the local end (``settle``, which judges what it waits for, keeps them)."""
        note = asyncio.get_running_loop().call_later(
            UNANSWERED_S,
            self._wait,
            f"local write at offset {sent.base_offset} unanswered for over {UNANSWERED_S:.0f} s"
            " (acks=all: the leader waits for its in-sync replicas)",
        )
        try:
            await future
        except Exception:
            pass  # a failed write: judged by ``_answer``
        finally:
            note.cancel()

    def _answer(self, sent: Sent, future: asyncio.Future[ProduceResult]) -> ProduceResult:
        """The answer to a write that is done; a request that failed (timed out, its
        connection cut) is what the partition waits for until a write lands."""
        if future.cancelled() or future.exception() is not None:
            self._doubt(sent)
        if not future.cancelled() and (error := future.exception()) is not None:
            self._wait(f"local write at offset {sent.base_offset} unanswered: {error}")
        return future.result()

    def _judge(self, sent: Sent, result: ProduceResult) -> Verdict:
        code = result.error_code
        return judge(sent.base_offset, code, result.base_offset, code != 0 and is_retriable(code))

    def _confirm(self, sent: Sent) -> None:
        self._unsure = None  # landed with acks=all: everything of ours before it is committed
        # only a write that continues what is confirmed: one behind a write answered not as
        # sent (or lost) leaves what lies between them to the landed check
        if self.confirmed is None or sent.base_offset <= self.confirmed:
            self.confirmed = max(self.confirmed or 0, sent.next_offset)
        self.proven_at, self.proven_on = sent.max_timestamp, self.local.known_leader(self.tp)
        self.refused_at = self.too_large = None
        if self.waiting_since is not None:
            log.info(
                "%s: writes land again after %.1f s waiting (%s)",
                self.where,
                time.monotonic() - self.waiting_since,
                self.status.waiting,
            )
            self.waiting_since = self.status.waiting = None

    def _wait(self, reason: str) -> None:
        """The writes wait for ``reason`` (a refusal they are retried after): the status
        shows it until one lands; logged once when it starts or changes, not per retry."""
        if reason != self.status.waiting:
            log.warning("%s: writes wait: %s; retrying with backoff", self.where, reason)
        if self.waiting_since is None:
            self.waiting_since = time.monotonic()
        self.status.waiting = reason

    def _too_large(self, sent: Sent) -> TransientClusterError:
        """The remote took the batch: its limit may have been raised since the local topic
        last followed it. Retried once the local topic followed its remote's settings now
        (``checked_local_end``), which halts if the limit is still too low."""
        self.too_large = sent
        refused = f"batch at offset {sent.base_offset} ({sent.size} bytes)"
        self._wait(f"{refused} refused as too large; the local topic follows its remote's limit")
        return TransientClusterError(f"{self.where}: {refused} is too large for the local topic")

    def _coalesced_too_large(self, sent: Sent) -> Resync:
        """A write of several source batches coalesced was refused as too large: the local
        topic's limit is below what syncer made of them, not below a source batch. They are
        written one by one from the local end on, and every later batch too."""
        self.coalescing = False
        log.warning(
            "%s: %d batches coalesced at offset %d (%d bytes) refused as too large; writing"
            " each source batch as it is from now on",
            self.where,
            sent.batches,
            sent.base_offset,
            sent.size,
        )
        return Resync(f"coalesced write at offset {sent.base_offset} refused as too large")

    async def _followed_limit(self) -> None:
        """Halt unless the local max.message.bytes, once the topic followed its remote's
        settings (``Cluster.followed_limit``), now takes the batch refused as too large."""
        sent = self.too_large
        if sent is None:
            return
        limit = await self.local.followed_limit(self.tp.topic)
        if limit is None or limit < sent.size:
            raise PartitionHalted(
                f"{self.where}: batch at offset {sent.base_offset} ({sent.size} bytes) is"
                " larger than the local topic's max.message.bytes allows"
            )

    def _not_as_sent(self, sent: Sent, result: ProduceResult) -> Resync:
        """A write answered as landed but not as sent (``not_appended_as_sent``): nothing of
        it is confirmed, nor any write behind it (``_confirm``); one that may have been
        stamped by the broker's clock is noted for the topic's setting to tell
        (``_stamped_or_repeated``)."""
        if stamped_by_broker(sent, result) and self._stamped is None:
            self._stamped = (sent, result.log_append_time)
        return Resync(
            f"write at offset {sent.base_offset} answered with append time"
            f" {result.log_append_time}, not -1: taken for a repeat of an earlier write of ours"
            " (or stamped by the broker's clock); what landed there is compared with the"
            " remotes before more is written"
        )

    async def _stamped_or_repeated(self) -> None:
        """A write answered with an append time other than its own max timestamp: the local
        topic turned LogAppendTime (halt, naming the write: a refresh refuses the topic up to
        ``refresh_interval_s`` later, the answer tells at once), or the broker took it for a
        repeat of an earlier batch of ours with other timestamps (the landed check tells
        whose records those are). The topic's setting tells which."""
        if self._stamped is None:
            return
        sent, stamp = self._stamped
        try:
            found = await self.local.topic_settings([self.tp.topic], [TIMESTAMP_TYPE])
        except TransientClusterError:
            raise  # asked again at the next resync
        except ClusterError as exc:  # refused (no DescribeConfigs): what landed tells
            log.warning("%s: reading %s: %s", self.where, TIMESTAMP_TYPE, exc)
            found = {}
        if found.get(self.tp.topic, {}).get(TIMESTAMP_TYPE) == "LogAppendTime":
            raise self._stamped_by_broker(sent, stamp)
        self._stamped = None  # a repeat, or unknown: the landed check compares the records

    def _stamped_by_broker(self, sent: Sent, stamp: int) -> PartitionHalted:
        """A write landed with the local broker's clock in place of its records' timestamps:
        the local topic became LogAppendTime since it was checked."""
        return PartitionHalted(
            f"{self.where}: the write of offsets {sent.base_offset}..{sent.next_offset - 1}"
            f" landed stamped with the local broker's time ({stamp}) in place"
            " of the source's timestamps: the local topic's message.timestamp.type is now"
            " LogAppendTime; set it back to CreateTime (the records written since carry the"
            " local clock)"
        )

    def _misplaced(self, verdict: Verdict) -> MisalignedWrite:
        return MisalignedWrite(
            f"{self.where}: record from remote offset {verdict.expected} landed at local"
            f" offset {verdict.landed_at}; another producer writes into this partition, or"
            " the broker had lost our producer state"
        )

    def _verify(self, sent: Sent, result: ProduceResult) -> None:
        """Judge one answer: a write that landed where it should moves the confirmed end;
        anything else stops the writes behind it."""
        verdict = self._judge(sent, result)
        outcome = verdict.outcome
        if outcome is Outcome.LANDED and not_appended_as_sent(result):
            raise self._not_as_sent(sent, result)
        if outcome is Outcome.LANDED:
            self._confirm(sent)
            return
        if outcome in MAYBE_ABOVE:
            self._doubt(sent)
        if outcome is Outcome.MISPLACED:
            raise self._misplaced(verdict)
        if outcome is Outcome.REFUSED_SEQUENCE:
            raise Resync(
                f"sequence refused at offset {sent.base_offset}: the partition moved",
                refused_at=sent.base_offset,
            )
        if outcome is Outcome.DUPLICATE:
            raise Resync(f"duplicate sequence at offset {sent.base_offset}")
        if outcome is Outcome.TOO_LARGE and sent.batches > 1:
            raise self._coalesced_too_large(sent)
        if outcome is Outcome.TOO_LARGE:
            raise self._too_large(sent)
        error = error_for(result.error_code, f"write at offset {sent.base_offset}")
        if outcome in (Outcome.NOT_LANDED, Outcome.UNKNOWN):
            self._wait(waiting_for(result.error_code) or f"local {error}")
            # logged with the partition's name as it is retried; what landed is checked. A
            # leader that moved stays ``LeaderMoved``: the copier retries it without waiting
            if isinstance(error, TransientClusterError):
                raise error
            raise TransientClusterError(str(error))
        said = f" ({result.message})" if result.message else ""
        hint = refusal_hint(result.error_code)
        raise PartitionHalted(f"{self.where}: {error}{said}" + (f": {hint}" if hint else ""))

    # after an error -------------------------------------------------------------------

    async def settle(self) -> None:
        """Nothing still queued goes out, and every write already sent is answered and
        judged before the local end is read again. A write sent behind one that failed may
        have landed where it should (the local end moves past it) or, had the broker lost
        our producer state, at another offset: that halts here."""
        self.writer.forget(self.tp)  # queued, never sent: cancelled
        pending = list(self._pending)
        self._pending.clear()
        futures = [future for _sent, future in pending]
        if futures:
            await asyncio.wait(futures)  # not cancelled with us: the writer answers each
        for sent, future in pending:
            if future.cancelled() or future.exception() is not None:
                # never sent, or unknown: the local end read next is checked
                self._doubt(sent)
                continue
            result = future.result()
            verdict = self._judge(sent, result)
            if verdict.outcome is Outcome.MISPLACED:
                raise self._misplaced(verdict)
            if verdict.outcome in MAYBE_ABOVE:
                self._doubt(sent)
            if verdict.landed and not_appended_as_sent(result):
                self._not_as_sent(sent, result)  # the writes behind it are not confirmed
            elif verdict.landed:
                self._confirm(sent)

    async def checked_local_end(
        self, check: LandedCheck, stopping: Callable[[], bool] = lambda: False
    ) -> int:
        """The local end, once what lies between the confirmed end and it is known to be the
        source's records (``check``): writes whose answers were lost (a timeout, a cut
        connection) or refused may have landed, and anything that landed wrong halts
        before more is written behind it. A write that landed above the high watermark is
        waited for where sending it again could land it twice (``_under_watermark``). No
        write is pipelined until one lands again."""
        self.proven_at = None
        await self._stamped_or_repeated()
        await self._followed_limit()
        end = (await self.local.latest([self.tp]))[self.tp]
        confirmed = self.confirmed
        if confirmed is None:
            # the writes of the process before us are not known: any may sit above it
            end = await self._under_watermark(end, stopping)
            self.confirmed = end  # the end found at start (the agreement checks below it)
            self.status.started_at_end = end  # records copied are counted from here
            self.status.local_end = end
            return end
        for _ in range(SHRINK_READS):
            if end >= confirmed:
                break
            await asyncio.sleep(self.retry_backoff_s)
            end = (await self.local.latest([self.tp]))[self.tp]
        else:
            raise PartitionHalted(
                f"{self.where}: the local end went back from {confirmed} to {end}: records"
                " written and acknowledged are gone locally (an unclean leader election, or"
                " the local topic deleted and recreated)"
            )
        unfenced = self._unfenced()
        if unfenced:
            end = await self._under_watermark(end, stopping)
        if end > confirmed:
            await check(confirmed, end)
            self.confirmed = end
        if unfenced and not stopping():  # what they may have left is under it now, checked
            self._unsure = None
        self.status.local_end = end  # writes whose answers were lost count once read back
        return end

    def _unfenced(self) -> bool:
        """Might a write sent again from the local end land twice? Only if one of the writes
        ``_unsure`` stands for sits above the high watermark and our producer state no longer
        fences it: the broker answers a repeat of one of our last five batches as a duplicate
        and refuses any other sequence only while it holds our state, until
        ``producer.id.expiration.ms`` past the max timestamp of the last batch it appended
        (the source's own, ``StateClock``). Asked as the local end is read and before each
        write until one lands: records near that age may pass it meanwhile."""
        if self._unsure is None:
            return False
        now_ms = int(time.time() * 1000)
        clock = self.state_clock
        return clock.expiration_ms <= 0 or not clock.fresh(self._unsure, now_ms)

    def _doubt(self, sent: Sent) -> None:
        """``sent`` may sit above the high watermark (``_unsure``)."""
        stamp = sent.max_timestamp
        self._unsure = stamp if self._unsure is None else min(self._unsure, stamp)

    async def _under_watermark(self, end: int, stopping: Callable[[], bool]) -> int:
        """The local end (``end``: the high watermark, all a reader sees) once it covers
        the leader's log end as it was asked now. A write appended by the leader but not yet
        taken by every in-sync replica sits above the high watermark, and a write whose
        answer was lost there reads as if it never landed; sent again while the broker holds
        no producer state for us (our records older than it keeps state for, Kafka's
        KIP-360), it is taken at the log end, behind its own first copy (seen on a 3-node
        Kafka 4.1 with a follower paused: the remote's offsets 5..9 written three times,
        the third landing at 15). The high watermark reaches the log end once the followers
        fetch it, or the leader drops the lagging ones from the ISR (``replica.lag.time
        .max.ms``, or the controller fencing a dead broker); the log end is asked again each
        time, as a new leader may hold less (the old one's records not replicated are
        gone)."""
        target = await self.local.log_end(self.tp)
        if end < target:
            self._wait(
                f"local offsets {end}..{target - 1} appended but not yet taken by every"
                " in-sync replica (high watermark below the log end): written again only once"
                " they are, or are gone"
            )
        while end < target and not stopping():
            await asyncio.sleep(SETTLE_POLL_S)
            end = (await self.local.latest([self.tp]))[self.tp]
            target = min(target, await self.local.log_end(self.tp))
        return end

    async def settled(self, offset: int, stopping: Callable[[], bool]) -> bool:
        """Does the local end stand still at ``offset`` for ``SETTLE_S``? (False: it moved,
        so the refusal was a write of ours the end had not shown yet, not a foreign one.)"""
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline and not stopping():
            if (await self.local.latest([self.tp]))[self.tp] != offset:
                return False
            await asyncio.sleep(SETTLE_POLL_S)
        return True


async def read_state_clock(local: Cluster) -> StateClock:
    """The local brokers' ``producer.id.expiration.ms`` (the lowest): how long a broker keeps
    our producer state after the newest timestamp we wrote. Unreadable (no DescribeConfigs
    on the cluster), no write is pipelined behind another: the fence is never relied on."""
    try:
        expiration_ms = await _lowest_expiration_ms(local)
    except ClusterError as exc:
        expiration_ms, why = None, str(exc)
    else:
        why = "no broker answered"
    if expiration_ms is None:
        log.warning(
            "cannot read producer.id.expiration.ms of the local brokers (%s): every partition"
            " writes one batch at a time",
            why,
        )
        return StateClock(0)
    clock = StateClock(expiration_ms)
    log.info("local brokers keep producer state for %d ms", clock.expiration_ms)
    return clock


async def lowered_state_clock(local: Cluster, clock: StateClock) -> StateClock | None:
    """The local brokers' ``producer.id.expiration.ms`` read again: a clock of the new
    value if one broker now keeps producer state for less than ``clock`` says (the setting
    is dynamic, and a broker may restart with another), else None. Never raised while the
    process runs (a broker that does not answer this time may hold the lower value)."""
    try:
        expiration_ms = await _lowest_expiration_ms(local)
    except ClusterError as exc:
        log.warning("reading producer.id.expiration.ms again: %s (tried again later)", exc)
        return None
    if expiration_ms is None or clock.expiration_ms <= 0:
        return None
    return StateClock(expiration_ms) if expiration_ms < clock.expiration_ms else None


async def _lowest_expiration_ms(local: Cluster) -> int | None:
    values = await local.broker_settings("producer.id.expiration.ms")
    return min(int(v) for v in values.values()) if values else None
