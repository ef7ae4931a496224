"""Writes without the broker's fence: a partition syncer never wrote, and one whose producer
state the broker dropped (``producer.id.expiration.ms``, driven by the copied records' own
timestamps). Then the broker accepts our batches at any sequence, so a refused or lost write
must never let the next one land at its offsets. The local broker here keeps producer state
for 5 s (checked every second); the records copied are mostly days old, as in any
migration.

What the local log holds is read back with kcat (an independent reader) and with aiokafka, and
compared offset by offset with the remote."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TypeVar

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import RequestTimedOutError
from aiokafka.protocol.admin import AlterPartitionReassignmentsRequest
from aiokafka.structs import TopicPartition

from syncer import Syncer
from syncer.clusters import Cluster
from syncer.config import ClusterConfig, Config
from syncer.errors import TransientClusterError
from syncer.status import PartitionStatus, State
from syncer.testbed import ClusterSpec, Testbed
from syncer.testbed.bed import free_port
from syncer.testbed.proxy import LinkProxy
from syncer.testbed.tools import quorum_leader
from tests.conftest import cluster_of, three_nodes
from tests.integration.test_multinode import wait_placed
from tests.kafka_helpers import (
    Daemon,
    Rec,
    alter_topic,
    batch_layout,
    catch_up,
    create_topic,
    first_status,
    make_config,
    own_bed,
    poll_until,
    produce,
    read_partition,
    until,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

DAY_MS = 86_400_000
EXPIRY_MS = 5000
SHORT_MEMORY = {
    "producer.id.expiration.ms": str(EXPIRY_MS),
    "producer.id.expiration.check.interval.ms": "1000",
}
# a local topic that refuses records older than two and a half days: the first batch below
# (three days old) is refused, the ones after it (two days old) would be accepted
REFUSES_OLDEST = {"message.timestamp.before.max.ms": str(int(2.5 * DAY_MS))}


@pytest.fixture(scope="module")
def forgetful(tmp_path_factory: pytest.TempPathFactory, testbed: Testbed) -> Iterator[Testbed]:
    specs = [
        ClusterSpec(
            "forgetful_local", advertised=f"127.0.0.1:{free_port()}", properties=SHORT_MEMORY
        ),
        ClusterSpec("forgetful_remote"),
    ]
    with own_bed(tmp_path_factory.mktemp("forgetful"), testbed.jars, specs) as bed:
        yield bed


@pytest.fixture
async def link(forgetful: Testbed) -> AsyncIterator[LinkProxy]:
    """The proxy the local cluster advertises: syncer's only way to it, 40 ms away (so that
    a copy written one batch at a time lasts long enough to be cut in the middle)."""
    local = forgetful.clusters["forgetful_local"]
    async with LinkProxy.in_front_of(local, latency_ms=40) as proxy:
        yield proxy


def days_ago(days: float) -> int:
    return int(time.time() * 1000 - days * DAY_MS)


async def old_batches(bootstrap: str, topic: str, start: int, count: int, size: int = 1) -> None:
    """``count`` batches of ``size`` records, two days old, values numbered from ``start``."""
    for b in range(count):
        first = start + b * size
        records = [(b"k", b"v%d" % (first + i)) for i in range(size)]
        await produce(bootstrap, topic, records, timestamp_ms=days_ago(2))


def kcat_offsets(bootstrap: str, topic: str) -> list[tuple[int, str]]:
    """(offset, value) of every record of partition 0 as kcat reads it."""
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat, "kcat is not installed (apt-get install kcat; .ci/run installs it)"
    fmt = r"%o %s\n"  # kcat reads the backslash escape itself
    out = subprocess.run(
        [
            kcat,
            "-C",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            fmt,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [(int(o), v) for o, _, v in (line.partition(" ") for line in out.splitlines())]


async def assert_prefix_of_remote(local: str, remote: str, topic: str) -> list[Rec]:
    """Every local record equals the remote's at the same offset (nothing misplaced)."""
    copied = await read_partition(local, topic)
    source = await read_partition(remote, topic)
    assert copied == source[: len(copied)]
    by_kcat = await asyncio.to_thread(kcat_offsets, local, topic)
    assert by_kcat == [(r.offset, (r.value or b"").decode()) for r in copied]
    return copied


# coalesce_bytes 0: each source batch a write of its own, so the ones behind a refused write
# are writes the one-at-a-time rule must hold back (coalesced, they would share its fate)
COALESCING = pytest.mark.parametrize("coalesce_bytes", [0, 65536], ids=["alone", "coalesced"])


def config_of(local: str, remote: str, topic: str, coalesce_bytes: int) -> Config:
    copier = {"shutdown_timeout_s": 10, "coalesce_bytes": coalesce_bytes}
    return make_config(local, {"east": remote}, [topic], copier=copier)


