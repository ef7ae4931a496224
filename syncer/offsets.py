"""Consumer group offsets carried over as they are: offsets mean the same on both sides, so a
group's committed offsets on a remote are valid locally unchanged, and a consumer that moves
from the remote to local resumes at the next record. Each is committed with the metadata
string it was committed with (Kafka Streams keeps a partition's stream time there).

A group's offsets are committed locally only while the group has no members locally (the
broker itself refuses a commit from outside a group with members), only where the local log
already reaches the offset, never below what the group committed locally (read whatever
DescribeGroups says: a group of the consumer protocol, KIP-848, is "Dead" to it, and one
with members is left alone once the broker refuses the commit), and only
for topics the remote still serves (not one dropped for them: its log there is another).
They carry no leader epoch: the remote's epochs mean nothing to the local cluster, and a
consumer that validated against them would reset or loop on metadata."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from aiokafka.errors import for_code

from syncer.clusters import TP, Cluster
from syncer.config import GroupsConfig
from syncer.errors import SyncerError

log = logging.getLogger(__name__)

IDLE_STATES = ("Empty", "Dead")  # Dead: the group does not exist locally yet
# the error code a group with members answers a commit from outside it with (Kafka's
# ClassicGroup and ConsumerGroup validateOffsetCommit)
UNKNOWN_MEMBER_ID = 25
# until the daemon's first topic refresh has named the mirrored partitions a pass copies
# nothing, so the next one comes this soon rather than a whole interval later
UNKNOWN_TOPICS_RETRY_S = 1.0


def copies_offsets(mirrored: Mapping[str, int], owned: Collection[TP], may_write: bool) -> bool:
    """Does this member of a group copy the consumer group offsets? The one that owns the
    first partition of the first mirrored topic, while its lease holds: one member at a
    time (a pass reads the local commit, then commits: two at once could move it back),
    kept through a static member's restart (the coordinator hands it its partitions back
    without a rebalance), and none while members mirror different topics."""
    return may_write and bool(mirrored) and TP(min(mirrored), 0) in owned


def offsets_to_commit(
    remote: Mapping[TP, int], local: Mapping[TP, int], local_ends: Mapping[TP, int]
) -> dict[TP, int]:
    """Which of a group's remote offsets to commit locally: those above the local commit
    (never backwards) that the local log already reaches."""
    return {
        tp: offset
        for tp, offset in remote.items()
        if tp in local_ends and offset <= local_ends[tp] and offset > local.get(tp, -1)
    }


@dataclass
class GroupStatus:
    source: str
    committed: int = 0  # partition offsets committed locally so far
    waiting: int = 0  # remote offsets the local log does not reach yet (last pass)
    skipped: str | None = None  # why the last pass left the group alone
    failed: bool = False  # the last pass could not copy its offsets (``skipped`` says why)


@dataclass
class OffsetCopier:
    """Copies the chosen groups' offsets every ``interval_s``; ``copy_once`` for one pass."""

    config: GroupsConfig
    local: Cluster
    remotes: Mapping[str, Cluster]
    mirrored: Callable[[], Mapping[str, int]]  # topic → partitions this deployment mirrors
    # topic → the remotes it is copied from (none dropped for it); None: every remote
    sources: Callable[[], Mapping[str, tuple[str, ...]]] | None = None
    groups: dict[str, GroupStatus] = field(default_factory=dict)
    # why the last pass did not reach every chosen group (a remote did not list its
    # groups), or None
    failure: str | None = None
    # whether this process copies them now (in a group, one member: ``copies_offsets``)
    may_copy: Callable[[], bool] = lambda: True
    # partition → the remotes its copier dropped (another history there; only this
    # process's copiers are known): none of their offsets of it are copied
    dropped: Callable[[], Mapping[TP, Collection[str]]] = dict

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.copy_once()
            except SyncerError as exc:
                log.warning("copying consumer group offsets: %s; trying again", exc)
            wait = self.config.interval_s
            if not self.mirrored():
                wait = min(wait, UNKNOWN_TOPICS_RETRY_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)

    async def copy_once(self) -> None:
        mirrored = self.mirrored()
        if not mirrored or not self.may_copy():
            return  # no offset could be committed, or another member copies them
        chosen: dict[str, list[str]] = {}  # group → the remotes listing it, in their order
        failed: list[SyncerError] = []  # one remote away, one group refused: not the rest
        unlisted: list[str] = []
        for name, remote in list(self.remotes.items()):  # a remote may join meanwhile
            try:
                listed = await remote.consumer_groups()
            except SyncerError as exc:
                failed.append(exc)
                unlisted.append(f"remote {name} did not list its groups: {exc}")
                continue
            for group in listed:
                if self.config.selects(group):
                    chosen.setdefault(group, []).append(name)
        sources = self.sources() if self.sources is not None else None
        for group, names in chosen.items():
            status = self.groups.setdefault(group, GroupStatus(names[0]))
            try:
                await self._copy_group(group, names, mirrored, sources, status)
            except SyncerError as exc:
                status.skipped, status.failed = f"copying its offsets failed: {exc}", True
                failed.append(exc)
        self.failure = "; ".join(unlisted) or None
        if failed:  # after every other remote and group had its turn
            raise failed[0]

    async def _copy_group(
        self,
        group: str,
        names: list[str],
        mirrored: Mapping[str, int],
        sources: Mapping[str, tuple[str, ...]] | None,
        status: GroupStatus,
    ) -> None:
        """Each topic's offsets from the first of ``names`` (the remotes listing the group,
        in the configuration's order) that serves the topic and committed to it: a remote
        dropped for a topic (its log there another) gives none of it."""
        state = await self.local.group_state(group)
        status.failed = False
        if state not in IDLE_STATES:
            status.skipped = f"the group has members locally ({state})"
            return
        status.skipped = None
        dropped = self.dropped()
        wanted: dict[TP, int] = {}
        metadata: dict[TP, str] = {}  # each offset's metadata, committed with it
        taken: dict[str, str] = {}  # topic → the remote its offsets come from
        for name in names:
            for tp, (offset, meta) in (await self.remotes[name].commits(group)).items():
                if tp.partition >= mirrored.get(tp.topic, 0):
                    continue
                if sources is not None and name not in sources.get(tp.topic, ()):
                    continue
                if name in dropped.get(tp, ()):
                    continue  # its log of this partition is another: its offsets point there
                if taken.setdefault(tp.topic, name) == name:
                    wanted[tp], metadata[tp] = offset, meta
        if not wanted:
            return
        local = await self.local.committed(group)
        ends = await self.local.latest(wanted)
        todo = offsets_to_commit(wanted, local, ends)
        status.waiting = sum(1 for tp, o in wanted.items() if o > ends.get(tp, 0))
        if not todo:
            return
        codes = await self.local.commit_offsets(group, todo, {tp: metadata[tp] for tp in todo})
        refused = {tp: code for tp, code in codes.items() if code}
        status.committed += len(codes) - len(refused)
        if refused and set(refused.values()) == {UNKNOWN_MEMBER_ID}:
            # a commit from outside the group is refused so while it has members: of the
            # consumer protocol (KIP-848: DescribeGroups tells them "Dead"), or joined since
            status.skipped = "the group has members locally (a commit from outside it refused)"
        elif refused:
            why = ", ".join(sorted({for_code(code).__name__ for code in refused.values()}))
            status.skipped = f"the local cluster refused {len(refused)} commits ({why})"
            status.failed = True
            log.warning("group %s: %s", group, status.skipped)
        else:
            log.info("group %s: committed %d offsets from %s", group, len(codes), status.source)
