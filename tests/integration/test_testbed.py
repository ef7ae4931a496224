"""The test bed itself: real brokers answer, data of every kind round-trips, the CLI leaves
no Java process behind; a 3-node cluster replicates, survives a kill -9 of a node, and moves
leaders by preferred election and reassignment."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from syncer.clusters import Cluster
from syncer.config import ClusterConfig
from syncer.testbed import Testbed
from syncer.testbed.probe import Placement, broker_ids, placements_async, probe_metadata
from tests.conftest import cluster_of
from tests.kafka_helpers import (
    batch_layout,
    create_topic,
    produce,
    produce_every_kind,
    read_partition,
    run_cli,
)

log = logging.getLogger(__name__)


async def test_every_kind_of_record_round_trips(east: str, topic: str) -> None:
    await create_topic(east, topic)
    written = await produce_every_kind(east, topic)
    records = await read_partition(east, topic)
    assert [r.offset for r in records] == list(range(written))
    by_key = {r.key: r for r in records}
    assert by_key[None].value == b"no key"
    assert by_key[b"no value"].value is None
    assert by_key[b"h"].headers == (("trace", b"abc"), ("empty", b""), ("dup", b"1"), ("dup", b"2"))
    assert by_key[b"t"].timestamp == 1_500_000_000_000
    assert len(by_key[b"large"].value or b"") == 256 * 3500
    codecs = {codec for _base, _count, codec in await batch_layout(east, topic)}
    assert codecs == {"none", "gzip", "snappy", "lz4", "zstd"}


def test_cli_up_status_down_leaves_no_java(tmp_path: Path) -> None:
    state = tmp_path / "bed"
    up = run_cli("testbed", "up", "--clusters", "a,b", "--state", str(state))
    assert up.returncode == 0, up.stderr
    try:
        bootstraps = [line.split("\t")[1] for line in up.stdout.splitlines()]
        assert len(bootstraps) == 2
        assert all(probe_metadata(b) for b in bootstraps)
        status = run_cli("testbed", "status", "--state", str(state), "--json")
        assert status.returncode == 0, status.stderr
        assert '"answers": true' in status.stdout
    finally:
        down = run_cli("testbed", "down", "--state", str(state))
    assert down.returncode == 0, down.stderr
    ours = subprocess.run(
        ["pgrep", "-f", f"syncer.testbed.dir={state}"], capture_output=True, text=True, check=False
    )
    assert ours.stdout.strip() == ""
    assert not any(probe_metadata(b, timeout=2.0) for b in bootstraps)


def test_a_broker_that_cannot_start_is_named_with_its_log(tmp_path: Path) -> None:
    import socket

    import pytest

    from syncer.testbed import ClusterSpec, Testbed, TestbedError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        bed = Testbed(tmp_path / "bed")
        with pytest.raises(TestbedError) as caught:
            bed.up([ClusterSpec("busy", port=port)])
    message = str(caught.value)
    assert "Kafka cluster 'busy'" in message
    assert str(tmp_path / "bed" / "busy" / "broker.log") in message
    assert not bed.clusters["busy"].is_running()


# clusters of three nodes ----------------------------------------------------------------------


async def create_replicated(
    bootstrap: str, topic: str, partitions: int, rf: int = 3
) -> list[Placement]:
    """A topic of ``rf`` replicas, returned once every partition has a leader and all its
    replicas in sync; its placement then (a node asked next may not know the topic yet: each
    learns new metadata on its own)."""
    async with Cluster(ClusterConfig(bootstrap, name="test"), role="test") as cluster:
        await cluster.create_topic(topic, partitions, {}, rf)
    return await wait_placed(
        bootstrap,
        topic,
        lambda ps: len(ps) == partitions and all(set(p.isr) == set(p.replicas) for p in ps),
    )


async def wait_placed(
    bootstrap: str,
    topic: str,
    check: Callable[[list[Placement]], bool],
    timeout: float = 60.0,
) -> list[Placement]:
    """Until the topic's placement passes ``check``; the placement then."""
    deadline = time.monotonic() + timeout
    seen: list[Placement] = []
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # a node just killed may still be asked
            seen = await placements_async(bootstrap, topic, 5.0)
            if seen and check(seen):
                return seen
        await asyncio.sleep(0.3)
    raise AssertionError(f"{topic}: placement never passed the check; last {seen}")


def records(start: int, count: int) -> list[tuple[bytes | None, bytes | None]]:
    return [(b"k%d" % i, b"v%d" % i) for i in range(start, start + count)]


async def test_three_nodes_replicate_a_topic_to_each(local3: Testbed, topic: str) -> None:
    cluster = cluster_of(local3)
    assert [m.rack for m in cluster.members] == ["r0", "r1", "r2"]
    assert broker_ids(cluster.bootstrap) == {1, 2, 3}
    placed = await create_replicated(cluster.bootstrap, topic, 3)
    assert len(placed) == 3
    assert all(sorted(p.replicas) == [1, 2, 3] for p in placed)
    assert {p.leader for p in placed} == {1, 2, 3}  # one partition led by each node
    for node in cluster.members:  # any one node is a way in
        await produce(node.bootstrap, topic, records(node.node_id * 10, 10))
    assert [r.offset for r in await read_partition(cluster.bootstrap, topic)] == list(range(30))


