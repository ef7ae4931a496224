"""A fetch written at once on an open connection (``fetch_by_id_then``) has no task (issue
23: a task per request woke a loop turn after its answer and cost as much CPU as the rest of
the step): its answer concludes it as it is read, a timer keeps its chunk timeout, a
connection that closes fails it at once, and a fetcher that stops gives it up."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from syncer.clusters import TP, FetchedPartition
from syncer.config import CopierConfig
from syncer.errors import TransientClusterError
from syncer.fetcher import Fetcher
from tests.unit.test_fetcher import Broker

A = TP("t", 0)


@dataclass
class SilentById(Broker):
    """Takes fetches by topic id, written at once, and answers only when the test hands
    their ``then`` something; counts the requests given up."""

    written: int = 0
    given_up: int = 0
    then: Any = None

    def fetch_by_id_then(
        self, node: int, offsets: Mapping[TP, Any], topic_ids: Any, then: Any, **kw: Any
    ) -> Any:
        self.written += 1
        self.then = then
        return self._give_up

    def _give_up(self) -> None:
        self.given_up += 1


def by_id(broker: Broker, timeout_ms: int = 200) -> Fetcher:
    config = CopierConfig(fetch_max_wait_ms=20, chunk_timeout_ms=timeout_ms)
    f = Fetcher(broker, config, topic_ids={"t": uuid.uuid4()})  # type: ignore[arg-type]
    f.start()
    return f


async def written(broker: SilentById, n: int = 1) -> None:
    for _ in range(5):
        await asyncio.sleep(0)
    assert broker.written == n


async def test_a_fetch_written_at_once_and_never_answered_fails_at_the_chunk_timeout() -> None:
    broker = SilentById()
    f = by_id(broker)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        fetch = f.fetch(A, 0)
        await written(broker)
        assert not f._requests  # no task awaits it
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(fetch, 2)
        assert 0.2 <= loop.time() - started < 0.4
        assert broker.given_up == 1  # the connection's own timeout goes with it
        assert f.connections.in_flight() == 0
        broker.then({A: FetchedPartition(0, 5, 5, 0, (), b"late")})  # nothing more
        assert f.fetches == 0
    finally:
        await f.stop()


async def test_a_fetch_whose_connection_closes_fails_at_once() -> None:
    broker = SilentById()
    f = by_id(broker, timeout_ms=10_000)
    try:
        fetch = f.fetch(A, 0)
        await written(broker)
        broker.then(TransientClusterError("east: connection closed"))
        with pytest.raises(TransientClusterError, match="connection closed"):
            await asyncio.wait_for(fetch, 1)
        assert f.connections.in_flight() == 0 and not f._answering
    finally:
        await f.stop()


async def test_an_answer_concludes_its_fetch_and_its_timer() -> None:
    broker = SilentById()
    f = by_id(broker, timeout_ms=300)
    try:
        fetch = f.fetch(A, 0)
        await written(broker)
        broker.then({A: FetchedPartition(0, 5, 5, 0, (), b"r" * 5)})
        got = await asyncio.wait_for(fetch, 1)
        assert got.records == b"r" * 5 and f.fetches == 1
        await asyncio.sleep(0.4)  # past its chunk timeout: nothing fires
        assert broker.given_up == 0 and not f._answering
    finally:
        await f.stop()


async def test_a_fetcher_stopped_with_a_fetch_out_gives_it_up() -> None:
    broker = SilentById()
    f = by_id(broker, timeout_ms=10_000)
    poll = f.fetch(A, 0, poll=True)
    await written(broker)
    await f.stop()
    assert broker.given_up == 1 and f.connections.in_flight() == 0
    assert not f._answering
    poll.cancel()
