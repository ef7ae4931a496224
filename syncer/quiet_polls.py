"""The quiet partitions of one fetcher, each broker's held in its fetch session between polls.

A quiet partition's fetch, once its empty answer is held, is ``park``ed: it joins the
session of its broker and stays there, poll after poll, untouched while the session's
answers leave it out (nothing changed for it). Only what a session answer names is looked
at, so 10,000 idle partitions cost a poll request per broker and nothing per partition: no
re-queue, no timer, no entry in the request or the answer. A parked fetch leaves when it is
answered (records, a moved end, an error), when its hold runs out (``overdue``), when its
caller gives up (``unpark``), or when its broker's poll fails (``fail``: all of that broker's
go, and its session starts over with a full request).

Pure bookkeeping, no I/O: the fetcher sends and settles.
"""

from __future__ import annotations

import heapq
import itertools
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping

from syncer.clusters import TP
from syncer.errors import SyncerError
from syncer.fetch_session import FetchSession
from syncer.fetch_wants import Want


class QuietPolls:
    """Per broker: its fetch session and the fetches parked in it."""

    def __init__(self, topic_ids: Mapping[str, uuid.UUID]) -> None:
        self.topic_ids = topic_ids  # a topic's fetches join a session by its id
        self.sessions: dict[int, FetchSession] = defaultdict(FetchSession)
        self.parked: dict[int, dict[TP, Want]] = defaultdict(dict)  # node → its fetches
        self.out: set[int] = set()  # nodes whose poll is out
        self._node: dict[TP, int] = {}  # where each parked partition is
        # (when its hold runs out, order, partition, fetch); left in place when the fetch
        # leaves earlier, skipped when its time comes
        self._holds: list[tuple[float, int, TP, Want]] = []
        self._order = itertools.count()

    def __repr__(self) -> str:
        return f"<QuietPolls [parked: {len(self._node)}, polls out: {len(self.out)}]>"

    def __contains__(self, tp: TP) -> bool:
        return tp in self._node

    def held(self, tp: TP) -> Want | None:
        """``tp``'s parked fetch, if it has one."""
        node = self._node.get(tp)
        return None if node is None else self.parked[node][tp]

    def due(self) -> Iterator[int]:
        """The brokers with parked fetches and no poll out."""
        return (node for node, wants in self.parked.items() if wants and node not in self.out)

    def park(self, node: int, joining: Mapping[TP, Want]) -> dict[TP, tuple[int, int]]:
        """Park ``joining`` with ``node`` (each has been held once: ``want.empty``); what the
        next poll carries for them (offset, max bytes)."""
        parked = self.parked[node]
        for tp, want in joining.items():
            parked[tp] = want
            self._node[tp] = node
            heapq.heappush(self._holds, (want.since + want.hold_s, next(self._order), tp, want))
        return {tp: want.ask for tp, want in joining.items()}

    def unpark(self, tp: TP, want: Want) -> None:
        """``want`` leaves its session if it is parked (answered, given up, failed)."""
        node = self._node.get(tp)
        if node is None or self.parked[node].get(tp) is not want:
            return
        del self.parked[node][tp]
        del self._node[tp]
        topic_id = self.topic_ids.get(tp.topic)
        if topic_id is not None:
            self.sessions[node].drop((topic_id, tp.partition))

    def overdue(self, now: float) -> list[Want]:
        """The parked fetches whose hold ran out by ``now``, unparked: their callers get
        their last empty answer."""
        out = []
        while self._holds and self._holds[0][0] <= now:
            _, _, tp, want = heapq.heappop(self._holds)
            if self.held(tp) is want:
                self.unpark(tp, want)
                out.append(want)
        return out

    def rerouted(self, route: Callable[[TP], int]) -> list[tuple[TP, Want]]:
        """The parked fetches whose partition ``route`` sends elsewhere now (its leader
        moved; or none is known: ``route`` raises), unparked: they go again, there. Asked
        when the leaders were refreshed."""
        out = []
        for tp, node in self._node.items():
            try:
                moved = route(tp) != node
            except SyncerError:
                moved = True
            if moved:
                out.append((tp, self.parked[node][tp]))
        for tp, want in out:
            self.unpark(tp, want)
        return out

    def fail(self, node: int) -> list[Want]:
        """``node``'s poll failed: all its parked fetches, unparked, and its session closed
        (the broker's view is unknown: the next poll opens a new one)."""
        wants = self.parked.pop(node, {})
        for tp in wants:
            del self._node[tp]
        self.sessions[node].clear()
        return list(wants.values())

    def everything(self) -> list[Want]:
        """Every parked fetch (the fetcher stops or dies)."""
        return [want for wants in self.parked.values() for want in wants.values()]
