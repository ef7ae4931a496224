"""syncer on real multi-broker clusters (issue #19): a copy into a 3-node local cluster (RF 3,
min ISR 2) through broker faults, while a producer keeps writing to the remote, ending offset
by offset identical. Leader moves (a preferred election, a reassignment) are timed as the
copy stall of each moved partition: the longest stretch in which the local end stood still
while the remote's end was ahead of it, sampled every ~100 ms. The issue's target is 2 s; the
tests assert 5 s (a shared 2-core machine is noisy) and log the figures."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.structs import TopicPartition

from syncer.clusters import Cluster
from syncer.config import ClusterConfig
from syncer.errors import SyncerError
from syncer.syncer import Syncer
from syncer.testbed import Testbed
from syncer.testbed.probe import Placement, placements_async
from tests.conftest import cluster_of
from tests.kafka_helpers import create_topic, make_config, read_partition

log = logging.getLogger(__name__)

PARTITIONS = 6
STALL_LIMIT_S = 5.0  # the target is 2 s; asserted loosely, reported exactly
SETTLE_S = 5.0  # how long after a move has finished its stall still counts

Sample = tuple[float, int, int]  # (monotonic time, local end, remote end) of one partition


async def keep_producing(
    bootstrap: str, topic: str, stop: asyncio.Event, *, apart: bool = False
) -> int:
    """Small batches to every partition in turn until ``stop``; how many records. ``apart``:
    each partition written on its own (10 records at a time), so one whose leader is gone
    holds up only its own writes, not the others' (acks=all waits for a new leader)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    if apart:
        writers = [produce_to(producer, topic, [p], 10, stop) for p in range(PARTITIONS)]
    else:
        writers = [produce_to(producer, topic, range(PARTITIONS), 60, stop)]
    try:
        counts = await asyncio.gather(*writers)
    finally:
        await producer.stop()
    return sum(counts)


async def produce_to(
    producer: AIOKafkaProducer,
    topic: str,
    partitions: Sequence[int],
    per_round: int,
    stop: asyncio.Event,
) -> int:
    """Rounds of ``per_round`` records over ``partitions`` in turn, each round awaited,
    until ``stop``; how many records."""
    sent = 0
    while not stop.is_set():
        futures = [
            await producer.send(
                topic,
                b"value-%d" % (sent + i),
                key=b"k%d" % i,
                partition=partitions[i % len(partitions)],
            )
            for i in range(per_round)
        ]
        for future in futures:
            await future
        sent += len(futures)
        await asyncio.sleep(0.02)
    return sent


async def ends(bootstrap: str, topic: str) -> list[int]:
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    async with Cluster(ClusterConfig(bootstrap, name="test"), role="test") as cluster:
        latest = await cluster.latest(tps)
    return [latest[tp] for tp in tps]


async def every_partition_copying(syncer: Syncer) -> None:
    await wait_for(
        "every partition copying",
        lambda: (
            len(syncer.statuses()) == PARTITIONS and all(s.local_end > 0 for s in syncer.statuses())
        ),
        90,
    )


async def wait_for(what: str, check: object, timeout: float) -> float:
    """Seconds until ``check()`` holds."""
    started = time.monotonic()
    while not check():  # type: ignore[operator]
        assert time.monotonic() - started < timeout, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)
    return time.monotonic() - started


