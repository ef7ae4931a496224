"""Batches converted from v0/v1 message sets, stamped as syncer stamps every batch, are taken
by a Kafka 4 broker at their own offsets; a consumer and kcat read what a reader of the legacy
set sees. (The source side, a Kafka 2.8 remote holding such data, needs ZooKeeper-mode brokers
in the test bed: issue 20, item 1.)"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from syncer.batches import rewrite_for_local, split_batches
from syncer.clusters import Cluster
from syncer.config import ClusterConfig
from syncer.connection import TP
from tests.kafka_helpers import create_topic, read_partition
from tests.unit.test_legacy import GZIP, LZ4, SNAPPY, log_append_time, plain, wrapper

APPEND_TIME = 1_700_000_000_000


def legacy_log() -> tuple[bytes, list[tuple[int, int, bytes]]]:
    """v0 plain, v1 gzip, v1 snappy LogAppendTime, v1 lz4, v1 plain, from offset 0; and
    (offset, timestamp, value) a reader sees."""
    payload = (
        plain(0, [(o, 0, b"k", b"v0-%d" % o) for o in range(3)])
        + wrapper(1, GZIP, [(i, 1_000 + i, b"k", b"gz-%d" % i) for i in range(3)], 5)
        + log_append_time(
            wrapper(1, SNAPPY, [(0, 1, b"k", b"sn-0"), (1, 2, b"k", b"sn-1")], 7), APPEND_TIME
        )
        + wrapper(1, LZ4, [(0, 3_000, b"k", b"lz-0"), (1, 3_001, b"k", b"lz-1")], 9)
        + plain(1, [(10, 4_000, b"k", b"v1-10"), (11, 4_001, b"k", b"v1-11")])
    )
    seen = (
        [(o, -1, b"v0-%d" % o) for o in range(3)]
        + [(3 + i, 1_000 + i, b"gz-%d" % i) for i in range(3)]
        + [(6, APPEND_TIME, b"sn-0"), (7, APPEND_TIME, b"sn-1")]
        + [(8, 3_000, b"lz-0"), (9, 3_001, b"lz-1"), (10, 4_000, b"v1-10"), (11, 4_001, b"v1-11")]
    )
    return payload, seen


async def test_converted_batches_land_at_their_offsets(local: str, topic: str) -> None:
    await create_topic(local, topic)
    payload, seen = legacy_log()
    tp = TP(topic, 0)
    async with Cluster(ClusterConfig(local, name="local"), role="test") as cluster:
        pid, epoch = await cluster.init_producer_id()
        for batch in split_batches(payload):
            raw = rewrite_for_local(batch, pid, epoch)
            node = await cluster.leader_for(tp)
            answer = (await cluster.produce(node, {tp: raw}, timeout_ms=10_000))[tp]
            assert (answer.error_code, answer.base_offset) == (0, batch.base_offset)
    copied = await read_partition(local, topic)
    assert [(r.offset, r.timestamp, r.value) for r in copied] == seen
    assert {r.timestamp_type for r in copied} == {0}  # CreateTime
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed: the consumer's read above stands alone")
    out = subprocess.run(
        [
            "kcat",
            "-b",
            local,
            "-C",
            "-t",
            topic,
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%o %T %s\\n",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert [tuple(line.split(" ")) for line in out.splitlines()] == [
        (str(o), str(ts), v.decode()) for o, ts, v in seen
    ]
