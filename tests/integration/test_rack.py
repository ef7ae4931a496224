"""Fetching from the nearest replica (KIP-392, issue #19) on a 3-node remote whose nodes are in
racks r0, r1, r2 and run the rack-aware replica selector. syncer says it is in rack r2; every
partition is led by a node in another rack and has a replica on the node in r2. The bytes
copied must come from that follower (syncer's per-node count, and the kernel's byte counts of
this process's sockets to each broker as a second witness), the leaders must serve none; when
the follower is killed (-9) mid-copy the leaders serve the rest, and the copy is exact."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import random
import re
import subprocess
import time

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition

from syncer.clusters import Cluster
from syncer.config import ClusterConfig
from syncer.metrics import exposition
from syncer.syncer import Syncer
from syncer.testbed import Testbed
from syncer.testbed.probe import placements_async
from syncer.testbed.quorum import rack_of
from tests.conftest import cluster_of
from tests.kafka_helpers import make_config, read_partition

log = logging.getLogger(__name__)

NEAR = 3  # the node in syncer's rack
RACK = rack_of(NEAR)  # "r2"
# leaders on nodes 1 and 2 (the first replica listed is the preferred leader), a replica on 3
ASSIGNMENT = {0: [1, 3, 2], 1: [2, 3, 1], 2: [1, 2, 3]}
RECORDS = 3_000  # per partition, 1 KiB each: about 9 MiB in all
VALUE = 1024
KILL_AT = 0.3  # of the records copied when the near follower is killed
FALLBACK_LIMIT_S = 5.0  # from the kill to records from a leader (fencing takes 9 s)
# small fetches, so that the copy takes long enough to be killed in the middle of
COPIER = {"partition_fetch_max_bytes": 32768, "fetch_max_bytes": 65536, "max_chunks": 2}


async def create_placed_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, -1, -1, replica_assignments=ASSIGNMENT)])
    finally:
        await admin.close()


async def fill(bootstrap: str, topic: str) -> None:
    """RECORDS incompressible records per partition, acks=all (every replica holds them)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20)
    await producer.start()
    noise = random.Random(19)
    try:
        for partition in ASSIGNMENT:
            futures = [
                await producer.send(
                    topic, noise.randbytes(VALUE), key=b"k%d" % i, partition=partition
                )
                for i in range(RECORDS)
            ]
            await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def ends(bootstrap: str, topic: str) -> list[int]:
    tps = [TopicPartition(topic, p) for p in ASSIGNMENT]
    async with Cluster(ClusterConfig(bootstrap, name="test"), role="test") as cluster:
        latest = await cluster.latest(tps)
    return [latest[tp] for tp in tps]


def received_by_port(ports: set[int]) -> dict[int, int]:
    """Bytes the kernel received on this process's open TCP connections to each of
    ``ports``: what each broker sent us, counted outside syncer (``ss -ti``)."""
    out = subprocess.run(
        ["ss", "-tinpH", "state", "established"], capture_output=True, text=True, check=True
    ).stdout
    mine = f"pid={os.getpid()},"
    got = dict.fromkeys(ports, 0)
    port = -1
    for line in out.splitlines():
        if not line[:1].isspace():  # a socket: Recv-Q Send-Q local peer process
            fields = line.split()
            peer = fields[3] if len(fields) > 3 and mine in line else ""
            port = int(peer.rsplit(":", 1)[1]) if ":" in peer else -1
            continue
        found = re.search(r"bytes_received:(\d+)", line)  # its TCP info, on the next line
        if port in got and found:
            got[port] += int(found.group(1))
    return got


def fetched_metric(syncer: Syncer) -> dict[int, float]:
    """syncer_remote_fetched_bytes_total by node, as /metrics serves it."""
    text = exposition(syncer.instruments.attach(syncer.snapshot)).decode()
    pattern = r'syncer_remote_fetched_bytes_total\{node="(\d+)",remote="remote3"\} (\S+)'
    return {int(node): float(size) for node, size in re.findall(pattern, text)}