async def test_kill_9_of_the_busiest_local_leader_mid_copy_ends_identical(
    local3: Testbed, east: str, topic: str
) -> None:
    local = cluster_of(local3)
    name = local.name
    await create_topic(east, topic, PARTITIONS)
    config = make_config(local.bootstrap, {"east": east}, [topic])
    syncer = Syncer(config)
    stop_producing = asyncio.Event()
    producing = asyncio.create_task(keep_producing(east, topic, stop_producing))
    async with syncer:
        running = asyncio.create_task(syncer.run())
        try:
            await every_partition_copying(syncer)
            placed = await placements_async(local.bootstrap, topic)
            assert all(len(p.replicas) == 3 for p in placed), placed  # local default RF 3
            busiest, led = Counter(p.leader for p in placed).most_common(1)[0]
            log.warning("killing local node %d, leader of %d of %d", busiest, led, PARTITIONS)
            await asyncio.sleep(2)
            fault = time.monotonic()
            await asyncio.to_thread(local3.kill_node, name, busiest)
            await asyncio.sleep(5)
            await asyncio.to_thread(local3.start_node, name, busiest)
            log.warning("node %d back after %.1f s", busiest, time.monotonic() - fault)
            await asyncio.sleep(3)
            stop_producing.set()
            written = await producing
            remote = await ends(east, topic)
            assert sum(remote) == written
            statuses = {s.tp.partition: s for s in syncer.statuses()}
            caught_up = await wait_for(
                "the copy to catch up",
                lambda: [statuses[p].local_end for p in range(PARTITIONS)] == remote,
                240,
            )
            log.warning(
                "%d records; caught up %.1f s after the producer stopped, %.1f s after the kill -9",
                written,
                caught_up,
                time.monotonic() - fault,
            )
        finally:
            stop_producing.set()
            syncer.request_stop()
            await asyncio.wait_for(running, 60)
            await asyncio.gather(producing, return_exceptions=True)
    assert await ends(local.bootstrap, topic) == remote
    for partition in range(PARTITIONS):
        mirrored = await read_partition(local.bootstrap, topic, partition)
        source = await read_partition(east, topic, partition)
        assert mirrored == source, f"partition {partition} differs"


# copy stalls -------------------------------------------------------------------------------


def stalls(samples: Sequence[Sample]) -> list[tuple[float, float]]:
    """(start, end) of each stretch in which the local end stood still while the remote's
    was ahead of it: from the last sample before the local end stopped to the first one at
    which it moved or caught up (or the last sample). Bounds err long by one sample period,
    never short, so a stall is not hidden by the sampling."""
    out: list[tuple[float, float]] = []
    start: float | None = None
    previous: Sample | None = None
    for sample in samples:
        at, local, remote = sample
        stuck = previous is not None and local == previous[1] and remote > local
        if stuck and start is None:
            assert previous is not None
            start = previous[0]
        elif not stuck and start is not None:
            out.append((start, at))
            start = None
        previous = sample
    if start is not None and previous is not None:
        out.append((start, previous[0]))
    return out


def longest_stall(samples: Sequence[Sample], since: float, until: float) -> float:
    """Seconds of the longest stall that overlaps [since, until] (0: none)."""
    return max(
        (end - start for start, end in stalls(samples) if end >= since and start <= until),
        default=0.0,
    )


def longest_gap(samples: Sequence[Sample], since: float, until: float) -> float:
    """The longest time between two samples that overlaps [since, until]: how blind the
    sampler was (a gap that began before ``since`` counts)."""
    times = [at for at, _l, _r in samples]
    return max(
        (b - a for a, b in itertools.pairwise(times) if b >= since and a <= until), default=0.0
    )


def test_a_stall_is_a_stretch_the_local_end_stood_still_behind_the_remote() -> None:
    samples = [
        (0.0, 10, 10),
        (0.1, 10, 20),  # the remote moved ahead: the local end last moved at 0.0
        (0.2, 15, 25),  # moved: a stall of 0.2 s
        (0.3, 15, 30),
        (0.4, 15, 30),
        (0.5, 15, 40),
        (0.6, 40, 40),  # moved and caught up
        (0.7, 40, 40),  # standing still, caught up: no stall
        (0.8, 40, 41),
    ]
    assert stalls(samples) == [(0.0, 0.2), (0.2, 0.6), (0.7, 0.8)]
    assert abs(longest_stall(samples, 0.0, 1.0) - 0.4) < 1e-9
    assert abs(longest_stall(samples, 0.65, 1.0) - 0.1) < 1e-9
    assert longest_stall(samples[:1], 0.0, 1.0) == 0.0
    assert abs(longest_gap(samples, 0.0, 0.3) - 0.1) < 1e-9
    blind = [(0.0, 1, 2), (0.1, 1, 2), (9.8, 3, 3), (9.9, 3, 3)]
    assert abs(longest_gap(blind, 5.0, 9.9) - 9.7) < 1e-9  # the gap began before the window


