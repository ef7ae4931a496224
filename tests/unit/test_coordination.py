"""The group member's decisions, with no broker: when this process may write, what the leader's
assignor makes of the members' JoinGroup metadata (through aiokafka's own protocol classes),
in what order the member learns of a rebalance and tells the copiers, and its lifecycle."""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import time
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.coordinator.protocol import ConsumerProtocol, ConsumerProtocolMemberAssignment
from aiokafka.errors import (
    CoordinatorNotAvailableError,
    GroupAuthorizationFailedError,
    KafkaError,
    NodeNotReadyError,
    RequestTimedOutError,
)
from aiokafka.protocol.admin import DescribeGroupsResponse_v1
from aiokafka.protocol.group import JoinGroupRequest, LeaveGroupRequest

from syncer import coordination
from syncer.assignment import writer_of
from syncer.clusters import TP
from syncer.config import Config, CoordinationConfig
from syncer.coordination import (
    GapStickyAssignor,
    GroupMember,
    InstanceIdTaken,
    Membership,
    WriterRefused,
    _Listener,
    group_options,
    member_assignment,
    owners_of,
    replace_wait_s,
    subscribed_gaps,
    taken_by,
)
from syncer.errors import ExitCode, SyncerError

LEASE_S = 6.0
A, B, C = TP("t", 0), TP("t", 1), TP("t", 2)
DESCRIBE_GROUPS = 15  # the API key


def described(*members: tuple[str, str], error: int = 0) -> Any:
    """A DescribeGroups answer for group g with these (member id, client id), decoded as
    the broker's would be."""
    response = DescribeGroupsResponse_v1(
        0,
        [
            (
                error,
                "g",
                "Stable",
                "consumer",
                "syncer-gap-sticky",
                [(member, client, "/127.0.0.1", b"", b"") for member, client in members],
            )
        ],
    )
    return DescribeGroupsResponse_v1.decode(response.encode())


# the lease: may this process write? -----------------------------------------------------


def test_a_member_that_never_joined_may_not_write() -> None:
    membership = Membership(LEASE_S)
    assert not membership.may_write(0.0)
    assert not membership.may_write(1e9)
    membership.heartbeat(False, 5.0)
    assert not membership.may_write(5.0)


def test_a_join_grants_writes_for_the_lease_and_no_longer() -> None:
    membership = Membership(LEASE_S)
    membership.assign({A}, sent=100.0)
    assert membership.may_write(100.0) and membership.may_write(105.9)
    assert not membership.may_write(106.0)


def test_answered_heartbeats_renew_the_lease_and_unanswered_ones_let_it_lapse() -> None:
    membership = Membership(LEASE_S)
    membership.assign({A}, sent=0.0)
    membership.heartbeat(True, 5.0)
    assert membership.may_write(10.9)  # renewed at 5, not 0
    membership.heartbeat(False, 10.0)  # no answer: the lease runs out
    assert membership.may_write(10.9) and not membership.may_write(11.0)
    membership.heartbeat(True, 12.0)  # rejoined and answered again
    assert membership.may_write(12.0)
    membership.heartbeat(False, 13.0, expelled=True)  # unknown member: the session expired
    assert not membership.may_write(13.0)  # its partitions may be another's: at once


def test_a_revocation_keeps_the_lease_so_copiers_can_drain() -> None:
    membership = Membership(LEASE_S)
    membership.assign({A, B}, sent=0.0)
    membership.revoke({A})
    assert membership.assigned == {B}
    assert membership.may_write(1.0)


def test_an_assignment_names_what_is_new_and_counts_the_rebalance() -> None:
    membership = Membership(LEASE_S)
    assert membership.assign([A, B], sent=0.0) == {A, B}
    assert membership.assign([B, C], sent=1.0) == {C}
    assert membership.assigned == {B, C} and membership.rebalances == 2
    membership.revoke({B, C})  # aiokafka revokes everything before each join (eager)
    assert membership.assign([B], sent=2.0) == {B}
    assert membership.assigned == {B} and membership.rebalances == 3


# the member: what it tells the copiers, and in what order -------------------------------


class StubClient:
    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True


