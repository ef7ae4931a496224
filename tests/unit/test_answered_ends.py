"""Every copier reads its local end as it starts, and those reads go out as one ListOffsets
(``Coalesced``). A partition not led yet must fail only its own copier's read: a group
member given 3,333 partitions while the broker still created some had every end read
alone (3,333 requests) and copied nothing for 7 s at 10,000 partitions."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from syncer import wire as wire_module
from syncer.clusters import TP
from syncer.coalesce import NotAnswered
from syncer.errors import SyncerError, TransientClusterError
from syncer.wire import WireRequests

NOT_LEADER = 6


class Wire(WireRequests):
    """The real ends reads over a broker that answers NOT_LEADER for ``unled``."""

    def __init__(self, ends: dict[TP, int], unled: set[TP]) -> None:
        self.name = "local"
        self.ends_now = ends
        self.unled = unled
        self.leaders = SimpleNamespace(generation=0)
        self.requests: list[list[TP]] = []

    async def leader_for(self, tp: TP) -> int:
        return 1

    def leaders_moved(self, codes: Any, seen: int) -> None:
        pass

    async def send(self, node: int, request: Any, **_: Any) -> Any:
        asked = [TP(t, p) for t, parts in request._topics for p, *_ in parts]
        self.requests.append(asked)
        by_topic: dict[str, list[tuple[int, int, int, int]]] = {}
        for tp in asked:
            code = NOT_LEADER if tp in self.unled else 0
            by_topic.setdefault(tp.topic, []).append((tp.partition, code, -1, self.ends_now[tp]))
        return SimpleNamespace(topics=list(by_topic.items()))


async def read_all(wire: Wire, tps: list[TP]) -> list[Any]:
    return await asyncio.gather(*(wire.latest([tp]) for tp in tps), return_exceptions=True)


def test_one_partition_not_led_fails_only_its_own_read() -> None:
    tps = [TP("t", p) for p in range(4)]
    wire = Wire({tp: 10 * tp.partition for tp in tps}, unled={TP("t", 2)})
    got = asyncio.run(read_all(wire, tps))
    assert got[0] == {TP("t", 0): 0} and got[1] == {TP("t", 1): 10} and got[3] == {TP("t", 3): 30}
    assert isinstance(got[2], SyncerError) and "t[2]" in str(got[2])
    # one request for all, one for the partition that failed: not one per partition
    assert wire.requests == [tps, [TP("t", 2)]]


def test_a_read_of_many_still_fails_on_one_error() -> None:
    """``latest`` of several partitions (not the copiers' coalesced read) raises as before."""
    tps = [TP("t", p) for p in range(3)]
    wire = Wire(dict.fromkeys(tps, 5), unled={TP("t", 1)})
    with pytest.raises(SyncerError, match=r"t\[1\]"):
        asyncio.run(wire.latest(tps))


class Remote(Wire):
    """``Wire`` over three brokers: partition p led by broker p % 3, none for ``leaderless``,
    and broker ``silent`` never answering."""

    def __init__(self, ends: dict[TP, int], leaderless: set[TP], silent: int | None) -> None:
        super().__init__(ends, unled=set())
        self.leaderless, self.silent = leaderless, silent
        self.asked_nodes: list[int] = []

    async def leader_for(self, tp: TP) -> int:
        if tp in self.leaderless:
            raise TransientClusterError(f"remote: no leader known for {tp.topic}[{tp.partition}]")
        return tp.partition % 3

    async def send(self, node: int, request: Any, **kw: Any) -> Any:
        self.asked_nodes.append(node)
        if node == self.silent:
            await asyncio.Event().wait()
        return await super().send(node, request, **kw)


async def test_remote_ends_listed_for_waiting_partitions_go_out_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Partitions waiting for a dead remote list the others' ends (``stable_ends``): those
    asking within ``ENDS_GATHER_S`` share one listing per leader (its earliest and latest
    offsets, every leader asked at once). One with no leader known, one answered with an
    error, and those of a broker that does not answer are left out (``NotAnswered``), and
    fail none of the others; none is asked again alone."""
    monkeypatch.setattr(wire_module, "ENDS_LIST_TIMEOUT_S", 0.2)
    tps = [TP("t", p) for p in range(6)]
    remote = Remote({tp: 10 * tp.partition for tp in tps}, leaderless={TP("t", 4)}, silent=2)
    remote.unled = {TP("t", 3)}  # its leader (broker 0) answers NOT_LEADER for it
    first = asyncio.create_task(remote.stable_ends(tps[0]))
    await asyncio.sleep(0.05)  # later turns, within the gathering time
    rest = [asyncio.create_task(remote.stable_ends(tp)) for tp in tps[1:]]
    got = await asyncio.wait_for(asyncio.gather(first, *rest, return_exceptions=True), 2)
    assert got[0] == (0, 0) and got[1] == (10, 10)
    assert all(isinstance(got[p], NotAnswered) for p in (2, 3, 4, 5)), got  # 2, 5: broker 2
    assert sorted(remote.asked_nodes) == [0, 0, 1, 1, 2]  # earliest, then latest; 2 silent
    assert TP("t", 4) not in {tp for asked in remote.requests for tp in asked}
