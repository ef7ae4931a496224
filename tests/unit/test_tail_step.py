"""A caught-up copier writes what a poll brings in the fetcher's own loop turn (issue 23, the
hop): ``ChunkScheduler`` calls the copier's ``_step_now`` as the answer comes while the
copier waits, and the step is taken there if nothing in it waits, as the hop's floor does
(``tests/bench/floor.py``); anything that would wait, or raise, is left to the copier's task.
Driven here with a real ``PartitionCopier``, ``Fetcher`` and ``ChunkScheduler`` over a
stand-in remote broker that answers real record batches and a stand-in writer whose answers
the test gives; the local log itself is a stand-in too (its ends only)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import crc32c

from syncer.alignment import StateClock
from syncer.batches import decode, split_batches
from syncer.clusters import TP, FetchedPartition, ProduceResult
from syncer.config import CopierConfig
from syncer.copier import PartitionCopier
from syncer.errors import TransientClusterError
from syncer.holes import RemoteEnds
from syncer.identity import WriterIdentity
from syncer.lanes import Lanes
from syncer.partition import PartitionSources
from syncer.protocol.common import MESSAGE_TOO_LARGE, OUT_OF_ORDER_SEQUENCE
from syncer.sources import SourceHealth
from syncer.status import State
from tests.unit.test_chunk_wakeup import records
from tests.unit.test_fetcher import Broker, fetcher
from tests.unit.test_poll_rearm import Turns

A = TP("t", 0)
DAY_MS = 86_400_000


@dataclass
class Remote(Broker):
    """Answers real batches of ``A``, one per ``append``, and notes the loop turn each
    answer is handed back in."""

    turns: Turns | None = None
    answered_in: list[int] = field(default_factory=list)
    batches: list[bytes] = field(default_factory=list)
    one_batch: bool = False  # an answer brings the first batch only

    def append(self, tp: TP, records_: int = 1) -> None:
        self.batches.append(records(self.ends.get(tp, 0), records_))
        super().append(tp, records_)

    async def fetch(self, node: int, wants: Mapping[TP, tuple[int, int]], **kw: Any) -> Any:
        offset = wants[A][0]
        await self.wait({A: offset}, kw["max_wait_ms"])
        end = self.ends.get(A, 0)
        held = [b for b in self.batches if int.from_bytes(b[:8], "big") >= offset]
        got = b"".join(held[:1] if self.one_batch else held)
        self.answered_in.append(self.turns.count if self.turns else -1)
        return {A: FetchedPartition(0, end, end, 0, (), got)}


class Writer:
    """Each batch submitted, with the loop turn it was submitted in; answered by the test."""

    def __init__(self, turns: Turns) -> None:
        self.turns = turns
        self.sent: list[tuple[int, int, asyncio.Future[ProduceResult]]] = []
        self.raws: list[bytes] = []

    def submit(self, tp: TP, raw: bytes | bytearray) -> asyncio.Future[ProduceResult]:
        future: asyncio.Future[ProduceResult] = asyncio.get_running_loop().create_future()
        base = int.from_bytes(raw[53:57], "big")  # its sequence: the source offset
        self.sent.append((base, self.turns.count, future))
        self.raws.append(bytes(raw))
        return future

    def forget(self, tp: TP) -> None:
        pass

    def answer(self, index: int, error_code: int = 0, base_offset: int | None = None) -> None:
        base, _turn, future = self.sent[index]
        future.set_result(ProduceResult(error_code, base if base_offset is None else base_offset))

    def fail(self, index: int, error: Exception) -> None:
        self.sent[index][2].set_exception(error)

    def offsets(self) -> list[int]:
        return [base for base, _turn, _future in self.sent]


class Local:
    """The local log's ends as the copier asks for them (empty at the start)."""

    def __init__(self) -> None:
        self.end = 0
        self.leader_now: int | None = 1

    async def latest(self, tps: list[TP]) -> dict[TP, int]:
        return dict.fromkeys(tps, self.end)

    def known_leader(self, tp: TP) -> int | None:
        return self.leader_now

    async def log_end(self, tp: TP) -> int:
        return self.end  # nothing above the high watermark

    async def ends(self, tps: list[TP]) -> dict[TP, tuple[int, int]]:
        return dict.fromkeys(tps, (0, self.end))


