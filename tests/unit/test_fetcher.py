"""How the fetcher gathers polls, with a stand-in cluster that answers like a broker: a poll
(max wait > 0) returns as soon as any of its partitions has records past its offset, or
empty when the wait runs out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from syncer.brokers import BROKER_BACKOFF_MAX_S, BROKER_BACKOFF_S, BrokerFailed
from syncer.chunks import ChunkScheduler
from syncer.clusters import TP, FetchedPartition
from syncer.config import CopierConfig
from syncer.errors import TransientClusterError
from syncer.fetch_connections import (
    DATA_CONNECTION,
    PIPELINE,
    POLL_CONNECTIONS,
    QUIET_CONNECTION,
)
from syncer.fetcher import QUEUED_REQUESTS, Fetcher
from syncer.holes import RemoteEnds
from syncer.lanes import Lanes
from syncer.leaders import MetadataRefresh
from syncer.partition import PartitionSources
from syncer.sources import SourceHealth
from tests.unit.test_loops import died_of

A, B, C = TP("t", 0), TP("t", 1), TP("t", 2)


async def no_refresh() -> None:
    """No leader moves in these tests (test_leaders moves them)."""


@dataclass
class Broker:
    name: str = "east"
    ends: dict[TP, int] = field(default_factory=dict)
    requests: list[tuple[int, dict[TP, int], int]] = field(default_factory=list)
    appended: asyncio.Event = field(default_factory=asyncio.Event)
    leaders: MetadataRefresh = field(default_factory=lambda: MetadataRefresh(no_refresh))

    def leader(self, tp: TP) -> int:
        return 1

    def fetch_node(self, tp: TP) -> int:
        return self.leader(tp)  # no rack: a partition's fetches go to its leader

    def append(self, tp: TP, records: int = 1) -> None:
        self.ends[tp] = self.ends.get(tp, 0) + records
        self.appended.set()
        self.appended = asyncio.Event()

    async def wait(self, offsets: Mapping[TP, int], max_wait_ms: int) -> None:
        """Until a partition has records past its offset, or ``max_wait_ms``."""
        deadline = asyncio.get_running_loop().time() + max_wait_ms / 1000
        while not any(self.ends.get(tp, 0) > offset for tp, offset in offsets.items()):
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                break
            try:
                await asyncio.wait_for(self.appended.wait(), left)
            except TimeoutError:
                break

    def polled(self, tp: TP) -> int:
        """How many poll requests carried ``tp``."""
        return sum(1 for conn, wants, _w in self.requests if tp in wants and conn != 1)

    async def fetch(
        self,
        node: int,
        wants: Mapping[TP, tuple[int, int]],
        *,
        max_wait_ms: int,
        max_bytes: int,
        partition_max_bytes: int,
        connection: int,
        nearest: bool = False,
    ) -> dict[TP, FetchedPartition]:
        offsets = {tp: offset for tp, (offset, _limit) in wants.items()}
        self.requests.append((connection, offsets, max_wait_ms))
        await self.wait(offsets, max_wait_ms)
        out = {}
        for tp, offset in offsets.items():
            end = self.ends.get(tp, 0)
            records = b"r" * (end - offset) if end > offset else b""
            out[tp] = FetchedPartition(0, end, end, 0, (), records)
        return out


def fetcher(broker: Broker, *, wait_ms: int = 20, timeout_ms: int = 5_000) -> Fetcher:
    config = CopierConfig(fetch_max_wait_ms=wait_ms, chunk_timeout_ms=timeout_ms)
    f = Fetcher(broker, config)  # type: ignore[arg-type]
    f.start()
    return f


async def test_an_empty_poll_is_held_and_polled_again_until_records_come() -> None:
    broker = Broker()
    f = fetcher(broker)
    try:
        poll = asyncio.ensure_future(f.fetch(A, 0, poll=True))
        await asyncio.sleep(0.15)  # the first poll (20 ms) came back empty
        assert not poll.done()  # the copier was not woken by the empty answer
        assert broker.polled(A) >= 2
        broker.append(A)
        got = await asyncio.wait_for(poll, 1)
        assert got.records == b"r" and got.high_watermark == 1
    finally:
        await f.stop()


async def test_a_held_poll_comes_back_empty_after_the_hold() -> None:
    broker = Broker()
    f = fetcher(broker, wait_ms=20, timeout_ms=200)  # the hold is at most the chunk timeout
    try:
        started = asyncio.get_running_loop().time()
        got = await asyncio.wait_for(f.fetch(A, 0, poll=True), 2)
        waited = asyncio.get_running_loop().time() - started
        assert got.records == b"" and 0.2 <= waited < 1.0
    finally:
        await f.stop()


async def test_a_poll_is_held_for_as_long_as_its_fetch_asks() -> None:
    broker = Broker()
    f = fetcher(broker, wait_ms=20, timeout_ms=200)
    try:
        held = asyncio.ensure_future(f.fetch(A, 0, poll=True, hold_s=0.6))
        await asyncio.sleep(0.45)  # past the chunk timeout, the default bound
        assert not held.done()
        assert (await asyncio.wait_for(held, 2)).records == b""
    finally:
        await f.stop()


async def test_a_poll_is_not_held_when_the_copier_says_no_or_is_released() -> None:
    broker = Broker()
    f = fetcher(broker)
    try:
        got = await asyncio.wait_for(f.fetch(A, 0, poll=True, hold=lambda: False), 1)
        assert got.records == b""
        stopping = False
        held = asyncio.ensure_future(f.fetch(B, 0, poll=True, hold=lambda: not stopping))
        await asyncio.sleep(0.1)
        assert not held.done()
        stopping = True  # as a stopping copier does (ChunkScheduler.stop_polling)
        f.release(B)  # held between polls: back now; in a poll: back when that one ends
        assert (await asyncio.wait_for(held, 3)).records == b""
    finally:
        await f.stop()


async def test_ends_that_move_back_are_handed_back_at_once() -> None:
    broker = Broker(ends={A: 3})
    f = fetcher(broker)
    try:
        got = await asyncio.wait_for(f.fetch(A, 5, poll=True), 1)  # recreated topic: end 3
        assert got.high_watermark == 3
    finally:
        await f.stop()


async def test_a_partition_that_catches_up_during_a_poll_gets_a_poll_of_its_own() -> None:
    """A poll for A and B is out; C catching up must not wait for it to come back."""
    broker = Broker()
    f = fetcher(broker, wait_ms=2_000)
    try:
        first = [asyncio.ensure_future(f.fetch(tp, 0, poll=True)) for tp in (A, B)]
        await asyncio.sleep(0.05)
        late = asyncio.ensure_future(f.fetch(C, 0, poll=True))
        await asyncio.sleep(0.05)
        broker.append(C)
        got = await asyncio.wait_for(late, 0.5)  # well inside the first poll's 2 s
        assert got.records == b"r"
        connections = {conn for conn, wants, _w in broker.requests if C in wants}
        assert connections and connections <= set(POLL_CONNECTIONS)
        assert not any(t.done() for t in first)
    finally:
        await f.stop()


async def test_polls_wait_for_a_free_connection_when_all_are_out() -> None:
    broker = Broker()
    f = fetcher(broker, wait_ms=300)
    tps = [TP("t", p) for p in range(len(POLL_CONNECTIONS) + 1)]
    for tp in tps:  # all brought records lately: none is quiet (polled apart, in a session)
        f._brought[tp] = asyncio.get_running_loop().time()
    try:
        polls = []
        for tp in tps:
            polls.append(asyncio.ensure_future(f.fetch(tp, 0, poll=True)))
            await asyncio.sleep(0.01)  # each joins while the others' polls are out
        await asyncio.sleep(0.05)
        in_flight = [r for r in broker.requests if r[2] > 0]
        assert len(in_flight) == len(POLL_CONNECTIONS)  # the last one looked once, no wait
        assert broker.requests[-1][0] == DATA_CONNECTION and tps[-1] in broker.requests[-1][1]
        broker.append(tps[-1])
        got = await asyncio.wait_for(polls[-1], 1)  # polled once a connection came free
        assert got.records == b"r"
    finally:
        await f.stop()


async def test_without_topic_ids_quiet_partitions_keep_the_ordinary_polls() -> None:
    """Quiet polls are fetch sessions, which name topics by id: without ids a quiet partition
    stays in the ordinary polls (``test_quiet_polls`` has a broker that keeps sessions)."""
    broker = Broker()
    f = fetcher(broker, wait_ms=20, timeout_ms=3_000)  # quiet wait would be 1 s
    try:
        quiet = asyncio.ensure_future(f.fetch(A, 0, poll=True))
        await asyncio.sleep(0.3)
        assert {w for _c, wants, w in broker.requests if A in wants} == {20}
        assert QUIET_CONNECTION not in {c for c, _wants, _w in broker.requests}
        broker.append(A)
        assert (await asyncio.wait_for(quiet, 0.5)).records == b"r"
    finally:
        await f.stop()


async def test_a_stopping_copier_does_not_wait_for_its_long_poll() -> None:
    broker = Broker()
    f = fetcher(broker, wait_ms=2_000, timeout_ms=10_000)
    ends = {"east": RemoteEnds(0, 0)}
    sources = PartitionSources(A, {"east": SourceHealth("east", 0)}, ends)
    chunks = ChunkScheduler(A, {"east": Lanes([f])}, sources, f.config)
    try:
        chunks.launch(0, 0)  # caught up: one long poll at the tail
        waiting = asyncio.create_task(chunks.next_ready(0))
        await asyncio.sleep(0.1)
        assert not waiting.done() and broker.polled(A) == 1
        chunks.stop_polling()
        assert await asyncio.wait_for(waiting, 0.2) is None  # not after the poll's 2 s
    finally:
        await chunks.close()
        await f.stop()


class Silent(Broker):
    """A broker that takes requests and never answers them."""

    async def fetch(
        self,
        node: int,
        wants: Mapping[TP, tuple[int, int]],
        *,
        max_wait_ms: int,
        max_bytes: int,
        partition_max_bytes: int,
        connection: int,
        nearest: bool = False,
    ) -> dict[TP, FetchedPartition]:
        self.requests.append((connection, {tp: offset for tp, (offset, _) in wants.items()}, 0))
        await asyncio.Event().wait()
        return {}


async def test_a_request_never_answered_fails_after_the_chunk_timeout_from_its_sending() -> None:
    f = fetcher(Silent(), timeout_ms=200)
    try:
        started = asyncio.get_running_loop().time()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(f.fetch(A, 0), 2)
        assert 0.2 <= asyncio.get_running_loop().time() - started < 0.4  # timed once
    finally:
        await f.stop()


async def test_a_fetch_never_sent_fails_after_its_wait_in_the_queue() -> None:
    broker = Broker()
    f = fetcher(broker, timeout_ms=100)
    f.connections.data_busy[1] = PIPELINE  # a slot never freed (a bug): nothing more goes out
    try:
        started = asyncio.get_running_loop().time()
        with pytest.raises(TimeoutError, match="never sent"):
            await asyncio.wait_for(f.fetch(A, 0), 2)
        waited = asyncio.get_running_loop().time() - started
        assert QUEUED_REQUESTS * 0.1 <= waited < QUEUED_REQUESTS * 0.1 + 0.2
        assert not broker.requests
        await asyncio.sleep(0.01)
        assert not f._wants  # the failed fetch left the queue
    finally:
        await f.stop()


def broken_send(*_: object) -> None:
    raise RuntimeError("a bug sending a fetch")


async def test_a_bug_in_the_loops_pass_fails_the_fetches_it_took_from_the_queue() -> None:
    """The fetches a pass took from the queue are neither queued nor in flight: a bug met as
    they are sent fails them with why (the loop dies of it, failing only what still
    waits), or their copiers would wait for them for good."""
    f = fetcher(Broker(ends={A: 1, B: 1}))
    f._send = broken_send  # type: ignore[method-assign]
    try:
        fetches = [f.fetch(A, 0), f.fetch(B, 0)]  # queued together: one pass takes both
        await died_of(f, "a bug sending a fetch", fetches)
    finally:
        await f.stop()


async def test_a_bug_in_a_pass_made_in_a_copiers_turn_fails_its_fetch_and_the_loop() -> None:
    """A poll asked of an idle fetcher is sent in its caller's turn (``_send_now``), not by
    the loop's task: a bug met there fails it with why and the loop dies of it. Before, the
    loop's next pass found the queue empty and lived on, the poll stranded."""
    f = fetcher(Broker())
    await asyncio.sleep(0)  # the loop's task waits: a poll goes at once
    f._send = broken_send  # type: ignore[method-assign]
    try:
        poll = f.fetch(A, 0, poll=True)
        assert poll.done()  # failed in this turn, the caller's
        later = f.fetch(B, 0)  # asked before the loop's task has died: failed at once too
        assert later.done()
        await died_of(f, "a bug sending a fetch", [poll, later])
    finally:
        await f.stop()


