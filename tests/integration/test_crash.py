"""Invariant 2: the local log is the checkpoint. SIGKILL the daemon at random moments during
a large copy, restart it each time: nothing missing, nothing written twice."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
from pathlib import Path

import yaml
from aiokafka.structs import TopicPartition

from syncer.clusters import Cluster
from syncer.config import ClusterConfig
from syncer.errors import SyncerError
from syncer.testbed import Testbed
from syncer.testbed.tools import perf_produce
from tests.kafka_helpers import create_topic, partition_digests

PARTITIONS = 4


async def local_total(bootstrap: str, topic: str) -> int:
    async with Cluster(ClusterConfig(bootstrap, name="test"), role="test") as cluster:
        try:
            ends = await cluster.latest([TopicPartition(topic, p) for p in range(PARTITIONS)])
        except SyncerError:
            return 0  # the syncer has not created the local topic yet
    return sum(ends.values())


RECORDS = 160_000


async def test_sigkill_five_times_loses_and_duplicates_nothing(
    testbed: Testbed, local: str, east: str, topic: str, tmp_path: Path
) -> None:
    await create_topic(east, topic, PARTITIONS)
    await asyncio.to_thread(
        perf_produce, east, topic, records=RECORDS, record_size=1024, jars=testbed.jars
    )
    config = tmp_path / "syncer.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "local": {"bootstrap_servers": local},
                "remotes": [{"name": "east", "bootstrap_servers": east}],
                "topics": {"include": [topic]},
                "http": {"listen": "127.0.0.1:0"},
                # small fetches: the copy takes long enough to be killed in the middle of it
                "copier": {
                    "partition_fetch_max_bytes": 32768,
                    "fetch_max_bytes": 131072,
                    "max_in_flight": 1,
                },
            }
        )
    )
    rng = random.Random(7)
    kills = 0
    copied_so_far: list[int] = []
    for _ in range(5):
        proc = subprocess.Popen(
            [sys.executable, "-m", "syncer", "run", "-c", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        before = copied_so_far[-1] if copied_so_far else 0
        while proc.poll() is None and await local_total(local, topic) < before + 4000:
            await asyncio.sleep(0.02)  # wait until this run is copying
        await asyncio.sleep(rng.uniform(0.0, 0.3))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait(10)
        copied_so_far.append(await local_total(local, topic))
    assert kills == 5
    # the kills fell in the middle of the copy, which moved on after each restart
    mid_copy = [n for n in copied_so_far if 0 < n < RECORDS]
    assert len(mid_copy) >= 2, copied_so_far
    final = subprocess.run(
        [sys.executable, "-m", "syncer", "catch-up", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert final.returncode == 0, final.stderr
    for partition in range(PARTITIONS):
        remote = await partition_digests(east, topic, partition)
        copied = await partition_digests(local, topic, partition)
        assert copied == remote, f"partition {partition} differs"
    assert (
        sum(
            d[-1][0] + 1
            for d in [await partition_digests(local, topic, p) for p in range(PARTITIONS)]
        )
        == RECORDS
    )