class StubCoordinator:
    """Heartbeats answered in turn; requests recorded: a DescribeGroups answered with
    ``described``, a JoinGroup with the next of ``joined_as`` (a member id; an exception is
    raised instead)."""

    def __init__(self, answers: Iterable[bool | Exception]) -> None:
        self.answers = list(answers)
        self.member_id = ""  # none yet
        self.requests: list[Any] = []
        self.described: Any = described()
        self.joined_as: list[str | Exception] = []

    async def _send_req(self, request: Any) -> Any:
        self.requests.append(request)
        answer = self.described if request.API_KEY == DESCRIBE_GROUPS else self.joined_as.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return SimpleNamespace(member_id=answer) if isinstance(answer, str) else answer

    async def _do_heartbeat(self) -> bool:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class StubConsumer:
    """The parts of AIOKafkaConsumer the member touches; nothing crosses a wire."""

    def __init__(self, heartbeats: Iterable[bool | Exception] = ()) -> None:
        self._coordinator = StubCoordinator(heartbeats)
        self._client = StubClient()
        self.owned: set[TP] = set()
        self.paused: set[TP] = set()
        self.subscriptions: list[list[str]] = []
        self.starts = self.stops = self.polls = 0
        self.fail_poll: Exception | None = None  # every poll fails with it
        self.fail_polls: list[BaseException] = []  # the next polls fail with these, in turn
        self.fail_start: Exception | None = None
        self.hang_polls = 0  # the next polls never end (one waiting for an assignment)
        self.fail_stop: Exception | None = None

    async def start(self) -> None:
        self.starts += 1
        if self.fail_start is not None:
            raise self.fail_start

    async def stop(self) -> None:
        self.stops += 1
        if self.fail_stop is not None:
            raise self.fail_stop

    def subscribe(self, topics: list[str], listener: Any) -> None:
        self.subscriptions.append(topics)

    def assignment(self) -> set[TP]:
        return set(self.owned)

    def pause(self, *tps: TP) -> None:
        self.paused.update(tps)

    async def getmany(self, timeout_ms: int) -> dict[TP, list[Any]]:
        self.polls += 1
        if self.fail_poll is not None:
            raise self.fail_poll
        if self.hang_polls:
            self.hang_polls -= 1
            await asyncio.Event().wait()
        if self.fail_polls:
            raise self.fail_polls.pop(0)
        await asyncio.sleep(0.005)
        return {}


def config(instance_id: str = "") -> Config:
    return Config.from_dict(
        {
            "local": {"bootstrap_servers": "127.0.0.1:1"},
            "remotes": [{"name": "east", "bootstrap_servers": "127.0.0.1:2"}],
            "topics": {"include": ["t"]},
            "coordination": {"group": "g", "instance_id": instance_id},
        }
    )


class Member(GroupMember):
    """A member whose consumer is a stub (the real one is exercised in test_group.py)."""

    def __init__(
        self, consumer: StubConsumer | None = None, *then: StubConsumer, instance_id: str = ""
    ) -> None:
        self.told: list[tuple[str, set[TP], bool, set[TP]]] = []
        self.failures: list[SyncerError] = []
        super().__init__(
            config(instance_id), self._told_assigned, self._told_revoked, self.failures.append
        )
        self.stub = consumer or StubConsumer()
        self.then = list(then)  # the consumers that replace a broken one, in turn

    def _open_consumer(self) -> Any:
        if self._consumer is not None:
            self.stub = self.then.pop(0)
        return self.stub

    async def _told_assigned(self, tps: set[TP]) -> None:
        self.told.append(("assigned", tps, self.may_write(), set(self.assigned)))

    async def _told_revoked(self, tps: set[TP]) -> None:
        self.told.append(("revoked", tps, self.may_write(), set(self.assigned)))


async def test_a_member_before_its_first_assignment_may_not_write() -> None:
    async with Member() as member:
        assert not member.may_write()


async def test_copiers_start_once_the_partitions_are_paused_and_writable() -> None:
    async with Member() as member:
        await _Listener(member, member.stub).on_partitions_assigned({A, B})
        assert member.told == [("assigned", {A, B}, True, {A, B})]
        assert member.stub.paused >= {A, B}  # never fetched by the group's consumer
        assert member.rebalances == 1


async def test_revoked_partitions_are_no_longer_owned_when_their_copiers_are_stopped() -> None:
    async with Member() as member:
        listener = _Listener(member, member.stub)
        await listener.on_partitions_assigned({A, B})
        await listener.on_partitions_revoked({A, B})
        await listener.on_partitions_assigned({B, C})
    assert [(what, tps, owned) for what, tps, _w, owned in member.told] == [
        ("assigned", {A, B}, {A, B}),
        ("revoked", {A, B}, set()),
        ("assigned", {B, C}, {B, C}),
    ]
    assert member.told[1][2]  # still writable while the revoked copiers drain


async def test_heartbeats_renew_the_lease_and_failures_do_not() -> None:
    stub = StubConsumer(heartbeats=[True, False, ConnectionError("gone"), True])
    async with Member(stub) as member:
        heartbeat = stub._coordinator._do_heartbeat  # as wrapped by the member
        assert await heartbeat() is True and member.may_write()
        member.membership.lease_s = 0.02
        await asyncio.sleep(0.03)
        assert await heartbeat() is False and not member.may_write()
        with pytest.raises(ConnectionError):
            await heartbeat()
        assert not member.may_write()
        assert await heartbeat() is True and member.may_write()


