"""A randomized broker fault run: ``syncer run`` processes in one group copy a partitioned
topic from a 3-node remote into a 3-node local cluster (RF 3, min ISR 2 on both) while a
producer keeps writing to the remote, and rounds of faults hit the brokers and the processes
at random moments: kill -9 of a local or a remote node, restarted after a random short
delay (before or after the controller fences it); a clean stop and start of a local node; a
preferred leader election on whichever cluster a restart left unbalanced; kill -9 and a
pause past the write lease of a group member. At the end every local partition must equal
the remote's offset by offset: nothing lost, nothing duplicated.

Each broker fault waits for its cluster to be whole again (the node back, every partition of
the topic, and of the local group's offsets topic, led and fully in sync) before the next
round, so no fault ever costs a quorum or ``min.insync.replicas``: what is tested is syncer
through everyday broker events, not a cluster that has lost writes.

A broker round costs ~15 s where a process round of ``test_chaos`` costs ~3, so the rounds
here are ``SYNCER_CHAOS_BROKER_ROUNDS``, by default half of ``SYNCER_CHAOS_ROUNDS`` (``make
chaos`` runs 30, ``make chaos-brokers`` alone too); with neither set (``make test``), 2: a
slice that keeps ``make test`` near 20 minutes, the long runs being those targets'. The seed is
printed so that a failing run can be replayed (``SYNCER_CHAOS_SEED``): the faults are drawn
the same whatever the clusters did, only their timing against the copy differs."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from syncer.clusters import Cluster
from syncer.config import ClusterConfig
from syncer.errors import TransientClusterError
from syncer.testbed import ClusterSpec, Testbed
from syncer.testbed.jars import KafkaJars
from syncer.testbed.probe import Placement, placements_async
from tests.integration.test_chaos import PARTITIONS, chaos_config, keep_producing, start
from tests.integration.test_multinode import ends
from tests.kafka_helpers import own_bed, read_partition

LOCAL, REMOTE = "chaos_local3", "chaos_remote3"
NODES = (1, 2, 3)
# two members, not test_chaos's three: six JVMs already share the machine's two cores, and a
# kill -9 of one of two still hands its partitions over
DAEMONS = 2
OFFSETS_TOPIC = "__consumer_offsets"  # the local group's commits: must stay writable too
WHOLE_TIMEOUT_S = 120.0
CATCH_UP_S = 120.0
# how often each fault is drawn; a broker fault is the point, a process fault keeps the
# group moving under it
WEIGHTS: Mapping[str, int] = {
    "kill local node": 3,
    "stop local node": 2,
    "kill remote node": 3,
    "elect": 2,
    "kill member": 2,
    "pause member": 1,
}


# the rounds of ``make test`` (neither variable set): each costs ~15 s of its ~20 minutes
TEST_ROUNDS = 2


def chaos_rounds(environ: Mapping[str, str]) -> int:
    """``SYNCER_CHAOS_BROKER_ROUNDS``, or half of ``SYNCER_CHAOS_ROUNDS``, or ``TEST_ROUNDS``
    with neither: at least one round."""
    if "SYNCER_CHAOS_BROKER_ROUNDS" in environ:
        return max(1, int(environ["SYNCER_CHAOS_BROKER_ROUNDS"]))
    if "SYNCER_CHAOS_ROUNDS" in environ:
        return max(1, int(environ["SYNCER_CHAOS_ROUNDS"]) // 2)
    return TEST_ROUNDS


ROUNDS = chaos_rounds(os.environ)


@dataclass(frozen=True)
class Fault:
    """One round: wait ``before_s``, then ``kind`` on ``node`` (a node fault, or the local
    node restarted to unbalance leaders before an election) or ``member``, lasting
    ``length_s`` (a node's time down, a member's pause or time dead)."""

    kind: str
    node: int
    member: int
    before_s: float
    length_s: float

    def __str__(self) -> str:
        target = f"member {self.member}" if "member" in self.kind else f"node {self.node}"
        return f"{self.kind} ({target}, {self.length_s:.1f} s)"


def draw(rng: random.Random) -> Fault:
    """The next round's fault. Every round draws the same five values whatever its kind, so
    a seed replays the same faults however the clusters answered."""
    kind = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
    node, member = rng.choice(NODES), rng.randrange(DAEMONS)
    before_s = rng.uniform(0.5, 3.0)
    # a node down for up to 8 s comes back before or after the controller fences it (9 s)
    length_s = rng.uniform(0.0, 8.0) if "node" in kind else rng.uniform(0.5, 5.0)
    return Fault(kind, node, member, before_s, length_s)


def whole(placed: Sequence[Placement]) -> bool:
    """Every partition led and every replica in sync: the next node may go."""
    return all(p.leader >= 0 and set(p.isr) == set(p.replicas) for p in placed)


def unbalanced(placed: Sequence[Placement]) -> list[int]:
    """The partitions whose leader is not their preferred replica (the first)."""
    return [p.partition for p in placed if p.replicas and p.leader != p.replicas[0]]


def test_a_seed_draws_the_same_faults_and_every_kind_in_time() -> None:
    first = [draw(random.Random(7)) for _ in range(3)]
    assert first == [draw(random.Random(7)) for _ in range(3)]
    rng = random.Random(11)
    faults = [draw(rng) for _ in range(60)]
    assert {f.kind for f in faults} == set(WEIGHTS)
    assert all(f.node in NODES and 0 <= f.member < DAEMONS for f in faults)
    assert all(0.0 <= f.length_s <= 8.0 for f in faults)


def test_the_broker_rounds_are_half_the_process_rounds_unless_set() -> None:
    assert chaos_rounds({}) == 2
    assert chaos_rounds({"SYNCER_CHAOS_ROUNDS": "6"}) == 3
    assert chaos_rounds({"SYNCER_CHAOS_ROUNDS": "60"}) == 30
    assert chaos_rounds({"SYNCER_CHAOS_ROUNDS": "1"}) == 1
    assert chaos_rounds({"SYNCER_CHAOS_ROUNDS": "60", "SYNCER_CHAOS_BROKER_ROUNDS": "20"}) == 20


def test_a_cluster_is_whole_when_every_partition_is_led_and_in_sync() -> None:
    full = Placement(0, 1, (1, 2, 3), (3, 1, 2))
    assert whole([full])
    assert whole([])  # a topic not created yet holds nothing up
    assert not whole([full, Placement(1, 2, (2, 3, 1), (2, 3))])  # a follower behind
    assert not whole([Placement(0, -1, (1, 2, 3), (1, 2, 3))])  # no leader
    assert unbalanced([full, Placement(1, 3, (2, 3, 1), (2, 3, 1))]) == [1]


# the run --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """A 3-node local and a 3-node remote cluster, started side by side in one bed (the six
    JVMs start in about the time of three one after another)."""
    specs = [ClusterSpec(LOCAL, nodes=3), ClusterSpec(REMOTE, nodes=3)]
    started = time.monotonic()
    with own_bed(tmp_path_factory.mktemp("chaos-brokers"), KafkaJars.default(), specs) as bed:
        print(f"chaos-brokers: two 3-node clusters up in {time.monotonic() - started:.1f} s")
        yield bed


async def placements(bed: Testbed, name: str, topic: str) -> list[Placement] | None:
    """The topic's placements on cluster ``name``; None while it does not answer."""
    try:
        return await placements_async(bed.clusters[name].direct, topic, limit_s=5.0)
    except Exception:  # a node restarting: ask again
        return None


