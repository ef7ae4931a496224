"""Topics appearing at the remote while three members of a group run: each member finds them
at its own topic refresh, so for a moment they subscribe to different topics and the first
to subscribe starts a rebalance. The group gives out only what all of them subscribe to, no
member's coordinator fails on a topic it has not subscribed to, every partition ends up
copied by the member the group gave it to, and the copy is exact."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import yaml
from aiokafka.structs import TopicPartition

from syncer.clusters import Cluster
from syncer.config import ClusterConfig, Config
from syncer.coordination import group_owners
from syncer.errors import SyncerError
from tests.kafka_helpers import create_topic, partition_digests, produce

TOPICS, PARTITIONS, RECORDS = 6, 4, 30


async def ends(bootstrap: str, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    async with Cluster(ClusterConfig(bootstrap, name="t"), role="t") as cluster:
        try:
            return await cluster.latest(tps)
        except SyncerError:
            return {}


async def test_topics_found_at_different_refreshes_are_shared_only_once_all_subscribe(
    tmp_path: Path, local: str, east: str, topic: str
) -> None:
    topics = [f"{topic}.{i}" for i in range(TOPICS)]
    tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
    records = [(b"k%d" % n, b"v%d" % n) for n in range(RECORDS)]

    async def add(t: str) -> None:
        await create_topic(east, t, PARTITIONS)
        for p in range(PARTITIONS):
            await produce(east, t, records, partition=p)

    await add(topics[0])
    name = f"g-{uuid.uuid4().hex[:8]}"
    raw = {
        "name": name,
        "local": {"bootstrap_servers": local},
        "remotes": [{"name": "east", "bootstrap_servers": east}],
        "topics": {"include": [re.escape(topic) + r"[.].*"], "refresh_interval_s": 1},
        "http": {"listen": "127.0.0.1:0"},
        "coordination": {
            "group": name,
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 500,
            "lease_ms": 3000,
        },
    }
    path = tmp_path / "syncer.yaml"
    path.write_text(yaml.safe_dump(raw))
    logs = [tmp_path / f"member-{n}.log" for n in range(3)]
    procs = []
    for log in logs:
        with log.open("wb") as out:
            command = [sys.executable, "-m", "syncer", "-v", "run", "-c", str(path)]
            procs.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT))
    try:
        await asyncio.sleep(8)  # the group formed over the first topic
        for t in topics[1:]:  # found by the members at refreshes 1 s apart
            await add(t)
            await asyncio.sleep(0.4)
        remote = await ends(east, tps)
        assert sum(remote.values()) == len(tps) * RECORDS
        deadline = time.monotonic() + 90
        while True:
            owners = await group_owners(Config.from_dict(raw))
            done = len(owners) == len(tps) and len(set(owners.values())) == 3
            if done and await ends(local, tps) == remote:
                break
            assert time.monotonic() < deadline, f"not shared and in sync; logs in {tmp_path}"
            await asyncio.sleep(0.5)
        assert all(proc.poll() is None for proc in procs), f"a member exited; see {tmp_path}"
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(60)
    texts = [log.read_text() for log in logs]
    for text in texts:
        assert "stopped polling" not in text and "unsubscribed topic" not in text, tmp_path
    for tp in tps:
        theirs = await partition_digests(east, tp.topic, tp.partition)
        assert await partition_digests(local, tp.topic, tp.partition) == theirs, tp
