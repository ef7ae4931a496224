"""Consumer group offsets carried over unchanged, against real brokers: a consumer that moves
from the remote to local resumes at the next record, nothing skipped or seen twice; a group
with members locally is left alone; a local commit never moves back."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import OffsetAndMetadata

from syncer.errors import ExitCode
from syncer.status import status_document
from syncer.syncer import Syncer
from syncer.testbed.jars import KafkaJars
from syncer.testbed.tools import tool_command
from tests.kafka_helpers import catch_up as caught_up
from tests.kafka_helpers import create_topic, make_config, produce, run_cli


async def consume(bootstrap: str, topic: str, group: str, count: int) -> list[int]:
    """Read ``count`` records as a member of ``group`` from its committed offsets (earliest
    if none), commit, leave; the offsets read."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=count,
    )
    await consumer.start()
    try:
        seen: list[int] = []
        while len(seen) < count:
            for records in (
                await consumer.getmany(timeout_ms=5000, max_records=count - len(seen))
            ).values():
                seen += [r.offset for r in records]
        await consumer.commit()
        return seen
    finally:
        await consumer.stop()


async def committed(bootstrap: str, topic: str, group: str) -> int | None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    await consumer.start()
    try:
        return await consumer.committed(TopicPartition(topic, 0))
    finally:
        await consumer.stop()


async def commit_metadata(bootstrap: str, topic: str, group: str, offset: int, meta: str) -> str:
    """Commit ``offset`` of ``topic``[0] for ``group`` with ``meta`` as its metadata."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(offset, meta)})
    finally:
        await consumer.stop()
    return meta


async def local_commit(bootstrap: str, topic: str, group: str) -> tuple[int, str]:
    """``group``'s commit of ``topic``[0]: its offset and metadata, as an admin reads them."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    found = offsets[TopicPartition(topic, 0)]
    return found.offset, found.metadata


async def catch_up(local: str, east: str, topic: str, groups: list[str]) -> Syncer:
    return await caught_up(make_config(local, {"east": east}, [topic], groups={"include": groups}))


async def test_a_consumer_moving_to_local_resumes_at_the_next_record(
    local: str, east: str, topic: str
) -> None:
    group = f"{topic}-billing"
    await create_topic(east, topic)
    await produce(east, topic, [(b"k", b"%d" % i) for i in range(100)])
    assert await consume(east, topic, group, 40) == list(range(40))  # on the remote

    # its commit carries metadata (Kafka Streams keeps a partition's stream time there)
    stream_time = await commit_metadata(east, topic, group, 40, "stream-time=1733616000000")

    syncer = await catch_up(local, east, topic, [f"{topic}-.*"])
    assert await committed(local, topic, group) == 40
    assert await local_commit(local, topic, group) == (40, stream_time)  # kept
    assert status_document(syncer.snapshot())["groups"][group]["committed"] == 1
    # the consumer fails over to local: it goes on at 40, nothing skipped, nothing twice
    assert await consume(local, topic, group, 60) == list(range(40, 100))


async def test_a_group_with_members_locally_is_left_alone_and_commits_never_go_back(
    local: str, east: str, topic: str
) -> None:
    busy, ahead = f"{topic}-busy", f"{topic}-ahead"
    await create_topic(east, topic)
    await produce(east, topic, [(b"k", b"%d" % i) for i in range(50)])
    await consume(east, topic, busy, 30)
    await consume(east, topic, ahead, 10)
    first = await catch_up(local, east, topic, [f"{topic}-.*"])
    assert await committed(local, topic, ahead) == 10
    await consume(local, topic, ahead, 25)  # the group went on locally: 35
    await consume(east, topic, ahead, 5)  # and on the remote to 15 only

    member = AIOKafkaConsumer(topic, bootstrap_servers=local, group_id=busy)
    await member.start()  # the busy group is active locally
    try:
        await member.getmany(timeout_ms=3000)
        before = await member.committed(TopicPartition(topic, 0))
        syncer = await catch_up(local, east, topic, [f"{topic}-.*"])
        assert await member.committed(TopicPartition(topic, 0)) == before  # not touched
        assert "members locally" in (syncer.offsets.groups[busy].skipped or "")
    finally:
        await member.stop()
    assert await committed(local, topic, ahead) == 35  # not moved back to 15
    assert first.offsets.groups[ahead].committed == 1


async def test_a_catch_up_tells_each_group_and_leaves_a_consumer_protocol_group_alone(
    local: str, east: str, topic: str, config_file: Path
) -> None:
    """A local group of the consumer protocol (KIP-848, a Java consumer with
    group.protocol=consumer) with a member: DescribeGroups does not tell its members, and
    the broker refuses the commit from outside it (UNKNOWN_MEMBER_ID). The catch-up leaves
    it alone and says so, exits 0, and counts the offsets it did commit; the group's local
    offset is untouched. (Before: the refusal was a warning in the log, and a group whose
    offsets could not be copied did not change the exit code.)"""
    kip848, classic = f"{topic}-kip848", f"{topic}-classic"
    await create_topic(east, topic)
    await produce(east, topic, [(b"k", b"%d" % i) for i in range(100)])
    await consume(east, topic, kip848, 40)
    await consume(east, topic, classic, 30)
    config_file.write_text(
        yaml.safe_dump(
            {
                "local": {"bootstrap_servers": local},
                "remotes": [{"name": "east", "bootstrap_servers": east}],
                "topics": {"include": [topic]},
                "groups": {"include": [f"{topic}-.*"]},
                "http": {"listen": ""},
            }
        )
    )
    first = run_cli("catch-up", "-c", str(config_file), "--no-progress")
    assert first.returncode == ExitCode.OK, first.stderr
    assert "◆ 2 group offsets committed (2 groups) ◆" in first.stderr
    assert await committed(local, topic, kip848) == 40

    await consume(east, topic, kip848, 30)  # the remote goes on to 70 and 50
    await consume(east, topic, classic, 20)
    jars = KafkaJars.default().ensure()
    member = subprocess.Popen(
        tool_command(
            jars,
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            *("--bootstrap-server", local, "--topic", topic, "--group", kip848),
            *("--consumer-property", "group.protocol=consumer"),
            *("--consumer-property", "enable.auto.commit=false"),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert member.stdout is not None
        first_line = await asyncio.wait_for(asyncio.to_thread(member.stdout.readline), 60)
        assert first_line.strip() == "40"  # a member, reading from the group's offset
        second = run_cli("catch-up", "-c", str(config_file), "--no-progress")
    finally:
        member.kill()
        member.communicate()
    assert second.returncode == ExitCode.OK, second.stderr
    assert (
        f"syncer: group {kip848}: left alone: the group has members locally (a commit from"
        " outside it refused)" in second.stderr
    )
    assert "◆ 1 group offsets committed (2 groups) ◆" in second.stderr
    assert await committed(local, topic, kip848) == 40  # untouched
    assert await committed(local, topic, classic) == 50
