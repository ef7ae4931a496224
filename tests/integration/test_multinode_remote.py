"""syncer copying from a 3-node remote (RF 3, min ISR 2) into the one-node local cluster
through the remote's broker faults (issue #19, item 2), while a producer keeps writing to
the remote. One copy run goes through them all in turn: a kill -9 of the remote node leading
most partitions (and its restart), a preferred leader election (the restart left the leaders
unbalanced), a clean rolling restart of all three nodes, and a reassignment of one partition
away from its leader. The leader moves of the election and the reassignment are timed as each
moved partition's copy stall (``test_multinode.stalls``): asserted under 5 s, logged exactly
(the target is 2 s). A broker that fails backs off alone (``syncer.brokers``): through the
kill, the partitions led by the other nodes must copy on with no pause (under 2 s; a
whole-remote back-off stalled them 2.6 to 3.5 s); those of the killed node are logged (they
have no leader until the controller moves them). The rolling restart's stalls are logged, not
asserted: 1.0 to 2.5 s, with the sampler itself blind for up to 2.2 s while a node restarts.
At the end both sides are identical offset by offset."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import time
from collections import Counter
from collections.abc import Callable

import pytest
from aiokafka.protocol.metadata import MetadataRequest

from syncer.clusters import Cluster
from syncer.config import ClusterConfig
from syncer.connection import ClusterConnection
from syncer.syncer import Syncer
from syncer.testbed import Testbed
from syncer.testbed.probe import Placement
from tests.conftest import cluster_of
from tests.integration.test_multinode import (
    PARTITIONS,
    STALL_LIMIT_S,
    Sample,
    ends,
    every_partition_copying,
    keep_producing,
    report_stalls,
    sample_ends,
    wait_for,
    wait_placed,
)
from tests.kafka_helpers import kcat_lines, make_config, read_partition

log = logging.getLogger(__name__)

SETTLE_S = 3.0  # how long after a move has finished its stall still counts
# the longest stall of a partition led by a broker that did not fail (measured up to 0.41 s,
# 0.64 s on 2026-12-02; 2 s is the target). Their high watermarks stand still until
# the controller fences the dead node and drops it from their ISR (acks=all, RF 3): the copy
# can only follow. A sampler that read every partition in one request was blind to all of
# them while the dead node still led some, and counted a stretch begun just before the kill
# through its whole ~10 s blindness (a "9 s stall" of a healthy partition in 2 runs of 4)
HEALTHY_STALL_S = 2.0


async def create_replicated_topic(bootstrap: str, topic: str) -> None:
    """The topic with a replica on each of the three nodes (tests.kafka_helpers' has one)."""
    async with Cluster(ClusterConfig(bootstrap, name="test"), role="test") as cluster:
        await cluster.create_topic(topic, PARTITIONS, {}, 3)
    await wait_placed(bootstrap, topic, lambda ps: all(len(p.isr) == 3 for p in ps))


Check = Callable[[list[Placement]], bool]


def in_sync(node: int) -> Check:
    """A check on placements: ``node`` is back in the ISR of every partition it holds."""
    return lambda placed: all(node in p.isr for p in placed if node in p.replicas)


class RemoteFaults:
    """The faults, one after the other, on the remote's 3-node cluster; the windows in which
    leaders moved, and which partitions moved, for the stall report."""

    def __init__(self, bed: Testbed, topic: str) -> None:
        self.bed = bed
        self.name = cluster_of(bed).name
        self.bootstrap = cluster_of(bed).bootstrap
        self.topic = topic
        self.windows: dict[str, tuple[float, float]] = {}
        self.moved: dict[str, dict[int, tuple[int, int]]] = {}
        self.killed_led: set[int] = set()  # the partitions the killed node led

    async def placed(self, check: Check = lambda placed: True) -> list[Placement]:
        return await wait_placed(self.bootstrap, self.topic, check, 90)

    async def run(self) -> None:
        await self.kill_the_busiest_leader()
        await self.elect_preferred()
        await self.roll()
        await self.reassign_one()

    async def kill_the_busiest_leader(self) -> None:
        placed = await self.placed()
        busiest, led = Counter(p.leader for p in placed).most_common(1)[0]
        self.killed_led = {p.partition for p in placed if p.leader == busiest}
        await asyncio.sleep(1)
        began = time.monotonic()
        log.warning("kill -9 of remote node %d, leader of %d of %d", busiest, led, PARTITIONS)
        await asyncio.to_thread(self.bed.kill_node, self.name, busiest)
        await asyncio.sleep(3)
        await asyncio.to_thread(self.bed.start_node, self.name, busiest)
        await self.placed(in_sync(busiest))
        log.warning("node %d back in sync %.1f s after the kill", busiest, time.monotonic() - began)
        self.windows["kill -9"] = (began, time.monotonic() + SETTLE_S)
        await asyncio.sleep(SETTLE_S)

    async def elect_preferred(self) -> None:
        before = await self.placed()
        assert any(p.leader != p.replicas[0] for p in before), before  # unbalanced
        began = time.monotonic()
        partitions = [(self.topic, p) for p in range(PARTITIONS)]
        await asyncio.to_thread(self.bed.elect_preferred, self.name, partitions)
        after = await self.placed(lambda ps: all(p.leader == p.replicas[0] for p in ps))
        self.note("preferred election", began, before, after)
        await asyncio.sleep(SETTLE_S)

    async def roll(self) -> None:
        began = time.monotonic()
        for node in (1, 2, 3):
            step = time.monotonic()
            await asyncio.to_thread(self.bed.stop_node, self.name, node)
            await asyncio.to_thread(self.bed.start_node, self.name, node)
            await self.placed(in_sync(node))
            log.warning(
                "remote node %d restarted, in sync in %.1f s", node, time.monotonic() - step
            )
        self.windows["rolling restart"] = (began, time.monotonic() + SETTLE_S)
        await asyncio.sleep(SETTLE_S)

    async def reassign_one(self) -> None:
        """Partition 0 leaves its leader for its two followers: the leader must move."""
        before = await self.placed()
        first = before[0]
        followers = [r for r in first.replicas if r != first.leader]
        began = time.monotonic()
        await asyncio.to_thread(self.bed.reassign, self.name, {(self.topic, 0): followers})
        after = await self.placed(lambda ps: list(ps[0].replicas) == followers)
        self.note("reassignment", began, before, after)
        assert 0 in self.moved["reassignment"], after
        await asyncio.sleep(SETTLE_S)

    def note(
        self, what: str, began: float, before: list[Placement], after: list[Placement]
    ) -> None:
        done = time.monotonic()
        moved = {
            b.partition: (b.leader, a.leader)
            for b, a in zip(before, after, strict=True)
            if b.leader != a.leader
        }
        log.warning("%s took %.1f s; leaders moved (old → new): %s", what, done - began, moved)
        assert moved, f"{what}: no leader moved"
        self.moved[what] = moved
        self.windows[what] = (began, done + SETTLE_S)


@pytest.mark.long_multinode
async def test_remote_broker_faults_mid_copy_end_identical_and_leader_moves_stall_briefly(
    remote3: Testbed, local: str, topic: str
) -> None:
    remote = cluster_of(remote3).bootstrap
    await create_replicated_topic(remote, topic)
    syncer = Syncer(make_config(local, {"remote3": remote}, [topic]))
    faults = RemoteFaults(remote3, topic)
    samples: dict[int, list[Sample]] = {p: [] for p in range(PARTITIONS)}
    stop_producing, stop_sampling = asyncio.Event(), asyncio.Event()
    # each partition written on its own: the producer's writes to a healthy leader's
    # partitions do not wait for the killed node's to find new leaders
    producing = asyncio.create_task(keep_producing(remote, topic, stop_producing, apart=True))
    sampling = asyncio.create_task(sample_ends(local, remote, topic, samples, stop_sampling))
    started = time.monotonic()
    async with syncer:
        running = asyncio.create_task(syncer.run())
        try:
            await every_partition_copying(syncer)
            await faults.run()
            stop_producing.set()
            written = await producing
            remote_ends = await ends(remote, topic)
            # not idempotent: a write whose answer a kill lost is sent again, landing twice
            assert sum(remote_ends) >= written
            caught_up = await wait_for(
                "the copy to catch up",
                lambda: (
                    [s.local_end for s in sorted(syncer.statuses(), key=lambda s: s.tp.partition)]
                    == remote_ends
                ),
                60,
            )
            log.warning(
                "%d records; caught up %.1f s after the producer stopped; faults took %.0f s",
                written,
                caught_up,
                time.monotonic() - started,
            )
        finally:
            stop_producing.set()
            stop_sampling.set()
            syncer.request_stop()
            await asyncio.wait_for(running, 60)
            await asyncio.gather(producing, sampling, return_exceptions=True)
    report_stalls("rolling restart", samples, range(PARTITIONS), faults.windows["rolling restart"])
    window = faults.windows["kill -9"]
    # those the killed node led have no leader until the controller moves them (up to the
    # broker session timeout): a stall counted from the kill measures the remote, not us
    report_stalls("kill -9, partitions it led", samples, sorted(faults.killed_led), window)
    others = [p for p in range(PARTITIONS) if p not in faults.killed_led]
    worst = report_stalls("kill -9, the other partitions", samples, others, window)
    # no pause for them at all (a whole-remote back-off stalled them 2.6 to 3.5 s)
    assert worst < HEALTHY_STALL_S, f"kill -9: a healthy broker's partition stalled {worst:.1f} s"
    for what in ("preferred election", "reassignment"):
        worst = report_stalls(what, samples, sorted(faults.moved[what]), faults.windows[what])
        assert worst < STALL_LIMIT_S, f"{what}: a moved partition's copy stalled {worst:.1f} s"
    assert await ends(local, topic) == remote_ends
    for partition in range(PARTITIONS):
        mirrored = await read_partition(local, topic, partition)
        source = await read_partition(remote, topic, partition)
        assert len(mirrored) == remote_ends[partition]
        assert mirrored == source, f"partition {partition} differs"
    if shutil.which("kcat"):  # an independent reader of one partition
        there, here = await asyncio.gather(
            asyncio.to_thread(kcat_lines, remote, topic, 0),
            asyncio.to_thread(kcat_lines, local, topic, 0),
        )
        assert len(here) == remote_ends[0] and here == there


async def test_a_remote_node_that_takes_connections_but_answers_nothing_holds_up_no_other(
    remote3: Testbed,
) -> None:
    """A paused node (SIGSTOP: its kernel still completes TCP handshakes, as a restarting
    broker's bound socket does) while new connections are opened to it and to a healthy
    node: the healthy one answers at once, not after the silent one's request timeout
    (aiokafka opened every connection of a client under one lock)."""
    cluster = cluster_of(remote3)
    nodes = remote3.multi(cluster.name)
    config = ClusterConfig(cluster.bootstrap, name="remote3", request_timeout_ms=10_000)
    silent, healthy = 3, 1
    pid = nodes.node(silent).pid
    assert pid is not None
    async with ClusterConnection(config, role="test") as connection:
        await connection.refresh_metadata()
        os.kill(pid, signal.SIGSTOP)
        try:
            # connection numbers 7 and 8 are new to both nodes: each must be opened
            stuck = asyncio.create_task(
                connection.send(silent, MetadataRequest([], False), connection=7)
            )
            await asyncio.sleep(1)  # its TCP connection is open, its ApiVersions unanswered
            assert not stuck.done()
            began = time.monotonic()
            answer = await asyncio.wait_for(
                connection.send(healthy, MetadataRequest([], False), connection=8), 8
            )
            took = time.monotonic() - began
            log.warning("a new connection to a healthy node beside a silent one: %.2f s", took)
            assert {b[0] for b in answer.brokers} == {1, 2, 3}
            assert took < 2.0, f"the healthy node answered after {took:.1f} s"
            assert not stuck.done()  # the silent node still holds its own connection
        finally:
            os.kill(pid, signal.SIGCONT)
        back = await asyncio.wait_for(stuck, 30)  # woken, it answers on that connection
        assert {b[0] for b in back.brokers} == {1, 2, 3}
    await asyncio.to_thread(nodes.wait_node, silent)  # whole again for the next test
