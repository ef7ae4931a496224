"""Several syncer processes in one group on a 3-node local cluster (issue #19, item 5): the
broker that coordinates their group is killed -9 mid-copy and restarted 5 s later. The group's
state lives in ``__consumer_offsets`` (RF 3 here), so another node takes the group over. A
third process starts right after the kill, so its join goes through the outage and the new
coordinator moves partitions to it from the two that were copying, in one rebalance (no member
dropped while it drains the partitions it gives up). Every process must stay up, every
partition end up owned by exactly one of them, and the copy end identical offset by offset
with nothing written twice.

Measured and logged: the longest copy stall of any partition around the kill (the local end
standing still while the remote's end is ahead, sampled every ~100 ms, as in test_multinode),
and how long until the group was stable again on a live coordinator; both are bounded (the
second by how long a revoked copier may drain: what it has in flight, not the rest of its
chunk)."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from syncer.testbed import Testbed
from tests.conftest import cluster_of
from tests.integration import test_multinode as multinode
from tests.integration.test_group import Group
from tests.integration.test_multinode import keep_producing, longest_stall, sample_ends
from tests.kafka_helpers import Daemon, create_topic, poll_until, read_partition

log = logging.getLogger(__name__)

PARTITIONS = 12
MEMBERS = 3
DOWN_S = 5.0  # how long the coordinator's node stays dead
STALL_LIMIT_S = 30.0  # the dead node's partitions wait for its KRaft session (9 s) to end
# the kill to a stable group on a live coordinator: the KRaft session (9 s, 10-13 s on this
# machine) and one rebalance, whose join waits for the revoked copiers to drain. 13.2 and
# 14.9 s measured; 36 to 53 s while a revoked copier went on writing the rest of its chunk
# one batch at a time after the stop (22 to 33 s of drain)
STABLE_LIMIT_S = 30.0
# the backlog of the outage copied after the producer stopped: each remote batch is written
# as one (a Produce request holds one batch per partition), 2 in flight here; 41.8 and
# 45.4 s measured on a slow day (59.7 s at a204620 the same hour), so the bound is wide
CATCH_UP_S = 120.0


@dataclass(frozen=True)
class GroupView:
    """The group as its coordinator describes it."""

    coordinator: int
    state: str
    owners: dict[int, str]  # partition → member client id

    def stable_with(self, members: int, not_on: int) -> bool:
        return (
            self.coordinator != not_on
            and self.state == "Stable"
            and len(self.owners) == PARTITIONS
            and len(set(self.owners.values())) == members
        )


async def describe(bootstrap: str, group: str) -> GroupView | None:
    """FindCoordinator, then DescribeGroups on that node; None while either fails."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
    try:
        await admin.start()
        coordinator = await admin.find_coordinator(group)
        (response,) = await admin.describe_consumer_groups([group], coordinator)
    except Exception:  # a node down or the group loading: ask again
        return None
    finally:
        await admin.close()
    (described,) = response.groups
    owners: dict[int, str] = {}
    for member in described[5]:
        if member[-1]:
            for tp in ConsumerProtocolMemberAssignment.decode(member[-1]).partitions():
                owners[tp.partition] = str(member[-4])
    return GroupView(coordinator, str(described[2]), owners)


async def owned_per_member(members: list[Daemon]) -> dict[int, set[int]]:
    """Process id → the partitions that process copies, from its own /status."""
    return {
        m.proc.pid: {int(p["partition"]) for p in (await m.status())["partitions"]}  # type: ignore[attr-defined]
        for m in members
    }


def exactly_once(owned: Iterable[set[int]]) -> bool:
    """Every partition in exactly one of the sets."""
    owned = list(owned)
    return sorted(p for o in owned for p in o) == list(range(PARTITIONS))


async def copying(members: list[Daemon]) -> bool:
    """Every partition owned by exactly one process, by their own /status, and copied into."""
    try:
        statuses = [await m.status() for m in members]
    except OSError:
        return False
    rows = [row for s in statuses for row in s["partitions"]]  # type: ignore[attr-defined]
    owned = [{int(r["partition"]) for r in s["partitions"]} for s in statuses]  # type: ignore[attr-defined]
    return exactly_once(owned) and all(r["local_end"] > 0 for r in rows)


def assert_alive_and_clean(members: list[Daemon]) -> None:
    for member in members:
        text = member.log.read_text()
        assert member.proc.poll() is None, f"{member.log} exited: {text[-3000:]}"
        assert "Traceback" not in text, f"{member.log}: {text[-3000:]}"
        assert "stopped polling" not in text, f"{member.log}: {text[-3000:]}"


def assignments(member: Daemon) -> int:
    """How many assignments the process has been given (one log line each)."""
    return len(re.findall(r"member \S+ owns \d+ partitions", member.log.read_text()))


@dataclass(frozen=True)
class Plan:
    """One rebalance as its group leader logged it."""

    partitions: int
    loads: list[float]
    heaviest: float


PLAN = re.compile(
    r"group leader: (\d+) partitions to (\d+) members, loads ([\d. /]+) "
    r"\(by gap; the heaviest partition weighs ([\d.]+)\)"
)


def leader_plans(members: list[Daemon], size: int) -> list[Plan]:
    """Every plan a leader among ``members`` made for a group of ``size`` members."""
    return [
        Plan(int(m[1]), [float(x) for x in m[3].split(" / ")], float(m[4]))
        for member in members
        for m in PLAN.finditer(member.log.read_text())
        if int(m[2]) == size
    ]