@dataclass
class Rig:
    remote: Remote
    writer: Writer
    local: Local
    copier: PartitionCopier
    task: asyncio.Task[Any]
    turns: Turns

    async def until(self, condition: Any, what: str) -> None:
        for _ in range(500):
            if condition():
                return
            await asyncio.sleep(0.002)
        raise AssertionError(f"timed out waiting for {what}")

    async def settle(self) -> None:
        for _ in range(10):
            await asyncio.sleep(0)


async def rig(
    expiration_ms: int = DAY_MS,
    coalesce_bytes: int = 64 * 1024,
    until: int | None = None,
    batches: int = 0,
    listed_end: int | None = None,
) -> Rig:
    """A copier of ``A`` started (its task made, not run yet); ``until``: a catch-up to
    there; ``batches``: the remote holds this many batches of two records already;
    ``listed_end``: the remote's end as listed before the copy (else what it holds)."""
    turns = Turns()
    remote = Remote(ends={A: 0}, turns=turns)
    for _ in range(batches):
        remote.append(A, 2)
    lanes = Lanes([fetcher(remote, wait_ms=5_000, timeout_ms=10_000)])
    writer, local = Writer(turns), Local()
    config = CopierConfig(
        max_in_flight=5,
        retry_backoff_ms=10,
        retry_backoff_max_ms=20,
        coalesce_bytes=coalesce_bytes,
    )
    end = RemoteEnds(0, 2 * batches if listed_end is None else listed_end)
    sources = PartitionSources(A, {"east": SourceHealth("east", 0)}, {"east": end})
    copier = PartitionCopier(
        A,
        local,  # type: ignore[arg-type]
        writer,  # type: ignore[arg-type]
        {"east": lanes},
        WriterIdentity(producer_id=7, producer_epoch=0),
        config,
        sources,
        state_clock=StateClock(expiration_ms),
    )
    task = asyncio.create_task(copier.run(until))
    return Rig(remote, writer, local, copier, task, turns)


async def stop(r: Rig) -> None:
    r.copier.request_stop()
    for i, (_base, _turn, future) in enumerate(r.writer.sent):
        if not future.done():
            r.writer.answer(i)
    await asyncio.wait_for(r.task, 2)
    r.turns.stop()
    for lanes in r.copier.fetchers.values():
        for lane in lanes.lanes:
            await lane.stop()


async def second_write(r: Rig) -> None:
    """Caught up, then a polled batch written at offset 3 (the step in the fetcher's turn)."""
    await caught_up(r)
    r.remote.append(A, 2)
    await r.until(lambda: len(r.writer.sent) == 2, "the second write")


async def caught_up(r: Rig) -> None:
    """The first records written by the copier's task (the first chunk is compared with the
    local log first) and answered: from here the partition tails."""
    r.remote.append(A, 3)
    await r.until(lambda: r.writer.offsets() == [0], "the first write")
    r.writer.answer(0)
    await r.settle()


async def test_a_polled_batch_is_written_in_the_turn_its_answer_comes() -> None:
    r = await rig()
    try:
        await caught_up(r)
        for n in range(3):
            r.remote.append(A, 2)
            await r.until(lambda n=n: len(r.writer.sent) == 2 + n, "the polled batch's write")
            (base, written, _f), answered = r.writer.sent[-1], r.remote.answered_in[-1]
            assert base == 3 + 2 * n
            assert written == answered  # not a loop turn later, in the copier's task
            r.writer.answer(1 + n)
        assert r.copier.frontier == 9
        assert r.copier.status.state is State.COPYING
    finally:
        await stop(r)


async def test_an_answer_the_step_took_wakes_no_pass_of_the_fetchers_loop() -> None:
    """The step wrote what the poll brought and its next poll went out right after, in the
    answer's turn: the fetcher's own task is not woken for a pass that finds nothing (one a
    caught-up partition's answer, for nothing), and the pass made as the answer is handed
    back is one, not a second to find the poll's queue empty. The next answers still come."""
    r = await rig()
    try:
        await caught_up(r)
        fetcher = r.copier.fetchers["east"].lanes[0]
        dispatch, send_now = fetcher._dispatch, fetcher._send_now
        loop_passes: list[int] = []
        handing = [False]
        passes_handing = [0]

        def counted() -> bool:
            if not handing[0]:
                loop_passes.append(len(r.writer.sent))
            passes_handing[0] += handing[0]
            return dispatch()

        def sent_now() -> None:
            handing[0] = True
            try:
                send_now()
            finally:
                handing[0] = False

        fetcher._dispatch = counted  # type: ignore[method-assign]
        fetcher._send_now = sent_now  # type: ignore[method-assign]
        await r.settle()
        loop_passes.clear()
        for n in range(5):
            r.remote.append(A, 2)
            await r.until(lambda n=n: len(r.writer.sent) == 2 + n, "the polled batch's write")
            r.writer.answer(1 + n)
            await r.settle()
        assert r.writer.offsets() == [0, 3, 5, 7, 9, 11]
        assert loop_passes == []
        assert passes_handing[0] == 5  # one pass per answer, the one that sent its next poll
    finally:
        await stop(r)