async def test_the_lease_runs_from_when_the_heartbeat_was_sent_not_answered() -> None:
    """The coordinator's session runs from its answer; an answer read late (the event loop
    stalled, a slow link) must not stretch the lease past what was sent: it runs from the
    send. And an answer that says the member is unknown ends the lease at once."""
    stub = StubConsumer(heartbeats=[True, True, False])
    coordinator = stub._coordinator
    answer = coordinator._do_heartbeat
    late = [True]

    async def answered_late() -> bool:
        if late[0]:
            await asyncio.sleep(0.08)
        return await answer()

    coordinator._do_heartbeat = answered_late  # type: ignore[method-assign]
    async with Member(stub) as member:
        heartbeat = coordinator._do_heartbeat  # as wrapped by the member
        member.membership.lease_s = 0.1
        before = time.monotonic()
        assert await heartbeat() is True
        await asyncio.sleep(max(0.0, before + 0.105 - time.monotonic()))
        assert not member.may_write()  # 0.1 s from the send, not from the answer
        late[0] = False
        coordinator.member_id = "member-1"
        member.membership.lease_s = 5.0
        assert await heartbeat() is True and member.may_write()
        coordinator.member_id = ""  # aiokafka forgot it: unknown member, illegal generation
        assert await heartbeat() is False and not member.may_write()


# lifecycle ------------------------------------------------------------------------------


async def test_async_with_polls_with_everything_paused_and_stops_once() -> None:
    member = Member()
    async with member:
        member.stub.owned = {A}
        while member.stub.polls < 2:
            await asyncio.sleep(0.005)
        assert member.stub.paused == {A}
        await member.start()  # idempotent
        assert member.stub.starts == 1
    assert member.stub.stops == 1 and member._poll_task is None
    await member.stop()  # idempotent
    assert member.stub.stops == 1


async def test_subscribe_starts_the_member_and_resubscribes_only_on_a_change() -> None:
    member = Member()
    try:
        await member.subscribe(["t", "a"])
        await member.subscribe(["a", "t"])
        await member.subscribe(["a"])
        assert member.stub.starts == 1
        assert member.stub.subscriptions == [["a", "t"], ["a"]]
    finally:
        await member.stop()


async def test_a_poll_loop_that_dies_says_why(caplog: pytest.LogCaptureFixture) -> None:
    stub = StubConsumer()
    stub.fail_poll = RuntimeError("boom")
    async with Member(stub) as member:
        while member._poll_task is not None and not member._poll_task.done():
            await asyncio.sleep(0.005)
    assert "stopped polling: RuntimeError('boom')" in caplog.text
    assert stub.stops == 1


