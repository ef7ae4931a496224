"""Topic settings that do not drift, on real brokers: a running syncer makes the local topic
follow the copied settings its remote changes (set and back to the default) within one
refresh, raises max.message.bytes before a record larger than the old limit is copied
(exactly, without a halt), leaves a later change alone with ``sync_configs: false``, and
reports a topic deleted at the remote without deleting it locally.

The local settings are read back with aiokafka's own DescribeConfigs, not syncer's."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from syncer.clusters import TP
from syncer.config import Config
from syncer.errors import TransientClusterError
from syncer.metrics import exposition
from syncer.status import State, status_document
from syncer.syncer import Syncer
from syncer.topic_drift import WAITS_FOR_THE_COPY
from tests.integration.test_faults import delete_topic
from tests.kafka_helpers import (
    alter_topic,
    batch_layout,
    create_topic,
    make_config,
    partition_digests,
    produce,
)

REFRESH_S = 1.5
DYNAMIC_TOPIC_CONFIG = 1
BIG = 2_000_000  # above the brokers' default max.message.bytes (1048588)


async def described(bootstrap: str, topic: str) -> dict[str, tuple[str, bool]]:
    """The topic's settings: key → (value, set on the topic itself)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (response,) = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic)]
        )
    finally:
        await admin.close()
    (resource,) = response.resources
    return {e[0]: (e[1], e[3] == DYNAMIC_TOPIC_CONFIG) for e in resource[4]}


async def eventually(check: Callable[[], object], what: str, timeout: float = 15.0) -> float:
    """Seconds until ``check()`` (sync or async) is true."""
    started = time.monotonic()
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return time.monotonic() - started
        assert time.monotonic() - started < timeout, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def running(config: Config) -> AsyncIterator[Syncer]:
    syncer = Syncer(config)
    async with syncer:
        task = asyncio.create_task(syncer.run())
        try:
            yield syncer
        finally:
            syncer.request_stop()
            await task


def config(local: str, east: str, topic: str, **topics: object) -> Config:
    settings = {"include": [topic], "refresh_interval_s": REFRESH_S, **topics}
    return make_config(local, {"east": east}, [topic], topics=settings)


async def copied(syncer: Syncer, local: str, east: str, topic: str) -> bool:
    status = syncer.copiers.get(TP(topic, 0))
    assert status is None or status.status.state is not State.HALTED, status.status.error
    try:
        return await partition_digests(local, topic) == await partition_digests(east, topic)
    except TransientClusterError:  # the local topic is not there yet
        return False


async def test_local_topic_settings_follow_the_remote(local: str, east: str, topic: str) -> None:
    await create_topic(east, topic, **{"retention.ms": "3600000"})
    await produce(east, topic, [(b"k", b"small")])
    async with running(config(local, east, topic)) as syncer:
        await eventually(lambda: copied(syncer, local, east, topic), "the first copy")
        assert (await described(local, topic))["retention.ms"] == ("3600000", True)

        # the remote raises its limit and takes a record the old one refused at once: the
        # copy waits for the refresh that raises the local limit, and is exact
        changed = {"retention.ms": "60000", "max.message.bytes": str(BIG + 100_000)}
        await alter_topic(east, topic, changed)
        await produce(east, topic, [(b"big", b"x" * BIG)], max_request_size=BIG + 100_000)
        followed = await eventually(
            lambda: _has(local, topic, changed), "the local settings to follow"
        )
        await eventually(lambda: copied(syncer, local, east, topic), "the large record")
        assert followed < REFRESH_S + 3.0, followed
        print(f"local settings followed {followed:.2f} s after the record was produced")
        assert syncer.copiers[TP(topic, 0)].status.state is not State.HALTED
        assert syncer.refused == {}

        # retention.ms back to the remote's default: deleted locally, the limit kept
        await alter_topic(east, topic, {"max.message.bytes": str(BIG + 100_000)})
        await eventually(
            lambda: _inherits(local, topic, "retention.ms"), "retention.ms to be deleted"
        )
        # counted once the local broker reports it, which this test may see first
        await eventually(
            lambda: syncer.snapshot().topics.synced.get(topic, 0) >= 2, "the second sync counted"
        )
        drift = syncer.snapshot().topics
        assert drift.synced[topic] == 2, drift
        # the local broker's own default, as it reports it (the test bed sets -1)
        assert drift.last_sync[topic][1] == "retention.ms 60000 → -1"
        document = status_document(syncer.snapshot())["topics"]
        assert document["configs_synced"] == {topic: 2}
        metrics = exposition(syncer.instruments.attach(syncer.snapshot)).decode()
        assert f'syncer_topic_configs_synced_total{{topic="{topic}"}} 2.0' in metrics

    # sync_configs: false leaves a later change alone, and a topic deleted at the remote is
    # reported and kept locally
    async with running(config(local, east, topic, sync_configs=False)) as syncer:
        await eventually(lambda: TP(topic, 0) in syncer.copiers, "the copier")
        await alter_topic(east, topic, {"retention.ms": "120000", "max.message.bytes": str(BIG)})
        await asyncio.sleep(2 * REFRESH_S + 0.5)
        settings = await described(local, topic)
        assert settings["retention.ms"][1] is False  # not set: the broker's default
        assert settings["max.message.bytes"] == (str(BIG + 100_000), True)
        assert syncer.snapshot().topics.synced == {}
        await delete_topic(east, topic)
        await eventually(lambda: syncer.topics.drift.gone, "the deletion to be reported")
        assert syncer.topics.drift.gone == {topic: ("remote east",)}
        assert status_document(syncer.snapshot())["topics"]["gone_at_remote"] == {
            topic: ["remote east"]
        }
        metrics = exposition(syncer.instruments.attach(syncer.snapshot)).decode()
        assert f'syncer_topic_gone_at_remote{{remote="east",topic="{topic}"}} 1.0' in metrics
    assert "retention.ms" in await described(local, topic)  # the local topic is still there