async def test_with_the_producer_state_unproven_a_batch_waits_for_the_one_before() -> None:
    # expiration unknown (0): the fence is never relied on, so a write goes only once the
    # one before it is answered; the step that would have to wait is the task's
    r = await rig(expiration_ms=0)
    try:
        await caught_up(r)
        r.remote.append(A, 2)
        await r.until(lambda: len(r.writer.sent) == 2, "the second write")
        r.remote.append(A, 2)
        await r.settle()
        await asyncio.sleep(0.05)
        assert r.writer.offsets() == [0, 3]  # the third waits for the second's answer
        r.writer.answer(1)
        await r.until(lambda: len(r.writer.sent) == 3, "the third write")
        assert r.writer.offsets() == [0, 3, 5]
    finally:
        await stop(r)


async def test_a_write_that_landed_elsewhere_halts_at_the_next_step() -> None:
    r = await rig()
    try:
        await second_write(r)
        r.writer.answer(1, base_offset=4)  # the broker put offset 3's batch at 4
        r.remote.append(A, 2)
        await asyncio.wait_for(r.task, 2)
        status = r.copier.status
        assert status.state is State.HALTED
        assert "remote offset 3 landed at local offset 4" in (status.error or "")
        assert r.writer.offsets() == [0, 3]  # nothing written behind it
    finally:
        r.turns.stop()
        await stop(r)


async def test_a_refused_sequence_resumes_from_the_local_end() -> None:
    r = await rig()
    try:
        await second_write(r)
        r.writer.answer(1, error_code=OUT_OF_ORDER_SEQUENCE)
        r.local.end = 3  # what landed: the first write only
        r.remote.append(A, 2)
        await r.until(lambda: r.copier.status.retries == 1, "the resync")
        assert r.copier.status.errors == {"resync": 1}
        assert r.writer.offsets() == [0, 3]  # the step raised before it sent anything
    finally:
        await stop(r)


async def test_a_write_that_fails_while_the_copier_waits_for_a_poll_is_acted_on_at_once() -> None:
    """Nothing more comes from the remote: the partition's empty polls are held for minutes
    (ONE_SOURCE_HOLD_S). A write refused meanwhile (the writer stops writing while the
    group's lease lapses) is judged as it is answered, and the partition copied again from
    the local end, not when a poll next ends."""
    r = await rig()
    try:
        await second_write(r)
        await r.settle()
        assert r.copier.chunks.parked  # waits for the next poll, which the remote holds
        r.local.end = 3  # what landed: the first write only
        r.writer.fail(1, TransientClusterError("not writing: this process may have lost its group"))
        await r.until(lambda: r.writer.offsets() == [0, 3, 3], "offset 3 written again")
        assert r.copier.status.retries == 1
        assert r.remote.ends[A] == 5  # no new records brought it on
    finally:
        await stop(r)


async def test_a_write_waiting_for_room_goes_in_the_turn_after_the_answer_that_frees_it() -> None:
    """The hop (issue 23): a poll that brought more batches than may be in flight is written
    by the copier's task, each batch past the fifth once the oldest write is answered. The
    task wakes in the loop turn after that answer (``asyncio.wait`` took two: its own
    callback, then the task's), and the batch goes then. (Batches coalesced into one write:
    below, with none coalesced.)"""
    # the stand-in's records, stamped 0, are fresh
    r = await rig(expiration_ms=10**15, coalesce_bytes=0)
    try:
        await caught_up(r)
        for _ in range(8):
            r.remote.append(A, 1)  # eight batches, one poll: three more than may be in flight
        await r.until(lambda: len(r.writer.sent) == 6, "the first five of the eight")
        await r.settle()
        assert r.writer.offsets() == [0, 3, 4, 5, 6, 7]
        for n in range(3):
            answered_in = r.turns.count
            r.writer.answer(1 + n)
            await r.until(lambda n=n: len(r.writer.sent) == 7 + n, "the next batch")
            assert r.writer.sent[-1][0] == 8 + n
            assert r.writer.sent[-1][1] - answered_in <= 1  # the turn after the answer
    finally:
        await stop(r)