async def test_a_retriable_poll_error_is_polled_through(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(coordination, "POLL_RETRY_S", 0.001)
    stub = StubConsumer()
    stub.fail_polls = [CoordinatorNotAvailableError(), NodeNotReadyError()]
    async with Member(stub) as member:
        while stub.polls < 4:
            await asyncio.sleep(0.005)
        assert member._poll_task is not None and not member._poll_task.done()
    assert caplog.text.count("poll failed, polling again") == 2
    assert "stopped polling" not in caplog.text


async def test_a_broken_group_client_gives_up_the_partitions_and_a_new_one_joins(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fatal error, or aiokafka's coordination routine cancelled under the poll: that
    consumer never joins again. Kept, the member would stay up and out of the group."""
    monkeypatch.setattr(coordination, "REPLACE_FIRST_S", 0.001)
    for broke in (GroupAuthorizationFailedError(), asyncio.CancelledError()):
        caplog.clear()
        broken, fresh = StubConsumer(), StubConsumer()
        async with Member(broken, fresh) as member:
            await member.subscribe(["t"])
            await _Listener(member, member.stub).on_partitions_assigned({A, B})
            member.assignor.on_assignment(member_assignment({A, B}))
            broken.fail_polls = [broke]
            while not fresh.subscriptions:
                await asyncio.sleep(0.005)
            assert member._poll_task is not None and not member._poll_task.done()
            assert [(what, tps) for what, tps, _w, _o in member.told] == [
                ("assigned", {A, B}),
                ("revoked", {A, B}),  # drained before the new consumer joins
            ]
            assert member.assigned == set() and member.assignor.owned == set()
            assert broken.stops == 1 and fresh.starts == 1 and member.replaced == 1
            assert fresh.subscriptions == [["t"]]
            while fresh.polls < 2:  # the new consumer is polled
                await asyncio.sleep(0.005)
        assert fresh.stops == 1
        assert f"its group client broke ({broke!r}); it gives up its 2 partitions" in caplog.text
        assert "stopped polling" not in caplog.text


async def test_a_new_group_client_that_cannot_start_is_tried_again_later_and_later(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(coordination, "REPLACE_FIRST_S", 0.001)
    broken, away, fresh = StubConsumer(), StubConsumer(), StubConsumer()
    broken.fail_polls = [GroupAuthorizationFailedError()]
    away.fail_start = NodeNotReadyError()  # the local cluster away
    async with Member(broken, away, fresh) as member:
        await member.subscribe(["t"])
        while not fresh.subscriptions:
            await asyncio.sleep(0.005)
        assert member._broken_in_a_row == 2 and member.replaced == 1
        await _Listener(member, member.stub).on_partitions_assigned({A})
        assert member._broken_in_a_row == 0  # joined: the next break waits 1 s again
    waits = [line.rsplit(" in ", 1)[1] for line in caplog.messages if "broke" in line]
    assert waits == ["0 s", "0 s"] and "NodeNotReadyError" in caplog.messages[-1]
    assert away.stops == 1, "a consumer that failed to start is closed"


def test_a_replacement_doubles_its_wait_up_to_a_bound() -> None:
    waits = [replace_wait_s(n) for n in range(1, 12)]
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0] + [30.0] * 6


async def test_a_consumer_whose_stop_fails_still_has_its_connections_closed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    for fails in (None, KafkaError("Unexpected error during data retrieval")):  # dead fetcher
        stub = StubConsumer()
        stub.fail_stop = fails
        member = Member(stub)
        await member.start()
        await member.stop()  # does not raise: the process goes on stopping
        assert stub._client.closed and stub.stops == 1
        assert ("its group client stopped with" in caplog.text) == (fails is not None)


async def test_a_poll_that_never_ends_is_bounded_and_the_next_one_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A poll waiting for an assignment waits forever if aiokafka's coordination routine
    ends meanwhile; only the next poll raises."""
    monkeypatch.setattr(coordination, "POLL_MS", 10)
    monkeypatch.setattr(coordination, "REPLACE_FIRST_S", 0.001)
    broken, fresh = StubConsumer(), StubConsumer()
    broken.hang_polls = 1
    broken.fail_polls = [asyncio.CancelledError()]
    async with Member(broken, fresh) as member:
        await member.subscribe(["t"])
        async with asyncio.timeout(5):
            while not fresh.subscriptions:
                await asyncio.sleep(0.005)
        assert broken.polls == 2 and member.replaced == 1


async def test_rebalances_of_a_consumer_no_longer_the_members_are_not_told() -> None:
    """A broken consumer's coordination may still run as it is replaced: its late
    assignment must not start copiers, nor its late revocation stop the new one's."""
    old, new = StubConsumer(), StubConsumer()
    async with Member(old, new) as member:
        stale = _Listener(member, old)
        member._replacing = True
        await stale.on_partitions_assigned({A})
        member._replacing = False
        await member._replace_consumer(0)
        await _Listener(member, new).on_partitions_assigned({A, B})
        await stale.on_partitions_assigned({C})
        await stale.on_partitions_revoked({A, B})
        assert [(what, tps) for what, tps, *_ in member.told] == [
            ("revoked", set()),  # the replacement's own, of what it owned: nothing
            ("assigned", {A, B}),
        ]
        assert member.assigned == {A, B}


async def test_a_revocation_lets_a_task_started_just_before_it_run_first() -> None:
    """aiokafka starts its heartbeat task at a join and cancels it once the revocation
    callback returns; cancelled before it ran, it takes aiokafka's coordination with it."""
    ran: list[str] = []

    async def heartbeat() -> None:
        ran.append("heartbeat")

    async with Member() as member:
        started = asyncio.create_task(heartbeat())
        await member._revoked(set())
        assert ran == ["heartbeat"]
        assert [what for what, *_ in member.told] == ["revoked"]
        await started


# the assignor: what the leader makes of the members' metadata ---------------------------


class Metadata:
    """The leader's view of the topics' partition counts (ClusterMetadata's one used call)."""

    def __init__(self, partitions: dict[str, int]) -> None:
        self.partitions = partitions

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        count = self.partitions.get(topic)
        return None if count is None else set(range(count))


W1, W2 = writer_of("east-mirror", 7, 0), writer_of("east-mirrror", 9, 0)


def join(assignors: dict[str, GapStickyAssignor], topics: list[str], leader: str) -> None:
    """One rebalance as aiokafka runs it, bytes on the wire included: every member's
    metadata is encoded into its JoinGroup, the leader assigns, every member decodes its
    share from SyncGroup."""
    joined = {
        name: ConsumerProtocol.METADATA.decode(assignor.metadata(topics).encode())
        for name, assignor in assignors.items()
    }
    plan = assignors[leader].assign(Metadata({"t": 6, "u": 2}), joined)
    for name, assignor in assignors.items():
        assignor.on_assignment(ConsumerProtocol.ASSIGNMENT.decode(plan[name].encode()))


def test_an_assignment_round_trips_through_the_consumer_protocol() -> None:
    assignors = {"m1": GapStickyAssignor(), "m2": GapStickyAssignor()}
    join(assignors, ["t"], leader="m1")
    first = {name: a.owned for name, a in assignors.items()}
    assert sorted(first["m1"] | first["m2"]) == [TP("t", p) for p in range(6)]
    assert not first["m1"] & first["m2"] and len(first["m1"]) == len(first["m2"]) == 3
    # what each owns travels in its next JoinGroup: a third member takes only a share
    assignors["m3"] = GapStickyAssignor()
    join(assignors, ["t"], leader="m2")
    assert assignors["m1"].owned <= first["m1"] and assignors["m2"].owned <= first["m2"]
    assert [len(assignors[m].owned) for m in ("m1", "m2", "m3")] == [2, 2, 2]


def test_only_subscribed_topics_are_assigned_and_junk_user_data_owns_nothing() -> None:
    leader = GapStickyAssignor()
    members = {
        "old": ConsumerProtocol.METADATA(0, ["u"], b"\x00not json"),
        "new": ConsumerProtocol.METADATA(0, ["u"], b""),
    }
    plan = {
        m: set(a.partitions())
        for m, a in leader.assign(Metadata({"t": 6, "u": 2}), members).items()
    }
    assert plan["old"] | plan["new"] == {TP("u", 0), TP("u", 1)}
    assert len(plan["old"]) == len(plan["new"]) == 1


def test_a_topic_given_out_before_the_leader_knows_its_partitions_is_told() -> None:
    # the leader's metadata lacks it (just created): nothing of it is given out, and the
    # member is told, so that it asks its metadata again until it knows (aiokafka then
    # rejoins); left alone, aiokafka looks again only after 5 minutes
    leader = GapStickyAssignor()
    told: list[set[str]] = []
    leader.on_unknown = told.append
    members = {m: ConsumerProtocol.METADATA(0, ["t", "new"], b"") for m in ("a", "b")}
    plan = leader.assign(Metadata({"t": 2}), members)
    assert told == [{"new"}]
    assert {tp for a in plan.values() for tp in a.partitions()} == {TP("t", 0), TP("t", 1)}
    leader.assign(Metadata({"t": 2, "new": 1}), members)
    assert told == [{"new"}]  # known now: nothing more to tell


def test_the_leaders_measured_gaps_weigh_partitions(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "syncer.coordination")
    leader = GapStickyAssignor()
    leader.gaps = {TP("t", 0): 1_000_000}  # the rest caught up or never measured
    members = {m: ConsumerProtocol.METADATA(0, ["t"], b"") for m in ("a", "b")}
    plan = {m: set(a.partitions()) for m, a in leader.assign(Metadata({"t": 6}), members).items()}
    heavy = next(m for m, parts in plan.items() if TP("t", 0) in parts)
    # t-0 weighs 7 (1 + its gap over the mean gap), the others 1 each: it is a share alone
    assert plan[heavy] == {TP("t", 0)}
    # the leader says so: an operator asking why one member copies fewer partitions
    assert (
        "group leader: 6 partitions to 2 members, loads 7.00 / 5.00 "
        "(by gap; the heaviest partition weighs 7.00)" in caplog.messages
    )


def test_a_member_writing_as_another_writer_gets_nothing_and_is_told_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One member configured with another deployment name (another producer id): the two
    would write one partition with two ids in turn. The leader, in the minority here,
    gives itself nothing; the two that agree share every partition."""
    assignors = {m: GapStickyAssignor() for m in ("m1", "m2", "typo")}
    assignors["m1"].writer = assignors["m2"].writer = W1
    assignors["typo"].writer = W2
    join(assignors, ["t", "u"], leader="typo")
    owned = {m: a.owned for m, a in assignors.items()}
    assert owned["typo"] == set() and assignors["typo"].refused == (W1, 2)
    assert owned["m1"] | owned["m2"] == {TP("t", p) for p in range(6)} | {TP("u", 0), TP("u", 1)}
    assert assignors["m1"].refused is None and assignors["m2"].refused is None
    assert f"they get no partition (typo as {W2})" in caplog.text
    assignors["old"] = GapStickyAssignor()  # an older version tells no writer: left in
    join(assignors, ["t", "u"], leader="m1")
    assert assignors["old"].owned and assignors["old"].refused is None
    assert assignors["typo"].owned == set() and assignors["typo"].refused == (W1, 2)


def test_running_members_keep_the_group_from_more_newcomers_writing_otherwise() -> None:
    """A deploy that starts three processes with a typo beside two running ones (one of
    the new ones leading): the running ones keep every partition, the new ones get none."""
    assignors = {m: GapStickyAssignor() for m in ("run-1", "run-2")}
    for assignor in assignors.values():
        assignor.writer = W1
    join(assignors, ["t"], leader="run-1")
    for name in ("new-1", "new-2", "new-3"):
        assignors[name] = GapStickyAssignor()
        assignors[name].writer = W2
    join(assignors, ["t"], leader="new-1")
    assert assignors["run-1"].owned | assignors["run-2"].owned == {TP("t", p) for p in range(6)}
    for name in ("new-1", "new-2", "new-3"):
        assert assignors[name].owned == set() and assignors[name].refused == (W1, 2)


def test_a_static_member_handed_its_stored_assignment_refuses_itself() -> None:
    """A static member restarted (same instance id) into a stable group is handed the
    assignment stored for it, without the leader assigning anything: restarted with
    another name, it is told the group's writer there and refuses itself."""
    assignors = {m: GapStickyAssignor() for m in ("s1", "s2")}
    for assignor in assignors.values():
        assignor.writer = W1
    joined = {
        name: ConsumerProtocol.METADATA.decode(assignor.metadata(["t"]).encode())
        for name, assignor in assignors.items()
    }
    stored = assignors["s1"].assign(Metadata({"t": 6}), joined)["s2"].encode()
    restarted = GapStickyAssignor()
    restarted.writer = W2
    restarted.on_assignment(ConsumerProtocol.ASSIGNMENT.decode(stored))
    assert restarted.refused == (W1, 2)
    assert restarted.owned == set()  # nothing claimed at its next join
    again = GapStickyAssignor()
    again.writer = W1  # restarted as it was: not refused
    again.on_assignment(ConsumerProtocol.ASSIGNMENT.decode(stored))
    assert again.refused is None and again.owned


async def test_a_refused_member_leaves_and_says_why_in_one_line() -> None:
    async with Member() as member:
        member.assignor.writer = W2
        member.assignor.refused = (W1, 2)
        # a static member's stored assignment names partitions: none is copied
        await _Listener(member, member.stub).on_partitions_assigned({A, B})
        async with asyncio.timeout(5):
            while member.stub.stops == 0:
                await asyncio.sleep(0.005)
    (failed,) = member.failures
    assert isinstance(failed, WriterRefused) and failed.exit_code == ExitCode.CONFIG
    assert str(failed) == (
        f"coordination: group g: 2 members write as {W1}, this process as {W2}: "
        "give every member of a group the same name and state_topic"
    )
    assert [(what, tps) for what, tps, _w, _o in member.told] == [("revoked", set())]
    assert not member.may_write()  # it never had a share


def test_subscribed_gaps_cover_every_known_partition_once() -> None:
    counts = {"t": 3, "u": 1}
    gaps = subscribed_gaps(
        ["t", "gone"],
        lambda t: range(counts[t]) if t in counts else None,
        {
            TP("t", 1): 50,
            TP("u", 0): 99,  # not subscribed
        },
    )
    assert gaps == {TP("t", 0): 0, TP("t", 1): 50, TP("t", 2): 0}


def test_a_member_assignment_groups_partitions_by_topic() -> None:
    encoded = member_assignment({TP("u", 3), TP("t", 1), TP("t", 0)}).encode()
    decoded = ConsumerProtocolMemberAssignment.decode(encoded)
    assert decoded.assignment == [("t", [0, 1]), ("u", [3])]
    assert decoded.user_data == b""


# the consumer's settings and the owners shown by `syncer status` ------------------------


def test_group_options_for_dynamic_and_static_members() -> None:
    dynamic = group_options(CoordinationConfig(group="g"), drain_s=30.0)
    assert dynamic["group_instance_id"] is None  # "" would ask for static membership
    assert dynamic["max_poll_interval_ms"] == 300_000
    static = group_options(
        CoordinationConfig(group="g", instance_id="a", session_timeout_ms=200_000), drain_s=30.0
    )
    assert static["group_instance_id"] == "a"
    assert static["max_poll_interval_ms"] == 600_000
    assert static["group_id"] == "g" and static["session_timeout_ms"] == 200_000


@pytest.mark.parametrize(("session_ms", "drain_s"), [(6_000, 30.0), (10_000, 30.0), (6_000, 2.5)])
def test_the_rebalance_timeout_outlasts_a_revocation_drain(session_ms: int, drain_s: float) -> None:
    """A member joins a rebalance only once its revoked copiers drained (``drain_s`` at most)
    and it heard of the rebalance (a heartbeat, well within a session timeout); the
    coordinator must not drop it before then and give its partitions away mid-drain."""
    options = group_options(
        CoordinationConfig(group="g", session_timeout_ms=session_ms, heartbeat_interval_ms=500),
        drain_s=drain_s,
    )
    assert options["rebalance_timeout_ms"] >= drain_s * 1000 + session_ms
    assert options["rebalance_timeout_ms"] > options["session_timeout_ms"]


def test_owners_come_from_the_group_description() -> None:
    share = member_assignment({TP("t", 0), TP("t", 2)}).encode()
    response = DescribeGroupsResponse_v1(
        0,
        [
            (
                0,
                "g",
                "Stable",
                "consumer",
                "syncer-gap-sticky",
                [
                    ("id-1", "syncer-host-1", "/127.0.0.1", b"", share),
                    ("id-2", "syncer-host-2", "/127.0.0.1", b"", b""),  # not assigned yet
                ],
            )
        ],
    )
    groups = DescribeGroupsResponse_v1.decode(response.encode()).groups
    assert owners_of(groups) == {TP("t", 0): "host-1", TP("t", 2): "host-1"}


class _Nodes:
    def get_random_node(self) -> int:
        return 3


class _Local:
    """A local cluster that records what is sent (or fails every send)."""

    def __init__(self, fail: Exception | None = None) -> None:
        self._client = _Nodes()
        self.sent: list[tuple[int, Any]] = []
        self.fail = fail

    async def send(self, node: int, request: Any) -> Any:
        if self.fail is not None:
            raise self.fail
        self.sent.append((node, request))
        return None


async def test_a_member_asks_for_its_coordinator_before_it_joins() -> None:
    """Asked as the process starts, a new cluster creates its offsets topic before the local
    topics' creation is queued ahead of it."""
    local = _Local()
    await Member().announce(local)  # type: ignore[arg-type]
    ((node, request),) = local.sent
    assert node == 3 and type(request).__name__ == "FindCoordinatorRequest"
    assert (request._coordinator_key, request._coordinator_type) == ("g", 0)


async def test_asking_for_the_coordinator_early_never_fails_the_start() -> None:
    await Member().announce(_Local(fail=OSError("no broker yet")))  # type: ignore[arg-type]


# one instance id, one process ------------------------------------------------------------


class UnansweredLeave(StubCoordinator):
    """A coordinator that never answers a LeaveGroup (its broker hung, the link cut)."""

    async def _send_req(self, request: Any) -> Any:
        if request.API_KEY == LeaveGroupRequest.API_KEY:
            self.requests.append(request)
            await asyncio.Event().wait()
        return await super()._send_req(request)


async def test_a_leave_unanswered_is_given_up_so_a_stop_keeps_to_its_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """aiokafka leaves the group as the consumer stops, waiting its request timeout (40 s)
    for the answer: a daemon told to stop, its local cluster hung, outlived its own
    shutdown budget. The leave is given up after ``LEAVE_TIMEOUT_S`` as a KafkaError,
    which aiokafka logs and closes on."""
    monkeypatch.setattr(coordination, "LEAVE_TIMEOUT_S", 0.05)
    consumer = StubConsumer()
    consumer._coordinator = UnansweredLeave([])  # type: ignore[assignment]
    async with Member(consumer):
        leave = consumer._coordinator._send_req
        async with asyncio.timeout(2):
            with pytest.raises(KafkaError, match=r"unanswered after 0\.05 s"):
                await leave(LeaveGroupRequest("g", "m-1"))
        assert [r.API_KEY for r in consumer._coordinator.requests] == [LeaveGroupRequest.API_KEY]
        consumer._coordinator.joined_as.append("m-2")  # other requests are not bounded so
        assert (await leave(join_request())).member_id == "m-2"


def join_request() -> JoinGroupRequest:
    return JoinGroupRequest("g", 10_000, 40_000, "", "twin", "consumer", [])


async def joined(member: Member, consumer: StubConsumer, as_id: str) -> None:
    """The consumer's JoinGroup answered with member id ``as_id``, then aiokafka forgot it
    (a heartbeat answered "unknown member")."""
    coordinator = consumer._coordinator
    coordinator.joined_as.append(as_id)
    await coordinator._send_req(join_request())
    coordinator.member_id = ""
    coordinator.requests.clear()


def test_a_member_of_our_client_id_that_we_never_were_has_taken_our_place() -> None:
    mine, theirs = "twin-1", "twin-2"
    groups = described((mine, "syncer-twin"), (theirs, "syncer-twin"), ("o", "syncer-x")).groups
    assert taken_by(groups, "syncer-twin", held={mine}) == theirs
    assert taken_by(groups, "syncer-twin", held={mine, theirs}) is None  # both were ours
    assert taken_by(groups, "syncer-other", held=set()) is None
    assert taken_by(described().groups, "syncer-twin", held={mine}) is None  # expired


async def test_a_static_member_joining_again_finds_its_place_taken_and_leaves(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its heartbeat went unknown and aiokafka joins again: the group shows another
    process with its instance id. The join is not sent (it would take the place back); the
    next poll says the routine ended, and the member gives up everything, closes its
    consumer and says why. It does not join again, even when asked to subscribe."""
    consumer, spare = StubConsumer(), StubConsumer()
    async with Member(consumer, spare, instance_id="twin") as member:
        await member.subscribe(["t"])
        await joined(member, consumer, "twin-1")
        await _Listener(member, consumer).on_partitions_assigned({A, B})
        coordinator = consumer._coordinator
        coordinator.described = described(("twin-2", "syncer-twin"))
        with pytest.raises(InstanceIdTaken) as raised:
            await coordinator._send_req(join_request())
        assert [r.API_KEY for r in coordinator.requests] == [DESCRIBE_GROUPS]  # no join
        assert member.failed is raised.value and raised.value.exit_code == ExitCode.CONFIG
        consumer.fail_polls = [KafkaError("Unexpected error during coordination")]
        while consumer.stops == 0:
            await asyncio.sleep(0.005)
        assert member.failures == [raised.value]
        assert [(what, tps) for what, tps, _w, _o in member.told] == [
            ("assigned", {A, B}),
            ("revoked", {A, B}),
        ]
        assert member.assigned == set() and consumer._client.closed
        assert member._consumer is None and member.replaced == 0
        await member.subscribe(["t", "u"])  # a topic refresh: it stays out
        assert spare.starts == 0 and member._consumer is None
    assert str(raised.value) in caplog.text and "broke" not in caplog.text
    assert "instance_id 'twin' is another process's too: it joined group g as member twin-2" in (
        str(raised.value)
    )


async def test_a_member_that_cannot_drain_still_says_it_left() -> None:
    consumer = StubConsumer()
    failures: list[SyncerError] = []

    async def cannot_drain(tps: set[TP]) -> None:
        raise RuntimeError("a copier would not stop")

    async def assigned(tps: set[TP]) -> None:
        pass

    member = GroupMember(config("twin"), assigned, cannot_drain, failures.append)
    member._consumer = consumer  # type: ignore[assignment]
    taken = InstanceIdTaken("twin", "g", "twin-2")
    with pytest.raises(RuntimeError):
        await member._leave(taken)
    assert failures == [taken]


@pytest.mark.parametrize(
    ("instance_id", "held", "member_id"),
    [
        ("", "m-1", ""),  # dynamic: nobody else has its id
        ("twin", None, ""),  # its first join: a restarted process takes its place back
        ("twin", "twin-1", "twin-1"),  # a rebalance: it is still a member
    ],
    ids=["dynamic", "first-join", "rebalance"],
)
async def test_only_a_static_member_joining_again_as_new_looks_first(
    instance_id: str, held: str | None, member_id: str
) -> None:
    consumer = StubConsumer()
    async with Member(consumer, instance_id=instance_id) as member:
        coordinator = consumer._coordinator
        if held is not None:
            await joined(member, consumer, held)
        coordinator.member_id = member_id
        coordinator.described = described(("twin-2", f"syncer-{member.name}"))
        coordinator.joined_as.append("twin-3")
        assert (await coordinator._send_req(join_request())).member_id == "twin-3"
        assert [r.API_KEY for r in coordinator.requests] == [JoinGroupRequest.API_KEY]
        assert member.failed is None and "twin-3" in member._held


@pytest.mark.parametrize(
    "cause",
    ["describe-fails", "describe-errs", "join-unanswered"],
)
async def test_a_look_that_cannot_tell_lets_the_join_go_on(
    cause: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The group cannot be described (its coordinator moved), answers with an error, or
    our last join went unanswered: the broker may then hold a member of ours we never heard
    of (``twin-lost``), which must not be taken for another process."""
    consumer = StubConsumer()
    async with Member(consumer, instance_id="twin") as member:
        coordinator = consumer._coordinator
        await joined(member, consumer, "twin-1")
        coordinator.described = described(("twin-lost", "syncer-twin"))
        if cause == "describe-fails":
            coordinator.described = CoordinatorNotAvailableError()
        elif cause == "describe-errs":  # NOT_COORDINATOR: no members listed
            coordinator.described = described(error=16)
        else:  # the broker made us twin-lost, and its answer was lost
            coordinator.described = described()
            coordinator.joined_as.append(RequestTimedOutError())
            with pytest.raises(RequestTimedOutError):
                await coordinator._send_req(join_request())
            coordinator.requests.clear()
            coordinator.described = described(("twin-lost", "syncer-twin"))
        coordinator.joined_as.append("twin-2")
        assert (await coordinator._send_req(join_request())).member_id == "twin-2"
        sent = [r.API_KEY for r in coordinator.requests]
        assert sent[-1] == JoinGroupRequest.API_KEY and member.failed is None
        if cause == "join-unanswered":
            assert sent == [JoinGroupRequest.API_KEY]
        else:
            assert "describing it before joining again" in caplog.text
        # answered now: the next look counts again
        coordinator.member_id = ""
        coordinator.described = described(("twin-lost", "syncer-twin"))
        with pytest.raises(InstanceIdTaken):
            await coordinator._send_req(join_request())


async def test_a_closed_consumers_ended_routine_is_not_reported_as_never_retrieved() -> None:
    """Its end reached the poll as a copy; left unretrieved, the task's error is logged as
    "never retrieved" when it is collected (a traceback on the expected path)."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))

    async def ended() -> None:
        raise KafkaError("Unexpected error during coordination")

    consumer = StubConsumer()
    routine = asyncio.ensure_future(ended())
    await asyncio.sleep(0)
    consumer._coordinator._coordination_task = routine  # type: ignore[attr-defined]
    await Member(consumer)._close(consumer)  # type: ignore[arg-type]
    del routine, consumer
    gc.collect()
    loop.set_exception_handler(None)
    assert reported == []


def test_the_lease_runs_on_a_clock_that_counts_a_suspended_host(monkeypatch: Any) -> None:
    """CLOCK_MONOTONIC stands still while the host is suspended: a member whose host slept
    past its session would wake with lease time left. The lease reads CLOCK_BOOTTIME, which
    counts the sleep, where there is one (Linux), else the monotonic clock."""
    from syncer import coordination

    if sys.platform == "linux":
        assert coordination.BOOTTIME == time.CLOCK_BOOTTIME
    asked: list[int] = []
    monkeypatch.setattr(time, "clock_gettime", lambda clock: asked.append(clock) or 123.0)
    monkeypatch.setattr(coordination, "BOOTTIME", 7)
    assert coordination.lease_clock() == 123.0 and asked == [7]
    monkeypatch.setattr(coordination, "BOOTTIME", None)
    monkeypatch.setattr(time, "monotonic", lambda: 5.0)
    assert coordination.lease_clock() == 5.0 and asked == [7]
