"""syncer on real multi-broker clusters (issue #19): a copy into a 3-node local cluster (RF 3,
min ISR 2) through broker faults, while a producer keeps writing to the remote, ending offset
by offset identical. Timings are logged, not asserted (yet)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

from aiokafka import AIOKafkaProducer
from aiokafka.structs import TopicPartition

from syncer.clusters import Cluster
from syncer.config import ClusterConfig
from syncer.syncer import Syncer
from syncer.testbed import Testbed
from syncer.testbed.probe import placements_async
from tests.conftest import cluster_of
from tests.kafka_helpers import create_topic, make_config, read_partition

log = logging.getLogger(__name__)

PARTITIONS = 6


async def keep_producing(bootstrap: str, topic: str, stop: asyncio.Event) -> int:
    """Small batches to every partition in turn until ``stop``; how many records."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    sent = 0
    try:
        while not stop.is_set():
            futures = [
                await producer.send(
                    topic, b"value-%d" % (sent + i), key=b"k%d" % i, partition=i % PARTITIONS
                )
                for i in range(60)
            ]
            for future in futures:
                await future
            sent += len(futures)
            await asyncio.sleep(0.02)
    finally:
        await producer.stop()
    return sent


async def ends(bootstrap: str, topic: str) -> list[int]:
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    async with Cluster(ClusterConfig(bootstrap, name="test"), role="test") as cluster:
        latest = await cluster.latest(tps)
    return [latest[tp] for tp in tps]


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
            await wait_for(
                "every partition copying",
                lambda: (
                    len(syncer.statuses()) == PARTITIONS
                    and all(s.local_end > 0 for s in syncer.statuses())
                ),
                90,
            )
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
