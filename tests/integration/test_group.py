"""Local coordination against real brokers: processes of one group share the partitions
through the local cluster's group coordinator; kills, pauses and scaling leave the copy exact."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import yaml
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import TopicPartition

from syncer.clusters import Cluster
from syncer.config import ClusterConfig, Config
from syncer.coordination import group_owners
from syncer.errors import SyncerError
from syncer.testbed import Testbed
from syncer.testbed.tools import perf_produce
from tests.kafka_helpers import create_topic, partition_digests, run_cli

PARTITIONS = 24


class Group:
    """Daemons of one syncer group, started as real processes."""

    def __init__(self, tmp_path: Path, local: str, east: str, topic: str) -> None:
        self.local, self.east, self.topic = local, east, topic
        self.name = f"g-{uuid.uuid4().hex[:8]}"
        self.raw = {
            "name": self.name,
            "local": {"bootstrap_servers": local},
            "remotes": [{"name": "east", "bootstrap_servers": east}],
            "topics": {"include": [topic], "refresh_interval_s": 1},
            "copier": {"partition_fetch_max_bytes": 65536, "max_in_flight": 2},
            "http": {"listen": "127.0.0.1:0"},
            "coordination": {
                "group": self.name,
                "session_timeout_ms": 6000,
                "heartbeat_interval_ms": 500,
                "lease_ms": 3000,
            },
        }
        self.path = tmp_path / "syncer.yaml"
        self.path.write_text(yaml.safe_dump(self.raw))
        self.logs = tmp_path
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def config(self) -> Config:
        return Config.from_dict(self.raw)

    def start(self, n: int = 1) -> list[subprocess.Popen[bytes]]:
        started = []
        for _ in range(n):
            log = open(self.logs / f"member-{len(self.procs)}.log", "wb")  # noqa: SIM115
            proc = subprocess.Popen(
                [sys.executable, "-m", "syncer", "-v", "run", "-c", str(self.path)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            log.close()
            self.procs.append(proc)
            started.append(proc)
        return started

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
        proc.wait(40)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(40)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    async def owners(self) -> dict[TopicPartition, str]:
        try:
            return await group_owners(self.config)
        except Exception:
            return {}

    async def wait_for(
        self, what: str, check: Callable[[], Awaitable[bool]], seconds: float = 60
    ) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if await check():
                return
            await asyncio.sleep(0.5)
        raise AssertionError(f"timed out waiting for {what}; logs in {self.logs}")

    async def ends(self, bootstrap: str) -> dict[TopicPartition, int]:
        tps = [TopicPartition(self.topic, p) for p in range(PARTITIONS)]
        async with Cluster(ClusterConfig(bootstrap, name="t"), role="t") as cluster:
            try:
                return await cluster.latest(tps)
            except SyncerError:
                return {}

    async def in_sync(self) -> bool:
        remote = await self.ends(self.east)
        return bool(remote) and await self.ends(self.local) == remote

    async def assert_identical(self) -> None:
        for p in range(PARTITIONS):
            remote = await partition_digests(self.east, self.topic, p)
            copied = await partition_digests(self.local, self.topic, p)
            assert copied == remote, f"partition {p} differs"

    async def members(self) -> int:
        return len(set((await self.owners()).values()))

    async def wait_members(self, n: int, seconds: float = 60) -> None:
        async def check() -> bool:
            return await self.members() == n

        await self.wait_for(f"{n} members", check, seconds)

    async def finish(self, producing: asyncio.Future[str]) -> None:
        """Let the producer end, wait for the copy, stop every member, compare every batch."""
        await producing
        await self.wait_for("local in sync with east", self.in_sync, seconds=90)
        self.stop_all()
        await self.assert_identical()


@pytest.fixture
async def group(tmp_path: Path, local: str, east: str, topic: str) -> AsyncIterator[Group]:
    await create_topic(east, topic, PARTITIONS)
    g = Group(tmp_path, local, east, topic)
    try:
        yield g
    finally:
        g.stop_all()


def produce_in_background(
    testbed: Testbed, east: str, topic: str, records: int, per_second: int
) -> asyncio.Future[str]:
    return asyncio.ensure_future(
        asyncio.to_thread(
            perf_produce,
            east,
            topic,
            records=records,
            record_size=512,
            throughput=per_second,
            jars=testbed.jars,
        )
    )


async def group_names(bootstrap: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return {g[0] for g in await admin.list_consumer_groups()}
    finally:
        await admin.close()


async def test_three_members_share_24_partitions_and_remotes_see_no_group(
    group: Group, testbed: Testbed
) -> None:
    """The records come once the three share the partitions: the leader balances by the
    gaps it measured (``test_group_shares``), so records already there made the shares
    depend on how far the first member had copied when the others joined (seen under load:
    5, 9 and 10 partitions)."""
    group.start(3)

    async def all_owned_by_three() -> bool:
        owners = await group.owners()
        return len(owners) == PARTITIONS and len(set(owners.values())) == 3

    await group.wait_for("24 partitions owned by 3 members", all_owned_by_three)
    await asyncio.to_thread(
        perf_produce, group.east, group.topic, records=24_000, record_size=512, jars=testbed.jars
    )
    await group.wait_for("local in sync with east", group.in_sync)
    owners = await group.owners()
    counts = sorted(list(owners.values()).count(m) for m in set(owners.values()))
    assert counts == [8, 8, 8]
    assert group.name in await group_names(group.local)
    assert group.name not in await group_names(group.east)
    status = subprocess.run(
        [sys.executable, "-m", "syncer", "status", "-c", str(group.path), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    rows = json.loads(status.stdout)["partitions"]
    assert {(r["partition"], r["owner"]) for r in rows} == {
        (tp.partition, owner) for tp, owner in owners.items()
    }
    group.stop_all()
    await group.assert_identical()


async def test_sigkill_of_a_member_moves_its_partitions_and_loses_nothing(
    group: Group, testbed: Testbed
) -> None:
    producing = produce_in_background(testbed, group.east, group.topic, 60_000, 5_000)
    victim, *_ = group.start(3)
    await group.wait_members(3)
    await asyncio.sleep(2)
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    await group.wait_members(2)
    await group.finish(producing)


async def member_ids(bootstrap: str, name: str) -> set[str]:
    """The group's members by member id (both twins have client id syncer-twin)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        responses = await admin.describe_consumer_groups([name])
    finally:
        await admin.close()
    return {member[0] for r in responses for group in r.groups for member in group[5]}


