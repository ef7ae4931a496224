"""bench-scale's probe of a cluster, independent of syncer: when each topic's partitions all
have a leader in the cluster's metadata, when they all answer ListOffsets, when its first
record lands and when all its records have. The bound the one-process and group figures are
judged against (the broker creating the partitions) is measured here in the same run as
they are, so a target is said to be out of reach only with a figure beside it."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import pairwise

from aiokafka.protocol.offset import OffsetRequest
from aiokafka.structs import TopicPartition

from syncer.clusters import Cluster
from syncer.config import ClusterConfig
from syncer.errors import SyncerError

LATEST = -1  # ListOffsets: the end of the log
LOOK_S = 0.5  # between two looks


@dataclass
class TopicTimes:
    """Seconds from the probe's start at which one topic was first seen so (None: not yet)."""

    seen: float | None = None  # in the metadata, any partition
    led: float | None = None  # every partition with a leader in the metadata
    answering: float | None = None  # every partition answered ListOffsets without error
    first: float | None = None  # any record in it
    done: float | None = None  # every record in it


@dataclass
class Timeline:
    """Each topic's times, and the whole cluster's, from the looks of one probe."""

    partitions: int  # per topic
    want: int  # records per partition at the end
    topics: dict[str, TopicTimes] = field(default_factory=dict)
    answered: list[float] = field(default_factory=list)  # when each look was answered

    def longest_silence(self, until: float | None = None) -> float:
        """The longest time between two answered looks (up to ``until``): the broker
        answered none of the probe's requests for that long. Looks go out every LOOK_S."""
        times = [t for t in self.answered if until is None or t <= until]
        return max((b - a for a, b in pairwise(times)), default=0.0)

    def look(self, now: float, leaders: dict[str, int], answered: dict[str, list[int]]) -> None:
        """One look at ``now``: ``leaders`` (topic → partitions with a leader; a topic the
        metadata lacks is absent), ``answered`` (topic → end of each partition that answered;
        a partition that failed is absent)."""
        for topic, times in self.topics.items():
            if topic in leaders and times.seen is None:
                times.seen = now
            if leaders.get(topic, 0) >= self.partitions and times.led is None:
                times.led = now
            ends = answered.get(topic, [])
            if len(ends) >= self.partitions and times.answering is None:
                times.answering = now
            if sum(ends) and times.first is None:
                times.first = now
            if sum(ends) >= self.partitions * self.want and times.done is None:
                times.done = now

    def earliest(self, of: Callable[[TopicTimes], float | None]) -> float | None:
        values = [v for v in map(of, self.topics.values()) if v is not None]
        return min(values) if values else None

    def latest(self, of: Callable[[TopicTimes], float | None]) -> float | None:
        """When every topic had reached it (None: one has not)."""
        values = [of(t) for t in self.topics.values()]
        if not values or any(v is None for v in values):
            return None
        return max(v for v in values if v is not None)

    def summary(self) -> dict[str, float | None]:
        """The cluster-wide times, and the spread of each topic's lag from led to in sync."""
        lags = sorted(
            t.done - t.led for t in self.topics.values() if t.done is not None and t.led is not None
        )
        return {
            "first_topic_seen_s": self.earliest(lambda t: t.seen),
            "all_led_s": self.latest(lambda t: t.led),
            "all_answering_s": self.latest(lambda t: t.answering),
            "first_record_s": self.earliest(lambda t: t.first),
            "in_sync_s": self.latest(lambda t: t.done),
            "topic_led_to_in_sync_p50_s": _quantile(lags, 0.5),
            "topic_led_to_in_sync_max_s": lags[-1] if lags else None,
            "longest_silence_s": self.longest_silence(),
        }


def _quantile(values: list[float], q: float) -> float | None:
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


def new_timeline(topics: Iterable[str], partitions: int, want: int) -> Timeline:
    return Timeline(partitions, want, {t: TopicTimes() for t in topics})


async def probe(
    bootstrap: str,
    timeline: Timeline,
    started: float,
    done: Callable[[Timeline], bool],
    alive: Callable[[], None] = lambda: None,
    limit_s: float = 600.0,
) -> Timeline:
    """Look at the cluster every LOOK_S, from ``started`` (a monotonic time), until
    ``done(timeline)``. The metadata is read only while a topic is not led everywhere: at
    10,000 partitions reading it every look would take a good part of a core from syncer.
    ``alive`` raises if what is measured died."""
    async with Cluster(ClusterConfig(bootstrap, name="bench"), role="bench") as cluster:
        while time.monotonic() - started < limit_s:
            alive()
            try:
                if any(t.led is None for t in timeline.topics.values()):
                    await cluster.refresh_metadata()
                leaders, answered = await _look(cluster, timeline)
            except SyncerError:
                leaders, answered = {}, {}
            else:
                timeline.answered.append(time.monotonic() - started)
            timeline.look(time.monotonic() - started, leaders, answered)
            if done(timeline):
                return timeline
            await asyncio.sleep(LOOK_S)
    raise RuntimeError(f"not done after {limit_s:.0f} s")


async def _look(
    cluster: Cluster, timeline: Timeline
) -> tuple[dict[str, int], dict[str, list[int]]]:
    """(topic → partitions with a leader, topic → ends of the partitions that answered)."""
    metadata = cluster._client.cluster
    known = metadata.topics()
    leaders: dict[str, int] = {}
    by_leader: dict[int, dict[str, list[tuple[int, int]]]] = defaultdict(lambda: defaultdict(list))
    for topic in timeline.topics:
        if topic not in known:
            continue
        leaders[topic] = 0
        for p in range(timeline.partitions):
            node = metadata.leader_for_partition(TopicPartition(topic, p))
            if node is not None and node >= 0:
                leaders[topic] += 1
                by_leader[node][topic].append((p, LATEST))
    answered: dict[str, list[int]] = defaultdict(list)
    for node, asked in by_leader.items():
        answer = await cluster.send(node, OffsetRequest(-1, 0, list(asked.items())))
        for topic, parts in answer.topics:
            for _partition, code, *rest in parts:
                if not code:
                    answered[topic].append(int(rest[-1]))
    return leaders, answered
