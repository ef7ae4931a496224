"""The deployment's one writer identity: a producer id and epoch allocated once with
InitProducerId and kept in a small compacted topic on the local cluster.

Every syncer process of a deployment writes with this identity and stamps each batch with
``baseSequence = local offset mod 2^31``; the broker then accepts a batch only if it continues
the partition's sequence, and answers an exact repeat with the original offset. That is what
keeps a zombie from writing an offset twice (DESIGN, invariant 3)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import errors as kafka_errors
from aiokafka.structs import TopicPartition

from syncer.clusters import Cluster, client_options
from syncer.errors import TransientClusterError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WriterIdentity:
    producer_id: int
    producer_epoch: int


async def load_identity(local: Cluster, state_topic: str, deployment: str) -> WriterIdentity:
    """The deployment's identity, allocating and recording it on first use. If two processes
    race to allocate, both adopt the first record in the topic. A connection lost meanwhile
    is transient (worth another try), not a crash at start-up."""
    try:
        return await _load_identity(local, state_topic, deployment)
    except (kafka_errors.KafkaError, OSError) as exc:
        raise TransientClusterError(f"{local.name}: loading the writer identity: {exc!r}") from exc


async def _load_identity(local: Cluster, state_topic: str, deployment: str) -> WriterIdentity:
    # created only when missing: a creation goes to the node the metadata names controller,
    # and a start must not wait on a hung broker that leads nothing it reads
    if state_topic not in await local.partition_counts():
        await local.create_topic(
            # not compacted: compaction keeps the last record per key, and every process must
            # keep agreeing on the first one
            state_topic,
            1,
            {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"},
            -1,
        )
    key = f"producer:{deployment}".encode()
    found = await _read_first(local, state_topic, key)
    if found is not None:
        return found
    producer_id, epoch = await local.init_producer_id()
    producer = AIOKafkaProducer(
        bootstrap_servers=local.config.bootstrap_servers,
        request_timeout_ms=local.config.request_timeout_ms,
        acks="all",
        enable_idempotence=True,
        **client_options(local.config),
    )
    await producer.start()
    try:
        value = json.dumps({"producer_id": producer_id, "producer_epoch": epoch}).encode()
        await producer.send_and_wait(state_topic, key=key, value=value, partition=0)
    finally:
        await producer.stop()
    found = await _read_first(local, state_topic, key)
    assert found is not None, "identity record vanished right after it was written"
    log.info(
        "deployment %s writes as producer id %d epoch %d",
        deployment,
        found.producer_id,
        found.producer_epoch,
    )
    return found


async def _read_first(local: Cluster, topic: str, key: bytes) -> WriterIdentity | None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=local.config.bootstrap_servers,
        # the cluster's own timeout, not aiokafka's 40 s: a hung broker first among the
        # bootstrap servers held each start that long
        request_timeout_ms=local.config.request_timeout_ms,
        enable_auto_commit=False,
        isolation_level="read_committed",
        **client_options(local.config),
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            for record in batch.get(tp, []):
                if record.key == key and record.value:
                    raw = json.loads(record.value)
                    return WriterIdentity(int(raw["producer_id"]), int(raw["producer_epoch"]))
        return None
    finally:
        await consumer.stop()
