"""Test data of every kind, written with aiokafka's producer, and read back offset by offset."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from syncer.batches import Batch, decode, record_digest, split_batches
from syncer.clusters import Cluster
from syncer.config import ClusterConfig, Config
from syncer.syncer import Syncer
from syncer.testbed import ClusterSpec, Testbed
from syncer.testbed.bed import free_port
from syncer.testbed.jars import KafkaJars

CODECS = (None, "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True)
class Rec:
    """One record as a reader sees it: what must be identical on both sides."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int
    timestamp_type: int


async def create_topic(bootstrap: str, topic: str, partitions: int = 1, **configs: str) -> None:
    async with Cluster(ClusterConfig(bootstrap, name="test"), role="test") as cluster:
        await cluster.create_topic(topic, partitions, dict(configs), 1)
        for _ in range(50):
            if (await cluster.partition_counts()).get(topic) == partitions:
                return
            await asyncio.sleep(0.1)


async def produce(
    bootstrap: str,
    topic: str,
    records: list[tuple[bytes | None, bytes | None]],
    *,
    partition: int = 0,
    codec: str | None = None,
    headers: list[tuple[str, bytes | None]] | None = None,
    timestamp_ms: int | None = None,
    linger_ms: int = 0,
    max_request_size: int = 1048576,
    timestamps: list[int] | None = None,
) -> None:
    """``records`` sent together, then flushed (in one batch where ``linger_ms`` lets them
    gather); ``timestamps``: each record's own CreateTime, else ``timestamp_ms`` for all."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=codec,
        linger_ms=linger_ms,
        max_request_size=max_request_size,
        acks="all",
    )
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic,
                key=k,
                value=v,
                partition=partition,
                headers=headers,
                timestamp_ms=timestamp_ms if timestamps is None else timestamps[i],
            )
            for i, (k, v) in enumerate(records)
        ]
        await producer.flush()
        for future in futures:
            await future
    finally:
        await producer.stop()


async def produce_transactions(
    bootstrap: str,
    topic: str,
    transactions: list[tuple[bool, list[tuple[bytes | None, bytes | None]]]],
    *,
    partition: int = 0,
) -> None:
    """Each ``(commit, records)`` in turn as one transaction of one transactional producer,
    committed or aborted: its records, then its marker."""
    txn = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-txn")
    await txn.start()
    try:
        for commit, records in transactions:
            await txn.begin_transaction()
            for key, value in records:
                await txn.send_and_wait(topic, value, key=key, partition=partition)
            await (txn.commit_transaction() if commit else txn.abort_transaction())
    finally:
        await txn.stop()


async def produce_every_kind(bootstrap: str, topic: str, partition: int = 0) -> int:
    """Keys, null keys and values, headers, explicit timestamps, each codec, a large record.
    Returns the number of records written."""
    count = 0
    plain = [(b"key-%d" % i, b"value-%d" % i) for i in range(20)]
    await produce(bootstrap, topic, plain, partition=partition)
    count += len(plain)
    await produce(
        bootstrap, topic, [(None, b"no key"), (b"no value", None), (b"", b"")], partition=partition
    )
    count += 3
    await produce(
        bootstrap,
        topic,
        [(b"h", b"with headers")],
        partition=partition,
        headers=[("trace", b"abc"), ("empty", b""), ("dup", b"1"), ("dup", b"2")],
    )
    count += 1
    await produce(
        bootstrap,
        topic,
        [(b"t", b"old timestamp")],
        partition=partition,
        timestamp_ms=1_500_000_000_000,
    )
    count += 1
    for codec in CODECS:
        batch = [(b"%s-%d" % (str(codec).encode(), i), b"x" * (i * 37 % 500)) for i in range(50)]
        await produce(bootstrap, topic, batch, partition=partition, codec=codec, linger_ms=20)
        count += len(batch)
    large = [(b"large", bytes(range(256)) * 3500)]  # ~900 KB, near the 1 MB default limit
    await produce(bootstrap, topic, large, partition=partition)
    count += 1
    return count


async def catch_up(config: Config) -> Syncer:
    """One catch-up with ``config``; the syncer afterwards (stopped), for its statuses."""
    syncer = Syncer(config)
    async with syncer:
        await syncer.catch_up()
    return syncer


async def delete_records(bootstrap: str, topic: str, before: int, partition: int = 0) -> None:
    """DeleteRecords: the partition's start moves up to ``before``."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.records_to_delete import RecordsToDelete

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_records({TopicPartition(topic, partition): RecordsToDelete(before)})
    finally:
        await admin.close()


