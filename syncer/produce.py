"""Produce requests to the local cluster: acks=all, one batch per partition, by topic id
where the brokers take Produce v13 (Kafka 4.1+), else by name; written straight onto the open
connection where that can be, its answer handed on as it is read (``produce_then``,
``syncer.direct``). A produce answer's code is judged by ``alignment.judge``, not here."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from aiokafka import errors as kafka_errors
from aiokafka.protocol.produce import ProduceRequest

from syncer.connection import TP, ClusterConnection
from syncer.direct import by_id, open_connection, time_out, write_produce
from syncer.protocol import ProduceByIdRequest, produced_by_id

log = logging.getLogger(__name__)


class ProduceResult(NamedTuple):
    error_code: int
    base_offset: int
    message: str | None = None
    # the local broker's clock, stamped on the batch in place of its records' timestamps
    # (the topic's message.timestamp.type is LogAppendTime); -1: the timestamps were kept
    log_append_time: int = -1


class ProduceRequests(ClusterConnection):
    """The produce requests of one cluster, over its connection."""

    _writes_by_id = True  # until a broker turns out not to take Produce v13

    async def produce(
        self,
        node: int,
        batches: dict[TP, bytes | bytearray],
        *,
        timeout_ms: int,
        topic_ids: Mapping[str, uuid.UUID] | None = None,
        connection: int = 0,
        may_send: Callable[[], bool] | None = None,
    ) -> dict[TP, ProduceResult]:
        """One acks=all produce request carrying one batch per partition, on connection
        number ``connection`` (``ClusterConnection.send``, which asks ``may_send`` once the
        connection is open: False, and it is not sent). Given
        ``topic_ids`` (each topic's id as first seen; not empty), each topic is named by its
        id where the brokers take Produce v13 (Kafka 4.1+): a topic deleted, or recreated
        under its name, since then answers UNKNOWN_TOPIC_ID and nothing is appended to the
        new log. A topic with no id there yet (another process of the group saw it first)
        is not sent: it answers UNKNOWN_TOPIC_OR_PARTITION, to be tried again once the topic
        refresh has learned its id. Else by name."""
        if topic_ids and self._writes_by_id:
            try:
                return await self._produce_by_id(
                    node, batches, timeout_ms, topic_ids, connection, may_send
                )
            except NotImplementedError:  # the broker has no Produce v13
                log.warning(
                    "%s cluster %s cannot produce by topic id (Kafka 4.1+ can): a topic"
                    " recreated there while it is copied is told only by the topic refresh",
                    self.role,
                    self.name,
                )
                self._writes_by_id = False
        topics: dict[str, list[tuple[int, bytes | bytearray]]] = defaultdict(list)
        for tp, batch in batches.items():
            topics[tp.topic].append((tp.partition, batch))
        request = ProduceRequest(None, -1, timeout_ms, list(topics.items()))
        seen = self.leaders.generation
        response = await self.send(node, request, connection=connection, may_send=may_send)
        out: dict[TP, ProduceResult] = {}
        for topic, partitions in response.topics:
            for partition, code, offset, *rest in partitions:  # v2 on: the append time
                append_time = rest[0] if rest else -1
                out[TP(topic, partition)] = ProduceResult(code, offset, None, append_time)
        self.leaders_moved([(tp.topic, r.error_code) for tp, r in out.items()], seen)
        return out

    async def _produce_by_id(
        self,
        node: int,
        batches: dict[TP, bytes | bytearray],
        timeout_ms: int,
        topic_ids: Mapping[str, uuid.UUID],
        connection: int,
        may_send: Callable[[], bool] | None,
    ) -> dict[TP, ProduceResult]:
        topics, names, out = self._by_id(batches, topic_ids)
        if not topics:
            return out
        seen = self.leaders.generation
        request = ProduceByIdRequest(-1, timeout_ms, topics)
        response = await self.send(node, request, connection=connection, may_send=may_send)
        return self._produced(response, names, out, seen)

    @staticmethod
    def _by_id(
        batches: dict[TP, bytes | bytearray], topic_ids: Mapping[str, uuid.UUID]
    ) -> tuple[
        dict[uuid.UUID, list[tuple[int, bytes | bytearray]]], dict[uuid.UUID, str], dict[TP, Any]
    ]:
        """A topic with no id here yet is not sent: it answers UNKNOWN_TOPIC_OR_PARTITION."""
        topics, names, unknown = by_id(batches, topic_ids)
        code = kafka_errors.UnknownTopicOrPartitionError.errno
        return (
            topics,
            names,
            {tp: ProduceResult(code, -1, "topic id not known yet") for tp in unknown},
        )

    def _produced(
        self, response: Any, names: dict[uuid.UUID, str], out: dict[TP, ProduceResult], seen: int
    ) -> dict[TP, ProduceResult]:
        answered = []  # the broker's answers (not the ones made up for unknown ids)
        for p in produced_by_id(response):
            name = names.get(p.topic_id)
            if name is not None:
                result = ProduceResult(p.error_code, p.base_offset, p.message, p.append_time)
                out[TP(name, p.partition)] = result
                answered.append((name, p.error_code))
        self.leaders_moved(answered, seen)
        return out

    def produce_then(
        self,
        node: int,
        batches: dict[TP, bytes | bytearray],
        then: Callable[[dict[TP, ProduceResult] | Exception], None],
        *,
        timeout_ms: int,
        topic_ids: Mapping[str, uuid.UUID] | None = None,
        connection: int = 0,
    ) -> asyncio.Handle | None:
        """``produce`` by topic id with its request written before this returns (in the
        caller's loop turn, ``syncer.direct``), its outcome handed to ``then`` once, with no
        task: the results as the answer is read, or the error, as its connection closes or
        once it went unanswered for the request timeout (the connection is then closed, as
        ``send`` does). The handle of that timeout (cancel it to give the request up); None
        where the request cannot be written now: no ids, no Produce v13, the connection not
        open (or tuned) yet. Raises TransientClusterError if the connection broke as the
        request was written (``then`` is not called)."""
        by_id = topic_ids and self._writes_by_id
        conn = open_connection(self._client, node, connection) if by_id else None
        if conn is None or not topic_ids or (self._buffers and conn not in self._tuned):
            return None
        topics, names, out = self._by_id(batches, topic_ids)
        loop = asyncio.get_running_loop()
        if not topics:  # nothing to send: the ones with no id answered as such
            return loop.call_soon(then, out)
        seen = self.leaders.generation

        def answered(response: Any) -> None:
            timer.cancel()
            outcome: dict[TP, ProduceResult] | Exception
            try:
                if isinstance(response, BaseException):
                    raise response
                outcome = self._produced(response, names, out, seen)
            except (kafka_errors.KafkaError, OSError, TimeoutError) as exc:
                outcome = self.failed(node, exc)
            except Exception as exc:  # a bug: the writes fail with it
                outcome = exc
            then(outcome)

        try:
            future = write_produce(conn, -1, timeout_ms, topics, answered)
        except kafka_errors.KafkaError as exc:
            raise self.failed(node, exc) from exc
        timer = loop.call_later(conn._request_timeout, time_out, conn, future)
        return timer
