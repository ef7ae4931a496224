"""The version matrix the other way round: Kafka 4.1 (the session's ``east``) copied into a
Kafka 3.9.2 **local** cluster in KRaft mode, the local a deployment may still run while its
remotes move on. Everything syncer asks of its local cluster is asked of 3.9 here, in one
daemon run: creating the mirrored topics, the state topic and the writer identity (a
producer id and epoch), produces under that identity, ListOffsets, the local group that
shares the partitions (``coordination.group``) and the consumer group offsets copied over
(``groups``). Then both sides are read offset by offset (consumer, kcat) and ``syncer verify``
judges them."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from syncer.clusters import Cluster
from syncer.config import ClusterConfig
from syncer.syncer import Syncer
from syncer.testbed import ClusterSpec, KafkaJars, RunningCluster
from tests.integration.test_group import group_names
from tests.integration.test_offsets import consume
from tests.kafka_helpers import all_batches, make_config, own_bed, read_partition
from tests.matrix.pairing import PARTITIONS, assert_identical, topics_of, verify, write_data_set

log = logging.getLogger(__name__)

VERSION = "3.9.2"
COPY_TIMEOUT_S = 90
STEP_TIMEOUT_S = 30


@pytest.fixture(scope="module")
def local39(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    started = time.monotonic()
    spec = ClusterSpec("local39", version=VERSION, mode="kraft")
    with own_bed(tmp_path_factory.mktemp("local39"), KafkaJars.default(), [spec]) as bed:
        log.warning("Kafka %s (KRaft) local up in %.1f s", VERSION, time.monotonic() - started)
        cluster = bed.clusters["local39"]
        assert isinstance(cluster, RunningCluster) and cluster.mode == "kraft"
        assert f"Kafka version: {VERSION}" in cluster.log_path.read_text()
        yield cluster


async def ends(bootstrap: str, topics: list[str]) -> dict[TopicPartition, int]:
    tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
    async with Cluster(ClusterConfig(bootstrap, name="test"), role="test") as cluster:
        return dict(await cluster.latest(tps))  # type: ignore[arg-type]


def local_ends(syncer: Syncer) -> dict[TopicPartition, int]:
    """The local ends the syncer has written up to (none before its topics exist locally)."""
    return {TopicPartition(*s.tp): s.local_end for s in syncer.statuses()}


async def committed(bootstrap: str, topic: str, group: str) -> list[int | None]:
    """The group's committed offsets, partition by partition (bounded: a consumer waits for
    a group coordinator without end)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    async with asyncio.timeout(STEP_TIMEOUT_S):
        await consumer.start()
        try:
            return [await consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)]
        finally:
            await consumer.stop()


async def test_4_1_copies_into_a_3_9_local_offset_by_offset(
    local39: RunningCluster, east: str, topic: str, tmp_path: Path
) -> None:
    local = local39.bootstrap
    topics = list(topics_of(topic))
    written = await write_data_set(east, topic)
    billing = f"{topic}-billing"  # a consumer group of the remote, half-way through
    async with asyncio.timeout(STEP_TIMEOUT_S):  # a consumer joining a group waits unbounded
        assert len(await consume(east, topics[0], billing, 900)) == 900
    remote_commits = await committed(east, topics[0], billing)

    config = make_config(
        local,
        {"east": east},
        topics,
        coordination={"group": f"{topic}-syncer"},
        groups={"include": [billing], "interval_s": 1},
    )
    syncer = Syncer(config)
    want = await ends(east, topics)
    started = time.monotonic()
    async with syncer:
        running = asyncio.create_task(syncer.run())
        try:
            while (
                local_ends(syncer) != want
                or await committed(local, topics[0], billing) != remote_commits
            ):
                assert not running.done(), running.result()
                assert time.monotonic() - started < COPY_TIMEOUT_S, [
                    (s.tp, s.state, s.local_end, s.error) for s in syncer.statuses()
                ]
                await asyncio.sleep(0.5)
            copy_s = time.monotonic() - started
            assert f"{topic}-syncer" in await group_names(local)  # partitions shared there
        finally:
            syncer.request_stop()
            async with asyncio.timeout(STEP_TIMEOUT_S):
                await running
    assert not [s for s in syncer.statuses() if s.error], [s.error for s in syncer.statuses()]

    compared = await assert_identical(local, east, topic)
    assert compared == sum(written.values())
    # the writer identity, allocated by the 3.9 local and recorded in the state topic there,
    # is the producer id and epoch of every batch written locally
    (identity,) = [
        json.loads(r.value or b"{}")
        for r in await read_partition(local, config.state_topic)
        if r.key == f"producer:{config.name}".encode()
    ]
    for name in topics:
        for partition in range(PARTITIONS):
            stamps = {
                (b.producer_id, b.producer_epoch) async for b in all_batches(local, name, partition)
            }
            assert stamps == {(identity["producer_id"], identity["producer_epoch"])}, stamps
    # the remote's consumer fails over to the 3.9 local and goes on where it was
    assert sum(c or 0 for c in remote_commits) == 900
    verify(tmp_path, local, ("east", east), topic)
    log.warning(
        "4.1 → %s KRaft local: %d records and a group's offsets in %.1f s, identical",
        VERSION,
        compared,
        copy_s,
    )