async def test_a_fetch_answered_in_time_is_not_failed_by_its_queue_bound() -> None:
    broker = Broker(ends={A: 1})
    f = fetcher(broker, timeout_ms=100)
    try:
        assert (await f.fetch(A, 0)).records == b"r"
        await asyncio.sleep(QUEUED_REQUESTS * 0.1 + 0.05)  # past the bound: nothing fires
        assert (await f.fetch(A, 0)).records == b"r"
    finally:
        await f.stop()


async def test_a_chunk_whose_remote_never_answers_does_not_wait_forever() -> None:
    broker = Silent()
    f = fetcher(broker, timeout_ms=200)
    health = {"east": SourceHealth("east", 0)}
    sources = PartitionSources(A, health, {"east": RemoteEnds(0, 1_000)})
    chunks = ChunkScheduler(A, {"east": Lanes([f])}, sources, f.config)
    try:
        chunks.launch(0, 1_000)
        got = await asyncio.wait_for(chunks.next_ready(0), 2)
        assert got is None  # the chunk failed: its remote backs off, nothing else in flight
        assert health["east"].errors >= 1 and "TimeoutError" in str(health["east"].last_error)
        assert chunks.memory.used == 0
    finally:
        await chunks.close()
        await f.stop()


@dataclass
class ThreeNodes(Broker):
    """A remote of three brokers; fetches to a node in ``dead`` fail as a refused connection
    would. A metadata refresh applies ``elected`` (the controller's new leaders)."""

    led_by: dict[TP, int] = field(default_factory=lambda: {A: 1, B: 2, C: 3})
    dead: set[int] = field(default_factory=set)
    hung: set[int] = field(default_factory=set)  # restarting: they accept, answer nothing
    elected: dict[TP, int] = field(default_factory=dict)
    sent_to: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.leaders = MetadataRefresh(self.refresh, min_interval_s=0.0)

    async def refresh(self) -> None:
        self.led_by.update(self.elected)

    async def refresh_metadata(self) -> None:
        await self.refresh()

    def leader(self, tp: TP) -> int:
        return self.led_by[tp]

    async def fetch(
        self,
        node: int,
        wants: Mapping[TP, tuple[int, int]],
        *,
        max_wait_ms: int,
        max_bytes: int,
        partition_max_bytes: int,
        connection: int,
        nearest: bool = False,
    ) -> dict[TP, FetchedPartition]:
        self.sent_to.append(node)
        if node in self.dead:
            raise TransientClusterError(f"node {node}: ConnectionRefusedError()")
        if node in self.hung:
            await asyncio.Event().wait()
        assert all(self.led_by[tp] == node for tp in wants)
        return await super().fetch(
            node,
            wants,
            max_wait_ms=max_wait_ms,
            max_bytes=max_bytes,
            partition_max_bytes=partition_max_bytes,
            connection=connection,
        )