@COALESCING
async def test_a_refused_first_write_to_an_empty_partition_misplaces_nothing(
    forgetful: Testbed, link: LinkProxy, topic: str, coalesce_bytes: int
) -> None:
    local, remote = forgetful.clusters["forgetful_local"], forgetful.clusters["forgetful_remote"]
    await create_topic(remote.direct, topic)
    await create_topic(local.direct, topic, **REFUSES_OLDEST)
    await produce(remote.direct, topic, [(b"k", b"oldest")], timestamp_ms=days_ago(3))
    await old_batches(remote.direct, topic, 1, 20)
    syncer = await catch_up(config_of(local.bootstrap, remote.direct, topic, coalesce_bytes))
    (status,) = syncer.statuses()
    assert status.state is State.HALTED
    assert status.error is not None and "write at offset 0" in status.error
    assert "InvalidTimestamp" in status.error
    assert "message.timestamp.before.max.ms" in status.error  # what the operator widens
    # the partition had no producer state: without one write at a time, the 20 batches
    # behind the refused one landed at offsets 0..19, each one offset early
    assert await assert_prefix_of_remote(local.direct, remote.direct, topic) == []


async def test_a_first_batch_too_large_for_an_empty_partition_misplaces_nothing(
    forgetful: Testbed, link: LinkProxy, topic: str
) -> None:
    """The issue's own shape: a 300 kB first record, small batches behind it, a local topic
    that allows 100 kB. (A local limit below the remote's is refused up front, so the
    remote's limit is lowered to the local one after the large record was written.)"""
    local, remote = forgetful.clusters["forgetful_local"], forgetful.clusters["forgetful_remote"]
    limit = {"max.message.bytes": "100000"}
    await create_topic(remote.direct, topic)
    await create_topic(local.direct, topic, **limit)
    big = [(b"k", b"x" * 300_000)]
    await produce(remote.direct, topic, big, timestamp_ms=days_ago(2), max_request_size=400_000)
    await old_batches(remote.direct, topic, 1, 20)
    await alter_topic(remote.direct, topic, limit)
    syncer = await catch_up(make_config(local.bootstrap, {"east": remote.direct}, [topic]))
    (status,) = syncer.statuses()
    assert status.state is State.HALTED
    assert status.error is not None and "batch at offset 0" in status.error
    assert "larger than the local topic's max.message.bytes allows" in status.error
    # before one write at a time: 20 records at offsets 0..19, each one early
    assert await assert_prefix_of_remote(local.direct, remote.direct, topic) == []


@COALESCING
async def test_after_the_state_expired_a_refused_write_misplaces_nothing(
    forgetful: Testbed, link: LinkProxy, topic: str, coalesce_bytes: int
) -> None:
    local, remote = forgetful.clusters["forgetful_local"], forgetful.clusters["forgetful_remote"]
    await create_topic(remote.direct, topic)
    await create_topic(local.direct, topic, **REFUSES_OLDEST)
    await old_batches(remote.direct, topic, 0, 20, size=100)
    config = config_of(local.bootstrap, remote.direct, topic, coalesce_bytes)
    (status,) = (await catch_up(config)).statuses()
    assert status.state is State.CAUGHT_UP and status.local_end == 2000
    assert status.one_at_a_time and status.older_than_producer_expiry  # as /status shows
    await asyncio.sleep(EXPIRY_MS / 1000 + 3)  # the broker forgets our producer (2 days old)
    await produce(remote.direct, topic, [(b"k", b"oldest")], timestamp_ms=days_ago(3))
    await old_batches(remote.direct, topic, 2001, 4, size=10)
    (status,) = (await catch_up(config)).statuses()
    assert status.state is State.HALTED
    assert status.error is not None and "write at offset 2000" in status.error
    copied = await assert_prefix_of_remote(local.direct, remote.direct, topic)
    assert len(copied) == 2000  # seen before: 40 records at 2000..2039, each one early


async def test_old_records_through_cut_links_and_kill_9_end_identical(
    forgetful: Testbed, link: LinkProxy, topic: str, tmp_path: Path, daemons: list[Daemon]
) -> None:
    """Produce answers lost in cut connections and a daemon killed mid-write, while the
    broker forgets our producer every few seconds: the copy still ends identical."""
    local, remote = forgetful.clusters["forgetful_local"], forgetful.clusters["forgetful_remote"]
    partitions = 3
    await create_topic(remote.direct, topic, partitions)
    for p in range(partitions):
        for b in range(30):
            records = [(b"k%d" % i, b"p%d-%d-%d" % (p, b, i) * 40) for i in range(50)]
            await produce(remote.direct, topic, records, partition=p, timestamp_ms=days_ago(2))
    raw: dict[str, object] = {
        "name": f"forgetful-{topic}",
        "local": {"bootstrap_servers": local.bootstrap, "request_timeout_ms": 3000},
        "remotes": [{"name": "east", "bootstrap_servers": remote.direct}],
        "topics": {"include": [topic], "refresh_interval_s": 1},
        # small fetches: the copy lasts long enough to cut it many times
        "copier": {"partition_fetch_max_bytes": 8192, "fetch_max_bytes": 32768},
    }

    def copied(doc: dict[str, object]) -> int:
        return sum(int(p["records_copied"]) for p in doc["partitions"])  # type: ignore[index, attr-defined]

    (tmp_path / "first").mkdir()
    daemon = Daemon(tmp_path / "first", raw)
    daemons.append(daemon)
    await daemon.wait_for("some records copied", lambda doc: copied(doc) > 0)
    for _ in range(6):
        await link.cut()  # answers in flight are lost: outcome unknown
        await asyncio.sleep(0.3)
    daemon.proc.send_signal(signal.SIGKILL)  # mid-write
    await asyncio.to_thread(daemon.proc.wait, 10)
    await asyncio.sleep(EXPIRY_MS / 1000 + 2)  # the broker forgets us meanwhile
    (tmp_path / "second").mkdir()
    second = Daemon(tmp_path / "second", raw)
    daemons.append(second)
    await second.wait_for("copying again", lambda doc: copied(doc) > 0)
    for _ in range(4):
        await asyncio.sleep(0.5)
        await link.cut()

    def caught_up(doc: dict[str, object]) -> bool:
        parts = doc["partitions"]
        return all(p["local_end"] == 1500 for p in parts) and len(parts) == partitions  # type: ignore[index, union-attr, arg-type, attr-defined]

    await second.wait_for("every partition copied", caught_up)
    await asyncio.to_thread(second.stop)  # the proxy runs in this loop: never block it
    # the cuts did hit writes in flight (else this test would prove nothing)
    assert "resuming from the local end" in daemon.log.read_text() + second.log.read_text()
    for p in range(partitions):
        assert await read_partition(local.direct, topic, p) == await read_partition(
            remote.direct, topic, p
        ), f"partition {p}"


