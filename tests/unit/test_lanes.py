"""Which lane of a remote a fetch goes to, with stand-in fetchers."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from syncer.clusters import TP
from syncer.errors import SyncerError
from syncer.fetch_connections import DATA_CONNECTION
from syncer.lanes import Lanes, fetch_nodes

HOT, OTHER = TP("t", 0), TP("t", 1)


@dataclass
class FakeLane:
    name: str
    pending_bytes: int = 0
    pending: dict[TP, int] = field(default_factory=dict)
    config: Any = None
    cluster: Any = None
    asked: list[tuple[TP, int]] = field(default_factory=list)

    def fetch(
        self, tp: TP, offset: int, max_bytes: int | None = None, *, poll: bool = False, **_: Any
    ) -> asyncio.Future[str]:
        """Counted in the lane's load as it is asked, as ``Fetcher.fetch`` does."""
        self.asked.append((tp, offset))
        self.pending[tp] = self.pending.get(tp, 0) + 1
        self.pending_bytes += max_bytes or 0
        answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        answer.set_result(self.name)
        return answer

    def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass


def lanes(*fakes: FakeLane, unknown: tuple[FakeLane, ...] = ()) -> Lanes:
    class Named:
        name = "east"

        def __init__(self, knows: bool) -> None:
            self.knows = knows
            self.refreshes = 0
            self.connected: list[tuple[int, int]] = []  # (node, connection) opened ahead

        def fetch_node(self, tp: TP) -> int:
            if not self.knows:
                raise SyncerError(f"no leader known for {tp}")
            return 1

        async def leader_for(self, tp: TP) -> int:
            self.refreshes += 1
            await asyncio.sleep(0.01)  # a metadata round trip
            self.knows = True
            return 1

        async def partition_counts(self) -> dict[str, int]:
            self.refreshes += 1
            await asyncio.sleep(0.01)
            self.knows = True
            return {"t": 2}

        async def connect(self, node: int, *, connection: int = 0) -> bool:
            self.connected.append((node, connection))
            return True

    for fake in fakes:
        fake.cluster = Named(fake not in unknown)
    return Lanes(list(fakes))  # type: ignore[arg-type]


async def test_chunks_of_one_hot_partition_spread_over_every_lane() -> None:
    a, b, c = FakeLane("a"), FakeLane("b"), FakeLane("c")
    remote = lanes(a, b, c)
    got = [await remote.fetch(HOT, offset, 1000) for offset in (0, 100, 200, 300)]
    assert sorted(got[:3]) == ["a", "b", "c"]  # one each before any lane gets a second
    assert got[3] == "a"


async def test_a_lane_already_fetching_the_partition_is_avoided_even_if_lighter() -> None:
    busy = FakeLane("busy", pending_bytes=10, pending={HOT: 1})
    loaded = FakeLane("loaded", pending_bytes=5_000_000, pending={OTHER: 3})
    remote = lanes(busy, loaded)
    assert await remote.fetch(HOT, 0, 1000) == "loaded"
    assert await remote.fetch(OTHER, 0, 1000) == "busy"  # fewest bytes when neither has it


async def test_async_with_starts_every_lane_and_stops_each_even_if_one_fails() -> None:
    events: list[str] = []

    class Lifecycle(FakeLane):
        def start(self) -> None:
            events.append(f"start {self.name}")

        async def stop(self) -> None:
            events.append(f"stop {self.name}")
            if self.name == "b":
                raise RuntimeError("b failed to stop")

    with pytest.raises(RuntimeError, match="b failed"):
        async with lanes(Lifecycle("a"), Lifecycle("b"), Lifecycle("c")) as remote:
            assert events == ["start a", "start b", "start c"]
            assert len(remote) == 3
    assert sorted(events[3:]) == ["stop a", "stop b", "stop c"]


async def test_a_lane_that_knows_no_leader_yet_learns_it_before_its_fetch_goes() -> None:
    # sent at once, its fetch would fail "no leader known" and back the whole remote off;
    # passed over, it would never be asked and never learn (16 lanes: 6 ever fetched)
    a, b, c = FakeLane("a"), FakeLane("b"), FakeLane("c")
    remote = lanes(a, b, c, unknown=(a, b, c))
    got = await asyncio.gather(*(remote.fetch(HOT, offset, 1000) for offset in range(6)))
    assert sorted(got) == ["a", "a", "b", "b", "c", "c"]  # spread while they learned
    assert [fake.cluster.refreshes for fake in (a, b, c)] == [1, 1, 1]  # once per lane
    assert all(fake.cluster.knows for fake in (a, b, c))


async def test_the_first_fetch_of_a_partition_gets_every_lane_ready_for_the_next() -> None:
    # it goes out alone (it shows the batches' shape); the chunks after it find the lanes ready
    a, b, c = FakeLane("a"), FakeLane("b"), FakeLane("c")
    remote = lanes(a, b, c, unknown=(a, b, c))
    await remote.fetch(HOT, 0, 1000)
    await asyncio.sleep(0.05)
    assert all(fake.cluster.knows for fake in (a, b, c))
    assert [fake.cluster.refreshes for fake in (a, b, c)] == [1, 1, 1]  # once per lane
    assert a.asked == [(HOT, 0)] and not b.asked and not c.asked


async def test_every_lane_learns_the_leaders_and_connects_to_them_as_it_starts() -> None:
    # left to its first fetch, a lane spends three round trips before that fetch goes
    a, b, c = FakeLane("a"), FakeLane("b"), FakeLane("c")
    remote = lanes(a, b, c, unknown=(a, b, c))
    remote.start()
    got = await asyncio.gather(*(remote.fetch(TP("t", p), 0, 1000) for p in (0, 1)))
    assert sorted(got) == ["a", "b"]  # each went once its lane was ready
    assert all(fake.cluster.knows for fake in (a, b, c))
    assert [fake.cluster.refreshes for fake in (a, b, c)] == [1, 1, 1]  # the fetches waited
    assert [fake.cluster.connected for fake in (a, b, c)] == [[(1, DATA_CONNECTION)]] * 3
    await remote.stop()


async def test_one_lane_is_left_to_learn_with_the_topics() -> None:
    a = FakeLane("a")
    remote = lanes(a, unknown=(a,))
    remote.start()
    await asyncio.sleep(0.05)
    assert a.cluster.refreshes == 0 and not a.cluster.connected
    await remote.stop()


async def test_fetches_waiting_on_a_learning_lane_count_in_its_load() -> None:
    # uncounted, the first fetches of several partitions all went to the one idle lane that
    # was learning, and crossed its one connection in turn
    ready, b, c = FakeLane("ready"), FakeLane("b"), FakeLane("c")
    remote = lanes(ready, b, c, unknown=(b, c))
    got = await asyncio.gather(*(remote.fetch(TP("t", p), 0, 1000) for p in range(3)))
    assert got == ["ready", "b", "c"]


def test_a_lane_connects_to_the_brokers_leading_a_wanted_partition_only() -> None:
    leaders = {TP("t", 0): 1, TP("t", 1): 2, TP("t", 2): 1, TP("u", 0): 3, TP("x", 0): 4}
    counts = {"t": 4, "u": 1, "x": 1}  # t[3] has no leader known
    assert fetch_nodes(counts, lambda topic: topic != "x", leaders.get) == {1, 2, 3}
    assert fetch_nodes(counts, lambda topic: False, leaders.get) == set()