async def test_a_dead_broker_fails_only_its_partitions_which_follow_their_new_leader() -> None:
    broker = ThreeNodes(ends={A: 1, B: 1, C: 1})
    f = fetcher(broker)
    try:
        for tp in (A, B, C):  # every broker answered once: all three are routed to
            assert (await f.fetch(tp, 0)).records == b"r"
        broker.dead.add(1)
        with pytest.raises(BrokerFailed) as failed:
            await f.fetch(A, 0)
        assert failed.value.node == 1
        assert broker.leaders.started == 1  # its leader is asked for again
        # the others copy on, no pause: their brokers do not back off
        assert (await asyncio.wait_for(f.fetch(B, 0), 0.05)).records == b"r"
        assert (await asyncio.wait_for(f.fetch(C, 0), 0.05)).records == b"r"
        # A waits out its broker's back-off, then fails again; its new leader takes it once
        # the refresh that failure asks for names it
        tries = len([n for n in broker.sent_to if n == 1])
        again = asyncio.ensure_future(f.fetch(A, 0))
        await asyncio.sleep(BROKER_BACKOFF_S / 2)
        assert not again.done() and broker.sent_to.count(1) == tries  # held, not sent
        with pytest.raises(BrokerFailed):
            await asyncio.wait_for(again, 1)
        broker.elected[A] = 2
        with pytest.raises(BrokerFailed):
            await asyncio.wait_for(f.fetch(A, 0), 1)
        assert (await asyncio.wait_for(f.fetch(A, 0), 1)).records == b"r"  # from node 2
        assert broker.sent_to[-1] == 2
    finally:
        await f.stop()


