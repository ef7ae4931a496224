"""The version matrix, first pairing: a Kafka 2.8.2 remote in ZooKeeper mode, its topics
stored in message format v1 (``message.format.version=0.10.2``), copied into the session's
Kafka 4.1 local cluster. The 2.8 broker's own DumpLogSegments shows the data on disk is magic 1,
so the copy goes through syncer's conversion (syncer.legacy) to v2 batches at the same offsets;
a consumer, kcat and ``syncer verify`` then read both sides offset by offset. The same
for message format v0 (``message.format.version=0.9.0``: magic 0, no timestamps), for plain v1
messages merged into v2 batches a 64 KiB ``max.message.bytes`` takes, and for a copy whose
2.8 broker is killed (kill -9) mid-copy and restarted.

Left for issue 20: 3.9 in ZooKeeper mode and in KRaft as remotes, and 4.x into a 3.9 local."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from aiokafka import AIOKafkaClient
from aiokafka.protocol.admin import ApiVersionRequest

from syncer.batches import FILLER_HEADER, is_filler
from syncer.clusters import Cluster
from syncer.config import ClusterConfig
from syncer.connection import TP
from syncer.protocol.versions import too_old
from syncer.status import State
from syncer.syncer import Syncer
from syncer.testbed import ClusterSpec, KafkaJars, RunningCluster, Testbed
from tests.kafka_helpers import (
    all_batches,
    alter_topic,
    catch_up,
    create_topic,
    make_config,
    own_bed,
    produce,
    read_partition,
    run_cli,
)

log = logging.getLogger(__name__)

OLD = "2.8.2"
V1 = {"message.format.version": "0.10.2"}  # a 2.8 broker stores such a topic as magic 1
# the cleaner looks often and needs little memory on a 512 MiB heap
BROKER = {"log.cleaner.backoff.ms": "200", "log.cleaner.dedupe.buffer.size": str(16 << 20)}
BASE_TS = 1_600_000_000_000
COMPACT_WAIT_S = 40


@pytest.fixture(scope="module")
def old_bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """One Kafka 2.8.2 broker with its ZooKeeper, for this module."""
    started = time.monotonic()
    root = tmp_path_factory.mktemp("old")
    with own_bed(
        root, KafkaJars.default(), [ClusterSpec("old", version=OLD, properties=BROKER)]
    ) as bed:
        log.warning("Kafka %s (ZooKeeper mode) up in %.1f s", OLD, time.monotonic() - started)
        yield bed


@pytest.fixture(scope="module")
def old(old_bed: Testbed) -> RunningCluster:
    cluster = old_bed.clusters["old"]
    assert isinstance(cluster, RunningCluster)
    return cluster


async def test_a_kafka_2_8_broker_is_served(old: RunningCluster) -> None:
    """Its ApiVersions have every floor syncer needs (Fetch v11 and on), so a connection
    to it starts; the by-id requests it lacks fall back to by-name ones."""
    client = AIOKafkaClient(bootstrap_servers=old.bootstrap)
    await client.bootstrap()
    try:
        answer = await client.send(client.get_random_node(), ApiVersionRequest())
    finally:
        await client.close()
    versions = {key: (low, high) for key, low, high, *_ in answer.api_versions}
    log.warning(
        "Kafka %s answers Fetch up to v%d, Produce up to v%d", OLD, versions[1][1], versions[0][1]
    )
    assert versions[1][1] == 12  # Fetch v12: below v13, the first by topic id
    assert too_old(versions) is None
    async with Cluster(ClusterConfig(old.bootstrap, name="old"), role="remote") as cluster:
        assert await cluster.partition_counts() is not None  # started: not refused


def dump_log_segments(old: RunningCluster, topic: str, partition: int) -> str:
    """The 2.8 broker's own reading of a partition's first segment."""
    segment = Path(old.directory) / "data" / f"{topic}-{partition}" / f"{0:020d}.log"
    jars = KafkaJars(KafkaJars.default().cache_dir, OLD)
    out = subprocess.run(
        [
            "java",
            "-Xmx128m",
            "-cp",
            jars.classpath,
            "kafka.tools.DumpLogSegments",
            "--files",
            str(segment),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout


async def fetched_magic(bootstrap: str, topic: str, partition: int) -> int:
    """The magic byte of the first batch a fetch answers with (byte 16 in v0, v1 and v2)."""
    tp = TP(topic, partition)
    async with Cluster(ClusterConfig(bootstrap, name="probe"), role="test") as cluster:
        fetched = await cluster.fetch(
            await cluster.leader_for(tp),
            {tp: 0},
            max_wait_ms=100,
            max_bytes=1 << 20,
            partition_max_bytes=1 << 20,
        )
    return fetched[tp].records[16]


def kcat(bootstrap: str, topic: str, partition: int) -> list[str]:
    out = subprocess.run(
        [
            "kcat",
            "-C",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-p",
            str(partition),
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%o %T %k %s\\n",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.splitlines()


async def write_v1_topic(bootstrap: str, topic: str) -> None:
    """Partition 0 gzip (v1 wrappers of several inner messages), partition 1 uncompressed;
    keys, a null key, a null value, explicit timestamps."""
    await write_legacy_topic(bootstrap, topic, V1, rounds=5, keys=13, tag=b"p")


async def write_legacy_topic(
    bootstrap: str, topic: str, format_: dict[str, str], *, rounds: int, keys: int, tag: bytes
) -> None:
    """A topic in an old message format (``format_``), partition 0 gzip and partition 1
    plain, ``rounds`` × 100 records each with ``keys`` distinct keys, one null key and one
    null value per round, the timestamps BASE_TS + round (a v0 topic drops them)."""
    await create_topic(bootstrap, topic, 2, **format_)
    for partition, codec in ((0, "gzip"), (1, None)):
        for round_ in range(rounds):
            records: list[tuple[bytes | None, bytes | None]] = [
                (b"k%d" % (i % keys), b"%s%d-r%d-%d" % (tag, partition, round_, i))
                for i in range(100)
            ]
            records[7] = (None, b"no key")
            records[11] = (b"no value", None)
            await produce(
                bootstrap,
                topic,
                records,
                partition=partition,
                codec=codec,
                linger_ms=20,
                timestamp_ms=BASE_TS + round_,
            )


async def write_compacted_topic(bootstrap: str, topic: str) -> set[int]:
    """A v1 compacted topic with one key overwritten many times, gzip and not, compacted
    by the 2.8 cleaner until gaps are seen; then compaction is stopped so the source stays as
    read. The offsets missing below its end (the gaps)."""
    settings = {
        **V1,
        "cleanup.policy": "compact",
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
    }
    await create_topic(bootstrap, topic, **settings)
    for round_ in range(6):
        codec = "gzip" if round_ % 2 else None
        # every other record has a key of its own, the others one key overwritten each
        # time: what the cleaner keeps of a gzip wrapper has gaps inside it
        records = [
            (b"dup" if i % 2 else b"key-%d-%d" % (round_, i), b"c%d-%d" % (round_, i))
            for i in range(30)
        ]
        await produce(
            bootstrap, topic, records, codec=codec, linger_ms=20, timestamp_ms=BASE_TS + round_
        )
        await asyncio.sleep(0.2)  # the next write rolls the segment
    deadline = time.monotonic() + COMPACT_WAIT_S
    holes: set[int] = set()
    while time.monotonic() < deadline:
        await produce(bootstrap, topic, [(b"roll", b"x")])  # rolls segments, so more are cleanable
        remote = await read_partition(bootstrap, topic)
        holes = set(range(remote[-1].offset + 1)) - {r.offset for r in remote}
        if len(holes) > 30:
            break
        await asyncio.sleep(0.5)
    await alter_topic(bootstrap, topic, {"cleanup.policy": "delete", "retention.ms": "-1"})
    await asyncio.sleep(2)  # a cleaning under way finishes
    remote = await read_partition(bootstrap, topic)
    return set(range(remote[-1].offset + 1)) - {r.offset for r in remote}


async def test_v1_data_and_a_compaction_gap_copy_to_4_1_offset_by_offset(
    old: RunningCluster, local: str, topic: str, tmp_path: Path
) -> None:
    plain, compacted = f"{topic}.v1", f"{topic}.compacted"
    started = time.monotonic()
    await write_v1_topic(old.bootstrap, plain)
    holes = await write_compacted_topic(old.bootstrap, compacted)
    log.warning(
        "written in %.1f s; %d offsets compacted away", time.monotonic() - started, len(holes)
    )
    assert holes, f"the 2.8 cleaner left no gap within {COMPACT_WAIT_S} s"

    # what is stored is message format v1: the broker's own tool, and a fetch's answer
    for name, partition, codec in (
        (plain, 0, "compresscodec: gzip"),
        (plain, 1, "compresscodec: none"),
        (compacted, 0, ""),
    ):
        dumped = dump_log_segments(old, name, partition)
        assert "magic: 1" in dumped and "magic: 2" not in dumped, dumped[:2000]
        assert codec.lower() in dumped.lower()
        assert await fetched_magic(old.bootstrap, name, partition) == 1
    log.warning(
        "on disk: %s",
        next(line for line in dump_log_segments(old, plain, 0).splitlines() if "magic" in line),
    )

    copy_started = time.monotonic()
    topics = {"include": [plain, compacted], "fill": [compacted]}
    config = make_config(local, {"old": old.bootstrap}, [plain, compacted], topics=topics)
    syncer = await catch_up(config)
    log.warning("catch-up from %s in %.1f s", OLD, time.monotonic() - copy_started)
    statuses = {(s.tp.topic, s.tp.partition): s for s in syncer.statuses()}
    assert {k: s.state for k, s in statuses.items()} == {
        (plain, 0): State.CAUGHT_UP,
        (plain, 1): State.CAUGHT_UP,
        (compacted, 0): State.CAUGHT_UP,
    }, {k: s.error for k, s in statuses.items()}

    # a consumer, offset by offset
    for partition in (0, 1):
        remote = await read_partition(old.bootstrap, plain, partition)
        assert len(remote) == 500
        assert await read_partition(local, plain, partition) == remote
    remote_c = {r.offset: r for r in await read_partition(old.bootstrap, compacted)}
    local_c = await read_partition(local, compacted)
    assert [r.offset for r in local_c] == list(range(len(local_c)))
    fillers = {r.offset for r in local_c if is_filler(r.key, r.headers)}
    assert fillers == holes
    for r in local_c:
        assert r.offset in fillers or r == remote_c[r.offset], r
    assert all(dict(r.headers).get(FILLER_HEADER) for r in local_c if r.offset in fillers)

    # an independent reader: kcat on both sides
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed: the consumer's reads above stand alone")
    for partition in (0, 1):
        assert kcat(local, plain, partition) == kcat(old.bootstrap, plain, partition)
    local_lines = kcat(local, compacted, 0)
    kept = [line for line in local_lines if int(line.split(" ", 1)[0]) not in fillers]
    assert kept == kcat(old.bootstrap, compacted, 0)
    assert len(local_lines) - len(kept) == len(holes)

    verdicts = verify(tmp_path, local, old.bootstrap, [plain, compacted])
    assert len(verdicts) == 3, verdicts


def verify(tmp_path: Path, local: str, remote: str, topics: list[str]) -> list[dict[str, object]]:
    """syncer's own verify, from the command line: identical for every partition."""
    config_file = tmp_path / "syncer.yaml"
    config_file.write_text(
        yaml.safe_dump(
            {
                "local": {"bootstrap_servers": local},
                "remotes": [{"name": "old", "bootstrap_servers": remote}],
                "topics": {"include": topics},
            }
        )
    )
    result = run_cli("verify", "-c", str(config_file), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    verdicts: list[dict[str, object]] = json.loads(result.stdout)
    assert verdicts and all(v["identical"] for v in verdicts), verdicts
    log.warning(
        "verify: %s",
        [(str(v["topic"])[-9:], v["partition"], v["from"], v["to"]) for v in verdicts],
    )
    return verdicts


V0 = {"message.format.version": "0.9.0"}  # a 2.8 broker stores such a topic as magic 0
SMALL_LIMIT = 64 << 10  # max.message.bytes far below legacy.RUN_BYTES


async def write_v0_topic(bootstrap: str, topic: str) -> None:
    """Partition 0 gzip, partition 1 uncompressed, in message format v0: keys, a null key,
    a null value; the timestamps the producer gives are dropped (v0 has none)."""
    await write_legacy_topic(bootstrap, topic, V0, rounds=3, keys=7, tag=b"v0-p")


async def test_v0_data_and_merged_runs_under_a_small_limit_copy_exactly(
    old: RunningCluster, local: str, topic: str, tmp_path: Path
) -> None:
    """Message format v0, gzip and plain, copied offset by offset; and v1 plain messages
    into a local topic whose max.message.bytes (64 KiB, the remote's) is far below the
    256 KiB a merged run could once reach (each would be refused, MESSAGE_TOO_LARGE).

    Timestamps of v0 data: a v0 message has none. Kafka's Java consumer reads it as
    NO_TIMESTAMP (-1) with NO_TIMESTAMP_TYPE; aiokafka as None and None. The
    v2 copy holds -1, what Kafka's own up-conversion writes (LogValidator's
    convertAndAssignOffsetsNonCompressed: the record's timestamp, NO_TIMESTAMP for v0, in a
    batch of the topic's timestamp type). One difference is forced by the v2 format: a v2
    batch has no "no timestamp type" (its attribute bit is CreateTime or LogAppendTime), so a
    consumer of the 4.1 copy reads timestamp -1 with CreateTime (aiokafka: -1 and 0) where the
    remote gave none. kcat (librdkafka: no timestamp, printed as 0) prints 0 for the remote's
    v0 messages and -1 for the copy. ``verify`` counts them equal: a v0 message and its copy
    both have the timestamp -1 as Kafka's own record classes read them."""
    v0, small = f"{topic}.v0", f"{topic}.small"
    await write_v0_topic(old.bootstrap, v0)
    # kept whatever their (2020) timestamps: a week's retention would delete them under verify
    limit = {"max.message.bytes": str(SMALL_LIMIT), "retention.ms": "-1"}
    await create_topic(old.bootstrap, small, **V1, **limit)
    await create_topic(local, small, **limit)
    rows = [(b"s%d" % i, b"%0100d" % i) for i in range(3000)]  # ~420 KB of v1 messages
    await produce(old.bootstrap, small, rows, linger_ms=50, timestamp_ms=BASE_TS)
    for partition, codec in ((0, "compresscodec: gzip"), (1, "compresscodec: none")):
        dumped = dump_log_segments(old, v0, partition)
        assert "magic: 0" in dumped and "magic: 1" not in dumped, dumped[:2000]
        assert codec in dumped.lower()
    assert "magic: 1" in dump_log_segments(old, small, 0)
    log.warning(
        "on disk: %s",
        next(line for line in dump_log_segments(old, v0, 1).splitlines() if "magic" in line),
    )

    started = time.monotonic()
    syncer = await catch_up(make_config(local, {"old": old.bootstrap}, [v0, small]))
    log.warning("catch-up of v0 and the 64 KiB topic in %.1f s", time.monotonic() - started)
    statuses = {(s.tp.topic, s.tp.partition): s for s in syncer.statuses()}
    assert {k: s.state for k, s in statuses.items()} == {
        (v0, 0): State.CAUGHT_UP,
        (v0, 1): State.CAUGHT_UP,
        (small, 0): State.CAUGHT_UP,
    }, {k: s.error for k, s in statuses.items()}

    for partition in (0, 1):
        remote = await read_partition(old.bootstrap, v0, partition)
        copied = await read_partition(local, v0, partition)
        assert len(remote) == 300
        assert {(r.timestamp, r.timestamp_type) for r in remote} == {(None, None)}
        assert {(r.timestamp, r.timestamp_type) for r in copied} == {(-1, 0)}  # see above
        assert [replace(r, timestamp=None, timestamp_type=None) for r in copied] == remote
    remote_small = await read_partition(old.bootstrap, small)
    assert len(remote_small) == 3000
    assert await read_partition(local, small) == remote_small
    sizes = [len(b.raw) async for b in all_batches(local, small)]
    log.warning(
        "64 KiB topic: %d messages in %d v2 batches, at most %d bytes", 3000, len(sizes), max(sizes)
    )
    assert max(sizes) <= SMALL_LIMIT and len(sizes) < 3000 / 50  # merged, and taken

    if shutil.which("kcat") is not None:
        assert kcat(local, small, 0) == kcat(old.bootstrap, small, 0)
        for partition in (0, 1):  # offset, timestamp, key, value: see above for the second
            theirs = [line.split(" ", 2) for line in kcat(old.bootstrap, v0, partition)]
            ours = [line.split(" ", 2) for line in kcat(local, v0, partition)]
            assert {t for _o, t, _rest in theirs} == {"0"} and {t for _o, t, _r in ours} == {"-1"}
            assert [(o, rest) for o, _t, rest in ours] == [(o, rest) for o, _t, rest in theirs]
    verdicts = verify(tmp_path, local, old.bootstrap, [v0, small])
    assert sorted((v["from"], v["to"]) for v in verdicts) == [(0, 300), (0, 300), (0, 3000)]


async def test_a_killed_zookeeper_mode_remote_comes_back_and_the_copy_ends_identical(
    old_bed: Testbed, old: RunningCluster, local: str, topic: str, tmp_path: Path
) -> None:
    """kill -9 of the 2.8 broker mid-copy (its ZooKeeper stays up), restarted: the same
    catch-up waits it out, resumes where the local end is, and ends identical."""
    name = f"{topic}.killed"
    await create_topic(old.bootstrap, name, **V1)
    for round_ in range(4):
        rows = [(b"r%d-%d" % (round_, i), bytes(1000)) for i in range(500)]
        await produce(old.bootstrap, name, rows, codec="gzip" if round_ % 2 else None)
    copier = {"partition_fetch_max_bytes": 16 << 10, "fetch_max_bytes": 16 << 10, "max_chunks": 1}
    config = make_config(
        local, {"old": old.bootstrap}, [name], copier={**copier, "shutdown_timeout_s": 10}
    )
    syncer = Syncer(config)
    async with syncer:
        copy = asyncio.create_task(syncer.catch_up())
        while (at := next(iter(syncer.statuses()), None)) is None or at.local_end <= 0:
            assert not copy.done(), copy
            await asyncio.sleep(0.05)
        killed_at, started = at.local_end, time.monotonic()
        zookeeper_pid = old.zookeeper_pid
        # kill -9, then started again once ZooKeeper expired its session (restarted before,
        # a 2.8 broker finds its old registration there and exits: NodeExists)
        await asyncio.to_thread(old_bed.restart, "old", crash=True)
        assert old_bed.clusters["old"] is old
        assert old.zookeeper_pid == zookeeper_pid and old.zookeeper is not None
        assert old.zookeeper.is_running()  # the same ZooKeeper all along
        log.warning(
            "2.8 broker killed at local end %d, back in %.1f s",
            killed_at,
            time.monotonic() - started,
        )
        assert killed_at < 2000
        await asyncio.wait_for(copy, 60)
    (status,) = syncer.statuses()
    assert status.state is State.CAUGHT_UP, status.error
    remote = await read_partition(old.bootstrap, name)
    assert len(remote) == 2000
    assert await read_partition(local, name) == remote
    (verdict,) = verify(tmp_path, local, old.bootstrap, [name])
    assert (verdict["from"], verdict["to"]) == (0, 2000)
