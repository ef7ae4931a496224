"""The writer writes a request in the loop turn its batch was submitted while its connection
has room for one (the hop, issue 23), coalesces the batches that found it full into one
request when it frees, and keeps a node's requests in order while its connection is still
opening."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from syncer.clusters import TP, ProduceResult
from syncer.errors import TransientClusterError
from syncer.leaders import MetadataRefresh
from syncer.writer import WRITE_CONNECTIONS, Writer, write_connection
from tests.unit.test_loops import died_of

A, B, C = TP("t", 0), TP("t", 1), TP("t", 2)
# partitions that write on the same connection as A and as B (``write_connection``)
A2, B2 = TP("t", len(WRITE_CONNECTIONS)), TP("t", 1 + len(WRITE_CONNECTIONS))
A3 = TP("t", 2 * len(WRITE_CONNECTIONS))


async def no_refresh() -> None:
    return None


class Direct:
    """A cluster whose connection is open (``produce_then`` writes at once, logged in
    ``written``, and answers 10 ms later) unless ``opening``: then ``produce_then``
    declines and ``produce`` sends once the connection is up (``up``)."""

    name = "local"

    def __init__(self, *, opening: bool = False) -> None:
        self.leaders = MetadataRefresh(no_refresh)
        self.written: list[list[Any]] = []
        self.connections: list[int] = []  # each request's connection, as written
        self.opening = opening
        self.up = asyncio.Event()

    def leader(self, tp: TP) -> int:
        return 1

    def produce_then(
        self, node: int, batches: dict[TP, Any], then: Any, *, connection: int = 0, **_: Any
    ) -> asyncio.Handle | None:
        if self.opening:
            return None
        self.written.append(list(batches.values()))
        self.connections.append(connection)
        answer = {tp: ProduceResult(0, 0) for tp in batches}
        return asyncio.get_running_loop().call_later(0.01, then, answer)

    async def produce(self, node: int, batches: dict[TP, Any], **_: Any) -> Any:
        await self.up.wait()
        self.written.append(list(batches.values()))
        return await self._answer(batches)

    async def _answer(self, batches: dict[TP, Any]) -> dict[TP, ProduceResult]:
        await asyncio.sleep(0.01)
        return {tp: ProduceResult(0, 0) for tp in batches}


async def test_a_batch_to_an_idle_writer_is_written_before_submit_returns() -> None:
    cluster = Direct()
    async with Writer(cluster, max_in_flight=5) as writer:  # type: ignore[arg-type]
        await asyncio.sleep(0)  # the loop is waiting for work
        future = writer.submit(A, b"a")
        assert cluster.written == [[b"a"]]  # no loop turn in between
        assert (await future).error_code == 0


async def test_batches_that_find_their_connection_full_go_together_when_it_frees() -> None:
    cluster = Direct()
    async with Writer(cluster, max_in_flight=1) as writer:  # type: ignore[arg-type]
        await asyncio.sleep(0)
        first = writer.submit(A, b"a")
        rest = [writer.submit(A2, b"b"), writer.submit(A3, b"c")]  # A's connection: full
        other = writer.submit(B, b"d")  # another connection, with room
        assert cluster.written == [[b"a"], [b"d"]]
        await asyncio.sleep(0)
        assert cluster.written == [[b"a"], [b"d"]]  # the pass too leaves them waiting
        await asyncio.gather(first, other, *rest)
    assert cluster.written == [[b"a"], [b"d"], [b"b", b"c"]]


async def test_while_a_connection_opens_later_requests_wait_behind_it_in_order() -> None:
    cluster = Direct(opening=True)
    async with Writer(cluster, max_in_flight=5) as writer:  # type: ignore[arg-type]
        await asyncio.sleep(0)
        first = writer.submit(A, b"a1")  # goes through ``produce``: waits for the connection
        await asyncio.sleep(0.01)
        cluster.opening = False  # open now, but a request is still waiting to be written
        second = writer.submit(A, b"a2")
        await asyncio.sleep(0.01)
        assert cluster.written == []  # not written ahead of the first
        cluster.up.set()
        await asyncio.gather(first, second)
    assert cluster.written == [[b"a1"], [b"a2"]]


async def test_batches_go_behind_requests_in_flight_at_once_while_there_is_room() -> None:
    """The hop (issue 23): a request in flight is no reason to wait, nor is another batch
    written in the same turn (the fetch answers of several caught-up partitions read in one
    turn: each of their batches written as its answer is handed on, not after the rest)."""
    cluster = Direct()
    async with Writer(cluster, max_in_flight=5) as writer:  # type: ignore[arg-type]
        await asyncio.sleep(0)
        first = writer.submit(A, b"a")
        await asyncio.sleep(0)  # the next turn: ``a`` is still in flight (10 ms)
        second = writer.submit(B, b"b")
        assert cluster.written == [[b"a"], [b"b"]]  # no loop turn in between
        third, fourth = writer.submit(A, b"a2"), writer.submit(A2, b"c")  # one connection
        assert cluster.written == [[b"a"], [b"b"], [b"a2"], [b"c"]]
        await asyncio.gather(first, second, third, fourth)
    assert cluster.written == [[b"a"], [b"b"], [b"a2"], [b"c"]]


async def test_each_partition_writes_on_its_own_one_of_the_connections() -> None:
    """A broker reads a connection's next request only once it has answered the one before:
    partitions on different connections go in requests of their own in the same pass, the
    broker working on them side by side; a partition always on the same one (its batches
    reach the broker in offset order)."""
    cluster = Direct()
    tps = [TP("t", p) for p in range(2 * len(WRITE_CONNECTIONS))]
    async with Writer(cluster, max_in_flight=5) as writer:  # type: ignore[arg-type]
        await asyncio.sleep(0)
        first = [writer.submit(tp, f"{tp.partition}".encode()) for tp in tps]
        await asyncio.gather(*first)
        again = [writer.submit(tp, f"{tp.partition}+".encode()) for tp in tps]
        await asyncio.gather(*again)
    assert set(cluster.connections) == set(WRITE_CONNECTIONS) and len(WRITE_CONNECTIONS) > 1
    for pieces, connection in zip(cluster.written, cluster.connections, strict=True):
        partitions = [int(piece.rstrip(b"+")) for piece in pieces]
        assert {write_connection(TP("t", p)) for p in partitions} == {connection}
    # each burst: every batch at once, in a request of its own (room on every connection)
    assert len(cluster.written) == 2 * len(tps)


async def test_the_cap_on_requests_in_flight_holds_on_each_connection() -> None:
    """``max_in_flight`` requests on A's connection: A's next batch waits, B's (another
    connection) does not."""
    cluster = Direct()
    async with Writer(cluster, max_in_flight=2) as writer:  # type: ignore[arg-type]
        await asyncio.sleep(0)
        batches = [writer.submit(A, b"a1")]
        await asyncio.sleep(0)
        batches.append(writer.submit(A, b"a2"))  # behind it at once: two in flight
        await asyncio.sleep(0)
        batches.append(writer.submit(A, b"a3"))
        await asyncio.sleep(0)
        assert cluster.written == [[b"a1"], [b"a2"]]  # the third waits for an answer
        batches.append(writer.submit(B, b"b"))
        await asyncio.sleep(0)
        assert cluster.written == [[b"a1"], [b"a2"], [b"b"]]
        await asyncio.gather(*batches)
    assert cluster.written == [[b"a1"], [b"a2"], [b"b"], [b"a3"]]


class Answering(Direct):
    """Direct, whose requests are answered only when the test says (``answer``), each with
    the outcome given (results or an error), as a connection's read callback would."""

    def __init__(self) -> None:
        super().__init__()
        self.then: list[Any] = []
        self.timers: list[asyncio.TimerHandle] = []

    def produce_then(
        self, node: int, batches: dict[TP, Any], then: Any, *, connection: int = 0, **_: Any
    ) -> asyncio.Handle:
        self.written.append(list(batches.values()))
        self.then.append((then, list(batches)))
        self.timers.append(asyncio.get_running_loop().call_later(3600, lambda: None))
        return self.timers[-1]

    def answer(self, n: int, outcome: Exception | None = None) -> None:
        then, tps = self.then[n]
        then(outcome if outcome is not None else {tp: ProduceResult(0, 7) for tp in tps})


