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
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from aiokafka.errors import KafkaError, RequestTimedOutError
from aiokafka.protocol.admin import DescribeGroupsRequest
from aiokafka.protocol.coordination import FindCoordinatorRequest
from aiokafka.protocol.group import JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest

from syncer.assignment import (
    assign,
    common_topics,
    decode_group_writer,
    decode_owned,
    decode_writer,
    encode_group_writer,
    encode_owned,
    refusal,
    subscribed_gaps,
    the_groups_writer,
    weights_from_gaps,
    writing_otherwise,
)
from syncer.clusters import TP, Cluster, client_options
from syncer.config import Config, CoordinationConfig
from syncer.errors import ConfigError, SyncerError
from syncer.tasks import cancel_and_wait

log = logging.getLogger(__name__)


def lease_clock() -> float:
    """Seconds on the write lease's clock: CLOCK_BOOTTIME where there is one (Linux), which
    goes on while the host is suspended; CLOCK_MONOTONIC does not, and a member whose host
    slept past its session would wake believing its lease had time left, and write before
    its first heartbeat told it the group moved on."""
    return time.clock_gettime(BOOTTIME) if BOOTTIME is not None else time.monotonic()


BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)

ASSIGNOR_NAME = "syncer-gap-sticky"
POLL_RETRY_S = 1.0  # the pause before polling again after a retriable error
# a LeaveGroup unanswered this long is given up (aiokafka would wait its request timeout,
# 40 s, past the stop's own budget): the coordinator then drops us after the session
LEAVE_TIMEOUT_S = 5.0
# a group client that broke is replaced after 1, 2, 4 ... s, up to 30 s while it keeps breaking
REPLACE_FIRST_S = 1.0
REPLACE_MAX_S = 30.0
UNKNOWN_RETRY_S = 1.0  # between metadata asks for topics given out unknown
# the group's consumer never reads (every partition paused), yet aiokafka's fetch loop looks
# at every assigned partition each time it wakes: each poll, and every consumer_timeout_ms
# (200 ms by default). At 3,333 partitions a member that woke 6 times a second spent about
# 5% of a core on it, idle; a member still hears of a rebalance at once (heartbeats)
POLL_MS = 5_000
FETCH_LOOP_MS = 10_000
GROUP_COORDINATOR = 0  # FindCoordinator's key type for a consumer group
Callback = Callable[[set[TP]], Awaitable[None]]


class InstanceIdTaken(ConfigError):
    """Another process joined the group with this process's ``coordination.instance_id``
    and took its place (static membership: the newest member with an instance id wins)."""

    def __init__(self, instance_id: str, group: str, taker: str) -> None:
        super().__init__(
            [
                f"instance_id {instance_id!r} is another process's too: it joined group "
                f"{group} as member {taker} and took this one's place; give each process "
                "its own instance id (or none)"
            ],
            source="coordination",
        )


class WriterRefused(ConfigError):
    """The group's leader gave this process nothing: it writes as another writer (another
    deployment ``name`` or ``state_topic``) than the group's other members."""

    def __init__(self, group: str, own: str, theirs: str, members: int) -> None:
        super().__init__(
            [
                f"group {group}: {members} {'member writes' if members == 1 else 'members write'}"
                f" as {theirs}, this process as {own}: give every member of a group the same"
                " name and state_topic"
            ],
            source="coordination",
        )


class GapStickyAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """aiokafka's side of ``syncer.assignment``: members report what they own, and the
    writer they write as, in their JoinGroup user data; the leader balances by the gaps it
    last measured, among the members writing as the group's writer (the others get
    nothing), and tells every member the group's writer in its SyncGroup user data: one
    writing as another refuses itself (``refused``), also when the coordinator hands a
    static member its stored assignment without asking the leader."""

    name = ASSIGNOR_NAME
    version = 0

    def __init__(self) -> None:
        self.gaps: dict[TP, int] = {}
        self.owned: set[TP] = set()
        self.writer = ""  # as which writer this member writes (``writer_of``); told at joins
        # (the group's writer, how many members write as it) if the leader refused us
        self.refused: tuple[str, int] | None = None
        # told the topics given out whose partitions the leader's metadata does not know
        self.on_unknown: Callable[[set[str]], None] = lambda topics: None

    def assign(
        self, cluster: Any, members: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        writers = {member: decode_writer(meta.user_data) for member, meta in members.items()}
        owning = [m for m, meta in members.items() if decode_owned(meta.user_data)]
        ours = the_groups_writer(writers, self.writer, owning)
        otherwise = writing_otherwise(writers, ours)
        if otherwise:
            log.error(
                "group leader: %d members write as another writer than the group's %s: "
                "they get no partition (%s)",
                len(otherwise),
                ours,
                ", ".join(f"{m} as {w}" for m, w in sorted(otherwise.items())),
            )
            members = {m: meta for m, meta in members.items() if m not in otherwise}
        sharing = sum(1 for writer in writers.values() if writer == ours)
        told = encode_group_writer(ours, sharing) if ours else b""
        plan = self._balanced(cluster, members)
        plan.update({member: set() for member in otherwise})
        return {member: member_assignment(parts, told) for member, parts in plan.items()}

    def _balanced(
        self, cluster: Any, members: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, set[TP]]:
        topics = common_topics(meta.subscription for meta in members.values())
        unknown = {topic for topic in topics if not cluster.partitions_for_topic(topic)}
        if unknown:
            self.on_unknown(unknown)
        gaps = subscribed_gaps(topics, cluster.partitions_for_topic, self.gaps)
        owned = {member: decode_owned(meta.user_data) for member, meta in members.items()}
        weights = weights_from_gaps(gaps)
        plan = assign(owned, weights)
        log.info(
            "group leader: %d partitions to %d members, loads %s "
            "(by gap; the heaviest partition weighs %.2f)",
            len(weights),
            len(plan),
            " / ".join(f"{sum(weights[tp] for tp in parts):.2f}" for parts in plan.values()),
            max(weights.values(), default=0.0),
        )
        return plan

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        return ConsumerProtocolMemberMetadata(
            self.version, sorted(topics), encode_owned(self.owned, self.writer)
        )

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        self.refused = refusal(self.writer, decode_group_writer(assignment.user_data))
        # refused: nothing is ours, even in a stored assignment naming partitions
        self.owned = set(assignment.partitions()) if self.refused is None else set()


def member_assignment(
    partitions: set[TP], user_data: bytes = b""
) -> ConsumerProtocolMemberAssignment:
    """One member's share in the consumer protocol's SyncGroup format, with ``user_data``
    (``encode_group_writer``)."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ConsumerProtocolMemberAssignment(0, sorted(by_topic.items()), user_data)


class Membership:
    """What the group gave this process and whether it may still write to it, on plain
    values (the clock is passed in), so that ``GroupMember`` only does the I/O.

    Writing needs a lease: a join or an answered heartbeat renews it for ``lease_s`` from
    when its request was *sent* (the coordinator's session runs from its answer, later: an
    answer read after the event loop stalled past the session grants nothing the session
    does not cover). The config keeps the lease below the session timeout, so a member
    whose heartbeats go unanswered stops writing before the group can count it gone and
    give its partitions to another member; one told it is no member (unknown member,
    illegal generation) stops at once. A revocation does not end the lease: the revoked
    partitions' copiers drain their writes first, and the group gives those partitions to
    nobody else until this member rejoins (or its session expires, after the lease;
    ``group_options`` makes the rebalance timeout outlast the drain, or the coordinator
    would drop the member sooner)."""

    def __init__(self, lease_s: float) -> None:
        self.lease_s = lease_s
        self.assigned: set[TP] = set()
        self.rebalances = 0
        self._renewed_at: float | None = None  # never joined: nothing is ours to write

    def __repr__(self) -> str:
        return f"<Membership [owns: {len(self.assigned)}, rebalances: {self.rebalances}]>"

    def may_write(self, now: float) -> bool:
        return self._renewed_at is not None and now - self._renewed_at < self.lease_s

    def heartbeat(self, answered: bool, sent: float, *, expelled: bool = False) -> None:
        """A heartbeat sent at ``sent`` was answered (also "rebalance in progress": still a
        member): the lease runs from then. A failed one does not renew it (no answer: it
        runs out), and one that says the member is gone (``expelled``: its session expired,
        its partitions may be another's already) ends it."""
        if expelled:
            self._renewed_at = None
        elif answered and (self._renewed_at is None or sent > self._renewed_at):
            self._renewed_at = sent

    def assign(self, assigned: Iterable[TP], sent: float) -> set[TP]:
        """A join whose last request was sent at ``sent`` succeeded: these are ours now, and
        the lease starts again from then (before the copiers start, so their first writes
        are not refused). The partitions not held before."""
        assigned = set(assigned)
        self._renewed_at = sent
        self.rebalances += 1
        new = assigned - self.assigned
        self.assigned = assigned
        return new

    def revoke(self, revoked: Iterable[TP]) -> None:
        self.assigned -= set(revoked)


def group_options(group: CoordinationConfig, drain_s: float) -> dict[str, Any]:
    """The consumer's group settings. No instance id means dynamic membership (aiokafka wants
    None, not ""). ``_poll`` polls without pause (every partition paused), so the poll
    interval is only a backstop: at least Kafka's default and three session timeouts.

    A member joins a rebalance only after its revoked copiers have drained (``drain_s`` at
    most, then they are cancelled). The coordinator drops a member that has not joined
    within the rebalance timeout and gives its partitions away while it may still be
    draining into them, its lease renewed by "rebalance in progress" answers. aiokafka's
    default rebalance timeout is the session timeout, shorter than a drain: seen on a 3-node
    cluster whose group coordinator was killed, two members dropped 6 s into a rebalance
    while their copiers drained (the sequence fence refused the overlapping writes) and the
    group took three generations and 31 s to settle. So the timeout covers the drain, plus a
    session timeout for the heartbeat that brings the news and the join itself."""
    return {
        "group_id": group.group,
        "group_instance_id": group.instance_id or None,
        "session_timeout_ms": group.session_timeout_ms,
        "heartbeat_interval_ms": group.heartbeat_interval_ms,
        "rebalance_timeout_ms": round(drain_s * 1000) + group.session_timeout_ms,
        "max_poll_interval_ms": max(300_000, group.session_timeout_ms * 3),
    }


def replace_wait_s(broken_in_a_row: int) -> float:
    """How long a member whose group client broke ``broken_in_a_row`` times waits before
    joining with a new one: 1, 2, 4 ... s, up to 30 s."""
    return float(min(REPLACE_MAX_S, REPLACE_FIRST_S * 2 ** min(broken_in_a_row - 1, 8)))


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Tells the member of its consumer's rebalances, while that consumer is the member's
    and is not being replaced: a broken consumer's coordination may still run as it is
    closed, and a late assignment or revocation from it must not start or stop copiers of
    partitions the group has given out again since."""

    def __init__(self, member: GroupMember, consumer: AIOKafkaConsumer) -> None:
        self.member = member
        self.consumer = consumer

    def _current(self) -> bool:
        return self.consumer is self.member._consumer and not self.member._replacing

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        if self._current():
            await self.member._revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TP]) -> None:
        if self._current():
            await self.member._assigned(set(assigned))


def member_name(config: Config) -> str:
    return config.coordination.instance_id or f"{socket.gethostname()}-{os.getpid()}"


def taken_by(groups: Iterable[Sequence[Any]], client_id: str, held: set[str]) -> str | None:
    """The member id that holds this process's place, from DescribeGroups answers: a member
    with our client id (named after the instance id) that this process never was. None if
    there is none (our session expired: nobody took our place)."""
    for group in groups:
        for member in group[5]:
            member_id, member_client = member[0], member[-4]
            if member_client == client_id and member_id not in held:
                return str(member_id)
    return None


class GroupMember:
    """One process's membership. ``on_assigned``/``on_revoked`` start and stop copiers; a
    revocation returns only once the revoked partitions' writes are finished or abandoned.

    ``start()`` joins nothing yet (``subscribe`` does, and starts the member if needed);
    ``stop()`` leaves the group and is idempotent; ``async with`` does both.

    A member that cannot go on (another process took its instance id) gives up its
    partitions, leaves, and tells ``on_failed`` why (``failed``); it does not join again."""

    def __init__(
        self,
        config: Config,
        on_assigned: Callback,
        on_revoked: Callback,
        on_failed: Callable[[SyncerError], None] = lambda exc: None,
    ) -> None:
        self.config = config
        self.group = config.coordination
        self.name = member_name(config)
        self.client_id = f"syncer-{self.name}"
        self.assignor = GapStickyAssignor()
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self.on_failed = on_failed
        self.failed: SyncerError | None = None
        self._held: set[str] = set()  # the member ids the group gave this process
        self._join_unanswered = False  # the last JoinGroup sent got no answer
        self._sync_sent: float | None = None  # when the last SyncGroup was sent
        self.membership = Membership(self.group.lease_ms / 1000)
        self._consumer: AIOKafkaConsumer | None = None
        self._replacing = False  # a broken consumer is being replaced: subscribe its successor
        self.replaced = 0  # group clients replaced since the start
        self._broken_in_a_row = 0  # replaced with no assignment in between
        self._topics: tuple[str, ...] = ()
        self._poll_task: asyncio.Task[None] | None = None
        self._looking: asyncio.Task[None] | None = None  # for topics the leader did not know
        self.assignor.on_unknown = self._look_for

    def __repr__(self) -> str:
        return f"<GroupMember {self.group.group}/{self.name} [owns: {len(self.assigned)}]>"

    async def __aenter__(self) -> GroupMember:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def assigned(self) -> set[TP]:
        return self.membership.assigned

    @property
    def rebalances(self) -> int:
        return self.membership.rebalances

    def may_write(self) -> bool:
        """False once no heartbeat was answered within the lease: the group may have moved
        our partitions to another member already, so we stop writing at once."""
        return self.membership.may_write(lease_clock())

    async def announce(self, local: Cluster) -> None:
        """Ask once where the group's coordinator is, as the process starts, answer or not.
        On a new cluster the first such question makes the broker create its offsets topic;
        asked only at the first join, after 10,000 local partitions were created, that
        creation queued behind theirs and the first join waited 7 s for its coordinator."""
        try:
            node = local._client.get_random_node()  # as preflight does: any broker will do
            await local.send(node, FindCoordinatorRequest(self.group.group, GROUP_COORDINATOR))
        except Exception as exc:  # only a head start: the join asks again and waits
            log.debug("group %s: asking for its coordinator early: %r", self.group.group, exc)

    async def subscribe(self, topics: Iterable[str]) -> None:
        """Join (first call) or change the subscription to the local mirrored topics."""
        wanted = tuple(sorted(topics))
        await self.start()
        if wanted != self._topics and self._consumer is not None:
            self._topics = wanted
            if not self._replacing:  # else the new consumer subscribes to them
                listener = _Listener(self, self._consumer)
                self._consumer.subscribe(topics=list(wanted), listener=listener)

    async def start(self) -> None:
        """Connect the group's consumer to the local cluster and start polling; idempotent.
        A member that failed stays out."""
        if self._consumer is not None or self.failed is not None:
            return
        consumer = self._open_consumer()
        await consumer.start()
        self._consumer = consumer
        self._track(consumer)
        self._poll_task = asyncio.create_task(self._keep_joined(), name="group-poll")
        self._poll_task.add_done_callback(self._poll_died)

    def _open_consumer(self) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            bootstrap_servers=self.config.local.bootstrap_servers,
            client_id=self.client_id,
            enable_auto_commit=False,
            auto_offset_reset="latest",
            partition_assignment_strategy=(self.assignor,),
            max_partition_fetch_bytes=1024,
            fetch_max_bytes=1024,
            consumer_timeout_ms=FETCH_LOOP_MS,
            **group_options(self.group, self.config.copier.shutdown_timeout_s),
            **client_options(self.config.local),
        )

    def _track(self, consumer: AIOKafkaConsumer) -> None:
        """Wrap two calls of aiokafka's group coordinator (pinned aiokafka < 0.15;
        tests/integration/test_group.py and test_group_instance.py check them):

        - its heartbeat: aiokafka does not expose when one was last answered;
        - its LeaveGroup, as the consumer stops: given up after ``LEAVE_TIMEOUT_S``;
        - its requests: a member with an instance id that joins again as a new member (its
          heartbeat went unknown, or its client was replaced) looks first whether another
          process took its place. aiokafka's heartbeat does not carry the instance id, so
          the broker answers "unknown member", not "fenced", and aiokafka joins again,
          taking the place back: two processes with one instance id would each own every
          partition in turn, a rebalance every heartbeat."""
        coordinator = consumer._coordinator
        heartbeat, send = coordinator._do_heartbeat, coordinator._send_req

        async def tracked() -> bool:
            sent = lease_clock()
            answered = bool(await heartbeat())
            # unknown member, illegal generation: aiokafka forgot its member id
            unknown = coordinator.member_id == JoinGroupRequest.UNKNOWN_MEMBER_ID
            expelled = not answered and unknown
            self.membership.heartbeat(answered, sent, expelled=expelled)
            return answered

        async def checked(request: Any) -> Any:
            if request.API_KEY == SyncGroupRequest.API_KEY:
                self._sync_sent = lease_clock()  # the lease of the join runs from here
            if request.API_KEY == LeaveGroupRequest.API_KEY:
                return await left(request)
            if request.API_KEY != JoinGroupRequest.API_KEY:
                return await send(request)
            if (
                self.group.instance_id
                and self._held
                and coordinator.member_id == JoinGroupRequest.UNKNOWN_MEMBER_ID
            ):
                await self._check_place(send)
            try:
                response = await send(request)
            except BaseException:
                # the broker may have made us a member whose id we never heard: the next
                # look would count it as another process's
                self._join_unanswered = True
                raise
            self._join_unanswered = False
            if response.member_id:  # ours, whatever becomes of this join
                self._held.add(response.member_id)
            return response

        async def left(request: Any) -> Any:
            """aiokafka logs a KafkaError from its leave and goes on closing."""
            try:
                async with asyncio.timeout(LEAVE_TIMEOUT_S):
                    return await send(request)
            except TimeoutError:
                raise RequestTimedOutError(
                    f"unanswered after {LEAVE_TIMEOUT_S:g} s: the group drops this member"
                    " after its session timeout"
                ) from None

        coordinator._do_heartbeat = tracked
        coordinator._send_req = checked

    async def _check_place(self, send: Callable[[Any], Awaitable[Any]]) -> None:
        """Raise ``InstanceIdTaken`` (in aiokafka's coordination routine, which ends with
        it) if a member this process never was holds its client id, named after its
        instance id. A description that fails, or comes after a join that went unanswered
        (the broker may hold a member of ours we never heard of), lets the join go on."""
        if self._join_unanswered:
            return
        try:
            response = await send(DescribeGroupsRequest([self.group.group]))
            errors = [group[0] for group in response.groups if group[0]]
            if errors:
                raise KafkaError(f"DescribeGroups answered error code {errors[0]}")
        except Exception as exc:  # not raised into aiokafka's routine: it would end it
            log.warning("group %s: describing it before joining again: %r", self.group.group, exc)
            return
        taker = taken_by(response.groups, self.client_id, self._held)
        if taker is not None:
            self.failed = InstanceIdTaken(self.group.instance_id, self.group.group, taker)
            raise self.failed

    async def _keep_joined(self) -> None:
        """Poll the group's consumer; when aiokafka's group client breaks for good, give up
        the partitions, leave with it and join again with a new one. A member that kept a
        broken client would stay up but out of the group for good, copying nothing, while
        the others took its partitions."""
        while True:
            assert self._consumer is not None
            broke = await self._poll(self._consumer)
            if self.failed is not None:
                await self._leave(self.failed)
                return
            while True:
                self._broken_in_a_row += 1
                wait = replace_wait_s(self._broken_in_a_row)
                log.error(
                    "group %s: member %s: its group client broke (%r); it gives up its "
                    "%d partitions and joins again with a new one in %.0f s",
                    self.group.group,
                    self.name,
                    broke,
                    len(self.assigned),
                    wait,
                )
                try:
                    await self._replace_consumer(wait)
                    break
                except Exception as exc:  # the local cluster away, say: tried again later
                    broke = exc

    async def _poll(self, consumer: AIOKafkaConsumer) -> BaseException:
        """Keep the member alive for max.poll.interval: poll with every partition paused,
        until the consumer's group client breaks; returns why. An error Kafka marks
        retriable (the coordinator's broker gone, say) is polled through. Any other error,
        or aiokafka's coordination routine cancelled under us (``_revoked`` says how), is
        for good: aiokafka never joins again with that consumer."""
        while True:
            if self.failed is not None:  # refused by the group's leader
                return self.failed
            assignment = consumer.assignment()
            if assignment:
                consumer.pause(*assignment)
            try:
                # bounded: a poll that came during a rebalance waits for its assignment, and
                # forever if aiokafka's coordination routine ends meanwhile; the next poll
                # then says why
                async with asyncio.timeout(2 * POLL_MS / 1000):
                    await consumer.getmany(timeout_ms=POLL_MS)
            except TimeoutError:
                continue
            except KafkaError as exc:
                if not exc.retriable:
                    broke: BaseException = exc
                    return broke
                log.warning(
                    "group %s: member %s: poll failed, polling again: %r",
                    self.group.group,
                    self.name,
                    exc,
                )
                await asyncio.sleep(POLL_RETRY_S)
            except asyncio.CancelledError as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # stop() cancelled us
                return exc  # aiokafka's coordination routine ended cancelled

    async def _replace_consumer(self, wait_s: float) -> None:
        """Revoke everything (the copiers drain; the lease would end their writes anyway),
        close the broken consumer, and after ``wait_s`` subscribe a new one to the same
        topics. The new one joins as a new member."""
        self._replacing = True
        try:
            await self._revoked(set(self.assigned))
            looking, self._looking = self._looking, None  # it asks the broken consumer
            await cancel_and_wait(*(t for t in (looking,) if t is not None))
            if self._consumer is not None:
                await self._close(self._consumer)
            self.assignor.owned = set()  # nothing is ours to claim at the next join
            await asyncio.sleep(wait_s)
            consumer = self._consumer = self._open_consumer()  # stop() closes it if need be
            await consumer.start()
            self._track(consumer)
            self.replaced += 1
            if self._topics:
                consumer.subscribe(topics=list(self._topics), listener=_Listener(self, consumer))
        finally:
            self._replacing = False

    async def _leave(self, failed: SyncerError) -> None:
        """Give up every partition (the copiers drain), close the consumer for good, and
        say why."""
        log.error("group %s: member %s leaves for good: %s", self.group.group, self.name, failed)
        self._replacing = True  # the closing consumer's callbacks are not ours to act on
        try:
            await self._revoked(set(self.assigned))
            consumer, self._consumer = self._consumer, None
            if consumer is not None:
                await self._close(consumer)
        finally:  # a process left out of its group must stop, whatever the drain did
            self.on_failed(failed)

    async def _close(self, consumer: AIOKafkaConsumer) -> None:
        """Stop a consumer, leaving the group if it can. A background routine of aiokafka's
        that died raises here (its fetcher's, seen when the subscription changed as an
        assignment came), before the connections are closed: they are closed after it."""
        try:
            await consumer.stop()
        except Exception as exc:
            log.warning(
                "group %s: member %s: its group client stopped with %r",
                self.group.group,
                self.name,
                exc,
            )
        finally:  # also when a stop cancelled half-way is not done again (aiokafka's _closed)
            with contextlib.suppress(Exception):
                await consumer._client.close()
            # what ended aiokafka's coordination routine reached the poll another way (its
            # waiters are failed with a copy): taken here, or the task's end is logged as
            # never retrieved when it is collected
            routine = getattr(consumer._coordinator, "_coordination_task", None)
            if routine is not None and routine.done() and not routine.cancelled():
                routine.exception()

    def _look_for(self, topics: set[str]) -> None:
        """As group leader, this member gave out ``topics`` without their partitions: its
        consumer's metadata did not know them yet (a topic just created, on a broker not told
        yet). Its metadata is asked again until it knows them; aiokafka rejoins the group as
        it sees their partitions. Left to aiokafka's own refresh (every 5 minutes), the
        whole group owned nothing that long (a 3-node local cluster, two members, at start)."""
        if self._looking is None or self._looking.done():
            self._looking = asyncio.create_task(self._refresh_until_known(topics))

    async def _refresh_until_known(self, topics: set[str]) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        client = consumer._client
        while consumer is self._consumer:  # not a consumer this member stopped since
            cluster = client.cluster
            missing = {t for t in topics if not cluster.partitions_for_topic(t)}
            if not missing or not missing <= set(self._topics):
                return  # known now (the rejoin follows), or no longer subscribed
            log.info(
                "group %s: the leader's metadata lacks %s: asking again",
                self.group.group,
                ", ".join(sorted(missing)),
            )
            # bounded: aiokafka's update was seen never to end after a broker restart
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(client.force_metadata_update(), 10)
            await asyncio.sleep(UNKNOWN_RETRY_S)

    def _poll_died(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "group %s: member %s stopped polling: %r",
                self.group.group,
                self.name,
                task.exception(),
            )

    async def _assigned(self, assigned: set[TP]) -> None:
        assert self._consumer is not None
        refused = self.assignor.refused
        if refused is not None:  # given nothing: the poll sees it and the member leaves
            self.failed = WriterRefused(self.group.group, self.assignor.writer, *refused)
            return
        self._consumer.pause(*assigned)
        self._broken_in_a_row = 0
        sent = self._sync_sent if self._sync_sent is not None else lease_clock()
        new = self.membership.assign(assigned, sent)
        log.info(
            "group %s: member %s owns %d partitions (%d new)",
            self.group.group,
            self.name,
            len(assigned),
            len(new),
        )
        await self.on_assigned(assigned)

    async def _revoked(self, revoked: set[TP]) -> None:
        # aiokafka cancels its heartbeat task as this returns. Started by a join that just
        # succeeded, that task may not have run yet, and one cancelled before it ran raises
        # the cancellation in aiokafka's coordination routine, which ends silently: the
        # member never joins again. One turn of the loop lets it start first.
        await asyncio.sleep(0)
        self.membership.revoke(revoked)
        began = time.monotonic()
        await self.on_revoked(revoked)
        if revoked:  # the member joins the rebalance once this returns
            log.info(
                "group %s: member %s gives up %d partitions (drained in %.1f s)",
                self.group.group,
                self.name,
                len(revoked),
                time.monotonic() - began,
            )

    def update_gaps(self, gaps: Mapping[TP, int]) -> None:
        self.assignor.gaps = dict(gaps)

    async def stop(self) -> None:
        """Leave the group (the others take over at once); idempotent. The consumer is
        closed even when the caller is cancelled while the poll task ends."""
        task, self._poll_task = self._poll_task, None
        looking, self._looking = self._looking, None
        try:
            await cancel_and_wait(*(t for t in (task, looking) if t is not None))
        finally:
            consumer, self._consumer = self._consumer, None
            self._topics = ()  # a restarted member subscribes again
            if consumer is not None:
                await self._close(consumer)


async def group_owners(config: Config) -> dict[TP, str]:
    """Which member of the group owns each partition, as the local group coordinator says."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(
        bootstrap_servers=config.local.bootstrap_servers,
        client_id=f"{config.local.client_id}-status",
        request_timeout_ms=config.local.request_timeout_ms,
        **client_options(config.local),
    )
    await admin.start()
    try:
        responses = await admin.describe_consumer_groups([config.coordination.group])
    finally:
        await admin.close()
    return owners_of([group for response in responses for group in response.groups])


def owners_of(groups: Iterable[Sequence[Any]]) -> dict[TP, str]:
    """Partition → member name, from DescribeGroups answers (a group's members are its sixth
    field; a member's client id is fourth from its end, its assignment last). A member
    between a join and its assignment owns nothing yet."""
    owners: dict[TP, str] = {}
    for group in groups:
        for member in group[5]:
            client_id, assignment = member[-4], member[-1]
            if not assignment:
                continue
            decoded = ConsumerProtocolMemberAssignment.decode(assignment)
            for tp in decoded.partitions():
                owners[tp] = str(client_id).removeprefix("syncer-")
    return owners