async def test_a_killed_node_hands_its_leadership_over_and_comes_back(
    local3: Testbed, topic: str
) -> None:
    cluster = cluster_of(local3)
    await create_replicated(cluster.bootstrap, topic, 1)
    await produce(cluster.bootstrap, topic, records(0, 50))
    (before,) = await wait_placed(cluster.bootstrap, topic, lambda ps: len(ps) == 1)
    local3.kill_node("local3", before.leader)
    assert not cluster.node(before.leader).is_running() and not cluster.is_running()
    (moved,) = await wait_placed(
        cluster.bootstrap, topic, lambda ps: ps[0].leader not in (before.leader, -1)
    )
    assert before.leader not in moved.isr
    await produce(cluster.bootstrap, topic, records(50, 50))  # two in sync: min ISR 2 holds
    local3.start_node("local3", before.leader)
    assert cluster.is_running()
    (back,) = await wait_placed(cluster.bootstrap, topic, lambda ps: len(ps[0].isr) == 3)
    assert back.leader == moved.leader  # no periodic preferred election: it stays where it went
    got = await read_partition(cluster.node(before.leader).bootstrap, topic)
    assert [(r.offset, r.value) for r in got] == [(i, b"v%d" % i) for i in range(100)]


async def test_a_preferred_election_moves_the_leader_back(local3: Testbed, topic: str) -> None:
    cluster = cluster_of(local3)
    await create_replicated(cluster.bootstrap, topic, 1)
    (before,) = await wait_placed(cluster.bootstrap, topic, lambda ps: len(ps) == 1)
    preferred = before.replicas[0]
    assert before.leader == preferred
    local3.stop_node("local3", preferred)  # a clean stop hands leadership over at once
    (moved,) = await wait_placed(cluster.bootstrap, topic, lambda ps: ps[0].leader != preferred)
    local3.start_node("local3", preferred)
    await wait_placed(cluster.bootstrap, topic, lambda ps: preferred in ps[0].isr)
    assert (await placements_async(cluster.bootstrap, topic))[0].leader == moved.leader
    local3.elect_preferred("local3", [(topic, 0)])
    (after,) = await wait_placed(cluster.bootstrap, topic, lambda ps: ps[0].leader == preferred)
    assert after.replicas == before.replicas


async def test_a_reassignment_moves_a_partition_and_its_leader(local3: Testbed, topic: str) -> None:
    cluster = cluster_of(local3)
    await create_replicated(cluster.bootstrap, topic, 1, rf=2)
    await produce(cluster.bootstrap, topic, records(0, 30))
    (before,) = await wait_placed(cluster.bootstrap, topic, lambda ps: len(ps) == 1)
    (spare,) = {1, 2, 3} - set(before.replicas)
    follower = next(r for r in before.replicas if r != before.leader)
    local3.reassign("local3", {(topic, 0): [spare, follower]})
    (after,) = await wait_placed(cluster.bootstrap, topic, lambda ps: ps[0].leader != -1)
    assert after.replicas == (spare, follower)
    assert after.leader in (spare, follower) and after.leader != before.leader
    got = await read_partition(cluster.node(spare).bootstrap, topic)
    assert [r.value for r in got] == [b"v%d" % i for i in range(30)]


@pytest.mark.long_multinode
def test_cli_three_nodes_status_kill_start(tmp_path: Path) -> None:
    state = tmp_path / "bed"
    started = time.monotonic()
    up = run_cli("testbed", "up", "--clusters", "m:3,w", "--state", str(state))
    assert up.returncode == 0, up.stderr
    log.warning("CLI up of m:3,w took %.1f s", time.monotonic() - started)
    try:
        lines = dict(line.split("\t")[:2] for line in up.stdout.splitlines())
        assert len(lines["m"].split(",")) == 3 and len(lines["w"].split(",")) == 1
        status = json.loads(run_cli("testbed", "status", "--state", str(state), "--json").stdout)
        m = next(c for c in status["clusters"] if c["name"] == "m")
        assert [(n["id"], n["rack"], n["answers"]) for n in m["nodes"]] == [
            (1, "r0", True),
            (2, "r1", True),
            (3, "r2", True),
        ]
        kill = run_cli("testbed", "node", "kill", "m", "2", "--state", str(state))
        assert kill.returncode == 0, kill.stderr
        down = run_cli("testbed", "status", "--state", str(state), "--json")
        assert down.returncode == 1  # not every node answers
        m = next(c for c in json.loads(down.stdout)["clusters"] if c["name"] == "m")
        assert [n["running"] for n in m["nodes"]] == [True, False, True]
        start = run_cli("testbed", "node", "start", "m", "2", "--state", str(state))
        assert start.returncode == 0, start.stderr
        table = run_cli("testbed", "status", "--state", str(state))
        assert table.returncode == 0, table.stderr
        assert "r1" in table.stdout
    finally:
        stopped = run_cli("testbed", "down", "--state", str(state))
    assert stopped.returncode == 0, stopped.stderr
    ours = subprocess.run(
        ["pgrep", "-f", f"syncer.testbed.dir={state}"], capture_output=True, text=True, check=False
    )
    assert ours.stdout.strip() == ""
