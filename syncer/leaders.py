"""Leaders that moved: an answer saying a partition's leader is elsewhere now refreshes the
cluster's metadata at once, one refresh for a whole burst of such answers.

A produce, fetch or list-offsets answer carries an error code per partition; one of
``STALE_METADATA_CODES`` says the request went to a broker that does not lead the partition
(any more, or yet). Kafka's Java client then asks for a metadata update
(``Metadata.requestUpdate`` from ``Sender`` and ``Fetcher``) and aiokafka calls
``force_metadata_update``; without it, syncer kept sending to the old leader until the
periodic refresh (issue 19: 12 to 39 s of copying lost to one preferred-leader election).

The refresh is coalesced as Kafka's client does with its metadata versions: an answer to a
request sent before the last refresh ended is old news (that refresh already knows better),
and any answer that comes while a refresh is out joins it. So a response with a thousand
partitions answering NOT_LEADER_OR_FOLLOWER, or one from every broker, costs one refresh.
While it is out, the partitions of the topics it was asked for are not sent (their writes
and fetches wait for it: the next request goes to the new leader), and ``listen`` callbacks
wake those who hold them when it ends.

Refreshes of one cluster are at least ``MIN_INTERVAL_S`` apart: a broker whose metadata lags
the controller's may keep naming the old leader for a moment, and each fetch sent there by
the refreshed metadata answers NOT_LEADER_OR_FOLLOWER again. Without a pause that would be a
tight loop of metadata requests and fetches; with it, a refresh asked too soon after the
last one waits out the rest of the interval, the partitions held all the while."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Collection, Mapping

from syncer.errors import ClusterError
from syncer.protocol.common import (
    FENCED_LEADER_EPOCH,
    LEADER_NOT_AVAILABLE,
    NOT_LEADER_OR_FOLLOWER,
    UNKNOWN_LEADER_EPOCH,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from syncer.tasks import cancel_and_wait

log = logging.getLogger(__name__)

# the broker asked leads the partition no more: ask the new leader at once
LEADER_MOVED_CODES = frozenset({NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH})
# the metadata a request was routed by is out of date: refresh it before asking again (an
# election under way, a replica reassigned away from the broker asked)
STALE_METADATA_CODES = LEADER_MOVED_CODES | {LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION}
# the least time from the end of one refresh to the start of the next: a KRaft broker's
# metadata follows the controller's within tens of milliseconds, so a leader still named
# wrongly is asked about again after a pause this long, not in a loop
MIN_INTERVAL_S = 0.15


def refresh_delay(now: float, last_ended: float, min_interval_s: float) -> float:
    """How long a refresh asked at ``now`` waits before it goes out: what is left of
    ``min_interval_s`` since the last one ended at ``last_ended`` (none if longer ago)."""
    return max(0.0, last_ended + min_interval_s - now)


# a broker whose request failed this recently is asked for metadata last: killed and
# restarting, it accepts connections seconds before it answers, and a refresh that asked it
# first held the moved partitions (and, while it was out, their topics) until it did
FAILED_RECENTLY_S = 30.0


def asking_order(
    nodes: Collection[int],
    failed_at: Mapping[int, float],
    now: float,
    shuffle: Callable[[list[int]], None] = random.shuffle,
) -> list[int]:
    """The order to ask ``nodes`` for metadata: those with no failure in the last
    ``FAILED_RECENTLY_S`` first, in random order (the load spread), then the ones that
    failed, longest ago first (the likeliest to be back)."""
    healthy = [n for n in nodes if now - failed_at.get(n, float("-inf")) >= FAILED_RECENTLY_S]
    shuffle(healthy)
    failed = sorted((n for n in nodes if n not in healthy), key=lambda n: failed_at[n])
    return healthy + failed


class MetadataRefresh:
    """A cluster's refreshes of its leaders after answers that said they moved. Owns the
    refresh task it starts; ``close()`` ends it (idempotent)."""

    def __init__(
        self,
        refresh: Callable[[], Awaitable[None]],
        name: str = "",
        *,
        min_interval_s: float = MIN_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._refresh = refresh
        self.name = name
        self.min_interval_s = min_interval_s
        self._clock = clock
        self._ended = float("-inf")  # when the last refresh ended, answered or not
        self.generation = 0  # refreshes that ended with an answer
        self.started = 0  # refreshes started (what the tests count)
        self._task: asyncio.Task[None] | None = None
        self._topics: set[str] = set()  # those the refresh under way was asked for
        self._listeners: list[Callable[[], None]] = []

    def __repr__(self) -> str:
        state = f"refreshing {sorted(self._topics)}" if self._task is not None else "idle"
        return f"<MetadataRefresh {self.name} [{state}, generation: {self.generation}]>"

    def listen(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever a refresh ends (answered or not)."""
        self._listeners.append(callback)

    def moved(self, topics: Collection[str], seen: int) -> bool:
        """An answer to a request routed at ``generation`` ``seen`` said partitions of
        ``topics`` are led elsewhere: refresh now, unless a refresh is under way (it joins
        it) or one ended since that request was routed. Whether a refresh started."""
        if not topics:
            return False
        if self._task is not None:
            self._topics.update(topics)
            return False
        if self.generation > seen:
            return False  # refreshed since: the retry is routed by the new metadata
        self._topics = set(topics)
        self.started += 1
        delay = refresh_delay(self._clock(), self._ended, self.min_interval_s)
        moved = ", ".join(sorted(topics))
        log.info("%s: leaders moved (%s): refreshing metadata", self.name, moved)
        self._task = asyncio.create_task(self._run(delay), name=f"metadata-{self.name}")
        return True

    def refreshing(self, topic: str) -> bool:
        """Is a refresh under way for ``topic``'s leaders (hold its requests until it ends)?"""
        return self._task is not None and topic in self._topics

    async def wait(self) -> None:
        """Until the refresh under way, if any, has ended. A caller cancelled here does not
        cancel the refresh: others wait for it too."""
        task = self._task
        if task is not None:
            await asyncio.wait([task])

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task, msg=f"{self.name} closed")

    async def _run(self, delay: float) -> None:
        try:
            if delay > 0:  # the last refresh ended a moment ago: not in a loop
                await asyncio.sleep(delay)
            await self._refresh()
            self.generation += 1
        except ClusterError as exc:  # the next answer that says so asks again
            log.warning("%s: refreshing metadata after a leader move: %s", self.name, exc)
        except Exception:  # a bug: seen in the log, and the next answer asks again
            log.exception("%s: refreshing metadata after a leader move", self.name)
        finally:
            self._ended = self._clock()
            self._task = None
            self._topics = set()
            for callback in self._listeners:
                callback()
