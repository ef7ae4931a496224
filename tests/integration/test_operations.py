"""Operations: what /metrics says during a copy matches the clusters; /readyz follows the local
cluster; a remote broker restart is retried, counted and leaves the copy exact. These tests
stop and start brokers, so they run on a bed of their own."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from aiokafka.structs import TopicPartition

from syncer.clusters import Cluster
from syncer.config import ClusterConfig
from syncer.testbed import ClusterSpec, Testbed
from syncer.testbed.bed import free_port
from syncer.testbed.proxy import LinkProxy
from syncer.testbed.tools import perf_produce
from tests.kafka_helpers import Daemon, create_topic, get, own_bed, partition_digests, samples

PARTITIONS = 4
RECORDS = 40_000  # 1 KiB each
# small fetches and writes one at a time: the copy lasts long enough to act in the middle of it
SLOW_COPIER = {"partition_fetch_max_bytes": 16384, "fetch_max_bytes": 65536, "max_in_flight": 1}


@pytest.fixture(scope="module")
def blink(tmp_path_factory: pytest.TempPathFactory, testbed: Testbed) -> Iterator[Testbed]:
    specs = [
        ClusterSpec("blink_local"),
        ClusterSpec("blink_remote"),
        ClusterSpec("blink_far", advertised=f"127.0.0.1:{free_port()}"),  # behind a proxy
    ]
    with own_bed(tmp_path_factory.mktemp("blink"), testbed.jars, specs) as bed:
        yield bed


async def ends(bootstrap: str, topic: str) -> dict[int, int]:
    async with Cluster(ClusterConfig(bootstrap, name="test"), role="test") as cluster:
        found = await cluster.latest([TopicPartition(topic, p) for p in range(PARTITIONS)])
    return {tp.partition: end for tp, end in found.items()}


async def backlog(bed: Testbed, bootstrap: str, topic: str) -> None:
    await create_topic(bootstrap, topic, PARTITIONS)
    await asyncio.to_thread(
        perf_produce, bootstrap, topic, records=RECORDS, record_size=1024, jars=bed.jars
    )


def daemon_for(tmp_path: object, local: str, remote: str, topic: str, **copier: int) -> Daemon:
    return Daemon(
        tmp_path,  # type: ignore[arg-type]
        {
            "local": {"bootstrap_servers": local, "request_timeout_ms": 5000},
            "remotes": [{"name": "east", "bootstrap_servers": remote, "request_timeout_ms": 5000}],
            "topics": {"include": [topic], "refresh_interval_s": 2},
            "copier": {**SLOW_COPIER, "chunk_timeout_ms": 4000, **copier},
        },
    )


async def copying(
    tmp_path: object, daemons: list[Daemon], bed: Testbed, local: str, remote: str, topic: str
) -> Daemon:
    """A daemon a tenth of the way through copying a fresh backlog of ``remote``."""
    await backlog(bed, remote, topic)
    daemon = daemon_for(tmp_path, local, remote, topic)
    daemons.append(daemon)
    await daemon.wait_for("a tenth copied", lambda doc: copied(doc) > RECORDS // 10)
    return daemon


async def assert_identical(local: str, remote: str, topic: str) -> None:
    for partition in range(PARTITIONS):
        assert await partition_digests(local, topic, partition) == await partition_digests(
            remote, topic, partition
        )


def copied(doc: dict[str, list[dict[str, int]]]) -> int:
    return sum(max(0, p["local_end"]) for p in doc["partitions"])


async def test_metrics_during_a_copy_match_the_clusters(
    blink: Testbed, local: str, topic: str, tmp_path: object, daemons: list[Daemon]
) -> None:
    far = blink.clusters["blink_far"]
    await backlog(blink, far.direct, topic)
    remote_ends = await ends(far.direct, topic)
    # 4 MB/s per connection: the 40 MB copy lasts long enough to be watched in the middle
    async with LinkProxy.in_front_of(far, rate=4_000_000):
        daemon = daemon_for(tmp_path, local, far.bootstrap, topic)
        daemons.append(daemon)
        await daemon.wait_for("a tenth copied", lambda doc: copied(doc) > RECORDS // 10)
        before = await ends(local, topic)
        found = samples((await asyncio.to_thread(get, f"{daemon.url}/metrics"))[1])
        after = await ends(local, topic)
        assert sum(after.values()) < RECORDS, "the copy ended before the scrape"
        for partition in range(PARTITIONS):
            key = frozenset({("topic", topic), ("partition", str(partition))})
            local_end = found[("syncer_partition_local_end_offset", key)]
            assert before[partition] <= local_end <= after[partition]
            remote = found[("syncer_partition_remote_end_offset", key | {("remote", "east")})]
            assert remote == remote_ends[partition]
            assert found[("syncer_partition_lag_records", key)] == remote - local_end
            if remote > local_end and found[("syncer_partition_records_copied_total", key)]:
                assert found[("syncer_partition_lag_seconds", key)] > 0
        await daemon.wait_for("all copied", lambda doc: copied(doc) == RECORDS)
    east_label = frozenset({("remote", "east")})
    assert found[("syncer_fetch_duration_seconds_count", east_label)] > 0
    assert found[("syncer_produce_duration_seconds_count", frozenset())] > 0
    assert found[("syncer_remote_lanes", east_label)] == 1
    assert found[("syncer_remote_connections", east_label)] >= 1
    await assert_identical(local, far.direct, topic)


async def readyz(daemon: Daemon) -> int:
    return (await asyncio.to_thread(get, f"{daemon.url}/readyz"))[0]


async def within(seconds: float, what: str, check: object) -> float:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if await check():  # type: ignore[operator]
            return time.monotonic() - started
        await asyncio.sleep(0.25)
    raise AssertionError(f"not within {seconds} s: {what}")


async def test_readyz_follows_the_local_cluster_and_the_copy_completes(
    blink: Testbed, east: str, topic: str, tmp_path: object, daemons: list[Daemon], testbed: Testbed
) -> None:
    local = blink.clusters["blink_local"]
    daemon = await copying(tmp_path, daemons, testbed, local.bootstrap, east, topic)
    assert await readyz(daemon) == 200
    await asyncio.to_thread(local.stop)
    try:
        await within(15, "/readyz fails", lambda: _is(readyz(daemon), 503))
        code, body = await asyncio.to_thread(get, f"{daemon.url}/readyz")
        assert code == 503 and "local cluster unreachable" in body
        assert (await asyncio.to_thread(get, f"{daemon.url}/healthz"))[0] == 200  # alive
    finally:
        await asyncio.to_thread(local.start, blink.jars)
        await asyncio.to_thread(local.wait_ready)
    await within(30, "/readyz recovers", lambda: _is(readyz(daemon), 200))
    await daemon.wait_for("all copied", lambda doc: copied(doc) == RECORDS)
    await assert_identical(local.bootstrap, east, topic)


async def _is(value: object, expected: int) -> bool:
    return await value == expected  # type: ignore[misc]


async def test_a_remote_broker_restart_is_retried_counted_and_exact(
    blink: Testbed, local: str, topic: str, tmp_path: object, daemons: list[Daemon]
) -> None:
    remote = blink.clusters["blink_remote"]
    daemon = await copying(tmp_path, daemons, blink, local, remote.bootstrap, topic)
    await asyncio.to_thread(blink.restart, "blink_remote")
    await daemon.wait_for("all copied", lambda doc: copied(doc) == RECORDS)
    found = samples((await asyncio.to_thread(get, f"{daemon.url}/metrics"))[1])
    errors = {
        dict(labels)["kind"]: v
        for (name, labels), v in found.items()
        if name == "syncer_errors_total"
    }
    retried = sum(v for (name, _l), v in found.items() if name == "syncer_partition_retries_total")
    assert errors.get("fetch", 0) + retried > 0, errors  # the restart was seen and counted
    await assert_identical(local, remote.bootstrap, topic)


async def test_the_local_cluster_down_for_twenty_seconds_then_the_copy_completes_exactly(
    blink: Testbed, east: str, topic: str, tmp_path: object, daemons: list[Daemon], testbed: Testbed
) -> None:
    local = blink.clusters["blink_local"]
    daemon = await copying(tmp_path, daemons, testbed, local.bootstrap, east, topic)
    await asyncio.to_thread(local.stop)
    try:
        # twice the longest back-off (10 s), four request timeouts (5 s): retries at the
        # capped back-off, the daemon alive and healthy throughout
        await asyncio.sleep(20)
        assert daemon.proc.poll() is None  # still running, retrying with back-off
        assert (await asyncio.to_thread(get, f"{daemon.url}/healthz"))[0] == 200
    finally:
        await asyncio.to_thread(local.start, blink.jars)
        await asyncio.to_thread(local.wait_ready)
    await daemon.wait_for("all copied", lambda doc: copied(doc) == RECORDS)
    await assert_identical(local.bootstrap, east, topic)