def start_member(tmp_path: Path, group: Group, daemons: list[Daemon]) -> Daemon:
    home = tmp_path / f"member-{len(daemons)}"
    home.mkdir()
    daemons.append(Daemon(home, group.raw))
    return daemons[-1]


@pytest.mark.long_multinode
async def test_kill_9_of_the_group_coordinator_moves_the_group_and_duplicates_nothing(
    local3: Testbed,
    east: str,
    topic: str,
    tmp_path: Path,
    daemons: list[Daemon],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(multinode, "PARTITIONS", PARTITIONS)  # its producer, ends and sampler
    cluster = cluster_of(local3)
    local = cluster.bootstrap
    await create_topic(east, topic, PARTITIONS)
    group = Group(tmp_path, local, east, topic)
    for _ in range(MEMBERS - 1):
        start_member(tmp_path, group, daemons)
    stop_producing, stop_sampling = asyncio.Event(), asyncio.Event()
    producing = asyncio.create_task(keep_producing(east, topic, stop_producing))
    samples: dict[int, list[multinode.Sample]] = {p: [] for p in range(PARTITIONS)}
    sampling: asyncio.Task[None] | None = None

    async def shared_by(members: int, not_on: int = -1) -> bool:
        view = await describe(local, group.name)
        return view is not None and view.stable_with(members, not_on)

    try:
        await poll_until("two members sharing", lambda: shared_by(MEMBERS - 1), 90)
        await poll_until("every member copying its share", lambda: copying(daemons), 60)
        before = await describe(local, group.name)
        assert before is not None
        coordinator = before.coordinator
        assigned_before = [assignments(m) for m in daemons]
        sampling = asyncio.create_task(sample_ends(local, east, topic, samples, stop_sampling))
        await asyncio.sleep(2)
        log.warning("killing node %d, the coordinator of group %s", coordinator, group.name)
        fault = time.monotonic()
        await asyncio.to_thread(local3.kill_node, cluster.name, coordinator)
        start_member(tmp_path, group, daemons)
        watching = asyncio.create_task(
            poll_until(
                "three members on another coordinator", lambda: shared_by(MEMBERS, coordinator), 60
            )
        )
        await asyncio.sleep(DOWN_S)
        await asyncio.to_thread(local3.start_node, cluster.name, coordinator)
        restarted = time.monotonic() - fault
        stable = await watching - fault
        after = await describe(local, group.name)
        assert after is not None
        await asyncio.sleep(3)
        stop_producing.set()
        written = await producing
        stopped = time.monotonic()
        remote = await multinode.ends(east, topic)
        assert sum(remote) == written

        async def caught_up() -> bool:
            return await multinode.ends(local, topic) == remote

        caught = await poll_until("the copy to catch up", caught_up, CATCH_UP_S) - stopped
        stop_sampling.set()
        await sampling
        stall = max(longest_stall(samples[p], fault, stopped + caught) for p in range(PARTITIONS))
        moves = sum(before.owners[p] != after.owners[p] for p in range(PARTITIONS))
        rebalanced = [
            assignments(m) - n for m, n in zip(daemons, [*assigned_before, 0], strict=True)
        ]
        log.warning(
            "%d records; node %d back %.1f s after its kill; the group stable with 3 members on "
            "node %d %.1f s after the kill (%d partitions changed owner; assignments per member "
            "since the kill %s); longest copy stall %.1f s; caught up %.1f s after the producer "
            "stopped",
            written,
            coordinator,
            restarted,
            after.coordinator,
            stable,
            moves,
            rebalanced,
            stall,
            caught,
        )
        assert_alive_and_clean(daemons)
        await assert_each_copies_what_it_owns(daemons, after)
        # the newcomer got its share: the leader balances by gap, not by count (a partition
        # of the dead node, stalled and so behind, weighs more: 2 moves seen, not 3), so the
        # share is its loads within one partition's weight of each other, as the leader said
        plans = leader_plans(daemons, MEMBERS)
        assert plans, "no leader logged a plan for three members"
        for plan in plans:
            assert plan.partitions == PARTITIONS, plan
            spread = max(plan.loads) - min(plan.loads)
            assert spread <= plan.heaviest + 0.02, plan  # each figure printed to 0.01
        # one rebalance: no member was dropped mid-drain and its partitions given away
        assert rebalanced == [1] * MEMBERS, rebalanced
        assert stall < STALL_LIMIT_S
        # the revoked copiers drained what was in flight and no more
        assert stable < STABLE_LIMIT_S, f"the group took {stable:.1f} s to be stable again"
    finally:
        stop_producing.set()
        stop_sampling.set()
        await asyncio.gather(producing, *([sampling] if sampling else []), return_exceptions=True)
    for member in daemons:
        member.stop()
    assert await multinode.ends(local, topic) == remote
    for partition in range(PARTITIONS):
        mirrored = await read_partition(local, topic, partition)
        source = await read_partition(east, topic, partition)
        assert mirrored == source, f"partition {partition} differs"


async def assert_each_copies_what_it_owns(members: list[Daemon], view: GroupView) -> None:
    """By each process's own /status, every partition is copied by exactly one of them, the
    one the coordinator names (client id ``syncer-<host>-<pid>``)."""
    owned = await owned_per_member(members)
    assert exactly_once(owned.values()), owned
    for pid, partitions in owned.items():
        said = {p for p, member in view.owners.items() if member.endswith(f"-{pid}")}
        assert partitions == said, (pid, partitions, view.owners)
