"""What every pairing of the version matrix copies and how it is checked: real data (several
partitions, keys, null keys and values, headers, a compressed topic and a plain one, a few
thousand records) written on the remote, then read on both sides offset by offset by a
consumer and by kcat, and judged by ``syncer verify``."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import yaml

from syncer.clusters import Cluster
from syncer.config import ClusterConfig
from syncer.connection import TP
from tests.integration.test_versions import kcat
from tests.kafka_helpers import Rec, create_topic, produce, read_partition, run_cli

PARTITIONS = 3
ROUNDS = 4
PER_ROUND = 150  # records per partition per round: 600 a partition, 3,600 in all
# the compressed topic's partitions each with another codec (each a 3.9 broker stores too)
CODECS = ("gzip", "lz4", "zstd")
BASE_TS = 1_700_000_000_000
READ_ATTEMPTS = 10


def topics_of(prefix: str) -> dict[str, tuple[str | None, ...]]:
    """The data set's topics and the codec of each partition."""
    return {f"{prefix}.plain": (None,) * PARTITIONS, f"{prefix}.packed": CODECS}


async def write_data_set(bootstrap: str, prefix: str) -> dict[str, int]:
    """Write the data set under ``prefix``; records per topic."""
    written: dict[str, int] = {}
    for topic, codecs in topics_of(prefix).items():
        await create_topic(bootstrap, topic, PARTITIONS)
        for partition, codec in enumerate(codecs):
            for round_ in range(ROUNDS):
                records: list[tuple[bytes | None, bytes | None]] = [
                    (b"key-%d" % (i % 17), b"%s/%d/%d/%d" % (topic.encode(), partition, round_, i))
                    for i in range(PER_ROUND)
                ]
                records[3] = (None, b"no key")
                records[5] = (b"tombstone", None)
                await produce(
                    bootstrap,
                    topic,
                    records,
                    partition=partition,
                    codec=codec,
                    headers=[("round", b"%d" % round_), ("origin", bootstrap.encode())],
                    timestamp_ms=BASE_TS + round_,
                    linger_ms=5,
                )
            written[topic] = written.get(topic, 0) + ROUNDS * PER_ROUND
    return written


async def assert_identical(local: str, remote: str, prefix: str) -> int:
    """Both sides, every partition, record by record with a consumer (offset, key, value,
    headers, timestamp and its type) and line by line with kcat; the records compared."""
    compared = 0
    for topic in topics_of(prefix):
        for partition in range(PARTITIONS):
            there = await read_partition(remote, topic, partition)
            assert len(there) == ROUNDS * PER_ROUND, (topic, partition, len(there))
            here = await read_again_if_short(local, topic, partition, len(there))
            if here != there:  # how far the local log reaches, by syncer's own ListOffsets
                end = await latest_end(local, topic, partition)
                raise AssertionError(f"{first_difference(topic, partition, here, there)}; {end=}")
            assert there[0].headers == (("round", b"0"), ("origin", remote.encode()))
            compared += len(here)
            if shutil.which("kcat"):
                assert kcat(local, topic, partition) == kcat(remote, topic, partition)
    return compared


async def read_again_if_short(bootstrap: str, topic: str, partition: int, want: int) -> list[Rec]:
    """``read_partition``, again while it returns fewer than ``want`` records. Right after a
    catch-up into a topic syncer had just created, the consumer's end offset has been 0 for
    a partition whose end syncer's own ListOffsets gave as 600 (seen 3 times in ~12 runs, on
    4.1 locals): the reader's view, not the log; the records read are then compared whole."""
    here: list[Rec] = []
    for _ in range(READ_ATTEMPTS):
        here = await read_partition(bootstrap, topic, partition)
        if len(here) >= want:
            break
        await asyncio.sleep(0.5)
    return here


async def latest_end(bootstrap: str, topic: str, partition: int) -> int:
    tp = TP(topic, partition)
    async with Cluster(ClusterConfig(bootstrap, name="test"), role="test") as cluster:
        return (await cluster.latest([tp]))[tp]


def first_difference(topic: str, partition: int, here: list[Rec], there: list[Rec]) -> str:
    """Where a partition's two sides part first, for the failure message."""
    for mine, theirs in zip(here, there, strict=False):
        if mine != theirs:
            return f"{topic}/{partition}: local {mine} but remote {theirs}"
    return f"{topic}/{partition}: {len(here)} records locally, {len(there)} on the remote"


def verify(
    tmp_path: Path, local: str, remote: tuple[str, str], prefix: str
) -> list[dict[str, object]]:
    """``syncer verify`` as a user runs it: exit 0 and every partition identical."""
    name, bootstrap = remote
    config_file = tmp_path / "verify.yaml"
    config_file.write_text(
        yaml.safe_dump(
            {
                "local": {"bootstrap_servers": local},
                "remotes": [{"name": name, "bootstrap_servers": bootstrap}],
                "topics": {"include": list(topics_of(prefix))},
            }
        )
    )
    result = run_cli("verify", "-c", str(config_file), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    verdicts: list[dict[str, object]] = json.loads(result.stdout)
    assert len(verdicts) == 2 * PARTITIONS, verdicts
    assert all(v["identical"] for v in verdicts), verdicts
    return verdicts