async def test_a_paused_member_wakes_up_without_duplicating(group: Group, testbed: Testbed) -> None:
    producing = produce_in_background(testbed, group.east, group.topic, 75_000, 5_000)
    sleeper, *_ = group.start(3)
    await group.wait_members(3)
    await asyncio.sleep(1)
    sleeper.send_signal(signal.SIGSTOP)
    before = sum((await group.ends(group.local)).values())
    await group.wait_members(2, 30)
    await asyncio.sleep(2)
    assert sum((await group.ends(group.local)).values()) > before  # and make progress
    sleeper.send_signal(signal.SIGCONT)
    await group.wait_members(3, 40)
    await group.finish(producing)


async def test_scaling_one_to_three_to_one_during_a_copy(group: Group, testbed: Testbed) -> None:
    producing = produce_in_background(testbed, group.east, group.topic, 90_000, 5_000)
    group.start(1)
    await group.wait_members(1)
    await asyncio.sleep(2)
    extra = group.start(2)
    await group.wait_members(3)
    await asyncio.sleep(3)
    for proc in extra:
        group.stop(proc)
    await group.wait_members(1)
    await group.finish(producing)


async def test_static_members_restart_without_moving_partitions(
    group: Group, testbed: Testbed, tmp_path: Path
) -> None:
    await asyncio.to_thread(
        perf_produce, group.east, group.topic, records=2_400, record_size=512, jars=testbed.jars
    )
    paths = []
    for instance in ("a", "b"):
        raw = {**group.raw, "coordination": {**group.raw["coordination"], "instance_id": instance}}
        path = tmp_path / f"{instance}.yaml"
        path.write_text(yaml.safe_dump(raw))
        paths.append(path)
    group.path = paths[0]
    first = group.start(1)[0]
    group.path = paths[1]
    second = group.start(1)[0]

    async def both_own() -> bool:
        return set((await group.owners()).values()) == {"a", "b"}

    await group.wait_for("members a and b", both_own)
    before = await group.owners()
    gave_up = (group.logs / "member-0.log").read_text().count("gives up")
    group.stop(second)
    group.start(1)  # b again, within the session timeout
    await asyncio.sleep(3)
    await group.wait_for("members a and b", both_own)
    assert await group.owners() == before
    # a kept its partitions through b's restart: no revocation, no rebalance
    assert (group.logs / "member-0.log").read_text().count("gives up") == gave_up
    assert first.poll() is None
    await group.wait_for("local in sync with east", group.in_sync)


