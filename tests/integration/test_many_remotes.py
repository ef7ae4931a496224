"""Many remotes, BitTorrent-style: the gap comes from any remote ahead of local, several at
once; a remote that dies loses its chunks to the others; a remote that disagrees is dropped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from syncer.copier import State
from syncer.syncer import Syncer
from syncer.testbed import ClusterSpec, Testbed
from tests.kafka_helpers import batch_digests, create_topic, make_config, produce, read_partition

SMALL_CHUNKS = {"partition_fetch_max_bytes": 8192, "fetch_max_bytes": 65536, "max_chunks": 6}


async def fill(bootstrap: str, topic: str, count: int, tag: bytes = b"v", start: int = 0) -> None:
    for first in range(start, start + count, 50):  # batches of 50 records of ~300 bytes
        await produce(
            bootstrap,
            topic,
            [(b"k%d" % i, tag * 300) for i in range(first, min(first + 50, start + count))],
            linger_ms=50,
        )


async def mirror(source: str, target: str, topic: str) -> None:
    """Make ``target`` an offset-aligned copy of ``source`` (with syncer itself)."""
    async with Syncer(make_config(target, {"src": source}, [topic])) as syncer:
        await syncer.catch_up()


def syncer_for(local: str, remotes: dict[str, str], topic: str) -> Syncer:
    return Syncer(make_config(local, remotes, [topic], copier=SMALL_CHUNKS))


async def test_the_gap_comes_from_every_remote_that_is_ahead(
    local: str, east: str, west: str, topic: str
) -> None:
    await create_topic(east, topic)
    await fill(east, topic, 1000)
    await mirror(east, west, topic)
    await fill(west, topic, 1000, start=1000)  # west is 1000 records further ahead
    syncer = syncer_for(local, {"east": east, "west": west}, topic)
    async with syncer:
        await syncer.catch_up()
    (status,) = syncer.statuses()
    assert status.state is State.CAUGHT_UP and status.local_end == 2000
    assert status.served.get("east", 0) > 0 and status.served.get("west", 0) > 0
    assert syncer.memory.used == 0 and syncer.memory.peak > 0  # every fetched byte released
    assert await batch_digests(local, topic) == await batch_digests(west, topic)


async def test_a_remote_that_disagrees_is_dropped_and_reported(
    local: str, east: str, west: str, topic: str
) -> None:
    await create_topic(east, topic)
    await create_topic(west, topic)
    await fill(east, topic, 600, tag=b"a")
    await fill(west, topic, 600, tag=b"b")  # same offsets, other records
    syncer = syncer_for(local, {"east": east, "west": west}, topic)
    async with syncer:
        await syncer.catch_up()
    (status,) = syncer.statuses()
    assert status.state is State.CAUGHT_UP and status.local_end == 600
    assert list(status.dropped) == ["west"]
    assert status.dropped["west"].startswith("records differ from remote east's at offset")
    assert await read_partition(local, topic) == await read_partition(east, topic)


@pytest.fixture
async def doomed(tmp_path: Path, testbed: Testbed) -> AsyncIterator[Testbed]:
    """A cluster of its own, to be killed."""
    bed = Testbed(tmp_path / "doomed", testbed.jars)
    await asyncio.to_thread(bed.up, [ClusterSpec("doomed")])
    try:
        yield bed
    finally:
        await asyncio.to_thread(bed.down)


async def test_a_remote_killed_mid_copy_loses_its_chunks_to_the_other(
    local: str, west: str, topic: str, doomed: Testbed
) -> None:
    victim = doomed.clusters["doomed"].bootstrap
    await create_topic(victim, topic, 2)
    for partition in (0, 1):
        await produce(
            victim,
            topic,
            [(b"k%d" % i, b"x" * 2000) for i in range(4000)],
            partition=partition,
            linger_ms=20,
        )
    await mirror(victim, west, topic)
    config = make_config(
        local,
        {"doomed": victim, "west": west},
        [topic],
        copier={**SMALL_CHUNKS, "chunk_timeout_ms": 3000, "max_in_flight": 1},
    )
    syncer = Syncer(config)
    async with syncer:
        copying = asyncio.create_task(syncer.catch_up())
        while sum(s.served.get("doomed", 0) for s in syncer.statuses()) < 200_000:
            assert not copying.done(), "the copy ended before the remote could be killed"
            await asyncio.sleep(0.05)
        await asyncio.to_thread(doomed.clusters["doomed"].kill)
        await asyncio.wait_for(copying, 180)
    statuses = syncer.statuses()
    assert all(s.state is State.CAUGHT_UP and s.local_end == 4000 for s in statuses)
    assert sum(s.served.get("doomed", 0) for s in statuses) >= 200_000
    assert sum(s.served.get("west", 0) for s in statuses) > 0
    for partition in (0, 1):
        assert await batch_digests(local, topic, partition) == await batch_digests(
            west, topic, partition
        )
