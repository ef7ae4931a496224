"""A remote that loses records syncer already copied (issue #19, item 4): an unclean leader
election on a 3-node remote. A topic of RF 2 on two of its nodes with
``unclean.leader.election.enable=true`` and ``min.insync.replicas=1``: N records are copied,
the follower is stopped, M more are written to the leader alone and copied, the leader is
killed and the stale follower, holding only the first N, is elected. The remote's log below
the copied end (N + M) is now shorter (partition 0) or, once a producer writes K > M new
records there, different (partition 1). syncer must halt both partitions naming the offsets
and write nothing on top of what it copied."""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from syncer.config import Config
from syncer.status import State
from syncer.syncer import Syncer
from syncer.testbed import Testbed
from syncer.testbed.bed import ClusterSpec, free_port
from syncer.testbed.errors import TestbedError
from syncer.testbed.probe import placements_async
from syncer.testbed.proxy import LinkProxy
from syncer.testbed.tools import elect_leaders
from tests.conftest import cluster_of
from tests.integration.test_multinode import wait_for
from tests.kafka_helpers import make_config, own_bed, read_partition

log = logging.getLogger(__name__)

N, M, K = 300, 200, 400  # copied from both replicas; from the leader alone; the new history
SHRUNK, REPLACED = 0, 1  # the partition left shorter; the one whose new history passes N + M


async def create_on_two_nodes(bootstrap: str, topic: str, leader: int, follower: int) -> None:
    """Two partitions, both led by ``leader`` with ``follower`` as their only other replica."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        placed = {p: [leader, follower] for p in (SHRUNK, REPLACED)}
        settings = {"unclean.leader.election.enable": "true", "min.insync.replicas": "1"}
        await admin.create_topics(
            [NewTopic(topic, -1, -1, replica_assignments=placed, topic_configs=settings)]
        )
    finally:
        await admin.close()


async def write(bootstrap: str, topic: str, partition: int, count: int, tag: bytes) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, tag + b"-%d" % i, key=b"k%d" % i, partition=partition)
            for i in range(count)
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def led_by(bootstrap: str, topic: str, node: int) -> bool:
    try:
        placed = await placements_async(bootstrap, topic)
    except Exception:  # the cluster is between leaders
        return False
    return all(p.leader == node for p in placed)


def kcat_offsets(bootstrap: str, topic: str, partition: int) -> list[int]:
    """The offsets of a partition as kcat reads them (an independent reader)."""
    cmd = ["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", str(partition)]
    out = subprocess.run(
        [*cmd, "-o", "beginning", "-e", "-q", "-f", "%o\\n"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return [int(line) for line in out.stdout.split()]


@pytest.mark.long_multinode
async def test_an_unclean_election_on_the_remote_halts_the_partitions_it_shortened_or_replaced(
    remote3: Testbed, local: str, topic: str
) -> None:
    remote = cluster_of(remote3)
    name, bootstrap = remote.name, remote.bootstrap
    leader, follower = (m.node_id for m in remote.members[1:])
    await create_on_two_nodes(bootstrap, topic, leader, follower)
    await wait_for_async("the topic led by its first replica", led_by, bootstrap, topic, leader)
    for p in (SHRUNK, REPLACED):
        await write(bootstrap, topic, p, N, b"both")
    syncer = Syncer(make_config(local, {"remote3": bootstrap}, [topic]))
    async with syncer:
        running = asyncio.create_task(syncer.run())
        try:
            statuses = await copied_to(syncer, N)
            await asyncio.to_thread(remote3.stop_node, name, follower)
            for p in (SHRUNK, REPLACED):
                await write(bootstrap, topic, p, M, b"leader-only")
            originals = [await read_partition(bootstrap, topic, p) for p in (SHRUNK, REPLACED)]
            await copied_to(syncer, N + M)
            await asyncio.to_thread(remote3.kill_node, name, leader)
            lost = time.monotonic()
            await asyncio.to_thread(remote3.start_node, name, follower)
            await elect_stale_follower(remote3, topic, follower)
            elected = time.monotonic()
            log.warning(
                "stale follower %d leads %.1f s after the kill", follower, time.monotonic() - lost
            )
            await write(bootstrap, topic, REPLACED, K, b"new-history")
            await wait_for(
                "both partitions halted",
                lambda: all(s.state is State.HALTED for s in statuses.values()),
                60,
            )
            log.warning(
                "both halted %.1f s after the kill, %.1f s after the election",
                time.monotonic() - lost,
                time.monotonic() - elected,
            )
        finally:
            syncer.request_stop()
            await asyncio.wait_for(running, 60)
            await asyncio.to_thread(remote3.start_node, name, leader)
    shrunk, replaced = statuses[SHRUNK].error or "", statuses[REPLACED].error or ""
    log.warning("halted: %s | %s", shrunk, replaced)
    assert f"ends at {N}" in shrunk and f"{N + M} copied" in shrunk, shrunk
    assert (
        re.search(rf"offset {N}\b", replaced) and "no longer matches what was copied" in replaced
    ), replaced
    for p, before in zip((SHRUNK, REPLACED), originals, strict=True):
        assert len(before) == N + M
        assert await read_partition(local, topic, p) == before, f"partition {p} changed"
        if shutil.which("kcat"):
            assert kcat_offsets(local, topic, p) == list(range(N + M))


async def copied_to(syncer: Syncer, end: int) -> dict[int, object]:
    """Wait until both partitions' local ends reach ``end``; their statuses by partition."""
    await wait_for(
        f"both partitions copied to {end}",
        lambda: sorted(s.local_end for s in syncer.statuses()) == [end, end],
        90,
    )
    return {s.tp.partition: s for s in syncer.statuses()}


