"""Lanes: one remote read over several connections through a thin, long link (the test bed's
proxy in front of a broker that advertises the proxy's address)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator

import pytest

from syncer.status import State
from syncer.syncer import Syncer
from syncer.testbed import ClusterSpec, KafkaJars, RunningCluster, Testbed
from syncer.testbed.bed import free_port
from syncer.testbed.proxy import LinkProxy
from syncer.testbed.tools import perf_produce
from tests.kafka_helpers import create_topic, make_config, own_bed, partition_digests

PARTITIONS = 2
RECORDS = 4_000  # 1 KiB each, per topic
RATE = 1_000_000  # bytes/s per connection
LATENCY_MS = 20


@pytest.fixture(scope="module")
def far_bed(tmp_path_factory: pytest.TempPathFactory, testbed: Testbed) -> Iterator[Testbed]:
    specs = [ClusterSpec("far", advertised=f"127.0.0.1:{free_port()}")]
    with own_bed(tmp_path_factory.mktemp("far"), testbed.jars, specs) as bed:
        yield bed


@pytest.fixture
async def far(far_bed: Testbed) -> AsyncIterator[tuple[RunningCluster, LinkProxy]]:
    cluster = far_bed.clusters["far"]
    async with LinkProxy.in_front_of(cluster, latency_ms=LATENCY_MS, rate=RATE) as proxy:
        yield cluster, proxy


async def backlog(cluster: RunningCluster, topic: str, jars: KafkaJars) -> None:
    await create_topic(cluster.direct, topic, PARTITIONS)
    await asyncio.to_thread(
        perf_produce, cluster.direct, topic, records=RECORDS, record_size=1024, jars=jars
    )


def lanes_config(
    local: str, far: RunningCluster, topic: str, lanes: int, **remote: object
) -> Syncer:
    config = make_config(
        local,
        {"far": far.bootstrap},
        [topic],
        copier={"partition_fetch_max_bytes": 262144, "chunk_timeout_ms": 5000},
    )
    far_remote = dataclasses.replace(config.remotes[0], connections=lanes, **remote)
    return Syncer(dataclasses.replace(config, remotes=(far_remote,)))


async def assert_identical(local: str, far: RunningCluster, topic: str) -> None:
    for partition in range(PARTITIONS):
        assert await partition_digests(local, topic, partition) == await partition_digests(
            far.direct, topic, partition
        )


async def test_lanes_copy_exactly_and_all_carry_data(
    local: str, far: tuple[RunningCluster, LinkProxy], topic: str, testbed: Testbed
) -> None:
    cluster, proxy = far
    await backlog(cluster, topic, testbed.jars)
    syncer = lanes_config(local, cluster, topic, 4, socket_receive_buffer_bytes=100_000)
    async with syncer:
        await syncer.catch_up()
        lanes = syncer._fetchers["far"].lanes
        assert [lane.fetches > 0 for lane in lanes] == [True] * 4  # every lane carried data
        buffers = [b for lane in lanes for b in lane.cluster.socket_buffers()]
    assert {s.state for s in syncer.statuses()} == {State.CAUGHT_UP}
    assert proxy.accepted >= 8  # each lane: its bootstrap connection and its broker's
    assert buffers and {rcv for rcv, _snd in buffers} == {200_000}  # Linux reports it doubled
    await assert_identical(local, cluster, topic)


async def test_a_cut_link_is_survived_with_nothing_lost_or_duplicated(
    local: str, far: tuple[RunningCluster, LinkProxy], topic: str, testbed: Testbed
) -> None:
    cluster, proxy = far
    await backlog(cluster, topic, testbed.jars)
    syncer = lanes_config(local, cluster, topic, 4)
    async with syncer:
        copying = asyncio.create_task(syncer.catch_up())
        cuts = 0
        while cuts < 2:
            copied = sum(s.records_copied for s in syncer.statuses())
            if copied >= (cuts + 1) * RECORDS // 4:
                await proxy.cut()
                cuts += 1
            assert not copying.done(), f"the copy ended after {cuts} cuts"
            await asyncio.sleep(0.02)
        await asyncio.wait_for(copying, 120)
    assert {s.state for s in syncer.statuses()} == {State.CAUGHT_UP}
    assert sum(s.local_end for s in syncer.statuses()) == RECORDS
    await assert_identical(local, cluster, topic)
