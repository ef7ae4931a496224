"""A topic deleted and recreated under its name is told by its topic id, on a remote and
locally: its partitions halt naming the cluster and both ids, and nothing of the new topic
is written. Real brokers; the local copy checked offset by offset."""

from __future__ import annotations

import asyncio
import time

from syncer.clusters import Cluster
from syncer.config import ClusterConfig
from syncer.status import State
from syncer.syncer import Syncer
from tests.integration.test_faults import delete_topic, wait_until
from tests.integration.test_producer_state import kcat_offsets
from tests.kafka_helpers import create_topic, make_config, produce, read_partition

STAMP = 1_700_000_000_000  # fixed timestamps: the new log's first records equal the old ones


async def topic_id(bootstrap: str, topic: str) -> str:
    async with Cluster(ClusterConfig(bootstrap, name="test"), role="test") as cluster:
        ids = await cluster.topic_ids([topic])
    assert ids is not None
    return str(ids[topic])


async def test_a_remote_topic_recreated_between_refreshes_serves_nothing_and_then_halts(
    local: str, east: str, topic: str
) -> None:
    """The window between two topic refreshes: the remote's new log starts with the very
    records that were copied (so comparing the record below the local end cannot tell) and
    goes on; fetches name the old topic id and get nothing of it."""
    await create_topic(east, topic)
    old = [(b"k", b"%d" % i) for i in range(20)]
    await produce(east, topic, old, timestamp_ms=STAMP)
    before = await read_partition(east, topic)
    old_id = await topic_id(east, topic)
    topics = {"include": [topic], "refresh_interval_s": 3600}  # no refresh in the window
    syncer = Syncer(make_config(local, {"east": east}, [], topics=topics))
    async with syncer:
        running = asyncio.create_task(syncer.run())
        await wait_until(lambda: [s.local_end for s in syncer.statuses()] == [20])
        await delete_topic(east, topic)
        await asyncio.sleep(2)
        await create_topic(east, topic)
        await produce(east, topic, old, timestamp_ms=STAMP)
        await produce(east, topic, [(b"new", b"%d" % i) for i in range(30)])
        new_id = await topic_id(east, topic)
        await asyncio.sleep(5)  # a copier fetching by name copies offsets 20..49 meanwhile
        assert await read_partition(local, topic) == before
        await syncer.refresh_topics()  # the next refresh
        (status,) = syncer.statuses()
        assert status.state is State.HALTED
        syncer.request_stop()
        await asyncio.wait_for(running, 30)
    assert status.error is not None
    assert "deleted and recreated on the remote east cluster" in status.error
    assert f"changed from {old_id} to {new_id}" in status.error
    assert syncer.summary().halted == 1
    assert await read_partition(local, topic) == before  # nothing of the new log, ever


async def test_a_local_topic_recreated_while_the_daemon_runs_halts_and_is_not_copied_again(
    local: str, east: str, topic: str
) -> None:
    other = topic + ".other"
    for name in (topic, other):
        await create_topic(east, name)
        await produce(east, name, [(b"k", b"%d" % i) for i in range(20)])
    topics = {"include": [topic + ".*"], "refresh_interval_s": 1}
    syncer = Syncer(make_config(local, {"east": east}, [], topics=topics))
    async with syncer:
        running = asyncio.create_task(syncer.run())
        await wait_until(lambda: [s.local_end for s in syncer.statuses()] == [20, 20])
        old_id = await topic_id(local, topic)
        await delete_topic(local, topic)
        await asyncio.sleep(0.5)
        await create_topic(local, topic)  # an operator's: empty, another id
        new_id = await topic_id(local, topic)
        by_topic = {s.tp.topic: s for s in syncer.statuses()}
        await wait_until(lambda: by_topic[topic].state is State.HALTED, 30)
        await produce(east, topic, [(b"k", b"%d" % i) for i in range(20, 30)])
        await produce(east, other, [(b"k", b"%d" % i) for i in range(20, 30)])
        await wait_until(lambda: by_topic[other].local_end == 30)
        await asyncio.sleep(3)  # several refreshes: it stays halted, nothing is copied
        assert by_topic[topic].state is State.HALTED
        syncer.request_stop()
        await asyncio.wait_for(running, 30)
    error = by_topic[topic].error
    assert error is not None
    assert "deleted and recreated on the local cluster" in error
    assert f"changed from {old_id} to {new_id}" in error
    assert await read_partition(local, topic) == []  # not copied again into the new topic
    assert await read_partition(local, other) == await read_partition(east, other)


