"""One connection to a cluster: bootstrap, metadata, topic ids, leaders, and sending a request
to a broker on one of its connections, or opening one ahead of it. aiokafka's errors are
translated into ours here, at the boundary; the clients' security settings (a TLS context
built once per cluster) come from ``syncer.client_security``."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import ssl
import time
import uuid
import weakref
from collections.abc import Callable, Collection
from typing import Any, Self, TypeAlias, cast

from aiokafka import errors as kafka_errors
from aiokafka.client import ConnectionGroup
from aiokafka.conn import CloseReason, create_conn
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.structs import TopicPartition

from syncer.client_security import client_options as client_options  # re-exported
from syncer.config import ClusterConfig
from syncer.errors import (
    AuthenticationError,
    BrokerTooOld,
    ClusterError,
    LeaderMoved,
    NotSent,
    TransientClusterError,
    UnreachableError,
)
from syncer.kafka_client import KafkaClient
from syncer.leaders import (
    LEADER_MOVED_CODES,
    STALE_METADATA_CODES,
    MetadataRefresh,
    asking_order,
)
from syncer.protocol import NO_ID, UNKNOWN_TOPIC_ID, TopicIdsRequest, topics_of
from syncer.protocol.common import FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH
from syncer.protocol.versions import refuse_if_too_old
from syncer.replicas import ReadReplicas

TP: TypeAlias = TopicPartition


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
    FENCED_LEADER_EPOCH: (
        "FencedLeaderEpochError",
        "the broker asked leads the partition under a newer leader epoch",
    ),
    UNKNOWN_LEADER_EPOCH: (
        "UnknownLeaderEpochError",
        "the broker asked does not know the partition's leader epoch yet",
    ),
}


def error_for(code: int, context: str) -> ClusterError:
    """Our error for a Kafka error code; transient ones are retriable, and a leader that
    moved is ``LeaderMoved`` (retried at once, on refreshed metadata)."""
    if code in UNKNOWN_TO_AIOKAFKA:
        name, meaning = UNKNOWN_TO_AIOKAFKA[code]
        text = f"{context}: {name} (error {code}): {meaning}"
    else:
        text = f"{context}: {kafka_errors.for_code(code).__name__} (error {code})"
    if code in LEADER_MOVED_CODES:
        return LeaderMoved(text)
    if code in UNKNOWN_TO_AIOKAFKA:
        return ClusterError(text)
    if is_retriable(code):
        return TransientClusterError(text)
    return ClusterError(text)


BOOTSTRAP_ATTEMPTS = 3  # at start-up, 1 s and 2 s apart


class ClusterConnection:
    """A connection to one cluster: its client, metadata and brokers. ``Cluster`` adds the
    requests (``syncer.wire``) and the admin calls (``syncer.admin``) on top of it."""

    def __init__(self, config: ClusterConfig, *, role: str, lane: int = 0) -> None:
        self.config = config
        self.name = config.name or role
        self.role = role
        self.lane = lane
        self._client = KafkaClient(
            bootstrap_servers=config.bootstrap_servers,
            client_id=f"{config.client_id}-{self.name}" + (f"-lane{lane}" if lane else ""),
            request_timeout_ms=config.request_timeout_ms,
            metadata_max_age_ms=config.metadata_max_age_ms,
            **client_options(config),
        )
        self._started = False
        self._buffers = {
            socket.SO_RCVBUF: config.socket_receive_buffer_bytes,
            socket.SO_SNDBUF: config.socket_send_buffer_bytes,
        }
        self._buffers = {k: v for k, v in self._buffers.items() if v > 0}
        self._tuned: weakref.WeakSet[Any] = weakref.WeakSet()
        # refreshes the leaders when an answer says they moved (``leaders_moved``)
        self.leaders = MetadataRefresh(self.refresh_metadata, self.name)
        self.failed_at: dict[int, float] = {}  # node → when a request to it last failed
        # with a rack: the follower in it each partition's leader named to fetch from
        self.rack = config.client_rack or ""
        self.read_replicas = ReadReplicas(config.metadata_max_age_ms / 1000)
        self.fetched_bytes: dict[int, int] = {}  # node → record bytes its fetches brought

    def __repr__(self) -> str:
        return f"<Cluster {self.role} {self.name} {self.config.bootstrap_servers}>"

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Bootstrap (a few attempts), refusing a cluster too old to serve our requests
        (``BrokerTooOld``); idempotent. A start that fails or is cancelled closes
        the client: whatever it had connected is not left open."""
        if self._started:
            return
        try:
            await self._bootstrap()
            where = f"{self.role} cluster {self.name!r} at {self.config.bootstrap_servers}"
            await refuse_if_too_old(self._client, where)
        except (asyncio.CancelledError, BrokerTooOld):
            await self._client.close()
            raise
        self._started = True

    async def _bootstrap(self) -> None:
        for attempt in range(1, BOOTSTRAP_ATTEMPTS + 1):
            try:
                await self._client.bootstrap()
                return
            except (kafka_errors.KafkaError, OSError) as exc:
                refused = await self._refused()  # credentials: no point in trying again
                if refused is not None or attempt == BOOTSTRAP_ATTEMPTS:
                    await self._client.close()
                    where = f"{self.role} cluster {self.name!r} at {self.config.bootstrap_servers}"
                    if refused is not None:
                        raise AuthenticationError(f"{where}: {refused}") from exc
                    raise UnreachableError(f"{where} is unreachable: {exc}") from exc
                await asyncio.sleep(attempt)  # a blip at start-up (a busy broker) is not fatal

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
        await self.leaders.close()
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
        brokers = asking_order(brokers, self.failed_at, time.monotonic())
        failures = []
        for node in brokers:
            try:
                response = await self._client.metadata(node)
            except (kafka_errors.KafkaError, OSError, TimeoutError) as exc:
                self.failed_at[node] = time.monotonic()
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

    async def cluster_id(self) -> str | None:
        """The cluster's id (Metadata v10, Kafka 2.8+); None where its brokers are older,
        or the one asked does not answer (then nothing is told by it)."""
        try:
            node = self._client.get_random_node()
            response = await self._client.send(node, TopicIdsRequest([]))
        except (NotImplementedError, kafka_errors.KafkaError, OSError, TimeoutError):
            return None
        return str(response.cluster_id) if response.cluster_id else None

    def known_leader(self, tp: TP) -> int | None:
        """The node the metadata names as ``tp``'s leader, if any (nothing asked)."""
        node = self._client.cluster.leader_for_partition(tp)
        return None if node is None or node < 0 else int(node)

    def leader(self, tp: TP) -> int:
        node = self._client.cluster.leader_for_partition(tp)
        if node is None or node < 0:
            self._client.force_metadata_update()
            raise TransientClusterError(
                f"{self.name}: no leader known for {tp.topic}[{tp.partition}]"
            )
        return int(node)

    def fetch_node(self, tp: TP) -> int:
        """Where ``tp``'s next fetch goes: the read replica its leader named (with a rack,
        while remembered and listed in the metadata), else its leader."""
        leader = self.leader(tp)
        if not self.rack:
            return leader
        online = {b.nodeId for b in self._client.cluster.brokers()}
        return self.read_replicas.node(tp, leader, time.monotonic(), online)

    def leaders_moved(self, codes: Collection[tuple[str, int]], seen: int) -> None:
        """The (topic, error code) of each partition of an answer to a request routed at
        metadata generation ``seen``: refresh the leaders now if one says they moved."""
        stale = {topic for topic, code in codes if code in STALE_METADATA_CODES}
        self.leaders.moved(stale, seen)

    async def leader_for(self, tp: TP) -> int:
        """Like ``leader``, after the refresh under way if a leader moved, and refreshing
        metadata once if the partition is not known yet."""
        await self.leaders.wait()
        if self._client.cluster.leader_for_partition(tp) in (None, -1):
            await self.refresh_metadata()
        return self.leader(tp)

    # sending ----------------------------------------------------------------------------

    async def send(
        self,
        node: int,
        request: Any,
        *,
        connection: int = 0,
        may_send: Callable[[], bool] | None = None,
    ) -> Any:
        """Send one request on connection number ``connection`` to ``node`` (a broker
        answers one connection's requests in order, so a long poll on one does not hold up
        requests on another). aiokafka keys its connections by (node, group) and opens one
        for any group it is given (it has two named ones, 0 and 1; aiokafka is pinned below
        0.15). Given ``may_send``, it is asked once the connection is open, in the turn
        the request is written on it (``_send_asked``): False, and the request is not sent
        (``NotSent``). Opening a connection can take as long as a request's timeout: what
        allowed the request when it was made may have ended by then."""
        group = cast(ConnectionGroup, connection)
        try:
            if may_send is not None:
                return await self._send_asked(node, group, request, may_send)
            if self._buffers:
                await self._tune(node, group)
            return await self._client.send(node, request, group=group)
        except (kafka_errors.KafkaError, TimeoutError, OSError) as exc:
            raise self.failed(node, exc) from exc

    async def _send_asked(
        self, node: int, group: ConnectionGroup, request: Any, may_send: Callable[[], bool]
    ) -> Any:
        """``send``'s way with ``may_send``: the connection opened (and tuned), then asked
        and written in one turn, on aiokafka's open connection as its client's ``send``
        writes (aiokafka's ``send`` takes the connection's lock again first, which can
        yield, and opens it again unasked should it have closed meanwhile)."""
        if not await self._client.ready(node, group=group):
            raise kafka_errors.NodeNotReadyError(f"node {node} not ready")
        if self._buffers:
            await self._tune(node, group)
        conn = self._client._conns.get((node, group))
        if conn is None or not conn.connected():
            raise kafka_errors.NodeNotReadyError(f"node {node}: its connection closed as it opened")
        if not may_send():
            raise NotSent(f"{self.name}: not sent to node {node}: no longer allowed")
        try:
            return await conn.send(request)
        except TimeoutError:  # as aiokafka's client does: a new connection for the next
            conn.close(reason=CloseReason.CONNECTION_TIMEOUT)
            raise kafka_errors.RequestTimedOutError() from None

    async def connect(self, node: int, *, connection: int = 0) -> bool:
        """Open connection number ``connection`` to ``node`` now, ahead of its first request:
        over a long link opening one costs round trips (TCP, then ApiVersions) that a request
        sent on it first would otherwise wait for. False if it could not be opened (aiokafka
        logs why and refreshes metadata); the request sent later opens it again or fails."""
        group = cast(ConnectionGroup, connection)
        opened = bool(await self._client.ready(node, group=group))
        if opened and self._buffers:
            await self._tune(node, group)  # before any request of ours crosses it
        return opened

    def failed(self, node: int, exc: Exception) -> TransientClusterError:
        """A request to ``node`` failed with ``exc``: ours to raise, and metadata refreshed."""
        self.failed_at[node] = time.monotonic()
        self._client.force_metadata_update()
        kafka = isinstance(exc, kafka_errors.KafkaError)
        return TransientClusterError(
            f"{self.name}: {type(exc).__name__}: {exc}" if kafka else f"{self.name}: {exc!r}"
        )

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
