"""Static membership against a real broker: one instance id, one process.

Two processes given the same ``coordination.instance_id`` (a copied config, a replica count
raised on a template) must not both go on. aiokafka's heartbeat does not carry the instance
id, so the broker answers the member it replaced "unknown member", not "fenced", and aiokafka
joins again with the same id, taking the place back: before the fix each process owned every
partition in turn, a revocation and a drain every heartbeat (seen: 2 × 14 in 14 s). The
member that lost its place now leaves for good with a ``ConfigError``; the newest one stays.
A static member that only lost its session (paused, cut off) joins again as before."""

from __future__ import annotations

import asyncio
import time

from aiokafka.structs import TopicPartition

from syncer.config import Config
from syncer.coordination import GroupMember, InstanceIdTaken
from syncer.errors import ExitCode, SyncerError
from tests.kafka_helpers import create_topic, until

PARTITIONS = 4
SESSION_MS = 6_000  # the broker's least (group.min.session.timeout.ms)


def static_config(local: str, group: str, instance_id: str) -> Config:
    return Config.from_dict(
        {
            "local": {"bootstrap_servers": local},
            "remotes": [{"name": "east", "bootstrap_servers": "127.0.0.1:9"}],
            "topics": {"include": [".*"]},
            "coordination": {
                "group": group,
                "instance_id": instance_id,
                "session_timeout_ms": SESSION_MS,
                "heartbeat_interval_ms": 500,
                "lease_ms": 3_000,
            },
        }
    )


class Recorded:
    """A member and what the group did to it."""

    def __init__(self, config: Config) -> None:
        self.owned: list[set[TopicPartition]] = []
        self.given_up: list[set[TopicPartition]] = []
        self.failures: list[SyncerError] = []
        self.member = GroupMember(config, self._assigned, self._revoked, self.failures.append)

    async def _assigned(self, tps: set[TopicPartition]) -> None:
        self.owned.append(set(tps))

    async def _revoked(self, tps: set[TopicPartition]) -> None:
        if tps:
            self.given_up.append(set(tps))

    @property
    def owns(self) -> set[TopicPartition]:
        return self.member.assigned


async def test_a_second_process_with_the_same_instance_id_makes_the_first_leave(
    local: str, topic: str
) -> None:
    await create_topic(local, topic, PARTITIONS)
    want = {TopicPartition(topic, p) for p in range(PARTITIONS)}
    config = static_config(local, f"g-{topic}", "twin")
    first, second = Recorded(config), Recorded(config)
    try:
        await first.member.subscribe([topic])
        await until(lambda: first.owns == want, "the first owning every partition", 30)
        await second.member.subscribe([topic])
        await until(lambda: bool(first.failures), "the first leaving", 20)
        failed = first.failures[0]
        assert isinstance(failed, InstanceIdTaken) and first.member.failed is failed
        assert failed.exit_code == ExitCode.CONFIG
        assert "instance_id 'twin' is another process's too" in str(failed)
        assert first.owns == set() and first.given_up[-1] == want
        assert first.member._consumer is None, "the first closed its consumer"
        assert second.owns == want and not second.failures
        # and it stays so: the first does not take the place back (before the fix, the two
        # swapped every partition each heartbeat)
        joins = len(second.owned)
        await asyncio.sleep(5 * 0.5 + 2)
        assert len(second.owned) == joins and not second.given_up
        assert first.owns == set() and len(first.owned) == 1
        await first.member.subscribe([topic])  # what a topic refresh would do: nothing
        assert first.member._consumer is None
    finally:
        await first.member.stop()
        await second.member.stop()


async def test_a_static_member_whose_session_expired_joins_again(local: str, topic: str) -> None:
    """Its heartbeats stall past the session timeout: the broker drops it, and its next
    heartbeat hears "unknown member", as when its place was taken. Nobody took it: it joins
    again with its instance id and owns its partitions again."""
    await create_topic(local, topic, PARTITIONS)
    want = {TopicPartition(topic, p) for p in range(PARTITIONS)}
    alone = Recorded(static_config(local, f"g-{topic}", "lonely"))
    try:
        await alone.member.subscribe([topic])
        await until(lambda: alone.owns == want, "it owning every partition", 30)
        consumer = alone.member._consumer
        assert consumer is not None
        coordinator = consumer._coordinator
        heartbeat = coordinator._do_heartbeat
        stalled = []

        async def stall_once() -> bool:
            if not stalled:
                stalled.append(time.monotonic())
                await asyncio.sleep(SESSION_MS / 1000 * 1.5)
            return bool(await heartbeat())

        coordinator._do_heartbeat = stall_once
        held = set(alone.member._held)
        await until(lambda: alone.member._held - held != set(), "a join as a new member", 40)
        await until(lambda: alone.owns == want, "it owning every partition again", 10)
        assert alone.given_up, "it gave its partitions up when it heard it was dropped"
        assert not alone.failures and alone.member.failed is None
        assert alone.member.replaced == 0, "the same client joined again"
    finally:
        await alone.member.stop()
