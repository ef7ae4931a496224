"""One class over aiokafka per cluster: metadata, ends, raw fetch and produce requests, topic
admin. aiokafka's errors are translated into ours here, at the boundary."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import ssl
import uuid
import weakref
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeAlias, cast

from aiokafka import AIOKafkaClient
from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.admin.records_to_delete import RecordsToDelete
from aiokafka.client import ConnectionGroup
from aiokafka.conn import create_conn
from aiokafka.helpers import create_ssl_context
from aiokafka.protocol.commit import OffsetCommitRequest
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.protocol.transaction import InitProducerIdRequest
from aiokafka.structs import TopicPartition

from syncer.config import ClusterConfig
from syncer.errors import (
    AuthenticationError,
    ClusterError,
    TransientClusterError,
    UnreachableError,
)
from syncer.protocol import (
    NO_ID,
    UNKNOWN_TOPIC_ID,
    ProduceByIdRequest,
    TopicIdsRequest,
    produced_by_id,
    topics_of,
)
from syncer.retry import retried

log = logging.getLogger(__name__)

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
EARLIEST = -2
LATEST = -1

TP: TypeAlias = TopicPartition


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """One partition of a fetch response, records still as raw bytes."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: tuple[tuple[int, int], ...]
    records: bytes

    @property
    def stable_end(self) -> int:
        return self.last_stable_offset if self.last_stable_offset >= 0 else self.high_watermark


@dataclass(frozen=True, slots=True)
class ProduceResult:
    error_code: int
    base_offset: int
    message: str | None = None


def is_retriable(code: int) -> bool:
    """Does Kafka say an error with this code may pass (a moved leader, a timeout)?"""
    kafka_error = kafka_errors.for_code(code)
    return bool(
        getattr(kafka_error, "retriable", False) or getattr(kafka_error, "invalid_metadata", False)
    )


# codes aiokafka 0.14 does not know (it names them UnknownError): name and meaning
UNKNOWN_TO_AIOKAFKA = {
    UNKNOWN_TOPIC_ID: (
        "UnknownTopicIdError",
        "no topic holds the id it was asked by: the topic was deleted, or recreated under"
        " its name, since that id was learned",
    ),
}


def error_for(code: int, context: str) -> ClusterError:
    """Our error for a Kafka error code; transient ones are retriable."""
    if code in UNKNOWN_TO_AIOKAFKA:
        name, meaning = UNKNOWN_TO_AIOKAFKA[code]
        return ClusterError(f"{context}: {name} (error {code}): {meaning}")
    text = f"{context}: {kafka_errors.for_code(code).__name__} (error {code})"
    if is_retriable(code):
        return TransientClusterError(text)
    return ClusterError(text)


BOOTSTRAP_ATTEMPTS = 3  # at start-up, 1 s and 2 s apart

# NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS: ask again
COORDINATOR_ERRORS = {14, 15, 16}


@contextlib.contextmanager
def _admin_errors(what: str) -> Iterator[None]:
    try:
        yield
    except (kafka_errors.KafkaError, OSError) as exc:
        raise TransientClusterError(f"{what}: {exc!r}") from exc


def client_options(config: ClusterConfig) -> dict[str, Any]:
    """The security settings of any aiokafka client of this cluster."""
    options: dict[str, Any] = {"security_protocol": config.security_protocol}
    if "SSL" in config.security_protocol:
        context = create_ssl_context(
            cafile=config.ssl_cafile or None,
            certfile=config.ssl_certfile or None,
            keyfile=config.ssl_keyfile or None,
            password=config.ssl_key_password or None,
        )
        context.check_hostname = config.ssl_check_hostname
        options["ssl_context"] = context
    if config.security_protocol.startswith("SASL"):
        options["sasl_mechanism"] = config.sasl_mechanism
        if config.sasl_mechanism == "OAUTHBEARER":
            options["sasl_oauth_token_provider"] = config.sasl_oauth_token_provider
        else:
            options["sasl_plain_username"] = config.sasl_username
            options["sasl_plain_password"] = config.sasl_password
    return options


