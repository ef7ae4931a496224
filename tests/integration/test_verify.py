"""``syncer verify`` against real brokers: a divergence planted at a random offset of a large
partition is found and named; identical partitions, filled holes included, pass."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import yaml

from syncer.clusters import TP, Cluster
from syncer.config import ClusterConfig
from syncer.errors import ExitCode
from tests.kafka_helpers import create_topic, produce, produce_transactions, run_cli, write_config

RECORDS = 60_000


def values(planted: int | None = None) -> list[tuple[bytes | None, bytes | None]]:
    out: list[tuple[bytes | None, bytes | None]] = [
        (b"k%d" % (i % 1000), b"value %d " % i + b"x" * 80) for i in range(RECORDS)
    ]
    if planted is not None:
        key, value = out[planted]
        out[planted] = (key, (value or b"")[:-1] + b"y")  # one byte differs
    return out


async def test_a_planted_divergence_is_found_and_named(
    local: str, east: str, topic: str, config_file: Path
) -> None:
    planted = random.Random().randrange(RECORDS)
    await create_topic(east, topic)
    await create_topic(local, topic)
    # the same records on both sides at the same offsets, but one value a byte off locally
    stamp = 1_700_000_000_000  # CreateTime set by us: the same on both sides
    await asyncio.gather(
        produce(east, topic, values(), linger_ms=20, timestamp_ms=stamp),
        produce(local, topic, values(planted), linger_ms=20, timestamp_ms=stamp),
    )
    for bootstrap in (east, local):  # both sides whole before comparing
        async with Cluster(ClusterConfig(bootstrap, name="test"), role="test") as cluster:
            assert await cluster.ends([TP(topic, 0)]) == {TP(topic, 0): (0, RECORDS)}
    write_config(config_file, local, east, topic)
    result = run_cli("verify", "-c", str(config_file), "--json")
    assert result.returncode == ExitCode.DIVERGED, result.stderr + result.stdout
    (verdict,) = json.loads(result.stdout)
    assert verdict["identical"] is False and verdict["divergent_offset"] == planted
    assert (verdict["from"], verdict["to"]) == (0, RECORDS)
    assert verdict["rounds"] == 4  # 60,000 → 3,750 → 235 → 15 records, compared one by one
    table = run_cli("verify", "-c", str(config_file))
    assert f"differs at offset {planted}" in table.stdout and table.returncode == 7

    # a range that stops short of the planted offset is identical
    if planted:
        before = run_cli("verify", "-c", str(config_file), "--to", str(planted), "--json")
        assert before.returncode == ExitCode.OK, before.stdout


async def test_identical_after_a_copy_with_filled_holes(
    local: str, east: str, topic: str, config_file: Path
) -> None:
    await create_topic(east, topic)
    await produce(east, topic, [(b"a", b"1"), (b"b", b"2")])
    await produce_transactions(east, topic, [(False, [(None, b"aborted")])])
    await produce(east, topic, [(b"c", b"3")])
    config_file.write_text(
        yaml.safe_dump(
            {
                "local": {"bootstrap_servers": local},
                "remotes": [{"name": "east", "bootstrap_servers": east}],
                "topics": {"include": [topic], "on_hole": "fill"},
            }
        )
    )
    copied = run_cli("catch-up", "-c", str(config_file), "--no-progress")
    assert copied.returncode == 0, copied.stderr
    result = run_cli("verify", "-c", str(config_file), "--json")
    assert result.returncode == ExitCode.OK, result.stdout + result.stderr
    (verdict,) = json.loads(result.stdout)
    assert verdict["identical"] and (verdict["from"], verdict["to"]) == (0, 5)