async def sample_ends(
    local: str,
    remote: str,
    topic: str,
    into: dict[int, list[Sample]],
    stop: asyncio.Event,
    period_s: float = 0.1,
) -> None:
    """Both ends of every partition every ``period_s`` until ``stop``. A partition whose
    end cannot be read on either side (its leader moving or dead) is left out of that round:
    each local partition is asked on its own, the remote's partitions one request per leader,
    so the others still count (asked all at once, the sampler was blind to every partition
    for the ~10 s a killed remote node still led some)."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]

    async def one(cluster: Cluster, tp: TopicPartition) -> int | None:
        try:
            return (await asyncio.wait_for(cluster.latest([tp]), 1.0))[tp]
        except Exception:  # a moving leader: this round goes without
            return None

    async def led_by_one(cluster: Cluster, group: list[TopicPartition]) -> dict[Any, int]:
        try:
            return await asyncio.wait_for(cluster.latest(group), 1.0)
        except Exception:  # its leader moving or dead: this round goes without them
            return {}

    async def remote_ends(cluster: Cluster) -> dict[Any, int]:
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in tps:
            with contextlib.suppress(SyncerError):  # no leader known: asked for next round
                by_leader.setdefault(cluster.leader(tp), []).append(tp)
        found = await asyncio.gather(*(led_by_one(cluster, g) for g in by_leader.values()))
        return {tp: end for answer in found for tp, end in answer.items()}

    async with (
        Cluster(ClusterConfig(local, name="sample-local"), role="test") as here,
        Cluster(ClusterConfig(remote, name="sample-remote"), role="test") as there,
    ):
        while not stop.is_set():
            at = time.monotonic()
            remote = await remote_ends(there)
            local_ends = await asyncio.gather(*(one(here, tp) for tp in tps))
            for tp, end in zip(tps, local_ends, strict=True):
                if end is not None and tp in remote:
                    into[tp.partition].append((at, end, remote[tp]))
            await asyncio.sleep(max(0.0, period_s - (time.monotonic() - at)))


async def copy_through(
    bed: Testbed,
    remote: str,
    topic: str,
    fault: Callable[[], Awaitable[None]],
    **extra: Any,
) -> dict[int, list[Sample]]:
    """Copy ``topic`` from ``remote`` into the bed's 3-node cluster while a producer writes to
    the remote, run ``fault`` once every partition is copying, let the copy catch up, and
    check the two identical offset by offset. Returns the ends sampled through it all."""
    local = cluster_of(bed).bootstrap
    await create_topic(remote, topic, PARTITIONS)
    syncer = Syncer(make_config(local, {"east": remote}, [topic], **extra))
    samples: dict[int, list[Sample]] = {p: [] for p in range(PARTITIONS)}
    stop_producing, stop_sampling = asyncio.Event(), asyncio.Event()
    producing = asyncio.create_task(keep_producing(remote, topic, stop_producing))
    sampling: asyncio.Task[None] | None = None
    async with syncer:
        running = asyncio.create_task(syncer.run())
        try:
            await every_partition_copying(syncer)
            sampling = asyncio.create_task(
                sample_ends(local, remote, topic, samples, stop_sampling)
            )
            await fault()
            stop_producing.set()
            written = await producing
            remote_ends = await ends(remote, topic)
            assert sum(remote_ends) == written
            caught_up = await wait_for(
                "the copy to catch up",
                lambda: (
                    [s.local_end for s in sorted(syncer.statuses(), key=lambda s: s.tp.partition)]
                    == remote_ends
                ),
                120,
            )
            log.warning(
                "%d records; caught up %.1f s after the producer stopped", written, caught_up
            )
        finally:
            stop_producing.set()
            stop_sampling.set()
            syncer.request_stop()
            await asyncio.wait_for(running, 60)
            await asyncio.gather(
                producing, *([sampling] if sampling else []), return_exceptions=True
            )
    assert await ends(local, topic) == remote_ends
    for partition in range(PARTITIONS):
        mirrored = await read_partition(local, topic, partition)
        source = await read_partition(remote, topic, partition)
        assert mirrored == source, f"partition {partition} differs"
    return samples


async def wait_placed(
    bootstrap: str, topic: str, check: Callable[[list[Placement]], bool], timeout: float = 60
) -> list[Placement]:
    """The topic's placements once ``check`` holds for them."""
    started = time.monotonic()
    while True:
        try:
            placed = await placements_async(bootstrap, topic)
        except Exception:  # a node restarting: ask again
            placed = []
        if placed and check(placed):
            return placed
        assert time.monotonic() - started < timeout, f"placements never settled: {placed}"
        await asyncio.sleep(0.2)