async def test_a_remote_whose_every_broker_fails_fails_as_a_whole() -> None:
    broker = ThreeNodes(ends={A: 1, B: 1, C: 1})
    f = fetcher(broker)
    try:
        for tp in (A, B, C):
            await f.fetch(tp, 0)
        broker.dead.update({1, 2, 3})  # a cut link
        with pytest.raises(BrokerFailed):
            await f.fetch(A, 0)
        with pytest.raises(BrokerFailed):
            await f.fetch(B, 0)
        with pytest.raises(TransientClusterError) as last:
            await f.fetch(C, 0)
        assert not isinstance(last.value, BrokerFailed)  # the remote's failure, as before
    finally:
        await f.stop()


async def test_a_broker_failure_counts_an_error_without_backing_the_remote_off() -> None:
    broker = ThreeNodes(ends={A: 5, B: 5, C: 5})
    f = fetcher(broker)
    health = {"east": SourceHealth("east", 0)}
    sources = PartitionSources(A, health, {"east": RemoteEnds(0, 5)})
    chunks = ChunkScheduler(A, {"east": Lanes([f])}, sources, f.config)
    try:
        for tp in (A, B, C):
            await f.fetch(tp, 0)
        broker.dead.add(1)
        broker.elected[A] = 2
        chunks.launch(0, 5)
        got = await asyncio.wait_for(chunks.next_ready(0), 2)
        assert got is not None and got.remote == "east"  # fetched again, from node 2
        assert health["east"].errors == 1 and "node 1" in str(health["east"].last_error)
        assert health["east"].healthy(time.monotonic())  # the remote never backed off
        assert health["east"].failures_in_row == 0
    finally:
        await chunks.close()
        await f.stop()


