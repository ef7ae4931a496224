"""Quiet partitions against a real broker: once a partition brought nothing for a while it is
long-polled in an incremental fetch session (KIP-227), whose answers leave out the
partitions with nothing new. What comes later must still be copied at once and exactly,
transactions included, and a partition that turns quiet again rejoins the session."""

from __future__ import annotations

import asyncio
import time

from syncer.fetch_session import FetchSession
from syncer.fetcher import QUIET_S, Fetcher
from syncer.syncer import Syncer
from tests.kafka_helpers import (
    create_topic,
    make_config,
    produce,
    produce_transactions,
    read_partition,
)

PARTITIONS = 4


async def _copied(syncer: Syncer, topic: str, partition: int, end: int, within: float) -> float:
    """Seconds until the local end of ``partition`` reaches ``end`` (fails after ``within``)."""
    started = time.monotonic()
    while time.monotonic() - started < within:
        ends = {s.tp.partition: s.local_end for s in syncer.statuses() if s.tp.topic == topic}
        if ends.get(partition, -1) >= end:
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    raise AssertionError(f"{topic}[{partition}] not at {end} within {within} s")


async def _in_session(fetcher: Fetcher, partitions: int) -> FetchSession:
    """The session once ``partitions`` are in it: quiet for QUIET_S, then a full request that
    opens it, answered after the quiet wait."""
    deadline = time.monotonic() + QUIET_S + 2 * fetcher._quiet_wait_ms / 1000 + 5
    while time.monotonic() < deadline:
        opened = [s for s in fetcher.quiet.sessions.values() if s.session_id]
        if opened and len(opened[0].sent) == partitions:
            return opened[0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"no session of {partitions} partitions: {dict(fetcher.quiet.sessions)}")


async def test_quiet_partitions_in_a_fetch_session_copy_what_comes_at_once_and_exactly(
    local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic, PARTITIONS)
    for p in range(PARTITIONS):
        await produce(east, topic, [(b"k", b"before-%d" % i) for i in range(5)], partition=p)
    # markers and aborted records become filler (else a marker halts the partition)
    fills = {"include": [topic], "fill": [topic]}
    syncer = Syncer(make_config(local, {"east": east}, [topic], topics=fills))
    async with syncer:
        running = asyncio.create_task(syncer.run())
        for p in range(PARTITIONS):
            await _copied(syncer, topic, p, 5, 30)
        fetcher: Fetcher = syncer._fetchers["east"].lanes[0]
        session = await _in_session(fetcher, PARTITIONS)  # all quiet: polled in the session
        # records to one quiet partition: the session's answer brings them at once
        await produce(east, topic, [(b"k", b"after-%d" % i) for i in range(3)], partition=1)
        assert await _copied(syncer, topic, 1, 8, 10) < 3.0
        # a committed transaction and an aborted one to another (markers take offsets)
        await produce_transactions(
            east, topic, [(True, [(b"t", b"in")]), (False, [(b"t", b"out")])], partition=3
        )
        await _copied(syncer, topic, 3, 9, 10)
        # partition 1 turns quiet again and rejoins the session; more records still come
        assert await _in_session(fetcher, PARTITIONS) is session
        await produce(east, topic, [(b"k", b"later")], partition=1)
        assert await _copied(syncer, topic, 1, 9, 10) < 3.0
        syncer.request_stop()
        await asyncio.wait_for(running, 30)
    for p in range(PARTITIONS - 1):
        assert await read_partition(local, topic, p) == await read_partition(east, topic, p)
    here, there = await read_partition(local, topic, 3), await read_partition(east, topic, 3)
    assert here[:6] == there[:6]  # the records before, and the committed one at 5
    assert [r.offset for r in here] == list(range(9))
    fillers = [dict(r.headers).get("syncer.filler") for r in here[6:]]
    assert fillers == [b"marker", b"aborted", b"marker"]  # commit, aborted 'out', abort