async def one_batch(bootstrap: str, topic: str, records: list[tuple[bytes, int]]) -> None:
    """``records`` (value, timestamp) in one batch of partition 0."""
    values, stamps = [(b"k", v) for v, _t in records], [t for _v, t in records]
    await produce(bootstrap, topic, values, timestamps=stamps, linger_ms=1000)


async def batch_by_batch(bootstrap: str, topic: str, records: list[tuple[bytes, int]]) -> None:
    """``records`` (value, timestamp), each a batch of its own in partition 0, one right
    after the other (the next sent as the one before is acknowledged: a few milliseconds,
    far less than a write's round trip to the local cluster here)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks="all")
    await producer.start()
    try:
        for value, stamp in records:
            await (
                await producer.send(topic, key=b"k", value=value, partition=0, timestamp_ms=stamp)
            )
    finally:
        await producer.stop()


HOUR_MS = 3_600_000
# the local topic refuses records more than an hour ahead of its clock; the remote's takes
# them up to a day ahead
REFUSES_FUTURE = {"message.timestamp.after.max.ms": str(HOUR_MS)}
TAKES_FUTURE = {"message.timestamp.after.max.ms": str(24 * HOUR_MS)}


async def test_a_trimmed_write_is_timed_by_what_it_holds_not_by_its_source_batch(
    forgetful: Testbed, link: LinkProxy, topic: str
) -> None:
    """The broker keeps our producer state by the max timestamp of the batch it appended.
    A batch trimmed at the local end holds less than its source batch, whose max may lie in
    what was cut off: counted by the source's max, a trimmed batch of two-day-old records
    passed for fresh, the next writes were sent behind unanswered ones though the broker
    had forgotten us, and when the first of them was refused, the ones behind it landed
    one offset early (seen with this test on the source's max: local offset 10 held the
    remote's record 11). Here the local end (4) lies inside the remote's one batch of 10:
    its first 4 records (the local already holds them) half an hour ahead, the rest two
    days old; then, while syncer runs, one record two hours ahead (the local topic refuses
    it) and right behind it twenty one-record batches half an hour ahead, fresh like the
    first four."""
    local, remote = forgetful.clusters["forgetful_local"], forgetful.clusters["forgetful_remote"]
    await create_topic(remote.direct, topic, **TAKES_FUTURE)
    await create_topic(local.direct, topic, **REFUSES_FUTURE)
    ahead = int(time.time() * 1000) + HOUR_MS // 2
    stamps = [ahead] * 4 + [days_ago(2)] * 6
    records = [(b"v%d" % i, stamp) for i, stamp in enumerate(stamps)]
    await one_batch(remote.direct, topic, records)
    assert [(base, count) for base, count, _codec in await batch_layout(remote.direct, topic)] == [
        (0, 10)
    ]
    await one_batch(local.direct, topic, records[:4])  # the same records, the same stamps
    syncer = Syncer(config_of(local.bootstrap, remote.direct, topic, coalesce_bytes=0))
    status = partial(first_status, syncer)
    async with syncer:
        run = asyncio.create_task(syncer.run())
        try:
            await until(lambda: status("local_end") == 10, "trimmed batch copied", 60)
            await asyncio.sleep(EXPIRY_MS / 1000 + 3)  # the broker forgets our producer
            later = int(time.time() * 1000) + 2 * HOUR_MS
            batches = [(b"too far ahead", later)] + [(b"v%d" % n, ahead) for n in range(11, 31)]
            await batch_by_batch(remote.direct, topic, batches)
            await until(lambda: status("state") is State.HALTED, "halt", 60)
        finally:
            syncer.request_stop()
            await run
    error = status("error")
    assert isinstance(error, str) and "write at offset 10" in error, error
    assert "message.timestamp.after.max.ms" in error, error  # what the operator widens
    copied = await assert_prefix_of_remote(local.direct, remote.direct, topic)
    assert len(copied) == 10


@pytest.fixture(scope="module")
def forgetful3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """A 3-node local cluster (RF 3, min ISR 2) that forgets producers after 5 s, and drops
    a follower from the ISR (or fences its broker) only after 120 s silent: a paused
    follower holds the high watermark until the test resumes it."""
    root = tmp_path_factory.mktemp("forgetful3")
    silent = {"broker.session.timeout.ms": "120000", "replica.lag.time.max.ms": "120000"}
    properties = {**SHORT_MEMORY, **silent}
    yield from three_nodes(root, "forgetful3", properties=properties)


PAUSED = 3  # follows the partition, leads nothing of it
WAITING = "not yet taken by every in-sync replica"


async def led_off_the_paused(
    local: str, *topics: str, placed: tuple[int, int, int] = (1, 2, PAUSED)
) -> None:
    """``topics``, one partition each, on the local cluster: node ``placed[0]`` (1) leads,
    the others (2 and ``PAUSED``) follow, all three in sync."""
    replicas = {0: list(placed)}
    admin = AIOKafkaAdminClient(bootstrap_servers=local)
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(t, num_partitions=-1, replication_factor=-1, replica_assignments=replicas)
                for t in topics
            ]
        )
    finally:
        await admin.close()
    for t in topics:
        await wait_placed(local, t, lambda ps: all(len(p.isr) == 3 for p in ps))


def paused_proof_reader(local: str) -> Cluster:
    """A reader of the local cluster that gives up on the paused node after 3 s (a request
    routed to it, a metadata refresh, would hold the test for the default 30 s)."""
    return Cluster(ClusterConfig(local, name="reader", request_timeout_ms=3000), role="test")


async def through_moves(tp: TopicPartition, ask: Callable[[], Awaitable[T]]) -> T:
    """``ask()``'s answer, asked again (the leaders refreshed) while the answer is that
    ``tp``'s leader moved or is not there yet (LeaderMoved, LEADER_NOT_AVAILABLE)."""
    for _ in range(20):
        try:
            return await ask()
        except TransientClusterError:
            await asyncio.sleep(0.5)
    raise AssertionError(f"{tp}: the leader never settled")


async def ends_of(reader: Cluster, tp: TopicPartition) -> tuple[int, int]:
    """The high watermark of ``tp`` and its leader's log end."""

    async def ask() -> tuple[int, int]:
        return (await reader.latest([tp]))[tp], await reader.log_end(tp)

    return await through_moves(tp, ask)


def ends_at(
    reader: Cluster, tp: TopicPartition, wanted: tuple[int, int]
) -> Callable[[], Awaitable[bool]]:
    """A check for ``poll_until``: are ``tp``'s high watermark and log end ``wanted``?"""

    async def check() -> bool:
        return await ends_of(reader, tp) == wanted

    return check


async def within(condition: Callable[[], bool], timeout_s: float) -> bool:
    """Does ``condition()`` hold within ``timeout_s``? (Looked at every 50 ms.)"""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def ten_once_having_waited(status: PartitionStatus, waited: bool, reason: str | None) -> None:
    """Once the paused follower is resumed: the local end reaches 10 with 5..9 found to be
    the remote's (not written again: a second copy would have halted the partition), and
    the wait before was shown, naming those offsets."""
    await until(lambda: status.local_end >= 10 or status.state is State.HALTED, "5..9 copied", 60)
    await asyncio.sleep(2)  # a second copy would follow its first by now
    assert status.state is not State.HALTED, status.error
    assert status.local_end == 10
    assert waited, "no wait for the in-sync replicas was shown"
    assert reason is not None and reason.startswith("local offsets 5..9 appended"), reason


async def test_a_write_left_above_the_high_watermark_is_not_written_again_behind_itself(
    forgetful3: Testbed, east: str, topic: str
) -> None:
    """A write the leader appended but its in-sync replicas have not taken yet sits above
    the high watermark, which is all a reader (and ListOffsets) sees: its answer lost (a
    timeout), the local end reads as if it never landed. Sent again while the broker still
    holds our producer state, it is answered as a duplicate; but records older than the
    broker keeps that state for (``producer.id.expiration.ms``, 5 s here, checked each
    second) leave the broker holding none, and it takes the write again at its log end,
    behind its own first copy. Here a follower is paused (SIGSTOP): the write of offsets
    5..9 (two days old) is appended by the leader and held above the high watermark; its
    answer is lost after syncer's 3 s request timeout. syncer must wait, saying why, until
    the high watermark covers the leader's log end (the follower resumed here), and find
    5..9 are the remote's. Without that wait it wrote the batch a second time at local
    offset 10 (and a third at 15)."""
    cluster = cluster_of(forgetful3)
    local = cluster.bootstrap
    await create_topic(east, topic, 1)
    await led_off_the_paused(local, topic)
    await one_batch(east, topic, [(b"v%d" % i, days_ago(2)) for i in range(5)])
    # a write unanswered for 3 s is given up (its answer lost)
    config = make_config(local, {"east": east}, [topic])
    syncer = Syncer(replace(config, local=replace(config.local, request_timeout_ms=3000)))
    async with syncer:
        running = asyncio.create_task(syncer.run())
        try:
            await until(lambda: first_status(syncer, "local_end") == 5, "the first five", 60)
            (status,) = syncer.statuses()
            pid = cluster.node(PAUSED).pid
            assert pid is not None
            os.kill(pid, signal.SIGSTOP)
            try:
                await one_batch(east, topic, [(b"v%d" % i, days_ago(2)) for i in range(5, 10)])
                waited = await within(lambda: WAITING in (status.waiting or ""), 20)
                reason = status.waiting
            finally:
                os.kill(pid, signal.SIGCONT)
            await ten_once_having_waited(status, waited, reason)
        finally:
            syncer.request_stop()
            await asyncio.wait_for(running, 60)
    await wait_placed(local, topic, lambda ps: all(len(p.isr) == 3 for p in ps))
    copied = await assert_prefix_of_remote(local, east, topic)
    assert [r.offset for r in copied] == list(range(10))


async def test_a_write_a_killed_process_left_above_the_high_watermark_is_not_written_again(
    forgetful3: Testbed, east: str, topic: str, tmp_path: Path
) -> None:
    """The same write above the high watermark, left by a process killed (kill -9) while
    its answer was pending: the next process knows nothing of it. It writes as the same
    producer, but the broker has forgotten that producer (the records are two days old),
    so nothing fences a repeat. It must wait at start until the high watermark covers the
    leader's log end (the follower resumed here), then find offsets 5..9 are the remote's.
    Without that wait it wrote 5..9 again at local offset 10."""
    cluster = cluster_of(forgetful3)
    local = cluster.bootstrap
    tp = TopicPartition(topic, 0)
    # the deployment's identity is kept off the paused node too: each start reads it
    state_topic = f"_syncer_state.{topic}"
    await create_topic(east, topic, 1)
    await led_off_the_paused(local, topic, state_topic)
    await one_batch(east, topic, [(b"v%d" % i, days_ago(2)) for i in range(5)])
    raw: dict[str, object] = {
        "local": {"bootstrap_servers": local},
        "remotes": [{"name": "east", "bootstrap_servers": east}],
        "topics": {"include": [topic]},
        "state_topic": state_topic,
    }
    async with paused_proof_reader(local) as reader:
        ends, at = partial(ends_of, reader, tp), partial(ends_at, reader, tp)
        first = Daemon(tmp_path, raw)
        try:
            await poll_until("the first five", at((5, 5)), 60)
            pid = cluster.node(PAUSED).pid
            assert pid is not None
            os.kill(pid, signal.SIGSTOP)
            try:
                await one_batch(east, topic, [(b"v%d" % i, days_ago(2)) for i in range(5, 10)])
                # appended by the leader, held above the high watermark by the paused follower
                await poll_until("5..9 appended", at((5, 10)), 30)
                first.proc.kill()
                first.proc.wait(10)
                # the paused node is asked at start (the brokers' settings, a bootstrap):
                # given up on after 3 s each time
                config = make_config(local, {"east": east}, [topic], state_topic=state_topic)
                local_config = replace(config.local, request_timeout_ms=3000)
                syncer = Syncer(replace(config, local=local_config))
                async with syncer:
                    running = asyncio.create_task(syncer.run())
                    try:
                        await until(lambda: bool(syncer.statuses()), "the next process", 60)
                        (status,) = syncer.statuses()
                        waited = await within(lambda: WAITING in (status.waiting or ""), 20)
                        reason = status.waiting
                        high, log_end = await ends()
                        assert high == 5, "the high watermark moved before the follower resumed"
                        assert log_end == 10, f"5..9 written again: the log ends at {log_end}"
                        os.kill(pid, signal.SIGCONT)
                        await ten_once_having_waited(status, waited, reason)
                    finally:
                        os.kill(pid, signal.SIGCONT)  # before the stop, which may wait
                        syncer.request_stop()
                        await asyncio.wait_for(running, 60)
            finally:
                os.kill(pid, signal.SIGCONT)
        finally:
            first.stop()
        assert await ends() == (10, 10)
    await wait_placed(local, topic, lambda ps: all(len(p.isr) == 3 for p in ps))
    copied = await assert_prefix_of_remote(local, east, topic)
    assert [r.offset for r in copied] == list(range(10))


async def leader_removed(
    bootstrap: str, nodes: tuple[int, int], tp: TopicPartition, replicas: list[int]
) -> None:
    """``tp`` reassigned to ``replicas`` (without its leader: the controller elects one of
    them at once), asked of ``nodes`` in turn, never the paused one (aiokafka's own request;
    Kafka's tools would route it to any node). A node has been seen to hold it unanswered
    for 20 s while a follower was paused (its metadata unanswered too): each is given 5 s,
    and asked again (the same target: a repeat changes nothing)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    partitions: list[tuple[int, list[int], dict[str, object]]] = [(tp.partition, replicas, {})]
    request = AlterPartitionReassignmentsRequest(30_000, [(tp.topic, partitions, {})], {})
    try:
        for node in (*nodes, *nodes):
            try:
                response = await admin._send_request_to_node(node, request)
                break
            except RequestTimedOutError:
                log.warning("reassignment of %s unanswered by node %d after 5 s", tp, node)
        else:
            raise AssertionError(f"{tp}: the reassignment was never answered")
    finally:
        await admin.close()
    assert response.error_code == 0, response
    errors = [p[1] for _name, partitions, _tags in response.responses for p in partitions]
    assert errors == [0], response


async def test_a_write_answered_by_a_leader_that_moved_is_not_written_again_behind_itself(
    forgetful3: Testbed, east: str, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An acks=all write the leader appended waits for its in-sync replicas (Kafka's
    ``DelayedProduce``); if the leader moves meanwhile, it is answered
    NOT_LEADER_OR_FOLLOWER (the old leader has no leader log any more), though the follower
    that took it before the move now leads with it above its high watermark. Here one node
    leads, one follows, and one follower is paused (SIGSTOP; not the active controller):
    offsets 5..9 (two days old) are appended by the leader and taken by the follower; then
    the partition is reassigned to the follower and the paused node, so the follower leads
    while the write waits. The broker keeps no producer state for records that old (5 s
    here), so nothing fences a repeat: the write must be taken as "may have landed" and
    what landed read back before anything is sent again. (Kafka's new leader refuses to list
    offsets until its high watermark reaches the start of its epoch, which also keeps a
    copier that reads the local end from sending 5..9 again; a copier that trusted a "not
    appended" verdict and sent them again at once put them at local offset 10, behind their
    own first copy.)"""
    cluster = cluster_of(forgetful3)
    local = cluster.bootstrap
    tp = TopicPartition(topic, 0)
    controller = await asyncio.to_thread(quorum_leader, local, jars=forgetful3.jars)
    paused = max(n for n in (1, 2, 3) if n != controller)
    leader, follower = (n for n in (1, 2, 3) if n != paused)
    await create_topic(east, topic, 1)
    await led_off_the_paused(local, topic, placed=(leader, follower, paused))
    await one_batch(east, topic, [(b"v%d" % i, days_ago(2)) for i in range(5)])
    # the write's answer comes from the broker as the leader moves (or at the broker's own
    # produce timeout, 30 s), not from a timeout of ours: a request is given up after 40 s
    config = make_config(local, {"east": east}, [topic])
    syncer = Syncer(replace(config, local=replace(config.local, request_timeout_ms=40_000)))
    async with paused_proof_reader(local) as reader, syncer:
        running = asyncio.create_task(syncer.run())
        pid = cluster.node(paused).pid
        assert pid is not None
        try:
            await until(lambda: first_status(syncer, "local_end") == 5, "the first five", 60)
            (status,) = syncer.statuses()
            os.kill(pid, signal.SIGSTOP)
            try:
                await one_batch(east, topic, [(b"v%d" % i, days_ago(2)) for i in range(5, 10)])
                # appended by the leader, held above the high watermark by the paused follower
                await poll_until("5..9 appended", ends_at(reader, tp, (5, 10)), 30)
                two = ",".join(cluster.node(n).direct for n in (leader, follower))
                await leader_removed(two, (follower, leader), tp, [follower, paused])
                # the new leader holds 5..9 (its log end: it lists no high watermark yet)
                assert await through_moves(tp, partial(reader.log_end, tp)) == 10
                await until(
                    lambda: "NOT_LEADER_OR_FOLLOWER" in caplog.text, "the moved leader's answer", 20
                )
                # a write sent again lands at once, behind its first copy (the new leader
                # holds no producer state for records that old); its answer waits
                await asyncio.sleep(3)
            finally:
                os.kill(pid, signal.SIGCONT)
            await until(lambda: status.local_end >= 10 or status.state is State.HALTED, "10", 60)
            await asyncio.sleep(2)  # a second copy's answer would follow its first by now
            assert status.state is not State.HALTED, status.error
            assert status.local_end == 10
        finally:
            os.kill(pid, signal.SIGCONT)
            syncer.request_stop()
            await asyncio.wait_for(running, 60)
        assert await ends_of(reader, tp) == (10, 10), "5..9 written again behind themselves"
    (placed,) = await wait_placed(local, topic, lambda ps: len(ps[0].isr) == 2)
    assert (placed.leader, placed.replicas) == (follower, (follower, paused)), placed
    copied = await assert_prefix_of_remote(local, east, topic)
    assert [r.offset for r in copied] == list(range(10))


@pytest.mark.parametrize("west_ms", [0, 1000], ids=["stamped-as-east", "stamped-otherwise"])
async def test_a_lost_write_sent_again_from_a_remote_with_another_history_splices_nothing(
    forgetful3: Testbed, testbed: Testbed, east: str, west: str, topic: str, west_ms: int
) -> None:
    """Two remotes agree up to offset 5 and differ from there, batch for batch (the same
    layout and timestamps, other values). east's 5..9 is appended by the local leader and
    held above the high watermark (a follower paused); its answer is lost (3 s). syncer
    reads the local end back as 5, and with east unreachable (paused) it sends the same
    offsets again from west, whose records below 5 agree. The broker still holds our
    producer state (the records are stamped ahead of its clock), so it takes west's batch
    for a repeat of east's (it matches producer, epoch and sequences, not records) and
    answers it as landed at 5, having kept east's records. Taken at its word, west then
    continued from 10 on top of east's 5..9: two histories spliced without a word. The
    answer of a repeat is told apart (its append time is the first batch's max timestamp,
    where a batch appended on a CreateTime topic is answered with -1), what landed is
    compared with the remotes, and west, whose records differ from the local ones there
    (east's), is dropped; the copy goes on from east. (With east paused, west was not even
    asked before east came back: its end was last seen at 5, when east was polled.) With
    west's records stamped ``west_ms`` later than east's, the answer's time (east's) read
    as the broker's clock: a halt saying the topic turned LogAppendTime, which it had not."""
    cluster = cluster_of(forgetful3)
    local = cluster.bootstrap
    tp = TopicPartition(topic, 0)
    for remote in (east, west):
        await create_topic(remote, topic, 1)
    await led_off_the_paused(local, topic)
    # ahead of the brokers' clocks: the local leader keeps our producer state all along
    ahead = int(time.time() * 1000) + 10 * 60_000

    def records(name: bytes, low: int, high: int) -> list[tuple[bytes, int]]:
        later = west_ms if name == b"west" else 0
        return [(b"%s%d" % (name, i), ahead + later) for i in range(low, high)]

    for remote in (east, west):
        await one_batch(remote, topic, records(b"v", 0, 5))
    # each source batch a write of its own: west's 10..14 waits for its 5..9's answer
    copier = {"shutdown_timeout_s": 10, "coalesce_bytes": 0}
    config = make_config(local, {"east": east, "west": west}, [topic], copier=copier)
    quick = partial(replace, request_timeout_ms=3000)  # unanswered for 3 s: given up
    config = replace(config, local=quick(config.local), remotes=tuple(map(quick, config.remotes)))
    follower, east_node = cluster.node(PAUSED).pid, testbed.clusters["east"].pid
    assert follower is not None and east_node is not None
    syncer = Syncer(config)
    async with paused_proof_reader(local) as reader, syncer:
        running = asyncio.create_task(syncer.run())
        paused: list[int] = []
        try:
            await until(lambda: first_status(syncer, "local_end") == 5, "the first five", 60)
            (status,) = syncer.statuses()
            os.kill(follower, signal.SIGSTOP)
            paused.append(follower)
            await one_batch(east, topic, records(b"east", 5, 10))
            await poll_until("east's 5..9 appended", ends_at(reader, tp, (5, 10)), 30)
            os.kill(east_node, signal.SIGSTOP)
            paused.append(east_node)
            await one_batch(west, topic, records(b"west", 5, 10))
            await one_batch(west, topic, records(b"west", 10, 15))
            # east's write given up; the end read back as 5; the same offsets sent from west
            await until(lambda: status.retries >= 1, "east's write given up", 30)
            await until(lambda: status.state is State.COPYING, "a write after it", 60)
            for pid in (follower, east_node):
                os.kill(pid, signal.SIGCONT)
                paused.remove(pid)
            await until(
                lambda: (
                    bool(status.dropped) or status.local_end >= 15 or status.state is State.HALTED
                ),
                "west's write answered",
                60,
            )
            await one_batch(east, topic, records(b"east", 10, 15))
            await until(
                lambda: status.local_end >= 15 or status.state is State.HALTED, "10..14", 60
            )
            assert status.state is not State.HALTED, status.error
        finally:
            for pid in paused:
                os.kill(pid, signal.SIGCONT)
            syncer.request_stop()
            await asyncio.wait_for(running, 60)
        assert await ends_of(reader, tp) == (15, 15)
    copied = await assert_prefix_of_remote(local, east, topic)  # not west's from 10 on
    assert [r.offset for r in copied] == list(range(15))
    assert list(status.dropped) == ["west"], status.dropped
    assert "which are remote east's" in status.dropped["west"], status.dropped


async def set_broker_settings(bootstrap: str, settings: dict[str, str]) -> None:
    """Each broker's dynamic settings, exactly ``settings`` (AlterConfigs replaces the whole
    set: ``{}`` leaves every broker its static value)."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        brokers = (await admin.describe_cluster())["brokers"]
        for broker in brokers:
            resource = ConfigResource(ConfigResourceType.BROKER, str(broker["node_id"]), settings)
            await admin.alter_configs([resource])
    finally:
        await admin.close()


# the local topic refuses records more than 90 minutes old: one two hours old is refused,
# those an hour old are taken
REFUSES_TWO_HOURS_OLD = {"message.timestamp.before.max.ms": str(90 * 60_000)}


async def test_producer_state_expiration_lowered_while_copying_is_followed(
    forgetful: Testbed, link: LinkProxy, topic: str
) -> None:
    """The local brokers keep producer state for a day when the daemon starts, and its
    writes of hour-old records are pipelined; the operator then lowers
    ``producer.id.expiration.ms`` (a dynamic setting) to 5 s, and the broker forgets our
    producer. A record two hours old (fresh by a day) is then refused, with hour-old batches
    behind it: read once at start, the day would have let them go out behind the refused
    one and land at its offsets (the broker, without our state, takes any sequence). Read
    again, every write goes alone, and the copy halts at the refused one with nothing
    misplaced (aiokafka and kcat)."""
    local, remote = forgetful.clusters["forgetful_local"], forgetful.clusters["forgetful_remote"]
    await create_topic(remote.direct, topic)
    await create_topic(local.direct, topic, **REFUSES_TWO_HOURS_OLD)
    hour_ago = int(time.time() * 1000) - HOUR_MS
    await set_broker_settings(local.direct, {"producer.id.expiration.ms": str(DAY_MS)})
    try:
        config = make_config(
            local.bootstrap,
            {"east": remote.direct},
            [topic],
            topics={"include": [topic], "refresh_interval_s": 1},
            copier={"shutdown_timeout_s": 10, "coalesce_bytes": 0},
        )
        syncer = Syncer(config)
        async with syncer:
            running = asyncio.create_task(syncer.run())
            for b in range(20):
                values = [(b"k", b"v%d" % (b * 10 + i)) for i in range(10)]
                await produce(remote.direct, topic, values, timestamp_ms=hour_ago)
            await until(lambda: first_status(syncer, "local_end") == 200, "200 records copied", 60)
            assert syncer.state_clock.expiration_ms == DAY_MS
            assert first_status(syncer, "one_at_a_time") is False  # pipelined
            await set_broker_settings(local.direct, {})  # back to the static 5 s
            await until(
                lambda: syncer.state_clock.expiration_ms == EXPIRY_MS,
                "lowered expiration read",
                30,
            )
            await asyncio.sleep(EXPIRY_MS / 1000 + 3)  # the broker forgets our producer
            stamps = [int(time.time() * 1000) - 2 * HOUR_MS] + [hour_ago] * 4
            await batch_by_batch(
                remote.direct, topic, [(b"late%d" % i, t) for i, t in enumerate(stamps)]
            )
            await until(
                lambda: first_status(syncer, "state") is State.HALTED, "halt at the refusal", 60
            )
            error = first_status(syncer, "error")
            assert isinstance(error, str) and "write at offset 200" in error, error
            syncer.request_stop()
            await asyncio.wait_for(running, 30)
    finally:
        await set_broker_settings(local.direct, {})
    copied = await assert_prefix_of_remote(local.direct, remote.direct, topic)
    assert len(copied) == 200


def owned(doc: dict[str, object]) -> set[int]:
    """The partitions a member's status shows it copying (not stopped: given up)."""
    parts: list[dict[str, object]] = doc["partitions"]  # type: ignore[assignment]
    return {int(p["partition"]) for p in parts if p["state"] != State.STOPPED.value}  # type: ignore[call-overload]


@pytest.mark.long_multinode
async def test_a_member_paused_past_its_session_writes_nothing_when_it_wakes(
    forgetful: Testbed, link: LinkProxy, topic: str, tmp_path: Path, daemons: list[Daemon]
) -> None:
    """Two members of one group copy two-day-old records: the broker keeps no producer
    state for them (5 s here), so nothing at the broker stops a member that lost its
    partition from writing it; only the lease does. The member copying partition 0 is
    paused (SIGSTOP) past its session with a poll out at the remote; the other takes the
    partition and copies what came meanwhile; the remote goes quiet and the broker forgets
    us. Woken, the paused member reads its poll's answer (those very records): without the
    lease it wrote them again at the log end. Partition 0, read back with kcat, equals the
    remote's."""
    local, remote = forgetful.clusters["forgetful_local"], forgetful.clusters["forgetful_remote"]
    await create_topic(remote.direct, topic, 2)
    raw: dict[str, object] = {
        "name": f"paused-{topic}",
        "local": {"bootstrap_servers": local.bootstrap},
        "remotes": [{"name": "east", "bootstrap_servers": remote.direct}],
        "topics": {"include": [topic], "refresh_interval_s": 1},
        "coordination": {
            "group": f"g-{topic}",
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 500,
            "lease_ms": 3000,
        },
    }
    members = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        members.append(Daemon(tmp_path / name, raw))
        daemons.append(members[-1])
    for member in members:
        await member.wait_for("a partition of its own", lambda doc: len(owned(doc)) == 1)
    await old_batches(remote.direct, topic, 0, 5)

    def copied_to(end: int) -> Callable[[dict[str, object]], bool]:
        def check(doc: dict[str, object]) -> bool:
            parts: list[dict[str, object]] = doc["partitions"]  # type: ignore[assignment]
            return any(p["partition"] == 0 and p["local_end"] == end for p in parts)

        return check

    paused, other = [m for m in members if 0 in owned(await m.status())] + [
        m for m in members if 0 not in owned(await m.status())
    ]
    await paused.wait_for("the first five copied", copied_to(5))
    os.kill(paused.proc.pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(0.5)
        await old_batches(remote.direct, topic, 5, 10)  # answers the paused member's poll
        await other.wait_for("partition 0 taken over and copied", copied_to(15))
        await asyncio.sleep(EXPIRY_MS / 1000 + 2)  # the broker forgets our producer
    finally:
        os.kill(paused.proc.pid, signal.SIGCONT)
    await asyncio.sleep(5)  # the woken member reads its poll's answer, and joins again
    # it did try to write what it read (else this test would prove nothing), and the lease
    # refused it
    assert "not writing: this process may have lost its group" in paused.log.read_text()
    await old_batches(remote.direct, topic, 15, 5)
    for member in members:
        assert member.proc.poll() is None, member.log.read_text()[-2000:]
    await until_copied(local.direct, remote.direct, topic, 20)
    for member in members:  # the proxy runs in this loop: never block it
        await asyncio.to_thread(member.stop)
    expected = [(o, f"v{o}") for o in range(20)]
    assert await asyncio.to_thread(kcat_offsets, local.direct, topic) == expected
    assert await asyncio.to_thread(kcat_offsets, remote.direct, topic) == expected


async def until_copied(local: str, remote: str, topic: str, end: int) -> None:
    """Partition 0's local end reaches ``end`` (or the test fails with both logs' tails)."""

    async def there() -> bool:
        async with Cluster(ClusterConfig(local, name="t"), role="t") as cluster:
            return (await cluster.latest([TopicPartition(topic, 0)]))[
                TopicPartition(topic, 0)
            ] >= end

    await poll_until(f"local offset {end}", there, 60)