async def _has(bootstrap: str, topic: str, settings: dict[str, str]) -> bool:
    now = await described(bootstrap, topic)
    return all(now.get(k) == (v, True) for k, v in settings.items())


async def _inherits(bootstrap: str, topic: str, key: str) -> bool:
    return (await described(bootstrap, topic))[key][1] is False


async def test_a_remote_that_changes_its_codec_is_followed_with_producer(
    local: str, east: str, topic: str
) -> None:
    """The remote topic recompresses to gzip, then to zstd: it holds batches of both. The
    local topic (gzip, as the remote's was when it was created) is set to ``producer``, which
    keeps every batch as it is sent: the zstd batches land as zstd, the copy exact and not
    refused (before: refused for good, nothing more copied)."""
    await create_topic(east, topic, **{"compression.type": "gzip"})
    await produce(east, topic, [(b"k", b"v%d" % i) for i in range(20)])
    async with running(config(local, east, topic)) as syncer:
        await eventually(lambda: copied(syncer, local, east, topic), "the first copy")
        assert (await described(local, topic))["compression.type"] == ("gzip", True)
        await alter_topic(east, topic, {"compression.type": "zstd"})
        await eventually(
            lambda: _has(local, topic, {"compression.type": "producer"}), "producer locally"
        )
        await produce(east, topic, [(b"k", b"w%d" % i) for i in range(20)])
        await eventually(lambda: copied(syncer, local, east, topic), "the zstd records")
        await asyncio.sleep(REFRESH_S + 0.5)  # one more look: producer is left as it is
        assert syncer.refused == {} and syncer.snapshot().topics.held == {}
    assert await batch_layout(local, topic) == await batch_layout(east, topic)
    assert {codec for _base, _count, codec in await batch_layout(local, topic)} == {
        "gzip",
        "zstd",
    }


async def test_a_remote_that_starts_compacting_is_followed_once_the_copy_caught_up(
    local: str, east: str, topic: str
) -> None:
    """The remote topic holds records without a key, then its owner sets it to compact
    while the copy lags (capped here to ~400 KB/s). A compacted local topic refuses a
    keyless record (INVALID_RECORD): followed at once, every partition halted there. The
    change waits, said in the status, until the copy has caught up, and is made then; the
    copy is exact."""
    await create_topic(east, topic)
    await produce(east, topic, [(None, b"v%05d" % i + b"." * 1000) for i in range(5000)])
    capped = config(local, east, topic)
    capped = dataclasses.replace(
        capped, copier=dataclasses.replace(capped.copier, max_bytes_per_second=400_000)
    )
    async with running(capped) as syncer:
        await eventually(lambda: syncer.copiers.get(TP(topic, 0)), "the copier")
        await alter_topic(east, topic, {"cleanup.policy": "compact"})
        held = await eventually(
            lambda: "cleanup.policy" in syncer.snapshot().topics.held.get(topic, {}),
            "the change to wait",
        )
        status = syncer.copiers[TP(topic, 0)].status
        assert status.local_end < 5000, "the copy caught up before the change was seen"
        assert syncer.snapshot().topics.held[topic]["cleanup.policy"] == WAITS_FOR_THE_COPY
        assert (await described(local, topic))["cleanup.policy"][0] == "delete"
        await eventually(
            lambda: _has(local, topic, {"cleanup.policy": "compact"}), "compaction locally", 60
        )
        assert status.local_end == 5000 and status.state is not State.HALTED, status.error
        assert topic not in syncer.snapshot().topics.held
        print(f"the change waited; seen {held:.1f} s after it was made")
    assert await partition_digests(local, topic) == await partition_digests(east, topic)