async def test_a_second_daemon_with_the_same_instance_id_stops_the_first_with_exit_3(
    group: Group, testbed: Testbed, tmp_path: Path
) -> None:
    """A copied config gives two daemons one instance id: the newest joins in the other's
    place, and the one it replaced drains, says so in one line and exits 3 (bad
    configuration). Before, the two took the place from each other every heartbeat, each
    owning every partition in turn. The copy stays exact throughout."""
    producing = produce_in_background(testbed, group.east, group.topic, 60_000, 5_000)
    raw = {**group.raw, "coordination": {**group.raw["coordination"], "instance_id": "twin"}}
    group.path = tmp_path / "twin.yaml"
    group.path.write_text(yaml.safe_dump(raw))
    first = group.start(1)[0]
    await group.wait_members(1)
    await asyncio.sleep(2)
    second = group.start(1)[0]

    async def first_ended() -> bool:
        return first.poll() is not None

    await group.wait_for("the first daemon's exit", first_ended, 30)
    assert first.returncode == 3
    said = (group.logs / "member-0.log").read_text()
    assert "syncer: coordination: instance_id 'twin' is another process's too" in said
    holder = await member_ids(group.local, group.name)
    await asyncio.sleep(3)  # the second keeps every partition: nobody takes it back
    assert second.poll() is None
    assert len(holder) == 1 and await member_ids(group.local, group.name) == holder
    assert set((await group.owners()).values()) == {"twin"}
    assert "gives up" not in (group.logs / "member-1.log").read_text()
    await group.finish(producing)


async def test_a_member_configured_as_another_deployment_gets_nothing_and_exits_3(
    group: Group, testbed: Testbed, tmp_path: Path
) -> None:
    """A second daemon joins the group with another ``name`` (a typo): it loads another
    writer identity, and two producer ids writing one partition in turn are kept apart by
    nothing at the broker. The group's leader gives it nothing; it says why in one line and
    exits 3. The first keeps every partition and the copy stays exact."""
    producing = produce_in_background(testbed, group.east, group.topic, 30_000, 5_000)
    first = group.start(1)[0]
    await group.wait_members(1)
    owners = await group.owners()
    group.path = tmp_path / "typo.yaml"
    group.path.write_text(yaml.safe_dump({**group.raw, "name": "syncer-typo"}))
    second = group.start(1)[0]

    async def second_ended() -> bool:
        return second.poll() is not None

    await group.wait_for("the second daemon's exit", second_ended, 60)
    assert second.returncode == 3
    said = (group.logs / "member-1.log").read_text()
    assert f"syncer: coordination: group {group.name}: 1 member writes as '{group.name}' (" in said
    assert "this process as 'syncer-typo' (producer id" in said
    assert "give every member of a group the same name and state_topic" in said
    assert "Traceback" not in said
    assert first.poll() is None and await group.owners() == owners  # every partition
    assert "they get no partition" in (group.logs / "member-0.log").read_text()

    # a catch-up run beside the group with the other name is refused as well, before it
    # writes anything; one with the group's own name is not
    typo = await asyncio.to_thread(run_cli, "catch-up", "-c", str(group.path), "--no-progress")
    assert typo.returncode == 3, typo.stderr
    assert f"syncer: coordination: group {group.name}: 1 member writes as '{group.name}' (" in (
        typo.stderr
    )
    assert "summary ◆" not in typo.stderr and "Traceback" not in typo.stderr
    # and one with the group's own name copies, leaving the group offsets to the running
    # members (two copiers of them could move a commit back)
    group.path = tmp_path / "offsets.yaml"
    group.path.write_text(yaml.safe_dump({**group.raw, "groups": {"include": [".*"]}}))
    same = await asyncio.to_thread(run_cli, "catch-up", "-c", str(group.path), "--no-progress")
    assert same.returncode == 0, same.stderr
    assert (
        f"syncer: consumer group offsets left to the running members of group {group.name}"
        in same.stderr
    )
    group.path = tmp_path / "syncer.yaml"
    await group.finish(producing)