async def test_an_answer_is_handed_to_its_batches_as_it_is_read_with_no_task() -> None:
    """The hop (issue 23): a request written at once has no task awaiting its answer (a task
    woke a loop turn after the answer was read, and cost as much CPU as the rest of the
    write); its batches' futures are resolved in the read callback, and its connection has
    room again then."""
    cluster = Answering()
    async with Writer(cluster, max_in_flight=1) as writer:  # type: ignore[arg-type]
        await asyncio.sleep(0)
        first = writer.submit(A, b"a1")
        waiting = writer.submit(A, b"a2")  # the connection is full: waits for the answer
        assert not writer._requests  # no task for the request in flight
        cluster.answer(0)
        assert first.done() and first.result() == ProduceResult(0, 7)  # no loop turn
        assert cluster.timers[0].cancelled()  # its timeout with it
        await asyncio.sleep(0)
        assert cluster.written == [[b"a1"], [b"a2"]]  # the room it freed was taken
        cluster.answer(1, TimeoutError("cut off"))
        with pytest.raises(TimeoutError, match="cut off"):
            waiting.result()
        cluster.answer(1)  # a second outcome of the same request changes nothing
        assert isinstance(waiting.exception(), TimeoutError)


async def test_a_writer_stopped_with_requests_in_flight_gives_them_up() -> None:
    """Stopped mid-request, the copier must not wait for an answer that never comes: the
    batches' futures are cancelled, the requests' timeouts too, and an answer arriving
    after the stop is not handed on."""
    cluster = Answering()
    writer = Writer(cluster, max_in_flight=5)  # type: ignore[arg-type]
    writer.start()
    await asyncio.sleep(0)
    batches = [writer.submit(A, b"a"), writer.submit(B, b"b")]
    assert len(cluster.written) == 2
    await writer.stop()
    assert all(batch.cancelled() for batch in batches)
    assert all(timer.cancelled() for timer in cluster.timers)
    assert not any(writer._in_flight.values())
    cluster.answer(0)  # late: nothing to hand it to
    assert batches[0].cancelled()