async def test_a_local_topic_deleted_while_the_daemon_runs_halts_and_is_not_created_again(
    local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic)
    await produce(east, topic, [(b"k", b"%d" % i) for i in range(20)])
    topics = {"include": [topic], "refresh_interval_s": 1}
    syncer = Syncer(make_config(local, {"east": east}, [], topics=topics))
    async with syncer:
        running = asyncio.create_task(syncer.run())
        await wait_until(lambda: [s.local_end for s in syncer.statuses()] == [20])
        old_id = await topic_id(local, topic)
        await delete_topic(local, topic)
        (status,) = syncer.statuses()
        await wait_until(lambda: status.state is State.HALTED, 30)
        await asyncio.sleep(3)  # several refreshes
        syncer.request_stop()
        await asyncio.wait_for(running, 30)
    assert status.error is not None
    assert f"topic {topic} (id {old_id}) was deleted on the local cluster" in status.error
    async with Cluster(ClusterConfig(local, name="test"), role="test") as cluster:
        assert topic not in await cluster.partition_counts()  # syncer did not recreate it


async def test_a_local_topic_recreated_while_its_copier_is_idle_takes_nothing_before_a_refresh(
    local: str, east: str, topic: str
) -> None:
    """The window between two topic refreshes on the local side: a copier caught up and
    idle, the local topic deleted and recreated (another id, no producer state: the broker
    would take any sequence at its offset 0), then new records at the remote. Writes name
    the local topic by the id learned at start (Produce v13), so the new topic refuses them
    with UNKNOWN_TOPIC_ID and the partition halts at once; by name, the first batch landed
    at offset 0 of the new topic before anything halted."""
    await create_topic(east, topic)
    await produce(east, topic, [(b"k", b"%d" % i) for i in range(20)])
    topics = {"include": [topic], "refresh_interval_s": 30}  # no refresh in the window
    syncer = Syncer(make_config(local, {"east": east}, [], topics=topics))
    async with syncer:
        running = asyncio.create_task(syncer.run())
        await wait_until(lambda: [s.local_end for s in syncer.statuses()] == [20])
        (status,) = syncer.statuses()
        old_id = await topic_id(local, topic)
        await delete_topic(local, topic)
        await asyncio.sleep(0.5)
        await create_topic(local, topic)  # empty, another id
        new_id = await topic_id(local, topic)
        since = time.monotonic()
        await produce(east, topic, [(b"k", b"%d" % i) for i in range(20, 30)])
        await wait_until(lambda: status.state is State.HALTED, 20)
        assert time.monotonic() - since < 20  # by the write, not by a refresh
        assert await read_partition(local, topic) == []
        assert await asyncio.to_thread(kcat_offsets, local, topic) == []
        error = status.error
        await syncer.refresh_topics()  # the next refresh names both ids
        named = status.error
        syncer.request_stop()
        await asyncio.wait_for(running, 30)
    assert error is not None
    assert error.startswith(f"{topic}[0]: write at offset 20: UnknownTopicIdError (error 100)")
    assert "deleted, or recreated under its name" in error
    assert named is not None and f"changed from {old_id} to {new_id}" in named
    assert syncer.summary().halted == 1
    assert await read_partition(local, topic) == []  # nothing, ever
