"""The migration runbook, run end to end as an operator would: a Kafka 3.9.2 cluster in
ZooKeeper mode with live producers and two consumer groups (one keeping up, one lagging)
moved to a fresh Kafka 4.1 KRaft cluster with syncer's command line — seed with ``catch-up``,
run the daemon, ``verify``, stop the producers and consumers, stop the daemon, a final
``catch-up``, check the groups' offsets, move the consumers, then the producers.

What a consumer must see is the promise: every record exactly once across the two clusters,
the moved consumer resuming at the next record, the moved producers' records after the old
ones at the next offsets. Every value carries its producer's sequence number, so a record
skipped or read twice shows up both as an offset and as a sequence number. Each step's wall
time is logged as a table (docs/runbooks.md quotes it)."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import GroupCoordinatorNotAvailableError
from aiokafka.structs import TopicPartition

from syncer.testbed import ClusterSpec, KafkaJars, RunningCluster
from tests.kafka_helpers import Daemon, create_topic, own_bed, run_cli

log = logging.getLogger(__name__)

OLD = "3.9.2"
TOPICS = {"orders": (4, None), "events": (3, "gzip")}  # stem → (partitions, producer codec)
ROUND = 50  # records per producer round
PAUSE_S = 0.05  # between rounds: several hundred records a second per topic
SEEDED = 5000  # records per topic written before the seed
WAIT_S = 90
Processed = tuple[str, int, int, int]  # topic, partition, offset, sequence number


@pytest.fixture(scope="module")
def old(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    """One Kafka 3.9.2 broker with its ZooKeeper: the cluster being left."""
    started = time.monotonic()
    root = tmp_path_factory.mktemp("old")
    with own_bed(root, KafkaJars.default(), [ClusterSpec("old", version=OLD)]) as bed:
        log.warning("Kafka %s (ZooKeeper mode) up in %.1f s", OLD, time.monotonic() - started)
        cluster = bed.clusters["old"]
        assert isinstance(cluster, RunningCluster)
        yield cluster


@dataclass
class Producers:
    """One producer per topic writing keyed records in rounds until stopped; each value is
    the topic's next sequence number, kept across clusters, so that the producers moved to
    the new cluster go on where the old ones stopped. Only acknowledged records count."""

    codecs: dict[str, str | None]
    acked: dict[str, int] = field(default_factory=dict)  # topic → next sequence number

    def __post_init__(self) -> None:
        self.acked = {topic: 0 for topic in self.codecs}

    async def run(self, bootstrap: str, stop: asyncio.Event) -> None:
        await asyncio.gather(*(self._one(bootstrap, t, stop) for t in self.codecs))

    async def _one(self, bootstrap: str, topic: str, stop: asyncio.Event) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all",
            enable_idempotence=True,  # a retry must not be a duplicate the test then blames
            compression_type=self.codecs[topic],
            linger_ms=5,
        )
        await producer.start()
        try:
            while not stop.is_set():
                first = self.acked[topic]
                futures = [
                    await producer.send(topic, b"%d" % seq, key=b"k%d" % (seq % 23))
                    for seq in range(first, first + ROUND)
                ]
                for future in futures:
                    await future
                self.acked[topic] = first + ROUND
                await asyncio.sleep(PAUSE_S)
        finally:
            await producer.stop()


@dataclass
class GroupConsumer:
    """A member of ``group`` that records every record it processes and commits after each
    poll exactly what it processed, so that its committed offsets are the next record."""

    group: str
    topics: list[str]
    processed: list[Processed] = field(default_factory=list)

    async def run(
        self, bootstrap: str, stop: asyncio.Event, *, max_records: int, pause_s: float
    ) -> None:
        consumer = AIOKafkaConsumer(
            *self.topics,
            bootstrap_servers=bootstrap,
            group_id=self.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            while not stop.is_set():
                polled = await consumer.getmany(timeout_ms=200, max_records=max_records)
                for tp, records in polled.items():
                    self.processed += [
                        (tp.topic, tp.partition, r.offset, int(r.value or b"-1")) for r in records
                    ]
                if polled:
                    await consumer.commit({tp: rs[-1].offset + 1 for tp, rs in polled.items()})
                await asyncio.sleep(pause_s)
        finally:
            await consumer.stop()

    def reached(self, ends: dict[TopicPartition, int]) -> bool:
        """Whether it has processed every record below ``ends``."""
        seen: dict[TopicPartition, int] = {}
        for topic, partition, offset, _ in self.processed:
            seen[TopicPartition(topic, partition)] = offset + 1
        return all(seen.get(tp, 0) >= end for tp, end in ends.items())


@dataclass
class Steps:
    """Each runbook step's wall time, for the table logged at the end."""

    times: list[tuple[str, float]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def done(self, step: str) -> None:
        now = time.monotonic()
        self.times.append((step, now - self.started))
        log.warning("step %-42s %6.1f s", step, now - self.started)
        self.started = now


async def end_offsets(bootstrap: str, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        return dict(await consumer.end_offsets(tps))
    finally:
        await consumer.stop()


async def committed(bootstrap: str, group: str) -> dict[TopicPartition, int]:
    """The group's committed offsets, as Kafka's admin API answers them. A cluster where no
    group committed yet creates its offsets topic on the first question, answering
    "coordinator not available" meanwhile."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        for _ in range(50):
            try:
                answer = await admin.list_consumer_group_offsets(group)
                break
            except GroupCoordinatorNotAvailableError:
                await asyncio.sleep(0.2)
        else:
            raise AssertionError(f"no coordinator for {group} at {bootstrap} within 10 s")
    finally:
        await admin.close()
    return {tp: meta.offset for tp, meta in answer.items() if meta.offset >= 0}


async def syncer_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``syncer ARGS`` in a thread: the producers and consumers of this loop go on meanwhile."""
    return await asyncio.to_thread(run_cli, *args)


async def wait_until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


def kcat(bootstrap: str, topic: str, partition: int) -> list[str]:
    out = subprocess.run(
        [
            *("kcat", "-C", "-b", bootstrap, "-t", topic, "-p", str(partition)),
            *("-o", "beginning", "-e", "-q", "-f", "%o %T %k %s\\n"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.splitlines()


def every_record_once(processed: list[Processed], ends: dict[TopicPartition, int]) -> None:
    """Each partition's records in the order processed are exactly offsets 0 … end-1: none
    skipped, none twice, none out of order."""
    by_partition: dict[TopicPartition, list[int]] = {tp: [] for tp in ends}
    for topic, partition, offset, _ in processed:
        by_partition[TopicPartition(topic, partition)].append(offset)
    for tp, offsets in by_partition.items():
        if offsets != list(range(ends[tp])):
            twice = [o for o, n in Counter(offsets).items() if n > 1]
            skipped = sorted(set(range(ends[tp])) - set(offsets))
            raise AssertionError(f"{tp}: twice {twice[:10]}, skipped {skipped[:10]}")


def every_sequence_once(processed: list[Processed], acked: dict[str, int]) -> None:
    for topic, count in acked.items():
        seqs = sorted(seq for t, _, _, seq in processed if t == topic)
        assert seqs == list(range(count)), (topic, len(seqs), count)


async def test_a_zookeeper_cluster_moves_to_kraft_with_its_producers_and_consumer_groups(
    old: RunningCluster, local: str, topic: str, tmp_path: Path
) -> None:
    steps = Steps()
    topics = {f"{topic}.{stem}": spec for stem, spec in TOPICS.items()}
    tps = [TopicPartition(t, p) for t, (n, _) in topics.items() for p in range(n)]
    for name, (partitions, _) in topics.items():
        await create_topic(old.bootstrap, name, partitions)
    keeping_up = GroupConsumer(f"{topic}.billing", list(topics))
    lagging = GroupConsumer(f"{topic}.reports", list(topics))
    groups = [keeping_up.group, lagging.group]
    raw: dict[str, object] = {
        "local": {"bootstrap_servers": local},
        "remotes": [{"name": "old", "bootstrap_servers": old.bootstrap}],
        "topics": {"include": list(topics)},
        "groups": {"include": groups},  # the daemon copies them every 10 s
    }
    config = tmp_path / "migration.yaml"
    config.write_text(yaml.safe_dump(raw))

    # the old cluster in use: producers writing, one group keeping up, one lagging
    producers = Producers({t: codec for t, (_, codec) in topics.items()})
    stop_producers, stop_consumers = asyncio.Event(), asyncio.Event()
    writing = asyncio.create_task(producers.run(old.bootstrap, stop_producers))
    reading = [
        asyncio.create_task(
            keeping_up.run(old.bootstrap, stop_consumers, max_records=500, pause_s=0)
        ),
        asyncio.create_task(
            lagging.run(old.bootstrap, stop_consumers, max_records=20, pause_s=0.3)
        ),
    ]
    await wait_until("records on the old cluster", lambda: min(producers.acked.values()) >= SEEDED)
    steps.done("0. old cluster in use")

    # 1. seed while the producers write
    seeded = await syncer_cli("catch-up", "-c", str(config), "--no-progress")
    assert seeded.returncode == 0, seeded.stdout + seeded.stderr
    steps.done("1. syncer catch-up (seed)")
    # the active groups' offsets so far, from a ZooKeeper-mode cluster's coordinator: only
    # where the copy reaches them, so the lagging group's, not those of the group keeping up
    # with the producers (the daemon or the final catch-up commits them)
    seeded_offsets = {g: await committed(local, g) for g in groups}
    assert seeded_offsets[lagging.group]
    for group, offsets in seeded_offsets.items():
        source_now = await committed(old.bootstrap, group)  # only ever moves forward
        assert all(o <= source_now[tp] for tp, o in offsets.items()), group
    log.warning(
        "seed: group offsets copied for %s partitions",
        {g[-7:]: len(offsets) for g, offsets in seeded_offsets.items()},
    )

    # 2. the daemon until it has followed the live writes for a while, every partition is near
    # the old cluster's end and it has copied the lagging group's offsets (a pass soon after
    # its first topic refresh, then every 10 s). The group keeping up commits at the old
    # cluster's end, which a mirror reaches only now and then.
    daemon = Daemon(tmp_path, raw)
    try:
        await daemon.wait_for(
            "lag near 0 and the lagging group copied",
            lambda s: (
                len(s["partitions"]) == len(tps)
                and sum(p["lag"] for p in s["partitions"]) < 500
                and sum(p["records_copied"] for p in s["partitions"]) >= 2000
                and s["groups"].get(lagging.group, {}).get("committed")
            ),
        )
        status: dict[str, Any] = await daemon.status()
        log.warning(
            "daemon: lag %d over %d partitions; groups %s",
            sum(p["lag"] for p in status["partitions"]),
            len(status["partitions"]),
            status["groups"],
        )
        steps.done("2. syncer run (lag ~0, one group pass)")

        # 3. verify while the producers still write: over the offsets both hold
        verified = await syncer_cli("verify", "-c", str(config), "--json")
        assert verified.returncode == 0, verified.stdout + verified.stderr
        verdicts = json.loads(verified.stdout)
        assert len(verdicts) == len(tps) and all(v["identical"] for v in verdicts), verdicts
        log.warning("verify while writing compared %d offsets", sum(v["to"] for v in verdicts))
        steps.done("3. syncer verify (producers writing)")

        # 4. stop the producers, then the consumers (they commit what they processed)
        stop_producers.set()
        await writing
        stop_consumers.set()
        await asyncio.gather(*reading)
        old_ends = await end_offsets(old.bootstrap, tps)
        old_committed = {
            g.group: await committed(old.bootstrap, g.group) for g in (keeping_up, lagging)
        }
        lag = {
            g: sum(old_ends[tp] - offsets.get(tp, 0) for tp in tps)
            for g, offsets in old_committed.items()
        }
        log.warning(
            "at the move: %d records in %d partitions (%s); groups' lag %s",
            sum(old_ends.values()),
            len(tps),
            producers.acked,
            lag,
        )
        assert sum(old_ends.values()) == sum(producers.acked.values())
        assert lag[lagging.group] > 1000  # it really lags: its move is the hard case
        steps.done("4. stop producers and consumers")
    finally:
        await asyncio.to_thread(daemon.stop)  # 5. SIGTERM
    assert daemon.proc.returncode == 0, daemon.log.read_text()[-3000:]
    steps.done("5a. stop the daemon (SIGTERM)")
    current = 0
    for group, offsets in old_committed.items():
        on_new = await committed(local, group)
        current += sum(on_new.get(tp) == offset for tp, offset in offsets.items())
    log.warning(
        "after the daemon: %d of %d group partitions already at the old cluster's offsets",
        current,
        sum(len(offsets) for offsets in old_committed.values()),
    )

    # 5. the final catch-up copies the rest and the groups' last offsets
    final = await syncer_cli("catch-up", "-c", str(config), "--no-progress")
    assert final.returncode == 0, final.stdout + final.stderr
    steps.done("5b. syncer catch-up (final)")
    verified = await syncer_cli("verify", "-c", str(config), "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    verdicts = json.loads(verified.stdout)
    assert len(verdicts) == len(tps) and all(v["identical"] for v in verdicts), verdicts
    assert {(v["topic"], v["partition"]): v["to"] for v in verdicts} == {
        (tp.topic, tp.partition): end for tp, end in old_ends.items()
    }
    assert await end_offsets(local, tps) == old_ends
    steps.done("5c. syncer verify (final)")

    # 6. the groups' committed offsets on the new cluster are the old cluster's
    for group, offsets in old_committed.items():
        assert await committed(local, group) == offsets, group
    steps.done("6. group offsets checked")

    if shutil.which("kcat"):  # an independent reader on a sample: one partition per topic
        for name in topics:
            copied = await asyncio.to_thread(kcat, local, name, 1)
            assert len(copied) == old_ends[TopicPartition(name, 1)]
            assert copied == await asyncio.to_thread(kcat, old.bootstrap, name, 1)

    # 7. the consumers move: same group ids, against the new cluster
    on_old = {g.group: len(g.processed) for g in (keeping_up, lagging)}
    stop_consumers = asyncio.Event()
    reading = [
        asyncio.create_task(g.run(local, stop_consumers, max_records=500, pause_s=0))
        for g in (keeping_up, lagging)
    ]
    await wait_until(
        "both groups through the old records on the new cluster",
        lambda: keeping_up.reached(old_ends) and lagging.reached(old_ends),
    )
    for g in (keeping_up, lagging):
        first_new: dict[TopicPartition, int] = {}
        for t, p, offset, _ in g.processed[on_old[g.group] :]:
            first_new.setdefault(TopicPartition(t, p), offset)
        resumed_at = {tp: old_committed[g.group].get(tp, 0) for tp in first_new}
        assert first_new == resumed_at, g.group  # the next record, on every partition
        every_record_once(g.processed, old_ends)
        every_sequence_once(g.processed, producers.acked)
    steps.done("7. consumers moved, caught up")

    # 8. the producers move: their records follow the old ones, offsets continuing
    moved_at = dict(producers.acked)
    stop_producers = asyncio.Event()
    writing = asyncio.create_task(producers.run(local, stop_producers))
    await wait_until(
        "records from the moved producers",
        lambda: min(producers.acked[t] - moved_at[t] for t in topics) >= 1000,
    )
    stop_producers.set()
    await writing
    new_ends = await end_offsets(local, tps)
    await wait_until(
        "both groups through the new records",
        lambda: keeping_up.reached(new_ends) and lagging.reached(new_ends),
    )
    stop_consumers.set()
    await asyncio.gather(*reading)
    for g in (keeping_up, lagging):
        every_record_once(g.processed, new_ends)
        every_sequence_once(g.processed, producers.acked)
        for t, p, offset, seq in g.processed:
            assert (seq >= moved_at[t]) == (offset >= old_ends[TopicPartition(t, p)])
    steps.done("8. producers moved, consumers read on")

    log.warning(
        "migration: %d records before the move, %d after, %d partitions, 2 groups\n%s",
        sum(old_ends.values()),
        sum(new_ends.values()) - sum(old_ends.values()),
        len(tps),
        "\n".join(f"  {step:<42} {seconds:6.1f} s" for step, seconds in steps.times),
    )