async def test_an_answer_with_nothing_waiting_wakes_no_pass_of_the_writers_task() -> None:
    """The hop (issue 23): a caught-up partition's write went out in its own turn, and its
    answer frees room nobody waits for: the writer's task is not woken for a pass that finds
    nothing (one per produce answer, for nothing, a sixth of syncer's loop passes). A batch
    that waits for the room is still sent when the answer frees it."""
    cluster = Answering()
    async with Writer(cluster, max_in_flight=1) as writer:  # type: ignore[arg-type]
        await asyncio.sleep(0)
        dispatch, passes = writer._dispatch, []

        def counted() -> None:
            passes.append(len(cluster.written))
            dispatch()

        writer._dispatch = counted  # type: ignore[method-assign]
        first = writer.submit(A, b"a1")
        cluster.answer(0)
        for _ in range(5):
            await asyncio.sleep(0)
        assert first.result() == ProduceResult(0, 7)
        assert passes == []
        writer.submit(A, b"a2")
        waiting = writer.submit(A, b"a3")  # the connection is full: waits for its answer
        for _ in range(5):
            await asyncio.sleep(0)
        passes.clear()
        cluster.answer(1)
        for _ in range(5):
            await asyncio.sleep(0)
        assert passes == [2]  # one pass, for the batch that waited
        assert cluster.written == [[b"a1"], [b"a2"], [b"a3"]]
        cluster.answer(2)
        assert waiting.done()


