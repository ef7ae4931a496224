"""A leader that moves (issue 19): an answer that says so, in produce, fetch or list offsets,
refreshes the cluster's metadata at once, one refresh for a whole burst of such answers, and
the retry goes to the new leader. The cluster layer is real (``Cluster``'s requests and
answers); only the broker's side of the socket is a stand-in that leads partitions by a table
the test moves."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from syncer.clusters import TP, Cluster
from syncer.config import ClusterConfig, CopierConfig
from syncer.errors import ClusterError, LeaderMoved, TransientClusterError
from syncer.fetcher import Fetcher
from syncer.leaders import FAILED_RECENTLY_S, MetadataRefresh, asking_order, refresh_delay
from syncer.protocol.common import NOT_LEADER_OR_FOLLOWER
from syncer.wire import FetchOutcome
from syncer.writer import Writer, write_connection

A, B, C = TP("t", 0), TP("t", 1), TP("u", 0)


class MovingCluster(Cluster):
    """A cluster whose brokers lead by ``led``; a partition asked of another broker answers
    NOT_LEADER_OR_FOLLOWER. ``elect`` moves leaders on the brokers; the client learns of it
    only through a metadata refresh, which takes until ``refresh_gate`` is set."""

    def __init__(self, led: dict[TP, int]) -> None:
        super().__init__(ClusterConfig("127.0.0.1:9", name="local"), role="local")
        self.led = dict(led)  # who leads, on the brokers
        self.known = dict(led)  # who leads, as the client's metadata says
        self.refreshed = 0
        self.refresh_gate = asyncio.Event()
        self.refresh_gate.set()
        self.sent: list[tuple[int, str, list[TP]]] = []  # node, request kind, partitions
        # ``leader_for`` asks the client's own metadata whether a partition is known
        self._client.cluster.leader_for_partition = self.leader  # type: ignore[method-assign]

    def elect(self, tp: TP, node: int) -> None:
        self.led[tp] = node

    async def refresh_metadata(self) -> None:
        await self.refresh_gate.wait()
        self.refreshed += 1
        self.known = dict(self.led)

    def leader(self, tp: TP) -> int:
        return self.known[tp]

    async def send(self, node: int, request: Any, *, connection: int = 0, **_: Any) -> Any:
        kind = type(request).__name__
        asked = [TP(t, p[0]) for t, partitions in request._topics for p in partitions]
        self.sent.append((node, kind, asked))
        await asyncio.sleep(0)

        def code(tp: TP) -> int:
            return 0 if self.led[tp] == node else NOT_LEADER_OR_FOLLOWER

        def answer(tp: TP) -> tuple[Any, ...]:
            if kind == "ProduceRequest":
                return (tp.partition, code(tp), 7 if code(tp) == 0 else -1)
            if kind == "FetchRequest":
                return (tp.partition, code(tp), 10, 10, 0, [], -1, b"")
            return (tp.partition, code(tp), -1, 10)  # list offsets: (.., timestamp, offset)

        topics: dict[str, list[tuple[Any, ...]]] = {}
        for tp in asked:
            topics.setdefault(tp.topic, []).append(answer(tp))
        return SimpleNamespace(topics=list(topics.items()))


async def settled(cluster: MovingCluster) -> None:
    """Until the refresh under way (if any) has ended and the loops woke to it."""
    await cluster.leaders.wait()
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_produce_answer_of_moved_leaders_refreshes_once_and_the_retry_finds_them() -> None:
    cluster = MovingCluster({A: 1, B: 1, C: 1})
    for tp in (A, B, C):
        cluster.elect(tp, 2)  # a preferred-leader election the client has not heard of
    writer = Writer(cluster, max_in_flight=1)  # type: ignore[arg-type]
    waiting = [writer.submit(tp, b"batch") for tp in (A, B, C)]  # before it runs: together
    async with writer:
        first = await asyncio.gather(*waiting)
        assert [r.error_code for r in first] == [NOT_LEADER_OR_FOLLOWER] * 3
        await settled(cluster)
        assert cluster.refreshed == 1  # one refresh for the three partitions, two topics
        again = await asyncio.gather(*(writer.submit(tp, b"batch") for tp in (A, B, C)))
    assert [r.error_code for r in again] == [0, 0, 0]
    # each on its own connection to the broker (``write_connection``: A, B and C on three),
    # so one request each; to an idle writer the first of a burst goes at once, the others
    # in its next pass
    assert len({write_connection(tp) for tp in (A, B, C)}) == 3
    assert [(node, tps) for node, _kind, tps in cluster.sent] == [
        (1, [A]),
        (1, [B]),
        (1, [C]),
        (2, [A]),
        (2, [B]),
        (2, [C]),
    ]
    assert cluster.leaders.started == 1


async def test_answers_of_a_burst_from_several_brokers_cost_one_refresh() -> None:
    cluster = MovingCluster({A: 1, B: 3})
    cluster.elect(A, 2)
    cluster.elect(B, 2)
    cluster.refresh_gate.clear()  # the refresh is slow: the second answer comes during it
    seen = cluster.leaders.generation
    await cluster.produce(1, {A: b"x"}, timeout_ms=1000)
    await cluster.produce(3, {B: b"x"}, timeout_ms=1000)
    assert cluster.leaders.refreshing("t")
    cluster.refresh_gate.set()
    await settled(cluster)
    # an answer to a request routed before that refresh ended is old news
    cluster.leaders_moved([("t", NOT_LEADER_OR_FOLLOWER)], seen)
    await settled(cluster)
    assert cluster.refreshed == 1
    assert cluster.leader(A) == cluster.leader(B) == 2


async def test_a_leader_that_moves_again_after_a_refresh_is_refreshed_again() -> None:
    cluster = MovingCluster({A: 1})
    cluster.elect(A, 2)
    await cluster.produce(1, {A: b"x"}, timeout_ms=1000)
    await settled(cluster)
    cluster.elect(A, 3)
    await cluster.produce(2, {A: b"x"}, timeout_ms=1000)
    await settled(cluster)
    assert cluster.refreshed == 2
    assert cluster.leader(A) == 3


async def test_a_fetch_answer_of_moved_leaders_refreshes_once_and_the_next_finds_them() -> None:
    cluster = MovingCluster({A: 1, B: 1})
    cluster.elect(A, 2)
    cluster.elect(B, 2)
    config = CopierConfig(fetch_max_wait_ms=10, chunk_timeout_ms=5_000)
    async with Fetcher(cluster, config) as fetcher:
        first = await asyncio.gather(fetcher.fetch(A, 0), fetcher.fetch(B, 0))
        assert [got.outcome for got in first] == [FetchOutcome.LEADER_MOVED] * 2
        await settled(cluster)
        again = await asyncio.gather(fetcher.fetch(A, 0), fetcher.fetch(B, 0))
    assert [got.outcome for got in again] == [FetchOutcome.OK] * 2
    assert cluster.refreshed == 1
    assert [node for node, _kind, _tps in cluster.sent] == [1, 2]


async def test_a_write_asked_during_the_refresh_waits_for_it_and_goes_to_the_new_leader() -> None:
    cluster = MovingCluster({A: 1})
    cluster.elect(A, 2)
    cluster.refresh_gate.clear()
    async with Writer(cluster, max_in_flight=1) as writer:
        assert (await writer.submit(A, b"x")).error_code == NOT_LEADER_OR_FOLLOWER
        retry = writer.submit(A, b"x")
        for _ in range(10):
            await asyncio.sleep(0)
        assert not retry.done() and len(cluster.sent) == 1  # held, not sent to node 1
        cluster.refresh_gate.set()
        assert (await asyncio.wait_for(retry, 1)).error_code == 0
    assert [node for node, _kind, _tps in cluster.sent] == [1, 2]


async def test_list_offsets_of_a_moved_leader_raise_leader_moved_and_the_retry_finds_it() -> None:
    cluster = MovingCluster({A: 1})
    cluster.elect(A, 2)
    with pytest.raises(LeaderMoved):
        await cluster.latest([A])
    assert cluster.leaders.started == 1
    assert (await cluster.latest([A])) == {A: 10}  # after the refresh it started
    assert [node for node, _kind, _tps in cluster.sent] == [1, 2]
    assert cluster.leaders.started == 1


async def test_answers_with_no_stale_metadata_refresh_nothing() -> None:
    cluster = MovingCluster({A: 1})
    await cluster.produce(1, {A: b"x"}, timeout_ms=1000)
    cluster.leaders_moved([("t", 0), ("t", 10)], cluster.leaders.generation)  # 10: too large
    await settled(cluster)
    assert cluster.leaders.started == 0


async def test_a_failed_refresh_lets_the_next_answer_ask_again() -> None:
    calls = 0

    async def refresh() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise TransientClusterError("no broker answered")

    leaders = MetadataRefresh(refresh, "local")
    assert leaders.moved({"t"}, 0)
    await leaders.wait()
    assert leaders.generation == 0  # not refreshed: the next answer asks again
    assert leaders.moved({"t"}, 0)
    await leaders.wait()
    assert (calls, leaders.generation) == (2, 1)
    assert not leaders.moved({"t"}, 0)  # routed before that refresh: old news
    await leaders.close()


def test_leader_moved_codes_are_our_leader_moved_error() -> None:
    from syncer.clusters import error_for

    assert isinstance(error_for(NOT_LEADER_OR_FOLLOWER, "write"), LeaderMoved)
    assert isinstance(error_for(74, "write"), LeaderMoved)  # FENCED_LEADER_EPOCH
    assert "FencedLeaderEpochError" in str(error_for(74, "write"))
    assert type(error_for(5, "write")) is TransientClusterError  # LEADER_NOT_AVAILABLE
    assert not isinstance(error_for(10, "write"), TransientClusterError)
    assert isinstance(error_for(10, "write"), ClusterError)


# refreshes not in a loop -----------------------------------------------------------------------


def test_a_refresh_waits_out_what_is_left_of_the_interval_since_the_last_one_ended() -> None:
    assert refresh_delay(10.0, float("-inf"), 0.15) == 0.0  # none yet: at once
    assert refresh_delay(10.0, 9.0, 0.15) == 0.0  # long ago
    assert refresh_delay(10.0, 9.85, 0.15) == 0.0  # just the interval
    assert abs(refresh_delay(10.0, 9.95, 0.15) - 0.1) < 1e-9
    assert abs(refresh_delay(10.0, 10.0, 0.15) - 0.15) < 1e-9


async def test_a_refresh_asked_right_after_one_ended_holds_the_topic_until_the_interval() -> None:
    calls = 0

    async def refresh() -> None:
        nonlocal calls
        calls += 1

    leaders = MetadataRefresh(refresh, "remote", min_interval_s=10, clock=lambda: 100.0)
    assert leaders.moved({"t"}, 0)
    await leaders.wait()
    assert calls == 1  # the first goes out at once
    assert leaders.moved({"t"}, leaders.generation)  # the leader named is wrong again
    for _ in range(10):
        await asyncio.sleep(0)
    assert calls == 1 and leaders.refreshing("t")  # waiting; its fetches held meanwhile
    await leaders.close()
    assert not leaders.refreshing("t")


class LaggingCluster(MovingCluster):
    """Its metadata names the old leader for ``lag_s`` after the election (a broker whose
    metadata has not caught up with the controller's)."""

    def __init__(self, led: dict[TP, int], lag_s: float) -> None:
        super().__init__(led)
        self.until = 0.0
        self.lag_s = lag_s
        self.leaders.min_interval_s = 0.05

    def elect(self, tp: TP, node: int) -> None:
        super().elect(tp, node)
        self.until = time.monotonic() + self.lag_s

    async def refresh_metadata(self) -> None:
        self.refreshed += 1
        if time.monotonic() >= self.until:
            self.known = dict(self.led)


async def test_metadata_that_names_the_old_leader_again_is_not_asked_in_a_tight_loop() -> None:
    cluster = LaggingCluster({A: 1}, lag_s=0.3)
    cluster.elect(A, 2)
    config = CopierConfig(fetch_max_wait_ms=10, chunk_timeout_ms=5_000)
    started = time.monotonic()
    async with Fetcher(cluster, config) as fetcher:
        while (await fetcher.fetch(A, 0)).outcome is FetchOutcome.LEADER_MOVED:
            assert time.monotonic() - started < 2
    # about one refresh per interval over the lag (hundreds without the interval)
    assert 2 <= cluster.refreshed <= 0.3 / 0.05 + 2, cluster.refreshed
    assert len(cluster.sent) == cluster.refreshed + 1
    assert cluster.sent[-1][0] == 2


def test_brokers_that_failed_recently_are_asked_for_metadata_last() -> None:
    # issue 19: a killed remote broker, restarting, accepted the refresh's connection and
    # answered nothing for seconds; its partitions' fetches waited on the refresh
    now = 1_000.0
    failed_at = {2: now - 1.0, 3: now - 5.0}
    assert asking_order([1, 2, 3], failed_at, now, shuffle=lambda nodes: None) == [1, 3, 2]
    order = asking_order([1, 2, 3, 4], failed_at, now, shuffle=lambda nodes: nodes.reverse())
    assert order == [4, 1, 3, 2]  # the healthy ones shuffled, the failed ones after them


def test_a_failure_long_ago_no_longer_puts_a_broker_last() -> None:
    now = 1_000.0
    failed_at = {1: now - FAILED_RECENTLY_S, 2: now - FAILED_RECENTLY_S + 1}
    assert asking_order([1, 2, 3], failed_at, now, shuffle=lambda nodes: None) == [1, 3, 2]
    assert asking_order([], failed_at, now) == []