async def until_whole(bed: Testbed, name: str, topic: str) -> float:
    """Seconds until cluster ``name`` is whole again for ``topic`` (and, locally, for the
    group's offsets topic)."""
    topics = [topic, OFFSETS_TOPIC] if name == LOCAL else [topic]
    started = time.monotonic()
    while True:
        placed = [await placements(bed, name, t) for t in topics]
        if all(p is not None and whole(p) for p in placed):
            return time.monotonic() - started
        assert time.monotonic() - started < WHOLE_TIMEOUT_S, f"{name} never whole: {placed}"
        await asyncio.sleep(0.3)


class Chaos:
    """The run's clusters, group members and what was done to them, one fault at a time."""

    def __init__(
        self, bed: Testbed, topic: str, tmp_path: Path, raw: dict[str, object], seed: int
    ) -> None:
        self.bed, self.topic, self.tmp_path, self.raw, self.seed = bed, topic, tmp_path, raw, seed
        self.members = [start(tmp_path, i, raw) for i in range(DAEMONS)]
        self.actions: list[str] = []

    async def hit(self, fault: Fault) -> None:
        await asyncio.sleep(fault.before_s)
        began, done = time.monotonic(), len(self.actions)
        if fault.kind == "kill local node":
            await self.bounce(LOCAL, fault.node, fault.length_s, crash=True)
        elif fault.kind == "stop local node":
            await self.bounce(LOCAL, fault.node, fault.length_s, crash=False)
        elif fault.kind == "kill remote node":
            await self.bounce(REMOTE, fault.node, fault.length_s, crash=True)
        elif fault.kind == "elect":
            await self.elect(fault)
        elif fault.kind == "kill member":
            await self.kill_member(fault.member, fault.length_s)
        else:
            await self.pause_member(fault.member, fault.length_s)
        self.actions.append(f"{fault} {time.monotonic() - began:.0f} s")
        print(f"chaos-brokers: {'; '.join(self.actions[done:])}")

    async def bounce(self, name: str, node: int, down_s: float, *, crash: bool) -> None:
        """Take one node down (kill -9 or a clean stop), start it after ``down_s`` and wait
        until the cluster is whole."""
        action = self.bed.kill_node if crash else self.bed.stop_node
        await asyncio.to_thread(action, name, node)
        await asyncio.sleep(down_s)
        await asyncio.to_thread(self.bed.start_node, name, node)
        await until_whole(self.bed, name, self.topic)

    async def elect(self, fault: Fault) -> None:
        """A preferred leader election on each cluster whose leaders a restart moved off
        their preferred replicas; with none, a clean restart of a local node first."""
        moved = {
            name: unbalanced(placed)
            for name in (LOCAL, REMOTE)
            if (placed := await placements(self.bed, name, self.topic))
        }
        if not any(moved.values()):
            await self.bounce(LOCAL, fault.node, fault.length_s, crash=False)
            placed = await placements(self.bed, LOCAL, self.topic)
            moved = {LOCAL: unbalanced(placed or [])}
        for name, partitions in moved.items():
            if not partitions:
                continue
            chosen = [(self.topic, p) for p in partitions]
            await asyncio.to_thread(self.bed.elect_preferred, name, chosen)
            started = time.monotonic()
            while (placed := await placements(self.bed, name, self.topic)) is None or unbalanced(
                placed
            ):
                assert time.monotonic() - started < WHOLE_TIMEOUT_S, f"{name}: {placed}"
                await asyncio.sleep(0.3)
            self.actions.append(f"elected {name} {partitions}")

    async def kill_member(self, index: int, dead_s: float) -> None:
        victim = self.members[index]
        victim.proc.send_signal(signal.SIGKILL)  # a crash mid-write
        await asyncio.to_thread(victim.proc.wait, 10)
        await asyncio.sleep(dead_s)
        self.members[index] = start(self.tmp_path, index, self.raw)

    async def pause_member(self, index: int, pause_s: float) -> None:
        victim = self.members[index]
        victim.proc.send_signal(signal.SIGSTOP)  # past the 3 s lease: a zombie that wakes
        await asyncio.sleep(pause_s)
        victim.proc.send_signal(signal.SIGCONT)

    def evidence(self) -> str:
        """What a failure message needs to be replayed and read."""
        logs = ", ".join(str(m.log) for m in self.members)
        return f"seed {self.seed}; faults: {'; '.join(self.actions)}; member logs: {logs}"

    async def stop(self) -> None:
        for member in self.members:
            if member.proc.poll() is None:
                member.proc.send_signal(signal.SIGCONT)
        await asyncio.gather(*(asyncio.to_thread(member.stop) for member in self.members))


