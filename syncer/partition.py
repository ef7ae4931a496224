"""The remotes of one partition, in one place: where each one's log starts and ends, which ones
were dropped for the partition and why, and their measured health. The scheduler learns ends
from its fetches, the agreement drops a remote that disagrees, the writes count what each one
served; the copier decides from them where to copy to and when to stop. Each of those goes
through a method of ``PartitionSources``; everything else reads views.

The decisions (``remote_end``, ``landed_reference``, ``start_to_align``, ``stuck``) are pure
over the ends and the dropped remotes, so they are tested on plain values."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from syncer.clusters import TP
from syncer.errors import PartitionHalted, SourceDataLost
from syncer.holes import RemoteEnds, choose_remote
from syncer.sources import SourceHealth


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

    def update_ends(self, ends: Mapping[str, RemoteEnds]) -> None:
        for remote, found in ends.items():
            self.update_end(remote, found)

    def drop(self, remote: str, reason: str) -> None:
        """``remote`` serves this partition no more (it disagreed with the local log or with
        another remote): its chunks are not written and its end is no target."""
        self._dropped[remote] = reason

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

    def start_to_align(self) -> int | None:
        """For an empty local partition: the start every remote still used has moved past
        (records below it are gone everywhere), None if one still holds offset 0."""
        return choose_remote(0, self.usable()).lost_below

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
