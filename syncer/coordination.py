"""Local coordination: the processes of one deployment join a consumer group on the **local**
cluster and copy exactly the partitions it assigns them. No remote cluster and no ZooKeeper
take part; more processes in the group is how syncer scales out.

The group's consumer is subscribed to the local mirrored topics only to receive an
assignment: every assigned partition stays paused, so it never fetches from them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from syncer.assignment import assign, decode_owned, encode_owned, weights_from_gaps
from syncer.clusters import TP, client_options
from syncer.config import Config

log = logging.getLogger(__name__)

ASSIGNOR_NAME = "syncer-gap-sticky"
Callback = Callable[[set[TP]], Awaitable[None]]


class GapStickyAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """aiokafka's side of ``syncer.assignment``: members report what they own in their
    JoinGroup user data; the leader balances by the gaps it last measured."""

    name = ASSIGNOR_NAME
    version = 0

    def __init__(self) -> None:
        self.gaps: dict[TP, int] = {}
        self.owned: set[TP] = set()

    def assign(
        self, cluster: Any, members: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        topics = {t for meta in members.values() for t in meta.subscription}
        gaps = {
            TP(topic, p): self.gaps.get(TP(topic, p), 0)
            for topic in topics
            for p in (cluster.partitions_for_topic(topic) or ())
        }
        owned = {member: decode_owned(meta.user_data) for member, meta in members.items()}
        plan = assign(owned, weights_from_gaps(gaps))
        return {member: _assignment(parts) for member, parts in plan.items()}

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        return ConsumerProtocolMemberMetadata(
            self.version, sorted(topics), encode_owned(self.owned)
        )

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        self.owned = set(assignment.partitions())


def _assignment(partitions: set[TP]) -> ConsumerProtocolMemberAssignment:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ConsumerProtocolMemberAssignment(0, sorted(by_topic.items()), b"")


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, member: GroupMember) -> None:
        self.member = member

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        await self.member._revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TP]) -> None:
        await self.member._assigned(set(assigned))


def member_name(config: Config) -> str:
    return config.coordination.instance_id or f"{socket.gethostname()}-{os.getpid()}"


class GroupMember:
    """One process's membership. ``on_assigned``/``on_revoked`` start and stop copiers; a
    revocation returns only once the revoked partitions' writes are finished or abandoned."""

    def __init__(self, config: Config, on_assigned: Callback, on_revoked: Callback) -> None:
        self.config = config
        self.group = config.coordination
        self.name = member_name(config)
        self.assignor = GapStickyAssignor()
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self.assigned: set[TP] = set()
        self.rebalances = 0
        self._consumer: AIOKafkaConsumer | None = None
        self._topics: tuple[str, ...] = ()
        self._poll_task: asyncio.Task[None] | None = None
        self._last_heartbeat = 0.0

    def __repr__(self) -> str:
        return f"<GroupMember {self.group.group}/{self.name} [owns: {len(self.assigned)}]>"

    def may_write(self) -> bool:
        """False once no heartbeat was answered within the lease: the group may have moved
        our partitions to another member already, so we stop writing at once."""
        return time.monotonic() - self._last_heartbeat < self.group.lease_ms / 1000

    async def subscribe(self, topics: Iterable[str]) -> None:
        """Join (first call) or change the subscription to the local mirrored topics."""
        wanted = tuple(sorted(topics))
        if self._consumer is None:
            await self._start()
        if wanted != self._topics and self._consumer is not None:
            self._topics = wanted
            self._consumer.subscribe(topics=list(wanted), listener=_Listener(self))

    async def _start(self) -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.config.local.bootstrap_servers,
            client_id=f"syncer-{self.name}",
            group_id=self.group.group,
            group_instance_id=self.group.instance_id or None,
            session_timeout_ms=self.group.session_timeout_ms,
            heartbeat_interval_ms=self.group.heartbeat_interval_ms,
            max_poll_interval_ms=max(300_000, self.group.session_timeout_ms * 3),
            enable_auto_commit=False,
            auto_offset_reset="latest",
            partition_assignment_strategy=(self.assignor,),
            max_partition_fetch_bytes=1024,
            fetch_max_bytes=1024,
            **client_options(self.config.local),
        )
        await consumer.start()
        self._consumer = consumer
        self._track_heartbeats(consumer)
        self._poll_task = asyncio.create_task(self._poll(consumer), name="group-poll")

    def _track_heartbeats(self, consumer: AIOKafkaConsumer) -> None:
        # aiokafka does not expose when a heartbeat was last answered; wrap its coordinator's
        # heartbeat call (pinned aiokafka < 0.15; tests/integration/test_group.py checks it).
        coordinator = consumer._coordinator
        original = coordinator._do_heartbeat

        async def tracked() -> bool:
            ok = bool(await original())
            if ok:
                self._last_heartbeat = time.monotonic()
            return ok

        coordinator._do_heartbeat = tracked

    async def _poll(self, consumer: AIOKafkaConsumer) -> None:
        """Keep the member alive for max.poll.interval: poll with every partition paused."""
        while True:
            assignment = consumer.assignment()
            if assignment:
                consumer.pause(*assignment)
            await consumer.getmany(timeout_ms=1000)

    async def _assigned(self, assigned: set[TP]) -> None:
        assert self._consumer is not None
        self._consumer.pause(*assigned)
        self._last_heartbeat = time.monotonic()  # the join just succeeded
        self.rebalances += 1
        new = assigned - self.assigned
        self.assigned = set(assigned)
        log.info(
            "group %s: member %s owns %d partitions (%d new)",
            self.group.group,
            self.name,
            len(assigned),
            len(new),
        )
        await self.on_assigned(assigned)

    async def _revoked(self, revoked: set[TP]) -> None:
        self.assigned -= revoked
        if revoked:
            log.info(
                "group %s: member %s gives up %d partitions",
                self.group.group,
                self.name,
                len(revoked),
            )
        await self.on_revoked(revoked)

    def update_gaps(self, gaps: Mapping[TP, int]) -> None:
        self.assignor.gaps = dict(gaps)

    async def stop(self) -> None:
        """Leave the group (the others take over at once); idempotent."""
        task, self._poll_task = self._poll_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()


async def group_owners(config: Config) -> dict[TP, str]:
    """Which member of the group owns each partition, as the local group coordinator says."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(
        bootstrap_servers=config.local.bootstrap_servers,
        client_id=f"{config.local.client_id}-status",
        **client_options(config.local),
    )
    await admin.start()
    try:
        responses = await admin.describe_consumer_groups([config.coordination.group])
    finally:
        await admin.close()
    owners: dict[TP, str] = {}
    for response in responses:
        for group in response.groups:
            for member in group[5]:
                client_id, assignment = member[-4], member[-1]
                if not assignment:
                    continue
                decoded = ConsumerProtocolMemberAssignment.decode(assignment)
                for tp in decoded.partitions():
                    owners[tp] = str(client_id).removeprefix("syncer-")
    return owners