async def test_with_another_remote_a_dead_broker_backs_its_remote_off_and_the_other_serves() -> (
    None
):
    # several remotes: a dead leader has nothing to serve until the controller moves it,
    # while the other remote has the records now (the BitTorrent-style promise)
    east = ThreeNodes(ends={A: 5, B: 5, C: 5})
    west = ThreeNodes(ends={A: 5, B: 5, C: 5})
    f_east, f_west = fetcher(east), fetcher(west)
    health = {"east": SourceHealth("east", 0), "west": SourceHealth("west", 0)}
    sources = PartitionSources(A, health, {"east": RemoteEnds(0, 5), "west": RemoteEnds(0, 5)})
    chunks = ChunkScheduler(
        A, {"east": Lanes([f_east]), "west": Lanes([f_west])}, sources, f_east.config
    )
    try:
        for f in (f_east, f_west):
            for tp in (A, B, C):  # every broker routed to: one dying is a broker failure
                await f.fetch(tp, 0)
        east.dead.add(1)  # A's leader at east, never re-elected in this test
        west.dead.add(1)
        west.led_by[A] = 2
        warmed = len(west.sent_to)
        chunks.launch(0, 5)
        waiting = asyncio.create_task(chunks.next_ready(0))
        started = time.monotonic()
        while len(west.sent_to) == warmed:
            assert time.monotonic() - started < 3, "west was never asked"
            await asyncio.sleep(0.01)
        assert west.sent_to[-1] == 2  # the chunk went to the other remote's leader
        assert not health["east"].healthy(time.monotonic())  # backed off as a whole
        assert health["west"].healthy(time.monotonic())
        waiting.cancel()
    finally:
        await chunks.close()
        await f_east.stop()
        await f_west.stop()


async def test_a_fetch_out_to_a_restarting_broker_goes_to_the_new_leader_once_refreshed() -> None:
    broker = ThreeNodes(ends={A: 1, B: 1, C: 1})
    f = fetcher(broker, timeout_ms=5_000)
    try:
        for tp in (A, B, C):
            await f.fetch(tp, 0)
        broker.dead.add(1)
        with pytest.raises(BrokerFailed):
            await f.fetch(A, 0)
        broker.dead.discard(1)
        broker.hung.add(1)  # back, not answering yet; the controller moved A meanwhile
        broker.elected[A] = 2
        started = asyncio.get_running_loop().time()
        with pytest.raises(BrokerFailed, match="moved off failing node 1"):
            await asyncio.wait_for(f.fetch(A, 0), 3)  # not the 5 s chunk timeout
        assert asyncio.get_running_loop().time() - started < BROKER_BACKOFF_MAX_S + 0.5
        assert broker.sent_to[-1] == 1  # it was out to node 1
        assert (await asyncio.wait_for(f.fetch(A, 0), 1)).records == b"r"
        assert broker.sent_to[-1] == 2
    finally:
        await f.stop()
