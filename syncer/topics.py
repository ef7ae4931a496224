"""Which topics are mirrored, and making the local side fit: pure selection, shape and
settings checks, plus the I/O that creates missing local topics and partitions."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace

from syncer.admin import TopicSetting
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
    selects: Callable[[str], bool] | None = None,
) -> TopicPlan:
    """Decide per selected remote topic: mirror, create locally, or refuse (partition counts
    differ between remotes or with the local topic). A topic already ``mirrored`` whose remote
    gained partitions grows locally to match; at start, any difference is refused. Which
    topics are selected: ``selects`` (``Config.mirrors``: never syncer's own state topic),
    else ``selection.selects``."""
    plan = TopicPlan()
    chosen = selects or selection.selects
    names = sorted({t for counts in remote_counts.values() for t in counts if chosen(t)})
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


# The settings of a local topic that change what its readers see (invariant 7), read with
# the broker's defaults filled in.
FIDELITY_SETTINGS = (
    "message.timestamp.type",
    "cleanup.policy",
    "max.message.bytes",
    "compression.type",
)


def unfaithful_setting(
    local: Mapping[str, str], remotes: Mapping[str, Mapping[str, str]]
) -> str | None:
    """Why a local topic with settings ``local`` cannot hold an identical copy of the remote
    topic with settings ``remotes[name]`` (one line naming the setting and both values), or
    None. A setting missing on either side is not judged."""
    for name, remote in remotes.items():
        for rule in (_timestamp_type, _compaction, _max_message_bytes, _compression):
            reason = rule(local, remote)
            if reason is not None:
                setting, why = reason
                return (
                    f"local {setting} is {local[setting]}, remote {name}'s is {remote[setting]}:"
                    f" {why}"
                )
    return None


_Reason = tuple[str, str] | None  # (setting, what would go wrong)


def _both(local: Mapping[str, str], remote: Mapping[str, str], setting: str) -> bool:
    return setting in local and setting in remote


def _timestamp_type(local: Mapping[str, str], remote: Mapping[str, str]) -> _Reason:
    setting = "message.timestamp.type"
    if _both(local, remote, setting) and local[setting] == "LogAppendTime":
        return setting, "the local broker would replace every record's timestamp with its own clock"
    return None


def _compaction(local: Mapping[str, str], remote: Mapping[str, str]) -> _Reason:
    setting = "cleanup.policy"
    if _both(local, remote, setting) and compacts(local[setting]) and not compacts(remote[setting]):
        return setting, "local compaction would remove records the remote keeps"
    return None


def compacts(policy: str) -> bool:
    return "compact" in {p.strip() for p in policy.split(",")}


def _max_message_bytes(local: Mapping[str, str], remote: Mapping[str, str]) -> _Reason:
    setting = "max.message.bytes"
    if _both(local, remote, setting) and int(local[setting]) < int(remote[setting]):
        return setting, "the local topic would refuse batches the remote holds"
    return None


def _compression(local: Mapping[str, str], remote: Mapping[str, str]) -> _Reason:
    # Kafka's LogValidator keeps a batch as it is sent when its codec equals the target
    # codec, and recompresses it otherwise; the target is the batch's own codec when the
    # topic's compression.type is `producer` (BrokerCompressionType.targetCompression), else
    # the topic's. A remote topic whose type is not `producer` holds only batches of that
    # codec (its broker recompressed them on append), so the same type locally recompresses
    # nothing we copy; any other type would recompress every batch of another codec.
    setting = "compression.type"
    if _both(local, remote, setting) and local[setting] not in ("producer", remote[setting]):
        return setting, "the local broker would recompress batches of another codec"
    return None


def refuse(plan: TopicPlan, refusals: Mapping[str, str]) -> TopicPlan:
    """``plan`` with the topics of ``refusals`` refused (name → reason) and nothing else
    planned for them."""
    if not refusals:
        return plan

    def kept(d: Mapping[str, int]) -> dict[str, int]:
        return {t: n for t, n in d.items() if t not in refusals}

    return replace(
        plan,
        mirror=kept(plan.mirror),
        create=kept(plan.create),
        grow=kept(plan.grow),
        refused={**plan.refused, **refusals},
        sources={t: s for t, s in plan.sources.items() if t not in refusals},
    )


def as_they_were(
    plan: TopicPlan,
    remote_counts: Mapping[str, Mapping[str, int]],
    down: Collection[str],
    before: TopicPlan,
) -> tuple[TopicPlan, set[str]]:
    """``plan``, made with the last census of the remotes ``down`` (they did not answer this
    refresh), with every topic such a remote holds (as last seen) left as it was
    ``before``: mirrored with the same count and sources, refused for the same reason, or
    not planned. A remote's topics cannot be judged, grown or created without it (its
    partition count, its settings), and a topic is not refused or dropped because a
    remote is away; the topics that only remotes answering hold are planned as usual.
    Returns the plan and those topics left as they were."""
    held = {t for r in down for t in remote_counts.get(r, {})}
    planned = set(plan.mirror) | set(plan.refused) | set(before.mirror) | set(before.refused)
    kept = held & planned

    mirror = {t: n for t, n in plan.mirror.items() if t not in kept}
    mirror.update({t: n for t, n in before.mirror.items() if t in kept})
    sources = {t: v for t, v in plan.sources.items() if t not in kept}
    sources.update({t: v for t, v in before.sources.items() if t in kept and t in mirror})
    refused = {t: r for t, r in plan.refused.items() if t not in kept}
    refused.update({t: r for t, r in before.refused.items() if t in kept})
    out = TopicPlan(
        mirror=mirror,
        create={t: n for t, n in plan.create.items() if t not in kept},
        grow={t: n for t, n in plan.grow.items() if t not in kept},
        refused=refused,
        sources=sources,
    )
    return out, kept


def first_to_create(create: Mapping[str, int], partitions: int) -> dict[str, int]:
    """The topics of ``create`` (name → partitions) to create first: in name order, until
    they hold ``partitions`` (at least one topic). A broker creates 10,000 partitions in tens
    of seconds; their copiers start as each share is ready, not once all are."""
    first: dict[str, int] = {}
    for topic in sorted(create):
        if first and sum(first.values()) + create[topic] > partitions:
            break
        first[topic] = create[topic]
    return first


def creation_configs(copied: Mapping[str, str]) -> dict[str, str]:
    """The settings of a local topic created from a remote's ``copied`` ones: always
    CreateTime, since the local broker must keep the timestamps we send (a LogAppendTime
    remote's batches are rewritten with their append time, see ``batches``)."""
    return {**copied, "message.timestamp.type": "CreateTime"}


async def create_local_topics(
    local: Cluster,
    sources: Mapping[str, Cluster],
    wanted: Mapping[str, tuple[str, int]],
    selection: TopicsConfig,
) -> tuple[dict[str, dict[str, TopicSetting]], dict[str, str]]:
    """Create each topic of ``wanted`` (topic → (source remote, partitions)) locally with its
    source's copied settings, read with one DescribeConfigs per source and created in
    batches: each created topic's settings as read (the ones the local topic starts from,
    for ``topic_configs``), and the topics the local cluster refused to create, with why."""
    by_source: dict[str, list[str]] = {}
    for topic, (source, _count) in wanted.items():
        by_source.setdefault(source, []).append(topic)
    settings: dict[str, dict[str, TopicSetting]] = {}
    for source, topics in by_source.items():
        settings.update(await sources[source].topic_setting_sources(topics, selection.copy_configs))
    new = []
    for topic, (_source, partitions) in wanted.items():
        read = settings.setdefault(topic, {})
        copied = {k: s.value for k, s in read.items() if s.explicit and s.value is not None}
        configs = creation_configs(copied)
        log.info("creating local topic %s with %d partitions and %s", topic, partitions, configs)
        new.append((topic, partitions, configs))
    refused = await local.create_topics(new, selection.replication_factor)
    created = {topic: settings[topic] for topic in wanted if topic not in refused}
    return created, refused