class Leaderless(Direct):
    """A cluster that knows no leader for ``C``."""

    def leader(self, tp: TP) -> int:
        if tp == C:
            raise TransientClusterError(f"no leader known for {tp}")
        return 1


async def test_a_batch_whose_partition_has_no_leader_fails_with_why_and_others_go() -> None:
    cluster = Leaderless()
    async with Writer(cluster, max_in_flight=5) as writer:  # type: ignore[arg-type]
        await asyncio.sleep(0)
        lost, fine = writer.submit(C, b"c"), writer.submit(A, b"a")
        assert cluster.written == [[b"a"]]  # the other partition's batch went at once
        with pytest.raises(TransientClusterError, match="no leader known"):
            await asyncio.wait_for(lost, 1)
        assert (await fine).error_code == 0
        assert cluster.written == [[b"a"]]  # the leaderless batch was never written


async def test_a_batch_behind_one_that_waits_is_not_written_ahead_of_it() -> None:
    cluster = Direct()
    async with Writer(cluster, max_in_flight=1) as writer:  # type: ignore[arg-type]
        await asyncio.sleep(0)
        first = writer.submit(A, b"a1")  # written: A's connection is full now
        second = writer.submit(A, b"a2")  # waits for it
        await first
        third = writer.submit(A, b"a3")  # the connection may have room: still behind a2
        await asyncio.gather(second, third)
        assert [b for request in cluster.written for b in request] == [b"a1", b"a2", b"a3"]


async def test_a_batch_whose_request_start_fails_is_not_queued_to_go_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a bug in a request's start, after it was written: the caller hears of it, and the pass
    # does not write the batch a second time
    start = Writer._start

    def written_then_broken(self: Writer, *args: Any) -> None:
        start(self, *args)
        raise RuntimeError("a bug after the write")

    monkeypatch.setattr(Writer, "_start", written_then_broken)
    cluster = Direct()
    async with Writer(cluster, max_in_flight=5) as writer:  # type: ignore[arg-type]
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="a bug after the write"):
            writer.submit(A, b"a")
        for _ in range(3):
            await asyncio.sleep(0)  # passes of the writer's task: nothing left to send
        assert cluster.written == [[b"a"]]


class Broken(Direct):
    """A cluster whose connection breaks as each request is written."""

    def produce_then(self, node: int, batches: dict[TP, Any], then: Any, **_: Any) -> Any:
        self.written.append(list(batches.values()))
        raise TransientClusterError("connection broke as the request was written")


async def test_a_batch_whose_request_breaks_as_it_is_written_fails_once_and_is_not_queued() -> None:
    cluster = Broken()
    async with Writer(cluster, max_in_flight=5) as writer:  # type: ignore[arg-type]
        await asyncio.sleep(0)
        future = writer.submit(A, b"a")
        with pytest.raises(TransientClusterError, match="broke"):
            await asyncio.wait_for(future, 1)
        for _ in range(3):
            await asyncio.sleep(0)  # passes of the writer's task: nothing left to send
        assert cluster.written == [[b"a"]]


async def test_a_bug_in_the_writers_pass_fails_the_batches_it_took_from_the_queues() -> None:
    """The batches a pass took from the queues are neither queued nor in flight: a bug met
    as they are written fails them with why (the loop dies of it, failing only what still
    waits), or their copiers would wait for their answers for good."""

    def broken(*_: object) -> None:
        raise RuntimeError("a bug writing a request")

    writer = Writer(Direct(), max_in_flight=5)  # type: ignore[arg-type]
    futures = [writer.submit(A, b"a"), writer.submit(B, b"b")]  # no loop yet: both queued
    writer._start = broken  # type: ignore[method-assign]
    writer.start()
    try:
        await died_of(writer, "a bug writing a request", futures)
    finally:
        await writer.stop()
