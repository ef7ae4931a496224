"""A caught-up partition's poll answers are taken as they come, by the same fetch (issue 23,
the hop): ``ChunkScheduler._take_tail`` gives the copier's step each answer that brought
records before the fetch's future is set, and the fetch polls on from where the records
end, with no new fetch, future or chunk per answer, and the answer never fed to the plan and
taken back from it. The step is the copier's own, with every check (``_step``); whatever
would wait, or is not all of the answer, goes the usual way. Driven with the real copier,
fetcher and scheduler over the stand-ins of ``test_tail_step``; the plan's side alone over
plain values (and inside the plan's random histories: ``test_chunk_plan``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from syncer.budget import ByteBudget
from syncer.cap_gate import CapGate
from syncer.chunk_plan import Chunk, ChunkPlan
from syncer.clusters import FetchedPartition
from syncer.holes import RemoteEnds
from syncer.lanes import Lanes
from syncer.ratelimit import ByteRate
from syncer.sources import SourceHealth
from syncer.status import State
from tests.unit.test_chunk_wakeup import records
from tests.unit.test_tail_step import A, Rig, caught_up, landed, rig, stop


def fetches_of(r: Rig) -> list[tuple[int, bool]]:
    """Count the fetches the copier asks for from here: (offset, poll) of each."""
    lanes: Lanes = r.copier.fetchers["east"]
    asked: list[tuple[int, bool]] = []
    fetch = lanes.fetch

    def counted(tp: Any, offset: int, *args: Any, **kw: Any) -> Any:
        asked.append((offset, kw.get("poll", False)))
        return fetch(tp, offset, *args, **kw)

    lanes.fetch = counted  # type: ignore[method-assign]
    return asked


async def test_one_fetch_polls_on_through_every_answer_and_its_records_land_in_order() -> None:
    r = await rig()
    try:
        await caught_up(r)
        asked = fetches_of(r)
        memory = r.copier.chunks.memory
        for n in range(6):
            r.remote.append(A, 2)
            await r.until(lambda n=n: len(r.writer.sent) == 2 + n, "the polled batch's write")
            (base, written, _f), answered = r.writer.sent[-1], r.remote.answered_in[-1]
            assert base == 3 + 2 * n
            assert written == answered  # in the answer's own turn
            r.writer.answer(1 + n)
        await r.settle()
        assert asked == []  # no fetch asked for since: the first poll went on through all six
        (polling,) = r.copier.chunks.plan.inflight.values()
        assert (polling.start, polling.end) == (15, None)  # it polls from where they end
        assert r.copier.frontier == 15 and r.copier.status.local_end == 15
        assert memory.used == 0  # every answer's bytes came back once its write was answered
    finally:
        await stop(r)


def blames(fetcher: Any) -> list[Any]:
    """Note each time ``fetcher`` fails a request on its broker (``Brokers.failed``)."""
    blamed: list[Any] = []
    failed = fetcher.brokers.failed

    def blame(*args: Any) -> Any:
        blamed.append(args)
        return failed(*args)

    fetcher.brokers.failed = blame
    return blamed


def polls_out_as_the_plan_moves_on(r: Rig) -> tuple[list[int], list[list[int]]]:
    """Note, each time the plan moves its open chunk on past a taken answer
    (``advance_tail``), how many polls are out to the remote (the answered one's connection
    was freed before the answer was handed back); and the offsets of each fetch request
    sent from here."""
    fetcher = r.copier.fetchers["east"].lanes[0]
    plan = r.copier.chunks.plan
    advance, send = plan.advance_tail, fetcher._send
    out: list[int] = []
    sent: list[list[int]] = []

    def noted(*args: Any) -> Any:
        out.append(len(fetcher.connections.polling[1]))
        return advance(*args)

    def sending(node: int, connection: int, wants: Any, wait_ms: int) -> None:
        sent.append([want.offset for want in wants.values()])
        send(node, connection, wants, wait_ms)

    plan.advance_tail = noted  # type: ignore[method-assign]
    fetcher._send = sending  # type: ignore[method-assign]
    return out, sent


async def three_polled_batches(r: Rig) -> None:
    """Three batches of two records, each polled, written and answered in turn."""
    for n in range(3):
        r.remote.append(A, 2)
        await r.until(lambda n=n: len(r.writer.sent) == 2 + n, "the polled batch's write")
        r.writer.answer(1 + n)
        await r.settle()


async def test_a_taken_answers_next_poll_goes_out_right_after_its_writes() -> None:
    """The next poll of a partition whose answer was taken is written before anything else
    of that answer is done (the plan's and the source's bookkeeping, the fetcher's counts
    and pass): records the remote gets meanwhile, mostly the producer's next request
    within a millisecond, wait for a poll only while none is out (issue 23: each µs between
    a floor's writes and its next poll cost the hop about as much)."""
    r = await rig()
    try:
        await caught_up(r)
        out, sent = polls_out_as_the_plan_moves_on(r)
        await three_polled_batches(r)
        assert out == [1, 1, 1]  # the next poll already out
        assert sent == [[5], [7], [9]]  # each from where the answer before it ended
        assert r.writer.offsets() == [0, 3, 5, 7]
    finally:
        await stop(r)


async def test_a_taken_answers_bookkeeping_waits_until_its_next_poll_is_out() -> None:
    """What the copier's step still does once its writes are out (the agreement's note of
    what was written, the budget held until the writes are answered: ``_written``) runs
    after the next poll is written, not between: each µs there costs the hop (issue 23).
    It still runs for every answer: each answer's bytes come back to the budget."""
    r = await rig()
    try:
        await caught_up(r)
        fetcher = r.copier.fetchers["east"].lanes[0]
        agreement = r.copier.agreement
        note = agreement.written
        noted: list[tuple[int, int]] = []

        def written(got: Any) -> None:
            noted.append((got.covered_end, len(fetcher.connections.polling[1])))
            note(got)

        agreement.written = written  # type: ignore[method-assign]
        memory = r.copier.chunks.memory
        await three_polled_batches(r)
        assert noted == [(5, 1), (7, 1), (9, 1)]  # each with the next poll already out
        assert agreement.last is not None and agreement.last.high == 9
        assert memory.used == 0
    finally:
        await stop(r)


async def test_with_a_cap_to_obey_a_taken_answers_poll_waits_for_the_pass() -> None:
    """A cap on the remote's bandwidth is the pass's to obey (its gate, paid as each answer
    is counted): the next poll then goes out in the pass, after the answer was paid for,
    and the partition tails on as before."""
    r = await rig()
    try:
        await caught_up(r)
        fetcher = r.copier.fetchers["east"].lanes[0]
        fetcher._gate = CapGate((ByteRate(10**9, time.monotonic()),), fetcher._wakeup.set)
        out, sent = polls_out_as_the_plan_moves_on(r)
        await three_polled_batches(r)
        assert out == [0, 0, 0]  # none out yet as the plan moved on: queued for the pass
        assert sent == [[5], [7], [9]]  # and each went, in the pass
        assert r.writer.offsets() == [0, 3, 5, 7]
    finally:
        await stop(r)


async def test_an_answer_whose_writes_must_wait_goes_the_usual_way() -> None:
    """With the producer state unproven a write goes only once the one before is answered:
    the step would wait, so the answer is handed back as any other and the copier's task
    writes it, from a fetch of its own after that."""
    r = await rig(expiration_ms=0)
    try:
        await caught_up(r)
        asked = fetches_of(r)
        r.remote.append(A, 2)
        await r.until(lambda: len(r.writer.sent) == 2, "the second write")
        r.remote.append(A, 2)
        await asyncio.sleep(0.05)
        assert r.writer.offsets() == [0, 3]  # the third waits for the second's answer
        r.writer.answer(1)
        await r.until(lambda: len(r.writer.sent) == 3, "the third write")
        assert r.writer.offsets() == [0, 3, 5]
        assert asked[0] == (7, True)  # the usual way: the fetch ended, the next poll its own
    finally:
        await stop(r)


@pytest.mark.parametrize("where", ["the step", "the bookkeeping"])
async def test_a_bug_in_a_taken_answers_step_halts_the_partition_and_blames_no_broker(
    where: str,
) -> None:
    """A bug in the step taken in the fetcher's turn, or in what it leaves for after the
    next poll is out (``_written``: its records written by then): the partition halts with
    the error (as one in the copier's task), and the fetcher's request is not failed for it
    (the broker is not the one that broke)."""
    r = await rig()
    try:
        await caught_up(r)
        fetcher = r.copier.fetchers["east"].lanes[0]
        blamed = blames(fetcher)

        def broken(*_: Any) -> Any:
            raise RuntimeError(f"a bug in {where}")

        if where == "the step":
            r.copier._scan = broken  # type: ignore[method-assign]
        else:
            r.copier.agreement.written = broken  # type: ignore[method-assign]
        r.remote.append(A, 2)
        if where == "the bookkeeping":
            await r.until(lambda: len(r.writer.sent) == 2, "the polled batch's write")
            r.writer.answer(1)  # the halting copier waits for its writes in flight
        await asyncio.wait_for(r.task, 2)
        status = r.copier.status
        assert status.state is State.HALTED
        assert status.error == f"internal error: RuntimeError: a bug in {where}"
        written = [0] if where == "the step" else [0, 3]  # the bookkeeping's came after
        assert r.writer.offsets() == written
        assert fetcher.dead is None and blamed == []
    finally:
        await stop(r)


async def test_records_that_come_while_the_partition_stops_are_not_taken() -> None:
    r = await rig()
    try:
        await caught_up(r)
        r.copier.request_stop()
        r.remote.append(A, 2)
        await asyncio.wait_for(r.task, 2)
        assert r.writer.offsets() == [0]
        assert r.copier.status.state is State.STOPPED
    finally:
        await stop(r)


async def test_a_catch_up_fetches_no_offset_twice() -> None:
    """A catch-up leaves every step to the copier's task: each chunk taken as its answer
    comes is left to it, and the next fetch goes on from where that chunk ends (it went
    from the frontier again too, 1 MiB more from the remote for each chunk, thrown away)."""
    r = await rig(until=40, coalesce_bytes=0, batches=20)
    asked = fetches_of(r)
    try:
        for n in range(20):
            await r.until(lambda n=n: len(r.writer.sent) > n, f"write {n}")
            r.writer.answer(n)
        await asyncio.wait_for(r.task, 2)
        assert r.writer.offsets() == list(range(0, 40, 2))
        offsets = [offset for offset, _poll in asked]
        assert len(offsets) == len(set(offsets)), asked  # none asked twice
    finally:
        await stop(r)


async def test_records_past_an_answers_stable_end_are_fetched_again_from_there_at_once() -> None:
    """An answer whose records run past the stable end it reports (seen on a real broker,
    1 in 15,000 steady answers: it takes the ends before it reads) is written up to that
    end only; the rest is fetched again from there at once, and the copy goes on. (A
    version that counted the chunk the copier held as holding the rest waited for it for
    ever; the one before this polled on from past the records, so they waited for the
    remote's next records: on a quiet partition, minutes.)"""
    r = await rig()
    fetch = r.remote.fetch
    short = [True]

    async def short_once(node: int, wants: Any, **kw: Any) -> Any:
        answer = await fetch(node, wants, **kw)
        got = answer[A]
        if short[0] and got.records:
            short[0] = False  # its records run 2 past the stable end it tells
            end = got.high_watermark - 2
            return {A: FetchedPartition(0, end, end, 0, (), got.records)}
        return answer

    def written() -> list[int]:
        return [offset for raw in r.writer.raws for offset, _v in landed(raw, sequence(raw))]

    try:
        await caught_up(r)
        r.remote.fetch = short_once  # type: ignore[method-assign]
        r.remote.append(A, 2)  # 3..4, brought by the poll already out
        await r.until(lambda: len(r.writer.sent) == 2, "the write of 3..4")
        r.writer.answer(1)
        asked = fetches_of(r)
        r.remote.append(A, 2)  # 5..6: its answer tells an end of 5
        await r.until(lambda: r.copier.frontier == 7, "the rest fetched again, with no more")
        assert asked[0] == (5, True)  # from the end it told
        for n in range(2, len(r.writer.sent)):
            r.writer.answer(n)
        assert written() == list(range(7))  # each offset once, in order
        r.remote.append(A, 2)  # 7..8
        await r.until(lambda: r.copier.frontier == 9, "and on")
    finally:
        await stop(r)


def sequence(raw: bytes) -> int:
    """A write's base sequence: the source offset of its first record."""
    return int.from_bytes(raw[53:57], "big")


# the plan's side, over plain values -------------------------------------------------------


def batch(base: int, count: int) -> bytes:
    return records(base, count)


def plan_at(start: int, ends: dict[str, int]) -> tuple[ChunkPlan, Chunk, ByteBudget]:
    """A plan caught up at ``start`` on remote ``east``: its one fetch, a poll there."""
    memory = ByteBudget(1 << 20)
    health = {name: SourceHealth(name, rank) for rank, name in enumerate(ends)}
    known = {name: RemoteEnds(0, end) for name, end in ends.items()}
    plan = ChunkPlan(health, known, {}, lambda _r: 1 << 20, 4, memory)
    plan.restart(start)
    (chunk,) = plan.launches(start, start, 0.0)
    assert chunk.end is None and chunk.remote == "east" and plan.polls(chunk)
    return plan, chunk, memory


def answer(raw: bytes, end: int) -> FetchedPartition:
    return FetchedPartition(0, end, end, 0, (), raw)


def test_an_answer_from_the_polls_start_to_the_remotes_end_is_taken() -> None:
    plan, chunk, memory = plan_at(10, {"east": 10})
    got = plan.tail_answer(chunk, answer(batch(10, 3) + batch(13, 2), 15))
    assert got is not None and (got.first_offset, got.covered_end) == (10, 15)
    assert plan.inflight == {chunk.number: chunk}  # nothing changed yet
    got.ticket.settle(got.size)
    polling = plan.advance_tail(got, 1.0)
    assert (polling.start, polling.end, polling.number) == (15, None, chunk.number)
    assert polling.ticket.nbytes == 0 and plan.writing is got and plan.next_fetch == 15
    assert memory.used == got.size  # held until its writes are answered
    got.ticket.release()
    assert memory.used == 0


def test_an_answer_that_is_not_all_of_one_poll_at_the_tail_goes_the_usual_way() -> None:
    plan, chunk, _memory = plan_at(10, {"east": 10})
    assert plan.tail_answer(chunk, answer(batch(10, 3), 20)) is None  # more to fetch
    assert plan.tail_answer(chunk, answer(batch(12, 3), 15)) is None  # not from its start
    assert plan.tail_answer(chunk, answer(batch(7, 3), 10)) is None  # nothing past it
    assert plan.tail_answer(chunk, answer(b"", 10)) is None  # nothing at all


def test_an_answer_with_another_remote_ahead_goes_the_usual_way() -> None:
    """The usual launches fetch what the other remote holds past it: a poll on the one
    that answered would leave it waiting for records it may never get."""
    plan, chunk, _memory = plan_at(10, {"east": 10, "west": 10})
    plan.ends["west"] = RemoteEnds(0, 30)  # type: ignore[index]
    assert plan.tail_answer(chunk, answer(batch(10, 3), 13)) is None


def test_an_answer_beside_other_chunks_or_ranges_to_fetch_again_goes_the_usual_way() -> None:
    plan, chunk, _memory = plan_at(10, {"east": 10})
    plan.todo.append((4, 6))
    assert plan.tail_answer(chunk, answer(batch(10, 3), 13)) is None
    plan.todo.clear()
    plan.excluded["west"] = "records differ"  # type: ignore[index]
    assert plan.tail_answer(chunk, answer(batch(10, 3), 13)) is None