def report_stalls(
    what: str,
    samples: dict[int, list[Sample]],
    partitions: Sequence[int],
    window: tuple[float, float],
    baseline: tuple[float, float] | None = None,
) -> float:
    """Log each partition's copy stall in ``window`` (and in the quiet ``baseline`` before
    it, for scale); the longest. A stall that fits inside a sampling gap (the sampler's own
    reads failing while a leader moves) is not seen, so the longest gap is logged beside it."""
    since, until = window
    per = {p: longest_stall(samples[p], since, until) for p in partitions}
    gaps = {p: longest_gap(samples[p], since, until) for p in partitions}
    worst = max(per.values(), default=0.0)
    quiet = (
        max(longest_stall(samples[p], *baseline) for p in range(PARTITIONS)) if baseline else None
    )
    log.warning(
        "%s: copy stall per partition %s; max %.2f s (target 2 s); longest sampling gap"
        " %s; quiet-time max stall %s; window %.1f s",
        what,
        {p: round(s, 2) for p, s in per.items()},
        worst,
        {p: round(g, 2) for p, g in gaps.items()},
        "n/a" if quiet is None else f"{quiet:.2f} s",
        until - since,
    )
    return worst


# leader moves during the copy ----------------------------------------------------------------


@pytest.mark.long_multinode
async def test_a_preferred_leader_election_mid_copy_stalls_the_moved_partitions_briefly(
    local3: Testbed, east: str, topic: str
) -> None:
    name = cluster_of(local3).name
    bootstrap = cluster_of(local3).bootstrap
    moved: dict[int, tuple[int, int]] = {}
    windows: dict[str, tuple[float, float]] = {}

    async def elect() -> None:
        placed = await placements_async(bootstrap, topic)
        # Unbalance: each partition's preferred replica becomes the node after its leader.
        # The replica set is unchanged, so no leader moves yet.
        order = {
            (topic, p.partition): [
                p.replicas[(p.replicas.index(p.leader) + 1 + i) % len(p.replicas)]
                for i in range(len(p.replicas))
            ]
            for p in placed
        }
        await asyncio.to_thread(local3.reassign, name, order)
        before = await wait_placed(
            bootstrap,
            topic,
            lambda ps: all(list(p.replicas) == order[topic, p.partition] for p in ps),
        )
        assert all(p.leader != p.replicas[0] for p in before), before  # unbalanced
        quiet = time.monotonic()
        await asyncio.sleep(2)
        began = time.monotonic()
        report = await asyncio.to_thread(
            local3.elect_preferred, name, [(topic, p) for p in range(PARTITIONS)]
        )
        after = await wait_placed(
            bootstrap, topic, lambda ps: all(p.leader == p.replicas[0] for p in ps)
        )
        done = time.monotonic()
        log.warning("election took %.1f s: %s", done - began, report.strip())
        moved.update(
            {
                b.partition: (b.leader, a.leader)
                for b, a in zip(before, after, strict=True)
                if b.leader != a.leader
            }
        )
        windows["quiet"], windows["move"] = (quiet, began), (began, done + SETTLE_S)
        await asyncio.sleep(SETTLE_S)

    samples = await copy_through(local3, east, topic, elect)
    assert sorted(moved) == list(range(PARTITIONS)), f"not every leader moved: {moved}"
    log.warning("leaders moved (partition: old → new): %s", moved)
    worst = report_stalls(
        "preferred election", samples, sorted(moved), windows["move"], windows["quiet"]
    )
    assert worst < STALL_LIMIT_S


