"""The remotes of one partition, in one place: where each one's log starts and ends, which ones
were dropped for the partition and why, and their measured health. The scheduler learns ends
from its fetches, the agreement drops a remote that disagrees, the writes count what each one
served; the copier decides from them where to copy to and when to stop. Each of those goes
through a method of ``PartitionSources``; everything else reads views.

The decisions (``remote_end``, ``landed_reference``, ``start_to_align``, ``stuck``,
``shrunk``) are pure over the ends and the dropped remotes, so they are tested on plain
values."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType

from syncer.clusters import TP
from syncer.errors import PartitionHalted, SourceDataLost
from syncer.holes import RemoteEnds, choose_remote
from syncer.sources import SourceHealth

# how long a remote's end may stay below what was copied from it before its log is taken to
# have lost those records: after an ordinary leader change the new leader's high watermark
# (the end a fetch answer carries) trails until its followers fetch, and a follower may lag
# up to replica.lag.time.max.ms (30 s by default) before the leader drops it from the ISR
# (the rule of ``writes.SETTLE_S``, for the remote's side)
SHRINK_GRACE_S = 35.0


class Shrink(Enum):
    """Does a remote still hold the records copied from it?"""

    HOLDS = "holds"
    WAITING = "waiting"  # its end is below them: a new leader's high watermark, or a loss
    LOST = "lost"  # its log lost them: truncated (an unclean leader election) or replaced


def shrink_verdict(
    held: int,
    end: int,
    out_of_range_at: int | None,
    below_since: float | None,
    now: float,
    grace_s: float = SHRINK_GRACE_S,
) -> Shrink:
    """A remote seen to hold ``held`` records that were copied (the local end, or the
    furthest end it was seen at if lower: a remote merely behind another loses nothing) now
    ends at ``end``. Lost when a fetch at an offset it held, ``out_of_range_at``, was answered
    out of range (Kafka answers so past the log's end, not its high watermark, and a leader
    elected cleanly holds everything below its predecessor's high watermark), or when its end
    has stayed below ``held`` since ``below_since`` for ``grace_s``. A first sight of an end
    below is no proof: a new leader's high watermark trails for a while (KIP-207)."""
    if out_of_range_at is not None and out_of_range_at <= held:
        return Shrink.LOST
    if end >= held:
        return Shrink.HOLDS
    if below_since is not None and now - below_since >= grace_s:
        return Shrink.LOST
    return Shrink.WAITING


def furthest_end(ends: Mapping[str, RemoteEnds], dropped: Mapping[str, str]) -> int:
    """The furthest end among the remotes still used, -1 if none: a dropped remote's end is
    no target (catch-up would wait for it forever)."""
    return max((e.end for n, e in ends.items() if n not in dropped), default=-1)


class PartitionSources:
    """One partition's remotes: their ends, the ones dropped (remote → why) and their health
    (one ``SourceHealth`` per remote per process, shared by every partition). The remotes are
    kept in the configuration's order: on a tie, the one listed first is chosen."""

    def __init__(
        self,
        tp: TP,
        health: Mapping[str, SourceHealth],
        ends: Mapping[str, RemoteEnds] | None = None,
    ) -> None:
        self.tp = tp
        self._health = dict(health)
        self._ends = dict(ends or {})
        for name in self._health:
            # not yet fetched: holds nothing as far as this partition knows
            self._ends.setdefault(name, RemoteEnds(0, 0))
        self._dropped: dict[str, str] = {}
        # for ``shrunk``: the furthest end each remote was seen at, since when its end has
        # been below what was copied from it, and the offset of a fetch answered out of range
        self._peaks = {name: e.end for name, e in self._ends.items()}
        self._below_since: dict[str, float] = {}
        self._out_of_range: dict[str, int] = {}
        self.ends: Mapping[str, RemoteEnds] = MappingProxyType(self._ends)
        self.dropped: Mapping[str, str] = MappingProxyType(self._dropped)
        self.healths: Mapping[str, SourceHealth] = MappingProxyType(self._health)

    def __repr__(self) -> str:
        ends = ", ".join(f"{n}: {e.start}..{e.end}" for n, e in self._ends.items())
        return (
            f"<PartitionSources {self.tp.topic}[{self.tp.partition}] [{ends or 'no remote'};"
            f" dropped: {sorted(self._dropped) or '-'}]>"
        )

    @property
    def where(self) -> str:
        return f"{self.tp.topic}[{self.tp.partition}]"

    @property
    def remotes(self) -> tuple[str, ...]:
        """The remotes that serve this partition, most trusted first."""
        return tuple(self._health)

    # changes --------------------------------------------------------------------------

    def update_end(self, remote: str, ends: RemoteEnds) -> None:
        """``remote``'s log now starts and ends at ``ends`` (a fetch or a listing said so)."""
        self._ends[remote] = ends
        self._peaks[remote] = max(self._peaks.get(remote, 0), ends.end)
        self._out_of_range.pop(remote, None)  # it answered: the offset asked is in its log

    def update_ends(self, ends: Mapping[str, RemoteEnds]) -> None:
        for remote, found in ends.items():
            self.update_end(remote, found)

    def drop(self, remote: str, reason: str) -> None:
        """``remote`` serves this partition no more (it disagreed with the local log or with
        another remote): its chunks are not written and its end is no target."""
        self._dropped[remote] = reason

    def out_of_range(self, remote: str, offset: int) -> None:
        """A fetch from ``remote`` at ``offset`` was answered out of range: its log starts
        above the offset or ends below it (``shrunk`` tells which matters)."""
        self._out_of_range[remote] = offset

    def served(self, remote: str, nbytes: int, records: int) -> None:
        """A write of ``remote``'s records landed ("": fillers of no remote)."""
        if remote:
            self._health[remote].count_served(nbytes, records)

    # views ----------------------------------------------------------------------------

    def health(self, remote: str) -> SourceHealth:
        return self._health[remote]

    def usable(self) -> dict[str, RemoteEnds]:
        """The ends of the remotes not dropped."""
        return {n: e for n, e in self._ends.items() if n not in self._dropped}

    def held(self, remote: str, copied_end: int) -> int:
        """The records copied (the local log ends at ``copied_end``) that ``remote`` was
        seen to hold: a remote merely behind the one copied from loses nothing."""
        return min(copied_end, self._peaks.get(remote, 0))

    def every_dropped(self) -> bool:
        """No remote is left to serve the partition: it halts."""
        return all(name in self._dropped for name in self._health)

    # decisions ------------------------------------------------------------------------

    def remote_end(self) -> int:
        """Where the copy goes to: the furthest end among the remotes still used."""
        return furthest_end(self._ends, self._dropped)

    def landed_reference(self) -> str:
        """The remote to compare writes that landed without a clean answer with: the one
        furthest ahead, among those not dropped (among all, should every one be dropped:
        what landed is checked all the same)."""
        usable = [n for n in self._health if n not in self._dropped] or list(self._health)
        return max(usable, key=lambda n: self._ends[n].end)

    def behind(self, frontier: int, now: float) -> list[str]:
        """The remotes to list when nothing continues at ``frontier`` (every remote seen
        holding it backs off, or none holds it): the healthy ones still used that were last
        seen ending below it or at it. A remote's end is learned from its fetch answers, and
        a partition at its tail polls one remote, so the others' ends go stale: one may hold
        the records by now. Fetching one at ``frontier`` past its end is no way to learn it:
        the out-of-range answer backs that remote off for every partition. (One seen ending
        at it is mostly long-polled there by the plan, and then nothing waits; but not while
        ranges of a remote that failed wait to be fetched again.)"""
        return [
            name
            for name, ends in self.usable().items()
            if ends.end <= frontier and self._health[name].healthy(now)
        ]

    def start_to_align(self) -> int | None:
        """For an empty local partition: the start every remote still used has moved past
        (records below it are gone everywhere), None if one still holds offset 0."""
        return choose_remote(0, self.usable()).lost_below

    def shrunk(self, copied_end: int, now: float) -> list[str]:
        """The remotes still used whose logs lost records copied from them (``Shrink.LOST``),
        with the local log ending at ``copied_end``; notes when each one's end was first
        seen below them (the grace counts from there)."""
        lost = []
        for name, ends in self.usable().items():
            held = self.held(name, copied_end)
            since = self._below_since.setdefault(name, now) if ends.end < held else None
            if since is None:  # back at what it held: a later fall starts a new grace
                self._below_since.pop(name, None)
            verdict = shrink_verdict(held, ends.end, self._out_of_range.get(name), since, now)
            if verdict is Shrink.LOST:
                lost.append(name)
        return lost

    def stuck(self, frontier: int) -> PartitionHalted | None:
        """Why nothing can continue at ``frontier`` for good: its records are gone at every
        remote still used, or every remote was dropped. None: every usable remote backs off
        or has nothing new yet (the copier waits and tries again)."""
        usable = self.usable()
        lost_below = choose_remote(frontier, usable).lost_below
        if lost_below is not None:
            return SourceDataLost(
                f"{self.where}: records {frontier}..{lost_below - 1} are gone at every remote"
                f" (start {lost_below} is beyond the local end {frontier})"
            )
        if not usable:
            return PartitionHalted(
                f"{self.where}: every remote was dropped as a source: "
                + "; ".join(f"{n}: {r}" for n, r in self._dropped.items())
            )
        return None
