"""The request loops' promise to their callers: nobody awaits forever. A loop that dies of a bug
fails what waits (and what is asked later) with the reason; a writer stopped mid-request
resolves the futures of the writes in flight, so their bytes go back to the budget."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from syncer.budget import ByteBudget
from syncer.clusters import TP, ProduceResult
from syncer.errors import TransientClusterError
from syncer.leaders import MetadataRefresh
from syncer.loops import RequestLoop
from syncer.writer import Writer

A = TP("t", 0)


async def died_of(loop: RequestLoop, bug: str, futures: list[asyncio.Future[Any]]) -> None:
    """Each of ``futures`` fails with ``bug`` (none left waiting), and ``loop`` dies of it."""
    for future in futures:
        with pytest.raises(TransientClusterError, match=bug):
            await asyncio.wait_for(future, 1)
    for _ in range(10):  # the task's death is noted a turn or two after it raised
        if loop.dead is not None:
            break
        await asyncio.sleep(0)
    assert loop.dead is not None and bug in str(loop.dead)


async def no_refresh() -> None:
    """No leader ever moves in these tests."""


class BrokenCluster:
    """A cluster whose metadata lookup fails with a bug (not one of our errors)."""

    name = "local"

    def __init__(self) -> None:
        self.leaders = MetadataRefresh(no_refresh)

    def leader(self, tp: TP) -> int:
        raise KeyError("a bug in the metadata lookup")


class SilentCluster:
    """A cluster that takes produce requests and never answers."""

    name = "local"

    def __init__(self) -> None:
        self.requests = 0
        self.leaders = MetadataRefresh(no_refresh)

    def leader(self, tp: TP) -> int:
        return 1

    def produce_then(self, *_: object, **__: object) -> None:
        return None  # never open: each request goes through ``produce``

    async def produce(
        self, node: int, batches: dict[TP, bytes], *, timeout_ms: int, **_ids: object
    ) -> dict[TP, ProduceResult]:
        self.requests += 1
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_a_writer_loop_that_dies_fails_every_waiting_write_and_later_ones() -> None:
    writer = Writer(BrokenCluster(), max_in_flight=1)  # type: ignore[arg-type]
    writer.start()
    waiting = writer.submit(A, b"batch")
    with pytest.raises(TransientClusterError, match="a bug in the metadata lookup"):
        await asyncio.wait_for(waiting, 5)
    later = writer.submit(A, b"batch")
    assert later.done()
    with pytest.raises(TransientClusterError, match="writer-local stopped"):
        later.result()
    await writer.stop()


async def test_a_writer_stopped_mid_request_resolves_the_writes_in_flight() -> None:
    cluster = SilentCluster()
    writer = Writer(cluster, max_in_flight=1)  # type: ignore[arg-type]
    budget = ByteBudget(1000)
    writer.start()
    in_flight = writer.submit(A, b"batch")
    budget.reserve(500)
    budget.release_when_done(500, in_flight)
    for _ in range(100):
        if cluster.requests:
            break
        await asyncio.sleep(0.01)
    assert cluster.requests == 1
    await writer.stop()
    assert in_flight.done()  # a copier awaiting it is not stuck
    assert budget.used == 0  # and the bytes it held are free again


async def test_forget_cancels_what_is_queued_so_it_never_goes_out() -> None:
    cluster = SilentCluster()
    writer = Writer(cluster, max_in_flight=1)  # type: ignore[arg-type]
    writer.start()
    first = writer.submit(A, b"first")
    for _ in range(100):
        if cluster.requests:
            break
        await asyncio.sleep(0.01)
    queued = writer.submit(A, b"second")  # behind the one in flight
    writer.forget(A)
    await asyncio.sleep(0.05)
    assert queued.cancelled() and not first.done()
    assert cluster.requests == 1  # the queued one was never sent
    await writer.stop()


async def test_async_with_runs_a_writer_for_the_block_and_resolves_what_it_left() -> None:
    cluster = SilentCluster()
    async with Writer(cluster, max_in_flight=1) as writer:  # type: ignore[arg-type]
        in_flight = writer.submit(A, b"first")
        for _ in range(100):
            if cluster.requests:
                break
            await asyncio.sleep(0.01)
        queued = writer.submit(A, b"second")  # behind the one in flight
        assert cluster.requests == 1
    assert in_flight.cancelled() and queued.cancelled()  # nobody awaits them forever
    assert repr(writer) == "<Writer local [queued: 0, in flight: 0]>"
    await writer.stop()  # again: nothing left to do


async def test_a_stop_that_is_itself_cancelled_still_resolves_what_waits() -> None:
    class Stubborn(SilentCluster):
        give_in: bool

        async def produce(
            self, node: int, batches: dict[TP, bytes], *, timeout_ms: int, **_ids: object
        ) -> dict[TP, ProduceResult]:
            self.requests += 1
            while True:  # ignores its cancellation until told: the stop waits for it
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    if self.give_in:
                        raise

    cluster = Stubborn()
    cluster.give_in = False
    writer = Writer(cluster, max_in_flight=1)  # type: ignore[arg-type]
    writer.start()
    writer.submit(A, b"first")
    for _ in range(100):
        if cluster.requests:
            break
        await asyncio.sleep(0.01)
    queued = writer.submit(A, b"second")
    stopping = asyncio.create_task(writer.stop())
    await asyncio.sleep(0.05)
    stopping.cancel()  # the stop's own caller gives up on it
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert queued.cancelled()
    cluster.give_in = True
    await writer.stop()  # the request still running ends now