async def test_a_reassignment_to_other_brokers_mid_copy_stalls_the_moved_partitions_briefly(
    local3: Testbed, east: str, topic: str
) -> None:
    name = cluster_of(local3).name
    bootstrap = cluster_of(local3).bootstrap
    moves: dict[tuple[str, int], list[int]] = {}
    before: list[Placement] = []
    windows: dict[str, tuple[float, float]] = {}

    async def reassign() -> None:
        before.extend(await placements_async(bootstrap, topic))
        assert all(len(p.replicas) == 2 for p in before), before
        # Each partition leaves its leader for the node it was not on (which must catch up
        # first), keeping its follower.
        for p in before:
            (spare,) = {1, 2, 3} - set(p.replicas)
            follower = next(r for r in p.replicas if r != p.leader)
            moves[topic, p.partition] = [spare, follower]
        quiet = time.monotonic()
        await asyncio.sleep(2)
        began = time.monotonic()
        await asyncio.to_thread(local3.reassign, name, moves)
        done = time.monotonic()
        log.warning("reassignment took %.1f s", done - began)
        windows["quiet"], windows["move"] = (quiet, began), (began, done + SETTLE_S)
        await asyncio.sleep(SETTLE_S)

    samples = await copy_through(
        local3, east, topic, reassign, topics={"include": [topic], "replication_factor": 2}
    )
    after = await placements_async(bootstrap, topic)
    for b, a in zip(before, after, strict=True):
        assert list(a.replicas) == moves[topic, a.partition], a
        assert a.leader in a.replicas and a.leader != b.leader, (b, a)
    log.warning(
        "leaders moved (partition: old → new): %s",
        {b.partition: (b.leader, a.leader) for b, a in zip(before, after, strict=True)},
    )
    worst = report_stalls(
        "reassignment", samples, range(PARTITIONS), windows["move"], windows["quiet"]
    )
    assert worst < STALL_LIMIT_S


@pytest.mark.long_multinode
async def test_a_clean_rolling_restart_of_every_local_node_mid_copy_ends_identical(
    local3: Testbed, east: str, topic: str
) -> None:
    cluster = cluster_of(local3)
    windows: dict[str, tuple[float, float]] = {}

    async def roll() -> None:
        quiet = time.monotonic()
        await asyncio.sleep(2)
        began = time.monotonic()
        for node in (1, 2, 3):
            step = time.monotonic()
            await asyncio.to_thread(local3.stop_node, cluster.name, node)
            await asyncio.to_thread(local3.start_node, cluster.name, node)
            await wait_placed(cluster.bootstrap, topic, lambda ps: all(len(p.isr) == 3 for p in ps))
            log.warning("node %d restarted and in sync in %.1f s", node, time.monotonic() - step)
        done = time.monotonic()
        windows["quiet"], windows["move"] = (quiet, began), (began, done + SETTLE_S)
        await asyncio.sleep(SETTLE_S)

    samples = await copy_through(local3, east, topic, roll)
    report_stalls("rolling restart", samples, range(PARTITIONS), windows["move"], windows["quiet"])