async def create_replicated(bootstrap: str, topic: str) -> None:
    """The remote topic on every node (RF 3): a node of it may die without losing a write."""
    async with Cluster(ClusterConfig(bootstrap, name="test"), role="test") as cluster:
        await cluster.create_topic(topic, PARTITIONS, {}, len(NODES))
        for _ in range(50):
            if (await cluster.partition_counts()).get(topic) == PARTITIONS:
                return
            await asyncio.sleep(0.1)


async def ends_or_none(bootstrap: str, topic: str) -> list[int] | None:
    """The test's own reading of the ends; None while a leader is being elected (the
    broker answers LEADER_NOT_AVAILABLE for a moment after the last round's election)."""
    try:
        return await ends(bootstrap, topic)
    except TransientClusterError:
        return None


@pytest.mark.timeout(240 + 60 * ROUNDS)
async def test_random_broker_kills_restarts_and_elections_lose_and_duplicate_nothing(
    pair: Testbed, topic: str, tmp_path: Path
) -> None:
    local, remote = pair.multi(LOCAL), pair.multi(REMOTE)
    seed = int(os.environ.get("SYNCER_CHAOS_SEED", str(random.randrange(1 << 30))))
    print(f"chaos-brokers: {ROUNDS} rounds, seed {seed}")
    rng = random.Random(seed)
    began = time.monotonic()
    await create_replicated(remote.direct, topic)
    raw = chaos_config(topic, local.bootstrap, remote.bootstrap)
    stop = asyncio.Event()
    # idempotent: a send retried through a remote node's death is not written twice there
    producing = asyncio.create_task(
        keep_producing(
            remote.direct, topic, stop, 0, enable_idempotence=True, request_timeout_ms=60_000
        )
    )
    chaos = Chaos(pair, topic, tmp_path, raw, seed)
    try:
        await until_copying(local.direct, topic, chaos)
        for _ in range(ROUNDS):
            await chaos.hit(draw(rng))
        stop.set()
        sent = await producing
        source = [await read_partition(remote.direct, topic, p) for p in range(PARTITIONS)]
        stopped = time.monotonic()
        want = [len(records) for records in source]
        while (have := await ends_or_none(local.direct, topic)) != want:
            assert time.monotonic() - stopped < CATCH_UP_S, (
                f"local ends {have}, remote {want}: {chaos.evidence()}"
            )
            await asyncio.sleep(0.5)
        print(
            f"chaos-brokers: {sent} records; caught up {time.monotonic() - stopped:.1f} s after"
            f" the producer stopped; {time.monotonic() - began:.0f} s in all; seed {seed}"
        )
        for p in range(PARTITIONS):
            copied = await read_partition(local.direct, topic, p)
            assert copied == source[p], f"partition {p} differs: {chaos.evidence()}"
            values = [r.value for r in source[p]]
            assert len(set(values)) == len(values), f"duplicates at the source, partition {p}"
        assert sum(want) == sent, chaos.evidence()
        crashed = [i for i, m in enumerate(chaos.members) if m.proc.poll() is not None]
        assert not crashed, f"members {crashed} exited on their own: {chaos.evidence()}"
    finally:
        stop.set()
        await chaos.stop()
        await asyncio.gather(producing, return_exceptions=True)


async def until_copying(local: str, topic: str, chaos: Chaos) -> None:
    """Until every local partition holds records: the faults hit a copy, not its start."""
    started = time.monotonic()
    while True:
        try:
            if all(end > 0 for end in await ends(local, topic)):
                return
        except Exception:  # the topic not created yet
            pass
        assert time.monotonic() - started < 90, f"never copying: {chaos.evidence()}"
        await asyncio.sleep(0.5)