async def copied_to(syncer: Syncer, records: int, timeout: float) -> int:
    """Wait, looking every 2 ms, until ``records`` are copied; how many are."""
    deadline = time.monotonic() + timeout
    while (done := sum(max(s.local_end, 0) for s in syncer.statuses())) < records:
        assert time.monotonic() < deadline, f"{done} of {records} records copied"
        await asyncio.sleep(0.002)
    return done


async def wait_for_leaders(syncer: Syncer, started: float, timeout: float) -> float:
    """Seconds from ``started`` until a leader (node 1 or 2) has served records."""
    while not any(syncer.clusters.fetched_bytes()["remote3"].get(n, 0) for n in (1, 2)):
        assert time.monotonic() - started < timeout, "no records from the leaders"
        await asyncio.sleep(0.01)
    return time.monotonic() - started


async def test_the_copy_comes_from_the_follower_in_syncers_rack_and_falls_back_to_the_leaders(
    remote3: Testbed, local: str, topic: str
) -> None:
    remote = cluster_of(remote3)
    await create_placed_topic(remote.bootstrap, topic)
    placed = await placements_async(remote.bootstrap, topic)
    assert all(p.leader != NEAR and NEAR in p.isr for p in placed), placed
    await fill(remote.bootstrap, topic)
    target = await ends(remote.bootstrap, topic)
    assert target == [RECORDS] * len(ASSIGNMENT)
    total = RECORDS * len(ASSIGNMENT)

    config = make_config(local, {"remote3": remote.bootstrap}, [topic], copier=COPIER)
    near_remote = dataclasses.replace(config.remotes[0], client_rack=RACK)
    syncer = Syncer(dataclasses.replace(config, remotes=(near_remote,)))
    ports = {node.port: node.node_id for node in remote.members}
    async with syncer:
        copy = asyncio.create_task(syncer.catch_up())
        try:
            await copied_to(syncer, int(KILL_AT * total), 60)
            before = syncer.clusters.fetched_bytes()["remote3"]
            kernel = {ports[p]: size for p, size in received_by_port(set(ports)).items()}
            started = time.monotonic()
            killed_at = await copied_to(syncer, 0, 1)
            await asyncio.to_thread(remote3.kill_node, remote.name, NEAR)
            # the first records from a leader: the leader would name the dead follower for
            # up to 30 s more (the ISR keeps it); the fall back must not wait for that
            to_leader = await wait_for_leaders(syncer, started, 30)
            summary = await asyncio.wait_for(copy, 90)
            took = time.monotonic() - started
        finally:
            copy.cancel()
        after = syncer.clusters.fetched_bytes()["remote3"]
        metric = fetched_metric(syncer)
    log.warning(
        "record bytes fetched per node before the kill -9 of node %d: syncer's %s, the"
        " kernel's %s; after (%d of %d records copied at the kill): %s; the leaders served"
        " records %.2f s after the kill, the rest was copied %.1f s after it",
        NEAR,
        before,
        kernel,
        killed_at,
        total,
        after,
        to_leader,
        took,
    )
    near, leaders = before.get(NEAR, 0), before.get(1, 0) + before.get(2, 0)
    assert near > 0.25 * total * VALUE  # a quarter of the copy and more came from node 3
    assert leaders <= 0.01 * near, before  # the leaders named it and served no records
    # the kernel agrees: what this process received came from the near node's port
    assert kernel[NEAR] > 0.9 * near, kernel
    assert kernel[1] + kernel[2] < 0.1 * kernel[NEAR], kernel
    # killed mid-copy: the leaders served the rest (a fifth of the copy at least)
    assert after.get(1, 0) + after.get(2, 0) > 0.2 * total * VALUE, after
    assert to_leader < FALLBACK_LIMIT_S
    assert metric == {node: float(size) for node, size in after.items()}
    assert summary.halted == 0
    assert await ends(local, topic) == target
    for partition in ASSIGNMENT:
        mirrored = await read_partition(local, topic, partition)
        source = await read_partition(remote.bootstrap, topic, partition)
        assert mirrored == source, f"partition {partition} differs"
