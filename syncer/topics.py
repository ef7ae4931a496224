"""Which topics are mirrored, and making the local side fit: pure selection and shape checks,
plus the I/O that creates missing local topics and partitions."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from syncer.clusters import Cluster
from syncer.config import TopicsConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicPlan:
    """What to do with each selected topic: mirror it (name → partition count), create it
    locally first, or refuse it (name → reason)."""

    mirror: dict[str, int] = field(default_factory=dict)
    create: dict[str, int] = field(default_factory=dict)
    grow: dict[str, int] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    sources: dict[str, tuple[str, ...]] = field(default_factory=dict)


def plan_topics(
    selection: TopicsConfig,
    local_counts: Mapping[str, int],
    remote_counts: Mapping[str, Mapping[str, int]],
    mirrored: Collection[str] = (),
) -> TopicPlan:
    """Decide per selected remote topic: mirror, create locally, or refuse (partition counts
    differ between remotes or with the local topic). A topic already ``mirrored`` whose remote
    gained partitions grows locally to match; at start, any difference is refused."""
    plan = TopicPlan()
    names = sorted({t for counts in remote_counts.values() for t in counts if selection.selects(t)})
    for topic in names:
        counts = {r: c[topic] for r, c in remote_counts.items() if topic in c}
        distinct = set(counts.values())
        if len(distinct) > 1:
            detail = ", ".join(f"{r}={n}" for r, n in counts.items())
            plan.refused[topic] = f"remotes disagree on the partition count ({detail})"
            continue
        (count,) = distinct
        local = local_counts.get(topic)
        if local is None:
            if not selection.create_missing:
                plan.refused[topic] = "missing locally and topics.create_missing is false"
                continue
            plan.create[topic] = count
        elif local < count and topic in mirrored and selection.create_missing:
            plan.grow[topic] = count  # the remote topic gained partitions while we ran
        elif local != count:
            plan.refused[topic] = f"partition counts differ: local has {local}, remote has {count}"
            continue
        plan.mirror[topic] = count
        plan.sources[topic] = tuple(counts)
    return plan


async def create_local_topic(
    local: Cluster, source: Cluster, topic: str, partitions: int, selection: TopicsConfig
) -> None:
    configs = await source.topic_configs(topic, selection.copy_configs)
    log.info("creating local topic %s with %d partitions and %s", topic, partitions, configs)
    await local.create_topic(topic, partitions, configs, selection.replication_factor)