async def alter_topic(bootstrap: str, topic: str, settings: dict[str, str]) -> None:
    """Set ``settings`` on ``topic`` (IncrementalAlterConfigs' older sibling, AlterConfigs)."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, settings)])
    finally:
        await admin.close()


def kcat_lines(bootstrap: str, topic: str, partition: int) -> list[str]:
    """Offset, key and value of every record, as kcat (librdkafka, not our code) reads them."""
    read = ["kcat", "-C", "-q", "-e", "-b", bootstrap, "-t", topic, "-p", str(partition)]
    out = subprocess.run(
        [*read, "-o", "beginning", "-f", "%o %k %s\\n"],
        capture_output=True,
        check=True,
        text=True,
        timeout=60,
    )
    return out.stdout.splitlines()


async def read_partition(bootstrap: str, topic: str, partition: int = 0) -> list[Rec]:
    """Every record of a partition, offset by offset (read_uncommitted: what is in the log)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        fetch_max_bytes=8 << 20,
        max_partition_fetch_bytes=4 << 20,
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        out: list[Rec] = []
        while await consumer.position(tp) < end:
            got = await consumer.getmany(tp, timeout_ms=2000)
            for m in got.get(tp, []):
                out.append(
                    Rec(m.offset, m.key, m.value, tuple(m.headers), m.timestamp, m.timestamp_type)
                )
        return out
    finally:
        await consumer.stop()


async def all_batches(bootstrap: str, topic: str, partition: int = 0) -> AsyncIterator[Batch]:
    """Every batch of a partition, raw, in offset order."""
    tp = TopicPartition(topic, partition)
    async with Cluster(ClusterConfig(bootstrap, name="test"), role="test") as cluster:
        end = (await cluster.latest([tp]))[tp]
        offset = 0
        while offset < end:
            fetched = await cluster.fetch(
                await cluster.leader_for(tp),
                {tp: offset},
                max_wait_ms=100,
                max_bytes=32 << 20,
                partition_max_bytes=16 << 20,
            )
            for batch in split_batches(fetched[tp].records):
                if batch.base_offset >= offset:
                    yield batch
                    offset = batch.next_offset


async def batch_layout(
    bootstrap: str, topic: str, partition: int = 0
) -> list[tuple[int, int, str]]:
    """(base offset, record count, codec) of every batch: the copy must keep codecs."""
    return [
        (b.base_offset, b.record_count, b.codec)
        async for b in all_batches(bootstrap, topic, partition)
    ]


async def record_codecs(bootstrap: str, topic: str, partition: int = 0) -> dict[int, str]:
    """The codec of the batch holding each offset: small uncompressed batches may be
    coalesced into one (``copier.coalesce_bytes``), compressed ones never change codec."""
    return {
        offset: b.codec
        async for b in all_batches(bootstrap, topic, partition)
        for offset in range(b.base_offset, b.next_offset)
    }


