"""Which consumer group offsets are committed locally, over plain values."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from syncer.clusters import TP
from syncer.config import Config, GroupsConfig
from syncer.errors import TransientClusterError
from syncer.offsets import OffsetCopier, copies_offsets, offsets_to_commit

A, B, C, D = (TP("orders", p) for p in range(4))


def test_offsets_are_committed_unchanged_only_where_local_reaches_them() -> None:
    remote = {A: 40, B: 100, C: 7, D: 5}
    local_committed = {C: 9, D: 5}  # C: the group went further locally; D: already there
    local_ends = {A: 60, B: 90, C: 60, D: 60}  # B: local has not got to 100 yet
    assert offsets_to_commit(remote, local_committed, local_ends) == {A: 40}


def test_partitions_not_mirrored_are_left_alone() -> None:
    assert offsets_to_commit({TP("other", 0): 3}, {}, {A: 10}) == {}


def test_group_selection_by_regex() -> None:
    config = Config.from_dict(
        {
            "local": {"bootstrap_servers": "l:9092"},
            "remotes": [{"name": "east", "bootstrap_servers": "e:9092"}],
            "topics": {"include": ["orders"]},
            "groups": {"include": ["billing-.*", "audit"], "exclude": ["billing-test"]},
        }
    )
    assert config.groups.selects("billing-eu") and config.groups.selects("audit")
    assert not config.groups.selects("billing-test") and not config.groups.selects("other")


class FakeCluster:
    """Just what the offset copier asks of a cluster: one group, committed at 40 on A (or at
    ``committed``), "Dead" to DescribeGroups."""

    def __init__(self, committed: dict[TP, int] | None = None) -> None:
        self.commits_made: list[dict[TP, int]] = []
        self.metadata: list[dict[TP, str]] = []
        self.asked_for_groups = 0
        self.committed_at = {A: 40} if committed is None else committed

    async def consumer_groups(self) -> list[str]:
        self.asked_for_groups += 1
        return ["billing"]

    async def committed(self, group: str) -> dict[TP, int]:
        return dict(self.committed_at)

    async def commits(self, group: str) -> dict[TP, tuple[int, str]]:
        return {tp: (offset, f"at {offset}") for tp, offset in self.committed_at.items()}

    async def group_state(self, group: str) -> str:
        return "Dead"

    async def latest(self, tps: dict[TP, int]) -> dict[TP, int]:
        return {tp: 60 for tp in tps}

    async def commit_offsets(
        self, group: str, offsets: dict[TP, int], metadata: dict[TP, str] | None = None
    ) -> dict[TP, int]:
        self.commits_made.append(dict(offsets))
        self.metadata.append(dict(metadata or {}))
        return {tp: 0 for tp in offsets}


async def test_the_daemon_copies_offsets_soon_after_its_first_topic_refresh() -> None:
    """The daemon's offset loop starts before its first topic refresh has named the mirrored
    partitions: that pass has nothing to copy, and the next must not wait a whole interval
    (seen on the test bed: a group's offsets first copied 10 s after the daemon started)."""
    local, remote = FakeCluster(committed={}), FakeCluster()
    mirrored: dict[str, int] = {}
    copier = OffsetCopier(
        GroupsConfig(include=("billing",), interval_s=600),
        cast(Any, local),
        {"east": cast(Any, remote)},
        lambda: mirrored,
    )
    stop = asyncio.Event()
    running = asyncio.create_task(copier.run(stop))
    await asyncio.sleep(0.1)  # the first pass: no topic known yet
    assert local.commits_made == [] and remote.asked_for_groups == 0  # nothing asked for nothing
    mirrored["orders"] = 4  # the first topic refresh
    for _ in range(40):
        if local.commits_made:
            break
        await asyncio.sleep(0.1)
    stop.set()
    await asyncio.wait_for(running, 5)
    assert local.commits_made == [{A: 40}]


def copier_of(local: FakeCluster, remote: FakeCluster, sources: dict[str, tuple[str, ...]]) -> Any:
    return OffsetCopier(
        GroupsConfig(include=("billing",), interval_s=600),
        cast(Any, local),
        {"east": cast(Any, remote)},
        lambda: {"orders": 4},
        lambda: sources,
    )


async def test_a_group_dead_to_describe_groups_is_never_committed_backwards() -> None:
    """A group of the consumer protocol (KIP-848) is "Dead" to DescribeGroups however much
    it committed locally: its local offsets are read all the same, and the remote's older
    commit is not written over them (its consumers would read again what they had)."""
    local, remote = FakeCluster(committed={A: 55}), FakeCluster()  # remote: 40
    await copier_of(local, remote, {"orders": ("east",)}).copy_once()
    assert local.commits_made == []
    fresh = FakeCluster(committed={})
    await copier_of(fresh, remote, {"orders": ("east",)}).copy_once()
    assert fresh.commits_made == [{A: 40}]


async def test_offsets_of_a_remote_that_no_longer_serves_the_topic_are_not_copied() -> None:
    """east was dropped for ``orders`` (its topic recreated: another log) while another
    remote serves it: east's commits point into the other log and are not copied."""
    local, remote = FakeCluster(committed={}), FakeCluster()
    await copier_of(local, remote, {"orders": ("west",)}).copy_once()
    assert local.commits_made == []
    west = FakeCluster(committed={A: 30})  # serves orders: its offsets are taken
    copier = OffsetCopier(
        GroupsConfig(include=("billing",), interval_s=600),
        cast(Any, local),
        {"east": cast(Any, remote), "west": cast(Any, west)},
        lambda: {"orders": 4},
        lambda: {"orders": ("west",)},
    )
    await copier.copy_once()
    assert local.commits_made == [{A: 30}]


class AwayCluster(FakeCluster):
    async def consumer_groups(self) -> list[str]:
        raise TransientClusterError("east: listing groups: no answer from node 1")


async def test_a_remote_away_stops_no_other_remotes_groups() -> None:
    """east does not answer: the groups west lists are copied all the same (a fail-over
    comes exactly when a remote is away), and the pass then says east failed."""
    local, west = FakeCluster(committed={}), FakeCluster()
    copier = OffsetCopier(
        GroupsConfig(include=("billing",), interval_s=600),
        cast(Any, local),
        {"east": cast(Any, AwayCluster()), "west": cast(Any, west)},
        lambda: {"orders": 4},
    )
    with pytest.raises(TransientClusterError, match="east: listing groups"):
        await copier.copy_once()
    assert local.commits_made == [{A: 40}] and copier.groups["billing"].source == "west"


class RefusingCluster(FakeCluster):
    """Answers every commit with ``code``."""

    def __init__(self, code: int) -> None:
        super().__init__(committed={})
        self.code = code

    async def commit_offsets(
        self, group: str, offsets: dict[TP, int], metadata: dict[TP, str] | None = None
    ) -> dict[TP, int]:
        self.commits_made.append(dict(offsets))
        return {tp: self.code for tp in offsets}


async def test_a_commit_refused_as_from_outside_a_group_with_members_leaves_it_alone() -> None:
    """UNKNOWN_MEMBER_ID is how a broker refuses a commit from outside a group that has
    members (one of the consumer protocol, which DescribeGroups tells "Dead", or one that
    joined since): the group is left alone, as one seen with members, not failed; any other
    refusal fails the group, and a later pass that commits clears it."""
    local = RefusingCluster(25)
    copier = copier_of(local, FakeCluster(), {"orders": ("east",)})
    await copier.copy_once()
    group = copier.groups["billing"]
    assert local.commits_made == [{A: 40}] and not group.failed and group.committed == 0
    assert "members locally" in (group.skipped or "")

    local.code = 30  # GROUP_AUTHORIZATION_FAILED
    await copier.copy_once()
    assert group.failed and group.skipped == (
        "the local cluster refused 1 commits (GroupAuthorizationFailedError)"
    )
    local.code = 0
    await copier.copy_once()
    assert not group.failed and group.skipped is None and group.committed == 1


async def test_a_pass_that_could_not_list_a_remotes_groups_says_so() -> None:
    copier = OffsetCopier(
        GroupsConfig(include=("billing",), interval_s=600),
        cast(Any, FakeCluster(committed={})),
        {"east": cast(Any, AwayCluster())},
        lambda: {"orders": 4},
    )
    with pytest.raises(TransientClusterError):
        await copier.copy_once()
    assert copier.failure == (
        "remote east did not list its groups: east: listing groups: no answer from node 1"
    )
    copier.remotes = {"east": cast(Any, FakeCluster())}
    await copier.copy_once()
    assert copier.failure is None


async def test_each_offset_is_committed_with_the_metadata_committed_with_it_remotely() -> None:
    """Kafka Streams keeps a partition's stream time in its commit's metadata: a group that
    moves over keeps it."""
    local, remote = FakeCluster(committed={}), FakeCluster(committed={A: 40, B: 7})
    await copier_of(local, remote, {"orders": ("east",)}).copy_once()
    assert local.commits_made == [{A: 40, B: 7}]
    assert local.metadata == [{A: "at 40", B: "at 7"}]


def test_in_a_group_the_owner_of_the_first_partition_copies_offsets_while_its_lease_holds() -> None:
    """Each pass reads the local commit, then commits: two members copying at once could
    move a commit back (one reads the remote's 200 while the other commits its 300, then
    commits 200), and a consumer moving over would read 200..300 again. One member copies
    them: the owner of the first partition of the first mirrored topic (which a static
    member restarted keeps, where the group's leader, asked to assign at a join, is not
    asked again), while its lease holds."""
    mirrored = {"orders": 4, "audit": 2}
    assert copies_offsets(mirrored, {TP("audit", 0), A}, may_write=True)
    assert not copies_offsets(mirrored, {TP("audit", 1), A}, may_write=True)
    assert not copies_offsets(mirrored, {TP("audit", 0)}, may_write=False)  # lease lapsed
    assert not copies_offsets({}, {TP("audit", 0)}, may_write=True)


async def test_a_member_that_does_not_copy_offsets_asks_nothing() -> None:
    """``may_copy`` False: no pass reads or commits anything."""
    local, remote = FakeCluster(committed={}), FakeCluster()
    copier = copier_of(local, remote, {"orders": ("east",)})
    leads = False
    copier.may_copy = lambda: leads
    await copier.copy_once()
    assert local.commits_made == [] and remote.asked_for_groups == 0
    leads = True
    await copier.copy_once()
    assert local.commits_made == [{A: 40}]


async def test_a_remote_dropped_for_a_partition_gives_none_of_its_offsets_of_it() -> None:
    """east was dropped for orders[1] alone (its records there differ from the local log's):
    its commit there points into another history and is not copied; orders[0]'s is."""
    local, remote = FakeCluster(committed={}), FakeCluster(committed={A: 40, B: 9})
    copier = copier_of(local, remote, {"orders": ("east",)})
    copier.dropped = lambda: {B: ("east",)}
    await copier.copy_once()
    assert local.commits_made == [{A: 40}]