async def elect_stale_follower(bed: Testbed, topic: str, follower: int) -> None:
    """The controller elects the stale follower itself (the topic allows unclean elections)
    or the election tool asks it to."""
    bootstrap = cluster_of(bed).bootstrap
    deadline = time.monotonic() + 60
    while not await led_by(bootstrap, topic, follower):
        assert time.monotonic() < deadline, "the stale follower was not elected"
        try:
            direct = bed.clusters[cluster_of(bed).name].direct
            partitions = [(topic, p) for p in (SHRUNK, REPLACED)]
            await asyncio.to_thread(elect_leaders, direct, partitions, "UNCLEAN", jars=bed.jars)
        except TestbedError as exc:
            log.info("unclean election: %s", exc)
        await asyncio.sleep(1)


async def wait_for_async(what: str, check: object, *args: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not await check(*args):  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


@pytest.fixture(scope="module")
def held_local(tmp_path_factory: pytest.TempPathFactory, testbed: Testbed) -> Iterator[Testbed]:
    """A local cluster of one node that advertises a proxy's address (``LinkProxy.
    in_front_of``): the test can hold what syncer writes to it."""
    spec = ClusterSpec("held_local", advertised=f"127.0.0.1:{free_port()}")
    with own_bed(Path(tmp_path_factory.mktemp("held_local")), testbed.jars, [spec]) as bed:
        yield bed


async def write_one_by_one(bootstrap: str, topic: str, count: int, tag: bytes) -> None:
    """``count`` records to partition 0, each a batch of its own (small writes to hold)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    await producer.start()
    try:
        for i in range(count):
            await producer.send_and_wait(topic, tag + b"-%d" % i, key=b"k", partition=SHRUNK)
    finally:
        await producer.stop()


async def values_of(bootstrap: str, topic: str) -> list[bytes]:
    return [r.value or b"" for r in await read_partition(bootstrap, topic, 0)]


@pytest.mark.long_multinode
async def test_chunks_of_a_leader_lost_in_an_unclean_election_are_not_continued_by_the_next(
    remote3: Testbed, held_local: Testbed, topic: str
) -> None:
    """Chunks fetched from the remote's leader wait behind local writes (held); with no
    fetch out, the leader is lost and a stale follower elected uncleanly, whose log ends
    below those chunks and goes on with other records. Nothing failed, so the held chunks
    and then the new leader's records each passed as continuing the log: the local log
    would hold the lost leader's records and then the new leader's, spliced (a review of
    the agreement, 2026-12-07). The new leader's batches carry a new leader epoch: where
    the epoch of the records written ends in its log is asked, and it ends below them; the
    partition halts, nothing of the new history written."""
    remote = cluster_of(remote3)
    name, bootstrap = remote.name, remote.bootstrap
    leader, follower = (m.node_id for m in remote.members[1:])
    await create_on_two_nodes(bootstrap, topic, leader, follower)
    await wait_for_async("the topic led by its first replica", led_by, bootstrap, topic, leader)
    await write_one_by_one(bootstrap, topic, 30, b"both")
    await asyncio.to_thread(remote3.stop_node, name, follower)
    await write_one_by_one(bootstrap, topic, 200, b"leader-only")
    lost = await values_of(bootstrap, topic)
    local = held_local.clusters["held_local"]
    config = Config.from_dict(
        {
            "local": {"bootstrap_servers": local.advertised, "request_timeout_ms": 120_000},
            "remotes": [
                {"name": "remote3", "bootstrap_servers": bootstrap, "metadata_max_age_ms": 500}
            ],
            "topics": {"include": [topic]},
            # small chunks, six at most: the ones waiting behind the held writes, no more
            "copier": {"partition_fetch_max_bytes": 2048, "max_chunks": 6, "coalesce_bytes": 0},
            "http": {"listen": ""},
        }
    )
    async with LinkProxy.in_front_of(local, rate=1000) as proxy:  # ~15 records a second
        syncer = Syncer(config)
        async with syncer:
            running = asyncio.create_task(syncer.run())
            try:
                await wait_for("two partitions", lambda: len(syncer.statuses()) == 2, 60)
                (status,) = [s for s in syncer.statuses() if s.tp.partition == SHRUNK]
                await wait_for("copying", lambda: status.local_end >= 10, 60)
                proxy.hold()
                await asyncio.sleep(2)  # the chunks behind the held writes fetched
                at_hold = status.local_end
                # below where the new leader's log ends (30): a chunk checked against the
                # local log after the loss compares records both leaders hold
                assert at_hold < 25, "nothing waits behind the held writes"
                await asyncio.to_thread(remote3.kill_node, name, leader)
                await asyncio.to_thread(remote3.start_node, name, follower)
                await elect_stale_follower(remote3, topic, follower)
                await write(bootstrap, topic, SHRUNK, 600, b"new-history")
                await asyncio.sleep(2)  # syncer's metadata names the new leader
                proxy.release()
                await wait_for(
                    "the partition halted, or copied past the lost leader's end",
                    lambda: status.state is State.HALTED or status.local_end > len(lost),
                    90,
                )
            finally:
                syncer.request_stop()
                await asyncio.wait_for(running, 60)
                await asyncio.to_thread(remote3.start_node, name, leader)
        copied = await values_of(local.advertised, topic)
        # through the proxy, which runs in this loop: kcat from a thread
        read_by_kcat = await asyncio.to_thread(kcat_offsets, local.advertised, topic, SHRUNK)
    log.warning("held at local end %d; halted: %s", at_hold, status.error)
    spliced = [(o, v) for o, v in enumerate(copied) if o >= len(lost) or v != lost[o]]
    assert not spliced, f"the new history written on top of the lost one: {spliced[:3]}"
    assert status.error is not None and "truncated or replaced at offset 30:" in status.error
    assert "its leader epoch" in status.dropped["remote3"], status.dropped
    assert read_by_kcat == list(range(len(copied)))