async def single_record_batches(
    bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], partition: int = 0
) -> None:
    """Each record in a batch of its own (the next is sent once the one before is acked), as
    a producer with linger.ms=0 writes a slow stream."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks="all")
    await producer.start()
    try:
        for key, value in records:
            await (await producer.send(topic, key=key, value=value, partition=partition))
    finally:
        await producer.stop()


def run_cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``syncer ARGS`` as a user runs it, with its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "syncer", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def write_config(path: Path, local: str, east: str, topic: str) -> None:
    """A config file copying ``topic`` from one remote, east, for the CLI."""
    path.write_text(
        yaml.safe_dump(
            {
                "local": {"bootstrap_servers": local},
                "remotes": [{"name": "east", "bootstrap_servers": east}],
                "topics": {"include": [topic]},
            }
        )
    )


def make_config(local: str, remotes: dict[str, str], include: list[str], **extra: object) -> Config:
    raw: dict[str, object] = {
        "local": {"bootstrap_servers": local},
        "remotes": [{"name": n, "bootstrap_servers": b} for n, b in remotes.items()],
        "topics": {"include": include},
        "copier": {"shutdown_timeout_s": 10},
        "http": {"listen": "127.0.0.1:0"},  # tests run many daemons side by side
    }
    raw.update(extra)
    return Config.from_dict(raw)


async def partition_digests(
    bootstrap: str, topic: str, partition: int = 0
) -> list[tuple[int, str]]:
    """(offset, digest of what a reader sees of it: timestamp, key, value, headers) of every
    record of a partition, in order: equal lists mean the same records at the same offsets,
    however the batches are cut (syncer writes neighbouring small batches as one,
    ``copier.coalesce_bytes``, so a copy's layout may differ from its remote's)."""
    return [
        (r.offset, record_digest(r).hex())
        async for b in all_batches(bootstrap, topic, partition)
        for r in decode(b)
    ]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


DAEMON_WAIT_S = 60


class Daemon:
    """``syncer run`` as a child process with its HTTP endpoint on a free port."""

    def __init__(self, tmp_path: Path, raw: dict[str, object]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.path = tmp_path / "daemon.yaml"
        self.path.write_text(yaml.safe_dump({**raw, "http": {"listen": f"127.0.0.1:{self.port}"}}))
        self.log = tmp_path / "daemon.log"
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "syncer",
                    os.environ.get("SYNCER_TEST_VERBOSITY", "-v"),
                    "run",
                    "-c",
                    str(self.path),
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    async def status(self) -> dict[str, object]:
        _code, body = await asyncio.to_thread(get, f"{self.url}/status")
        return dict(json.loads(body))

    async def wait_for(self, what: str, check: object) -> None:
        for _ in range(DAEMON_WAIT_S * 4):
            try:
                if check(await self.status()):  # type: ignore[operator]
                    return
            except OSError:
                pass  # not listening yet
            assert self.proc.poll() is None, f"daemon exited: {self.log.read_text()[-2000:]}"
            await asyncio.sleep(0.25)
        try:
            last = json.dumps(await self.status())[-3000:]
            buffer = {
                k[0]: v
                for k, v in samples(get(f"{self.url}/metrics")[1]).items()
                if k[0].startswith("syncer_buffer")
            }
        except OSError as exc:
            last, buffer = f"no status: {exc}", {}
        raise AssertionError(
            f"timed out waiting for {what}: {self.log.read_text()[-2000:]}\n"
            f"last status: {last}\nbuffer: {buffer}"
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGUSR1)  # it logs what each task awaits
                time.sleep(2)
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(
                    f"daemon did not stop within 30 s of SIGTERM: {self.log.read_text()[-8000:]}"
                ) from None


@contextlib.contextmanager
def own_bed(root: Path, jars: KafkaJars, specs: Iterable[ClusterSpec]) -> Iterator[Testbed]:
    """Clusters of a test module's own (tests that stop brokers, secure them or put a proxy
    in front), started in ``root`` and stopped after."""
    bed = Testbed(root, jars)
    bed.up(specs)
    try:
        yield bed
    finally:
        bed.down(kill=True)  # throw-away data: no clean shutdown to wait for


def first_status(syncer: Syncer, field: str) -> object:
    """``field`` of the status of ``syncer``'s one partition (None before it has one)."""
    statuses = syncer.statuses()
    return getattr(statuses[0], field) if statuses else None


async def poll_until(what: str, check: Callable[[], Awaitable[bool]], timeout: float) -> float:
    """The moment (``time.monotonic()``) ``check()`` was first seen to hold."""
    started = time.monotonic()
    while not await check():
        assert time.monotonic() - started < timeout, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)
    return time.monotonic()


async def until(condition: Callable[[], bool], what: str, timeout_s: float) -> None:
    """Wait until ``condition()`` holds, looking every 50 ms; AssertionError naming
    ``what`` once ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {timeout_s:.0f} s")
        await asyncio.sleep(0.05)
