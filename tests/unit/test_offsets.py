"""Which consumer group offsets are committed locally, over plain values."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from syncer.clusters import TP
from syncer.config import Config, GroupsConfig
from syncer.offsets import OffsetCopier, offsets_to_commit

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
    """Just what the offset copier asks of a cluster: one group, committed at 40 on A."""

    def __init__(self) -> None:
        self.commits: list[dict[TP, int]] = []
        self.asked_for_groups = 0

    async def consumer_groups(self) -> list[str]:
        self.asked_for_groups += 1
        return ["billing"]

    async def committed(self, group: str) -> dict[TP, int]:
        return {A: 40}

    async def group_state(self, group: str) -> str:
        return "Dead"

    async def latest(self, tps: dict[TP, int]) -> dict[TP, int]:
        return {tp: 60 for tp in tps}

    async def commit_offsets(self, group: str, offsets: dict[TP, int]) -> dict[TP, int]:
        self.commits.append(dict(offsets))
        return {tp: 0 for tp in offsets}


async def test_the_daemon_copies_offsets_soon_after_its_first_topic_refresh() -> None:
    """The daemon's offset loop starts before its first topic refresh has named the mirrored
    partitions: that pass has nothing to copy, and the next must not wait a whole interval
    (seen on the test bed: a group's offsets first copied 10 s after the daemon started)."""
    local, remote = FakeCluster(), FakeCluster()
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
    assert local.commits == [] and remote.asked_for_groups == 0  # nothing asked for nothing
    mirrored["orders"] = 4  # the first topic refresh
    for _ in range(40):
        if local.commits:
            break
        await asyncio.sleep(0.1)
    stop.set()
    await asyncio.wait_for(running, 5)
    assert local.commits == [{A: 40}]