def landed(raw: bytes, base: int) -> list[tuple[int, bytes | None]]:
    """The offsets and values a write's batch puts in the log from local offset ``base``."""
    stamped = bytearray(raw)
    stamped[0:8] = base.to_bytes(8, "big")  # as the broker stamps it
    return [(r.offset, r.value) for b in split_batches(stamped) for r in decode(b)]


async def eight_in_one_poll(r: Rig) -> None:
    """Caught up, then eight batches of a record each brought by one poll: one write."""
    await caught_up(r)
    for _ in range(8):
        r.remote.append(A, 1)
    await r.until(lambda: len(r.writer.sent) == 2, "the polled batches' write")


async def test_small_batches_of_one_poll_go_in_one_write_in_the_answers_turn() -> None:
    """Eight batches of a record each in one poll: one write, at once, holding every record
    at its own offset (each written alone, three waited for room: the hop's tail after a
    stall, a write per source batch, one after another)."""
    r = await rig(expiration_ms=10**15)
    try:
        await eight_in_one_poll(r)
        await r.settle()
        assert r.writer.offsets() == [0, 3]
        (_base, written, _f), answered = r.writer.sent[-1], r.remote.answered_in[-1]
        assert written == answered  # in the answer's turn: the step took it
        assert [offset for offset, _v in landed(r.writer.raws[-1], 3)] == list(range(3, 11))
        r.writer.answer(1)
        await r.until(lambda: r.copier.status.local_end == 11, "the local end at 11")
    finally:
        await stop(r)


async def test_a_coalesced_write_refused_as_too_large_is_written_batch_by_batch() -> None:
    """The local topic takes less than the batch syncer made of eight small ones (its
    max.message.bytes below the remote's, say): no halt, as for a source batch it refuses,
    but the records written again from the local end, each source batch alone."""
    r = await rig(expiration_ms=10**15)
    try:
        await eight_in_one_poll(r)
        r.local.end = 3
        r.writer.answer(1, error_code=MESSAGE_TOO_LARGE, base_offset=-1)
        for n in range(2, 10):  # written again from 3, one at a time (the state unproven)
            await r.until(lambda n=n: len(r.writer.sent) > n, f"write {n}")
            r.writer.answer(n)
        assert r.writer.offsets() == [0, 3, *range(3, 11)]
        assert all(len(landed(raw, 0)) == 1 for raw in r.writer.raws[2:])  # a record each
        status = r.copier.status
        assert status.state is not State.HALTED and status.errors == {"resync": 1}
        assert not r.copier.writes.coalescing
    finally:
        await stop(r)


def marker(base: int) -> bytes:
    """A transaction marker (a control batch of one record) at ``base``, as a log holds it."""
    raw = bytearray(records(base, 1))
    raw[22] |= 0x30  # transactional, control
    raw[17:21] = crc32c.crc32c(raw[21:]).to_bytes(4, "big")
    return bytes(raw)


async def test_a_transaction_marker_polled_while_tailing_halts_under_the_halt_policy() -> None:
    """A hole brought by a poll is not the lean step's: the copier's task meets it, and with
    ``on_hole: halt`` the partition halts there, nothing written at its offset."""
    r = await rig()
    try:
        await caught_up(r)
        r.remote.batches.append(marker(3))
        Broker.append(r.remote, A, 1)
        await asyncio.wait_for(r.task, 2)
        status = r.copier.status
        assert status.state is State.HALTED
        assert "hole at offset 3: transaction marker" in (status.error or "")
        assert r.writer.offsets() == [0]
    finally:
        r.turns.stop()
        await stop(r)


async def test_a_catch_up_stops_at_its_end_though_the_remote_holds_more() -> None:
    """A catch-up to 10 of a remote holding 20, its answers a batch each, its writes
    answered at once: the answers that come while the copier waits are its task's, not the
    lean step's (which would launch the next fetches to the remote's end, not the
    catch-up's): nothing past 10 is written and the copier returns there."""
    r = await rig(until=10, batches=10)
    r.remote.one_batch = True
    try:
        answered = 0
        for _ in range(200):
            if r.task.done():
                break
            for i in range(answered, len(r.writer.sent)):
                r.writer.answer(i)
            answered = len(r.writer.sent)
            await asyncio.sleep(0.002)
        await asyncio.wait_for(r.task, 2)
        assert r.copier.frontier == 10 and r.writer.offsets() == [0, 2, 4, 6, 8]
    finally:
        await stop(r)
