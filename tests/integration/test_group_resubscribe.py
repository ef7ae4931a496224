"""The group's consumer must stay in the group whatever the moment its subscription changes.

aiokafka starts its heartbeat task when a join succeeds and cancels it as the next rebalance
begins. Cancelled before it ever ran, that task does not catch the cancellation: awaiting it
raises it in aiokafka's coordination routine, which ends without a word. The member then
never joins again and sends no heartbeat, and the group drops it: seen in
``test_group_shares`` (a member found a new topic at its refresh while the group handed out
the last one, owned nothing and logged nothing more). Here the subscription changes inside
the assignment callback, which makes that ordering certain."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka.structs import TopicPartition

from syncer.config import Config
from syncer.coordination import GroupMember
from tests.kafka_helpers import create_topic

PARTITIONS = 2


def member_config(local: str, group: str, instance_id: str = "") -> Config:
    return Config.from_dict(
        {
            "local": {"bootstrap_servers": local},
            "remotes": [{"name": "east", "bootstrap_servers": "127.0.0.1:9"}],
            "topics": {"include": [".*"]},
            "coordination": {"group": group, "instance_id": instance_id},
        }
    )


async def wait_until_owned(
    owned: list[set[TopicPartition]], want: set[TopicPartition], within_s: float, after: int = 0
) -> None:
    """Until an assignment after the first ``after`` ones gives ``want``."""
    deadline = time.monotonic() + within_s
    while (len(owned) <= after or owned[-1] != want) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert len(owned) > after and owned[-1] == want, f"owns {owned[after:]}"


async def test_a_subscription_changed_as_partitions_are_handed_over_keeps_the_member(
    local: str, topic: str
) -> None:
    first, second = f"{topic}.a", f"{topic}.b"
    for t in (first, second):
        await create_topic(local, t, PARTITIONS)
    owned: list[set[TopicPartition]] = []
    member: GroupMember | None = None

    async def assigned(tps: set[TopicPartition]) -> None:
        owned.append(set(tps))
        if len(owned) == 1:  # a refresh found the second topic just as the first was given
            assert member is not None
            await member.subscribe([first, second])

    async def revoked(tps: set[TopicPartition]) -> None:
        pass

    member = GroupMember(member_config(local, f"g-{topic}"), assigned, revoked)
    try:
        await member.subscribe([first])
        want = {TopicPartition(t, p) for t in (first, second) for p in range(PARTITIONS)}
        await wait_until_owned(owned, want, 30)
        assert len(owned) >= 2, "the second topic came with a rebalance of its own"
        assert member.replaced == 0, "aiokafka's coordination routine outlived the change"
    finally:
        await member.stop()  # aiokafka's fetcher routine may have died of it: not raised


@pytest.mark.parametrize("instance_id", ["", "static"], ids=["dynamic", "static"])
async def test_a_member_whose_group_client_broke_joins_again_with_a_new_one(
    local: str, topic: str, instance_id: str
) -> None:
    """Whatever ends aiokafka's coordination routine, the member does not stay out of the
    group: it gives up its partitions, leaves, and joins again with a new consumer. A static
    member finds its old client's place in the group (a static member's close does not
    leave): its own, not another process's (``test_group_instance``)."""
    await create_topic(local, topic, PARTITIONS)
    owned: list[set[TopicPartition]] = []
    given_up: list[set[TopicPartition]] = []

    async def assigned(tps: set[TopicPartition]) -> None:
        owned.append(set(tps))

    async def revoked(tps: set[TopicPartition]) -> None:
        given_up.append(set(tps))

    member = GroupMember(member_config(local, f"g-{topic}", instance_id), assigned, revoked)
    try:
        await member.subscribe([topic])
        want = {TopicPartition(topic, p) for p in range(PARTITIONS)}
        await wait_until_owned(owned, want, 30)
        first, joins = member._consumer, len(owned)
        assert first is not None
        first._coordinator._coordination_task.cancel()  # as the heartbeat race did
        deadline = time.monotonic() + 30
        while member.replaced == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert member.replaced == 1 and member._consumer is not first
        assert want in given_up, "its copiers were stopped before it joined again"
        await wait_until_owned(owned, want, 30, after=joins)
        assert member.may_write() and member.failed is None
    finally:
        await member.stop()
