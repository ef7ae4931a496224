"""Faults against real brokers, each ending with the local copy checked offset by offset."""

from __future__ import annotations

import asyncio

from aiokafka.admin import AIOKafkaAdminClient

from syncer.status import State
from syncer.syncer import Syncer
from tests.kafka_helpers import (
    alter_topic,
    catch_up,
    create_topic,
    kcat_lines,
    make_config,
    produce,
    produce_transactions,
    read_partition,
)


async def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()


async def wait_until(check: object, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.1)


async def test_a_remote_topic_deleted_and_recreated_halts_it_and_says_so(
    local: str, east: str, topic: str
) -> None:
    other = topic + ".other"
    for name in (topic, other):
        await create_topic(east, name)
        await produce(east, name, [(b"k", b"%d" % i) for i in range(20)])
    before = await read_partition(east, topic)
    topics = {"include": [topic + ".*"], "refresh_interval_s": 1}
    config = make_config(local, {"east": east}, [], topics=topics)
    syncer = Syncer(config)
    async with syncer:
        running = asyncio.create_task(syncer.run())
        await wait_until(lambda: [s.local_end for s in syncer.statuses()] == [20, 20])
        await delete_topic(east, topic)
        await asyncio.sleep(2)
        await create_topic(east, topic)  # the same name, a new log: its end goes back to 5
        await produce(east, topic, [(b"new", b"%d" % i) for i in range(5)])
        await produce(east, other, [(b"k", b"%d" % i) for i in range(20, 30)])
        by_topic = {s.tp.topic: s for s in syncer.statuses()}
        await wait_until(lambda: by_topic[topic].state is State.HALTED, 60)
        await wait_until(lambda: by_topic[other].local_end == 30)
        syncer.request_stop()
        await asyncio.wait_for(running, 30)
    halted = by_topic[topic]
    assert halted.error is not None
    assert "deleted and recreated on the remote east cluster: its topic id changed" in halted.error
    assert await read_partition(local, topic) == before  # nothing lost, nothing written over
    assert await read_partition(local, other) == await read_partition(east, other)


async def test_a_remote_topic_recreated_with_more_records_halts_and_nothing_is_spliced(
    local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic)
    await produce(east, topic, [(b"old", b"%d" % i) for i in range(20)])
    before = await read_partition(east, topic)
    topics = {"include": [topic], "refresh_interval_s": 1}
    syncer = Syncer(make_config(local, {"east": east}, [], topics=topics))
    async with syncer:
        running = asyncio.create_task(syncer.run())
        await wait_until(lambda: [s.local_end for s in syncer.statuses()] == [20])
        await delete_topic(east, topic)
        await asyncio.sleep(2)
        await create_topic(east, topic)  # a new log, longer than what was copied of the old
        await produce(east, topic, [(b"new", b"%d" % i) for i in range(30)])
        (status,) = syncer.statuses()
        await wait_until(lambda: status.state is State.HALTED, 60)
        syncer.request_stop()
        await asyncio.wait_for(running, 30)
    assert status.error is not None
    assert "deleted and recreated on the remote east cluster: its topic id changed" in status.error
    assert await read_partition(local, topic) == before  # the old log only, nothing appended


async def test_a_remote_recreated_while_stopped_with_a_marker_below_the_local_end_halts(
    local: str, east: str, topic: str
) -> None:
    """The remote topic is deleted and recreated while syncer is stopped, and its new log
    holds a transaction's commit marker at the offset just below the local end. At the
    start the remote's record there is compared with the local one: a marker is no record,
    so nothing was compared, and that counted as agreeing: the new log's 10..19 were
    written on top of the old 0..9 (seen on a real broker before the fix). A marker where
    the local log holds a record differs from it; the partition halts, nothing written."""
    await create_topic(east, topic)
    await produce(east, topic, [(b"old", b"%d" % i) for i in range(10)])
    before = await read_partition(east, topic)
    await catch_up(make_config(local, {"east": east}, [topic]))
    assert await read_partition(local, topic) == before

    await delete_topic(east, topic)
    await asyncio.sleep(2)
    await create_topic(east, topic)
    await produce_transactions(east, topic, [(True, [(b"new", b"%d" % i) for i in range(9)])])
    await produce(east, topic, [(b"newer", b"%d" % i) for i in range(10)])  # at 10..19

    syncer = await catch_up(make_config(local, {"east": east}, [topic]))
    (status,) = syncer.statuses()
    assert status.state is State.HALTED, status
    assert status.error is not None and "differs from remote east's" in status.error
    assert await read_partition(local, topic) == before  # the old log only, nothing appended
    assert len(kcat_lines(local, topic, 0)) == 10


async def test_a_record_larger_than_the_local_topic_allows_halts_with_a_clear_error(
    local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic)
    await create_topic(local, topic, **{"max.message.bytes": "2000"})
    await produce(east, topic, [(b"small", b"x" * 100)] * 3)
    await produce(east, topic, [(b"large", b"y" * 10_000)])
    # the remote's limit lowered after the large record was written: the two topics' settings
    # agree (a local limit below the remote's is refused up front), the record still breaks it
    await alter_topic(east, topic, {"max.message.bytes": "2000"})
    syncer = await catch_up(make_config(local, {"east": east}, [topic]))
    (status,) = syncer.statuses()
    assert status.state is State.HALTED and status.local_end == 3
    assert status.error is not None
    assert "batch at offset 3" in status.error
    assert "larger than the local topic's max.message.bytes allows" in status.error
    assert await read_partition(local, topic) == (await read_partition(east, topic))[:3]