class Cluster:
    """A connection to one cluster. ``async with Cluster(cfg) as cluster: ...``"""

    def __init__(self, config: ClusterConfig, *, role: str, lane: int = 0) -> None:
        self.config = config
        self.name = config.name or role
        self.role = role
        self.lane = lane
        self._client = AIOKafkaClient(
            bootstrap_servers=config.bootstrap_servers,
            client_id=f"{config.client_id}-{self.name}" + (f"-lane{lane}" if lane else ""),
            request_timeout_ms=config.request_timeout_ms,
            metadata_max_age_ms=config.metadata_max_age_ms,
            **client_options(config),
        )
        self._admin: AIOKafkaAdminClient | None = None
        self._started = False
        self._writes_by_id = True  # until a broker turns out not to take Produce v13
        self._buffers = {
            socket.SO_RCVBUF: config.socket_receive_buffer_bytes,
            socket.SO_SNDBUF: config.socket_send_buffer_bytes,
        }
        self._buffers = {k: v for k, v in self._buffers.items() if v > 0}
        self._tuned: weakref.WeakSet[Any] = weakref.WeakSet()

    def __repr__(self) -> str:
        return f"<Cluster {self.role} {self.name} {self.config.bootstrap_servers}>"

    async def __aenter__(self) -> Cluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        if self._started:
            return
        for attempt in range(1, BOOTSTRAP_ATTEMPTS + 1):
            try:
                await self._client.bootstrap()
                break
            except (kafka_errors.KafkaError, OSError) as exc:
                refused = await self._refused()  # credentials: no point in trying again
                if refused is not None or attempt == BOOTSTRAP_ATTEMPTS:
                    await self._client.close()
                    where = f"{self.role} cluster {self.name!r} at {self.config.bootstrap_servers}"
                    if refused is not None:
                        raise AuthenticationError(f"{where}: {refused}") from exc
                    raise UnreachableError(f"{where} is unreachable: {exc}") from exc
                await asyncio.sleep(attempt)  # a blip at start-up (a busy broker) is not fatal
        self._started = True

    async def _refused(self) -> str | None:
        """Why the first bootstrap server refuses us, if it does over credentials or
        certificates (aiokafka only logs it): one connection, no retries."""
        if self.config.security_protocol == "PLAINTEXT":
            return None
        first = self.config.bootstrap_servers.split(",")[0].strip()
        host, _, port = first.rpartition(":")
        try:
            conn = await create_conn(
                host.strip("[]"),
                int(port),
                request_timeout_ms=self.config.request_timeout_ms,
                **client_options(self.config),
            )
        except (kafka_errors.SaslAuthenticationFailed, kafka_errors.AuthenticationFailedError) as e:
            user = self.config.sasl_username
            who = f" as {user!r}" if user else ""
            return f"authentication failed ({self.config.sasl_mechanism}{who}): {e}"
        except kafka_errors.UnsupportedSaslMechanismError:
            return f"the broker does not accept SASL mechanism {self.config.sasl_mechanism}"
        except ssl.SSLError as exc:
            return f"TLS handshake failed: {exc.reason or exc}"
        except (kafka_errors.KafkaError, OSError, ValueError):
            return None
        conn.close()
        return None

    async def stop(self) -> None:
        if self._admin is not None:
            admin, self._admin = self._admin, None
            await admin.close()
        if self._started:
            self._started = False
            await self._client.close()

    # metadata ---------------------------------------------------------------------------

    async def refresh_metadata(self) -> None:
        """The metadata of every topic, asked now of the first broker that answers and
        applied to the client's view; each request ends within the request timeout. Not
        by waiting for aiokafka's background update: after the local broker stopped and came
        back, that update's future was seen never to resolve (a daemon hung in its topic
        refresh and could not stop; aio-libs/aiokafka#712)."""
        brokers = [b.nodeId for b in self._client.cluster.brokers()]
        random.shuffle(brokers)
        failures = []
        for node in brokers:
            try:
                response = await self._client.send(node, MetadataRequest(None, False))
            except (kafka_errors.KafkaError, OSError, TimeoutError) as exc:
                failures.append(f"node {node}: {type(exc).__name__}")
                continue
            if response.brokers:  # a broker still starting may know of none
                self._client.cluster.update_metadata(response)
                return
            failures.append(f"node {node}: no brokers in its answer")
        if not brokers:  # none known yet: aiokafka asks its bootstrap servers
            timeout = self.config.request_timeout_ms / 1000
            with contextlib.suppress(TimeoutError):
                if await asyncio.wait_for(self._client.force_metadata_update(), timeout):
                    return
            failures.append("the bootstrap servers")
        raise TransientClusterError(f"{self.name}: metadata: no answer from {', '.join(failures)}")

    async def reachable(self) -> bool:
        """Does some broker of the cluster answer a metadata request now? One for no topics,
        to the first broker that answers: asking for every topic (thousands of partitions)
        every few seconds would cost more CPU than an idle copy does."""
        for broker in self._client.cluster.brokers():
            try:
                await self._client.send(broker.nodeId, MetadataRequest([], False))
                return True
            except (kafka_errors.KafkaError, OSError, TimeoutError):
                continue
        try:  # none known: the bootstrap servers
            await self.refresh_metadata()
        except TransientClusterError:
            return False
        return True

    async def partition_counts(self) -> dict[str, int]:
        """Topic name → partition count, for every topic the cluster has."""
        await self.refresh_metadata()
        cluster = self._client.cluster
        return {t: len(cluster.partitions_for_topic(t) or ()) for t in cluster.topics()}

    async def topic_ids(self, topics: Collection[str]) -> dict[str, uuid.UUID] | None:
        """Topic name → topic id, for those of ``topics`` the cluster holds now (Metadata
        v10). None if its brokers do not report topic ids (Kafka before 2.8)."""
        if not topics:
            return {}
        request = TopicIdsRequest(sorted(topics))
        brokers = [b.nodeId for b in self._client.cluster.brokers()]
        random.shuffle(brokers)
        failures = []
        for node in brokers:
            try:
                response = await self._client.send(node, request)
            except NotImplementedError:
                return None
            except (kafka_errors.KafkaError, OSError, TimeoutError) as exc:
                failures.append(f"node {node}: {type(exc).__name__}")
                continue
            return {
                name: found.topic_id
                for name, found in topics_of(response).items()
                if found.error_code == 0 and found.topic_id != NO_ID
            }
        detail = ", ".join(failures) or "no broker known"
        raise TransientClusterError(f"{self.name}: topic ids: no answer from {detail}")

    def leader(self, tp: TP) -> int:
        node = self._client.cluster.leader_for_partition(tp)
        if node is None or node < 0:
            self._client.force_metadata_update()
            raise TransientClusterError(
                f"{self.name}: no leader known for {tp.topic}[{tp.partition}]"
            )
        return int(node)

    async def leader_for(self, tp: TP) -> int:
        """Like ``leader``, refreshing metadata once if the partition is not known yet."""
        if self._client.cluster.leader_for_partition(tp) in (None, -1):
            await self.refresh_metadata()
        return self.leader(tp)

    # requests ---------------------------------------------------------------------------

    async def send(self, node: int, request: Any, *, connection: int = 0) -> Any:
        """Send one request on connection number ``connection`` to ``node`` (a broker
        answers one connection's requests in order, so a long poll on one does not hold up
        requests on another). aiokafka keys its connections by (node, group) and opens one
        for any group it is given (it has two named ones, 0 and 1; aiokafka is pinned below
        0.15)."""
        group = cast(ConnectionGroup, connection)
        try:
            if self._buffers:
                await self._tune(node, group)
            return await self._client.send(node, request, group=group)
        except kafka_errors.KafkaError as exc:
            self._client.force_metadata_update()
            raise TransientClusterError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
        except (TimeoutError, OSError) as exc:
            self._client.force_metadata_update()
            raise TransientClusterError(f"{self.name}: {exc!r}") from exc

    async def _tune(self, node: int, group: ConnectionGroup) -> None:
        """Socket buffers of the connection to ``node``, set once it is open and before any
        request of ours crosses it. aiokafka opens its own sockets and has no hook for this,
        so its connection table is read here (private; aiokafka is pinned below 0.15). On
        Linux the window scale is fixed at connect from net.ipv4.tcp_rmem's maximum, so a
        larger SO_RCVBUF set now still takes effect (up to net.core.rmem_max)."""
        await self._client.ready(node, group=group)
        # this one, and any aiokafka opened on its own meanwhile (metadata, bootstrap)
        for conn in list(self._client._conns.values()):
            if conn in self._tuned:
                continue
            writer = getattr(conn, "_writer", None)
            sock = writer.transport.get_extra_info("socket") if writer is not None else None
            if sock is not None:
                for option, size in self._buffers.items():
                    sock.setsockopt(socket.SOL_SOCKET, option, size)
                self._tuned.add(conn)

    def open_connections(self) -> int:
        return sum(1 for conn in list(self._client._conns.values()) if conn.connected())

    def socket_buffers(self) -> list[tuple[int, int]]:
        """(SO_RCVBUF, SO_SNDBUF) of every open connection, as the kernel reports them."""
        out = []
        for conn in list(self._client._conns.values()):
            writer = getattr(conn, "_writer", None)
            sock = writer.transport.get_extra_info("socket") if writer is not None else None
            if sock is not None:
                out.append(
                    (
                        sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
                        sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                    )
                )
        return out

    async def ends(
        self, tps: Iterable[TP], *, isolation: int = READ_COMMITTED
    ) -> dict[TP, tuple[int, int]]:
        """(start, end) of each partition; end is the last stable offset under read_committed."""
        tps = list(tps)
        starts = await self._list_offsets(tps, EARLIEST, isolation)
        latest = await self._list_offsets(tps, LATEST, isolation)
        return {tp: (starts[tp], latest[tp]) for tp in tps}

    async def latest(
        self, tps: Iterable[TP], *, isolation: int = READ_UNCOMMITTED
    ) -> dict[TP, int]:
        """End of each partition: the high watermark, or the last stable offset."""
        return await self._list_offsets(list(tps), LATEST, isolation)

    async def _list_offsets(self, tps: list[TP], which: int, isolation: int) -> dict[TP, int]:
        by_leader: dict[int, dict[str, list[tuple[int, int]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for tp in tps:
            by_leader[await self.leader_for(tp)][tp.topic].append((tp.partition, which))
        out: dict[TP, int] = {}
        for node, topics in by_leader.items():
            request = OffsetRequest(-1, isolation, list(topics.items()))
            response = await self.send(node, request)
            for topic, partitions in response.topics:
                for partition, code, *rest in partitions:
                    if code:
                        raise error_for(code, f"{self.name}: list offsets {topic}[{partition}]")
                    out[TP(topic, partition)] = int(rest[-1])
        return out

    async def fetch(
        self,
        node: int,
        wants: Mapping[TP, int | tuple[int, int]],
        *,
        max_wait_ms: int,
        max_bytes: int,
        partition_max_bytes: int,
        connection: int = 0,
    ) -> dict[TP, FetchedPartition]:
        """One read_committed fetch from ``node`` for every partition in ``wants`` (offset,
        or (offset, max bytes for that partition)), on connection number ``connection``."""
        topics: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        for tp, want in wants.items():
            offset, limit = want if isinstance(want, tuple) else (want, partition_max_bytes)
            topics[tp.topic].append((tp.partition, offset, limit))
        request = FetchRequest(max_wait_ms, 1, max_bytes, READ_COMMITTED, list(topics.items()))
        response = await self.send(node, request, connection=connection)
        out: dict[TP, FetchedPartition] = {}
        for topic, partitions in response.topics:
            for p in partitions:
                partition, code, hw, lso, start, aborted, _replica, records = p
                out[TP(topic, partition)] = FetchedPartition(
                    code,
                    hw,
                    lso,
                    start,
                    tuple((a[0], a[1]) for a in (aborted or ())),
                    records or b"",
                )
        return out

    async def produce(
        self,
        node: int,
        batches: dict[TP, bytes],
        *,
        timeout_ms: int,
        topic_ids: Mapping[str, uuid.UUID] | None = None,
    ) -> dict[TP, ProduceResult]:
        """One acks=all produce request carrying one batch per partition. Given
        ``topic_ids`` (each topic's id as first seen; not empty), each topic is named by its
        id where the brokers take Produce v13 (Kafka 4.1+): a topic deleted, or recreated
        under its name, since then answers UNKNOWN_TOPIC_ID and nothing is appended to the
        new log. A topic with no id there yet (another process of the group saw it first)
        is not sent: it answers UNKNOWN_TOPIC_OR_PARTITION, to be tried again once the topic
        refresh has learned its id. Else by name."""
        if topic_ids and self._writes_by_id:
            try:
                return await self._produce_by_id(node, batches, timeout_ms, topic_ids)
            except NotImplementedError:  # the broker has no Produce v13
                log.warning(
                    "%s cluster %s cannot produce by topic id (Kafka 4.1+ can): a topic"
                    " recreated there while it is copied is told only by the topic refresh",
                    self.role,
                    self.name,
                )
                self._writes_by_id = False
        topics: dict[str, list[tuple[int, bytes]]] = defaultdict(list)
        for tp, batch in batches.items():
            topics[tp.topic].append((tp.partition, batch))
        request = ProduceRequest(None, -1, timeout_ms, list(topics.items()))
        response = await self.send(node, request)
        out: dict[TP, ProduceResult] = {}
        for topic, partitions in response.topics:
            for partition, code, offset, *_ in partitions:
                out[TP(topic, partition)] = ProduceResult(code, offset)
        return out

    async def _produce_by_id(
        self,
        node: int,
        batches: dict[TP, bytes],
        timeout_ms: int,
        topic_ids: Mapping[str, uuid.UUID],
    ) -> dict[TP, ProduceResult]:
        out: dict[TP, ProduceResult] = {}
        topics: dict[uuid.UUID, list[tuple[int, bytes]]] = defaultdict(list)
        names: dict[uuid.UUID, str] = {}
        for tp, batch in batches.items():
            topic_id = topic_ids.get(tp.topic)
            if topic_id is None:
                unknown = kafka_errors.UnknownTopicOrPartitionError.errno
                out[tp] = ProduceResult(unknown, -1, "topic id not known yet")
                continue
            names[topic_id] = tp.topic
            topics[topic_id].append((tp.partition, batch))
        if not topics:
            return out
        response = await self.send(node, ProduceByIdRequest(-1, timeout_ms, topics))
        for p in produced_by_id(response):
            name = names.get(p.topic_id)
            if name is not None:
                out[TP(name, p.partition)] = ProduceResult(p.error_code, p.base_offset, p.message)
        return out

    async def init_producer_id(self) -> tuple[int, int]:
        """A fresh idempotent (non-transactional) producer id and epoch."""
        return await retried(self._init_producer_id, what=f"{self.name}: InitProducerId")

    async def _init_producer_id(self) -> tuple[int, int]:
        node = self._client.get_random_node()
        response = await self.send(node, InitProducerIdRequest(None, 60_000), connection=1)
        if response.error_code:
            raise error_for(response.error_code, f"{self.name}: InitProducerId")
        return int(response.producer_id), int(response.producer_epoch)

    # topic admin ------------------------------------------------------------------------

    async def _admin_client(self) -> AIOKafkaAdminClient:
        if self._admin is None:
            admin = AIOKafkaAdminClient(
                bootstrap_servers=self.config.bootstrap_servers,
                client_id=f"{self.config.client_id}-{self.name}-admin",
                request_timeout_ms=self.config.request_timeout_ms,
                **client_options(self.config),
            )
            try:
                with _admin_errors(f"{self.name}: connecting the admin client"):
                    await admin.start()
            except TransientClusterError:
                await admin.close()
                raise
            self._admin = admin
        return self._admin

    # consumer groups -----------------------------------------------------------------

    async def consumer_groups(self) -> list[str]:
        return await retried(self._consumer_groups, what=f"{self.name}: listing groups")

    async def committed(self, group: str) -> dict[TP, int]:
        """The group's committed offsets (partitions it never committed are absent)."""
        return await retried(
            partial(self._committed, group), what=f"{self.name}: offsets of {group}"
        )

    async def group_state(self, group: str) -> str:
        """Empty, Dead (no such group), Stable, PreparingRebalance, CompletingRebalance..."""
        return await retried(
            partial(self._group_state, group), what=f"{self.name}: describing {group}"
        )

    async def commit_offsets(self, group: str, offsets: Mapping[TP, int]) -> dict[TP, int]:
        """Commit ``offsets`` for ``group`` as a client outside it (generation -1), with no
        leader epoch: the broker refuses it while the group has members. Error code per
        partition (0: committed)."""
        return await retried(
            partial(self._commit_offsets, group, offsets),
            what=f"{self.name}: committing for {group}",
        )

    async def _consumer_groups(self) -> list[str]:
        with _admin_errors(f"{self.name}: listing groups"):
            admin = await self._admin_client()
            return sorted(str(g[0]) for g in await admin.list_consumer_groups())

    async def _committed(self, group: str) -> dict[TP, int]:
        with _admin_errors(f"{self.name}: offsets of {group}"):
            admin = await self._admin_client()
            offsets = await admin.list_consumer_group_offsets(group)
        return {TP(tp.topic, tp.partition): m.offset for tp, m in offsets.items() if m.offset >= 0}

    async def _group_state(self, group: str) -> str:
        with _admin_errors(f"{self.name}: describing {group}"):
            admin = await self._admin_client()
            (response,) = await admin.describe_consumer_groups([group])
        (described,) = response.groups
        if described[0] in COORDINATOR_ERRORS:
            raise TransientClusterError(f"{self.name}: describing {group}: coordinator moving")
        return str(described[2])

    async def _commit_offsets(self, group: str, offsets: Mapping[TP, int]) -> dict[TP, int]:
        topics: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
        for tp, offset in offsets.items():
            topics[tp.topic].append((tp.partition, offset, ""))
        with _admin_errors(f"{self.name}: committing for {group}"):
            admin = await self._admin_client()
            node = await admin.find_coordinator(group)
            request = OffsetCommitRequest(group, -1, "", -1, list(topics.items()))
            response = await admin._send_request(request, node)
        codes = {
            TP(topic, partition): code
            for topic, partitions in response.topics
            for partition, code in partitions
        }
        if COORDINATOR_ERRORS & set(codes.values()):
            raise TransientClusterError(f"{self.name}: committing for {group}: coordinator moving")
        return codes

    async def delete_records(self, tp: TP, before: int) -> int:
        """Delete ``tp``'s records below ``before``; the partition's new start."""

        async def delete() -> int:
            with _admin_errors(f"{self.name}: deleting records of {tp}"):
                admin = await self._admin_client()
                starts = await admin.delete_records({tp: RecordsToDelete(before)})
            return int(starts[tp])

        return await retried(delete, what=f"{self.name}: deleting records of {tp}")

    async def topic_configs(self, topic: str, keys: Iterable[str]) -> dict[str, str]:
        """The topic's explicitly set (non-default) values among ``keys``."""
        admin = await self._admin_client()
        wanted = set(keys)
        result = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        out: dict[str, str] = {}
        for response in result:
            for resource in response.resources:
                for entry in resource[4]:
                    name, value, _read_only, source = entry[0], entry[1], entry[2], entry[3]
                    if name in wanted and value is not None and source == 1:  # DYNAMIC_TOPIC_CONFIG
                        out[name] = value
        return out

    async def topic_settings(
        self, topics: Collection[str], keys: Collection[str]
    ) -> dict[str, dict[str, str]]:
        """Each topic's effective values of ``keys``: set on the topic or inherited from the
        broker (DescribeConfigs answers both). A topic that does not exist is absent."""
        if not topics:
            return {}
        return await retried(
            partial(self._topic_settings, sorted(topics), sorted(keys)),
            what=f"{self.name}: settings of {len(topics)} topics",
        )

    async def _topic_settings(
        self, topics: list[str], keys: list[str]
    ) -> dict[str, dict[str, str]]:
        wanted = {key: None for key in keys}  # the keys filter what the broker answers
        resources = [ConfigResource(ConfigResourceType.TOPIC, t, wanted) for t in topics]
        with _admin_errors(f"{self.name}: describing topic settings"):
            admin = await self._admin_client()
            responses = await admin.describe_configs(resources)
        out: dict[str, dict[str, str]] = {}
        for response in responses:
            for code, _message, _type, topic, entries in response.resources:
                if code == kafka_errors.UnknownTopicOrPartitionError.errno:
                    continue
                if code:
                    raise error_for(code, f"{self.name}: settings of topic {topic}")
                out[topic] = {e[0]: e[1] for e in entries if e[1] is not None}
        return out

    async def create_topic(
        self, topic: str, partitions: int, configs: dict[str, str], replication_factor: int
    ) -> None:
        admin = await self._admin_client()
        if replication_factor < 1:
            replication_factor = await self._default_replication_factor()
        new = NewTopic(topic, partitions, replication_factor, topic_configs=configs)
        try:
            response = await admin.create_topics([new])
        except kafka_errors.KafkaError as exc:
            raise ClusterError(f"{self.name}: creating topic {topic!r} failed: {exc}") from exc
        for _name, code, *rest in response.topic_errors:
            if code and code != kafka_errors.TopicAlreadyExistsError.errno:
                detail = rest[0] if rest and rest[0] else kafka_errors.for_code(code).__name__
                raise ClusterError(f"{self.name}: creating topic {topic!r} failed: {detail}")

    async def add_partitions(self, topic: str, total: int) -> None:
        admin = await self._admin_client()
        try:
            await admin.create_partitions({topic: NewPartitions(total_count=total)})
        except kafka_errors.KafkaError as exc:
            raise ClusterError(
                f"{self.name}: growing {topic!r} to {total} partitions: {exc}"
            ) from exc

    async def broker_settings(self, name: str) -> dict[int, str]:
        """Node id → the value of broker setting ``name`` on each broker of the cluster
        (whatever its source: default, static or dynamic)."""
        with _admin_errors(f"{self.name}: describing broker setting {name}"):
            admin = await self._admin_client()
            nodes = [b.nodeId for b in self._client.cluster.brokers()]
            resources = [ConfigResource(ConfigResourceType.BROKER, str(n)) for n in nodes]
            result = await admin.describe_configs(resources)
        out: dict[int, str] = {}
        for response in result:
            for res in response.resources:
                for entry in res[4]:
                    if entry[0] == name and entry[1] is not None:
                        out[int(res[3])] = str(entry[1])
        return out

    async def _default_replication_factor(self) -> int:
        admin = await self._admin_client()
        node = self._client.get_random_node()
        resource = ConfigResource(ConfigResourceType.BROKER, str(node))
        result = await admin.describe_configs([resource])
        for response in result:
            for res in response.resources:
                for entry in res[4]:
                    if entry[0] == "default.replication.factor" and entry[1]:
                        return int(entry[1])
        return 1
