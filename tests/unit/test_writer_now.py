"""The writer writes a request in the loop turn its batch was submitted when nothing else
waits (the hop, issue 23), coalesces the rest into its next pass, and keeps a node's requests
in order while its connection is still opening."""

from __future__ import annotations

import asyncio
from typing import Any

from syncer.clusters import TP, ProduceResult
from syncer.leaders import MetadataRefresh
from syncer.writer import Writer

A, B, C = TP("t", 0), TP("t", 1), TP("t", 2)


async def no_refresh() -> None:
    return None


class Direct:
    """A cluster whose connection is open (``produce_now`` writes at once, logged in
    ``written``) unless ``opening``: then ``produce_now`` declines and ``produce`` sends
    once the connection is up (``up``)."""

    name = "local"

    def __init__(self, *, opening: bool = False) -> None:
        self.leaders = MetadataRefresh(no_refresh)
        self.written: list[list[Any]] = []
        self.opening = opening
        self.up = asyncio.Event()

    def leader(self, tp: TP) -> int:
        return 1

    def produce_now(
        self, node: int, batches: dict[TP, Any], **_: Any
    ) -> Any:  # a coroutine, or None
        if self.opening:
            return None
        self.written.append(list(batches.values()))
        return self._answer(batches)

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


async def test_batches_behind_a_request_in_flight_go_together_in_the_next_pass() -> None:
    cluster = Direct()
    async with Writer(cluster, max_in_flight=5) as writer:  # type: ignore[arg-type]
        await asyncio.sleep(0)
        first = writer.submit(A, b"a")
        rest = [writer.submit(B, b"b"), writer.submit(C, b"c")]
        assert cluster.written == [[b"a"]]  # the others wait for the writer's pass
        await asyncio.gather(first, *rest)
    assert cluster.written == [[b"a"], [b"b", b"c"]]


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


async def test_a_batch_in_a_later_turn_goes_behind_the_request_in_flight_at_once() -> None:
    """The hop (issue 23): a request in flight is no reason to wait a turn; only batches
    of the same turn wait, to go together."""
    cluster = Direct()
    async with Writer(cluster, max_in_flight=5) as writer:  # type: ignore[arg-type]
        await asyncio.sleep(0)
        first = writer.submit(A, b"a")
        await asyncio.sleep(0)  # the next turn: ``a`` is still in flight (10 ms)
        second = writer.submit(B, b"b")
        assert cluster.written == [[b"a"], [b"b"]]  # no loop turn in between
        third, fourth = writer.submit(A, b"a2"), writer.submit(C, b"c")
        assert cluster.written == [[b"a"], [b"b"]]  # the same turn: they wait for the pass
        await asyncio.gather(first, second, third, fourth)
    assert cluster.written == [[b"a"], [b"b"], [b"a2", b"c"]]
