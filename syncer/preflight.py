"""``syncer check``'s gathering: asks the clusters what ``syncer.check`` judges, changing
nothing (a CreateTopics is sent only with ``validate_only``). Every cluster is opened on
its own, so one that fails its handshake is a FAIL line and the others are still checked."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.admin import NewTopic

from syncer.admin import COORDINATOR_ERRORS
from syncer.batches import first_timestamp, split_batches
from syncer.check import (
    COORDINATION_GROUP_NEEDS,
    GROUP_AUTHORIZATION_FAILED,
    LOCAL_TOPIC_NEEDS,
    REMOTE_GROUP_NEEDS,
    REMOTE_TOPIC_NEEDS,
    STATE_TOPIC_NEEDS,
    TIMESTAMP_BOUNDS,
    Level,
    Line,
    acl_line,
    ahead_line,
    broker_lines,
    create_line,
    idempotent_line,
    plan_lines,
    principal_of,
    producer_state_line,
    reach_line,
    same_cluster_line,
    settings_line,
    timestamp_line,
    version_line,
)
from syncer.cluster_ids import shares_a_topic
from syncer.clusters import READ_COMMITTED, TP, Cluster
from syncer.config import Config
from syncer.errors import SyncerError, TransientClusterError
from syncer.holes import RemoteEnds, choose_remote, scan
from syncer.protocol.acl import (
    Authorized,
    AuthorizedOperationsRequest,
    GroupOperationsRequest,
    Operation,
    authorized_of,
    group_operations_of,
)
from syncer.protocol.versions import api_versions, write_implies_idempotent
from syncer.retry import retried
from syncer.tasks import map_at_most
from syncer.topics import FIDELITY_SETTINGS, TopicPlan, plan_topics

log = logging.getLogger(__name__)

FETCHES_AT_ONCE = 16  # the hole scan's fetches in flight (one per partition with a gap)
BROKER_SETTINGS = (
    "unclean.leader.election.enable",
    "min.insync.replicas",
    "auto.create.topics.enable",
    "default.replication.factor",
)


async def preflight(config: Config) -> list[Line]:
    """Every line of the check, in the order a reader fixes things: clusters, ACLs, topics,
    broker settings, what lies ahead."""
    lines: list[Line] = []
    async with contextlib.AsyncExitStack() as stack:
        local = Cluster(config.local, role="local")
        local_versions = await _open(stack, local, "local", lines)
        remotes: dict[str, Cluster] = {}
        for remote in config.remotes:
            cluster = Cluster(remote, role="remote")
            if await _open(stack, cluster, f"remote {remote.name}", lines) is not None:
                remotes[remote.name] = cluster
        if local_versions is None:
            return lines  # nothing more can be judged without the local cluster
        local_id = await local.cluster_id()
        for name, cluster in list(remotes.items()):
            remote_id = await cluster.cluster_id()
            shared = False
            if local_id is not None and remote_id == local_id:
                try:
                    shared = shares_a_topic(
                        (await local.topic_census()).ids, (await cluster.topic_census()).ids
                    )
                except SyncerError:  # not told: the WARN says the ids alone agree
                    shared = False
            same = same_cluster_line(f"remote {name}", local_id, remote_id, shared)
            if same is not None:
                lines.append(same)
            if same is not None and same.level is Level.FAIL:
                del remotes[name]  # nothing of it is judged: it would be copied onto itself
        try:
            lines += await _judge(config, local, local_versions, remotes)
        except SyncerError as exc:  # a cluster stopped answering part-way: say where
            lines.append(Line(Level.FAIL, "check", "incomplete", str(exc)))
        except (kafka_errors.KafkaError, OSError, TimeoutError) as exc:  # the admin calls'
            lines.append(Line(Level.FAIL, "check", "incomplete", repr(exc)))
    return lines


async def _open(
    stack: contextlib.AsyncExitStack, cluster: Cluster, where: str, lines: list[Line]
) -> dict[int, tuple[int, int]] | None:
    """Connect (bootstrap, TLS, SASL, versions): the connect and version lines, and its
    ApiVersions (empty if it gave none); None if it could not be opened."""
    try:
        await stack.enter_async_context(cluster)
    except SyncerError as exc:
        lines.append(reach_line(where, cluster.config.security_protocol, str(exc)))
        return None
    lines.append(reach_line(where, cluster.config.security_protocol, None))
    try:
        versions = await api_versions(cluster._client)
    except (kafka_errors.KafkaError, OSError, TimeoutError) as exc:
        lines.append(Line(Level.WARN, where, "version", f"no ApiVersions answer: {exc!r}"))
        return {}
    lines.append(version_line(where, versions))
    return versions


async def _judge(
    config: Config,
    local: Cluster,
    local_versions: Mapping[int, tuple[int, int]],
    remotes: dict[str, Cluster],
) -> list[Line]:
    local_counts = await local.partition_counts()
    remote_counts = {n: await c.partition_counts() for n, c in remotes.items()}
    plan = plan_topics(config.topics, local_counts, remote_counts, selects=config.mirrors)
    lines = await _local_acls(config, local, write_implies_idempotent(local_versions), plan)
    for name, cluster in remotes.items():
        lines += await _remote_acls(config, name, cluster, plan)
    lines += plan_lines(plan)
    lines += await _settings(config, local, remotes, plan)
    lines += await _broker_settings(config, local)
    ahead, stamps = await _ahead(config, local, remotes, plan)
    oldest = min((kept for _first, kept, _newest in stamps.values()), default=None)
    expiry = (await _broker_values(local, ("producer.id.expiration.ms",))).get(
        "producer.id.expiration.ms"
    )
    now_ms = int(time.time() * 1000)
    lines.append(producer_state_line(int(expiry) if expiry else None, oldest, now_ms))
    lines += await _timestamps(local, plan, stamps, now_ms)
    return lines + ahead


async def _timestamps(
    local: Cluster, plan: TopicPlan, stamps: Mapping[str, tuple[int, int, int]], now_ms: int
) -> list[Line]:
    """A FAIL per topic whose local timestamp bounds refuse a record among the first to
    copy: a topic's own, or the brokers' defaults for one syncer would create."""
    existing = [t for t in stamps if t not in plan.create]
    bounds = await local.topic_settings(existing, TIMESTAMP_BOUNDS) if existing else {}
    if any(t in plan.create for t in stamps):
        defaults = await _broker_values(local, tuple(f"log.{k}" for k in TIMESTAMP_BOUNDS))
        created = {k.removeprefix("log."): v for k, v in defaults.items()}
        bounds.update({t: created for t in stamps if t in plan.create})
    lines = []
    for topic, (oldest, _kept, newest) in sorted(stamps.items()):
        line = timestamp_line(topic, bounds.get(topic, {}), oldest, newest, now_ms)
        if line is not None:
            lines.append(line)
    return lines


# ACLs -------------------------------------------------------------------------------------


async def _authorized(cluster: Cluster, topics: list[str]) -> Authorized:
    """What the principal may do on ``topics`` and the cluster; nothing is known from a
    broker without Metadata v10 (Kafka before 2.8): its lines WARN."""
    node = cluster._client.get_random_node()
    try:
        return authorized_of(await cluster.send(node, AuthorizedOperationsRequest(topics)))
    except NotImplementedError:
        return Authorized({t: (0, None) for t in topics}, None)


async def _local_acls(
    config: Config, local: Cluster, write_implies: bool, plan: TopicPlan
) -> list[Line]:
    principal = principal_of(config.local)
    topics = sorted(plan.mirror)
    asked = await _authorized(local, [*topics, config.state_topic])
    lines = []
    for topic in topics:
        code, ops = asked.topics.get(topic, (UNKNOWN, None))
        if topic in plan.create:
            refusal = await _create_refusal(local, topic, plan.create[topic])
            lines.append(create_line("local", topic, principal, refusal))
            continue
        lines.append(acl_line("local", f"topic {topic}", principal, LOCAL_TOPIC_NEEDS, ops, code))
    code, ops = asked.topics.get(config.state_topic, (UNKNOWN, None))
    state = f"topic {config.state_topic}"
    if code == UNKNOWN:  # created by the first run: CreateTopics must be allowed
        refusal = await _create_refusal(local, config.state_topic, 1)
        lines.append(create_line("local", config.state_topic, principal, refusal))
    else:
        lines.append(acl_line("local", state, principal, STATE_TOPIC_NEEDS, ops, code))
    writes_all = all(Operation.WRITE in (asked.topics.get(t, (0, None))[1] or ()) for t in topics)
    lines.append(idempotent_line("local", principal, asked.cluster, writes_all, write_implies))
    if config.coordination.enabled:
        group = config.coordination.group
        code, ops = await _group_operations(local, group)
        lines.append(
            acl_line("local", f"group {group}", principal, COORDINATION_GROUP_NEEDS, ops, code)
        )
    return lines


GroupOperations = tuple[int, frozenset[Operation] | None]  # error code, operations granted
UNKNOWN = 3  # UNKNOWN_TOPIC_OR_PARTITION: the topic does not exist (and we may describe it)


async def _create_refusal(local: Cluster, topic: str, partitions: int) -> str | None:
    """Would the broker let us create ``topic``? CreateTopics with validate_only: it
    authorizes first, creates nothing. An error other than an authorization one is not a
    refusal of ours (a replication factor the broker would pick differently, say)."""
    admin = await local._admin_client()
    replication = await local._default_replication_factor()
    new = NewTopic(topic, partitions, replication)
    try:
        response = await admin.create_topics([new], validate_only=True)
    except kafka_errors.KafkaError as exc:
        return f"CreateTopics (validate only) failed: {exc!r}"
    for _name, code, *rest in response.topic_errors:
        if code in (29, 31):  # TOPIC_ / CLUSTER_AUTHORIZATION_FAILED
            return f"{kafka_errors.for_code(code).__name__}" + (f": {rest[0]}" if rest[0:1] else "")
    return None


async def _group_operations(cluster: Cluster, group: str) -> GroupOperations:
    """A group's error code and the operations granted on it (DescribeGroups v3, at its
    coordinator; a cluster whose offsets topic is still being made answers after a while)."""
    return await retried(
        partial(_describe_group, cluster, group),
        what=f"{cluster.name}: describing group {group}",
        give_up_after_s=20,
    )


async def _describe_group(cluster: Cluster, group: str) -> GroupOperations:
    admin = await cluster._admin_client()
    try:
        node = await admin.find_coordinator(group)
        response = await admin._send_request(GroupOperationsRequest([group]), node)
    except kafka_errors.GroupAuthorizationFailedError:
        return GROUP_AUTHORIZATION_FAILED, None
    except kafka_errors.KafkaError as exc:
        if exc.retriable:
            what = f"{cluster.name}: describing group {group}: {exc!r}"
            raise TransientClusterError(what) from exc
        raise
    code, ops = group_operations_of(response).get(group, (GROUP_AUTHORIZATION_FAILED, None))
    if code in COORDINATOR_ERRORS:
        raise TransientClusterError(f"{cluster.name}: describing group {group}: coordinator moving")
    return code, ops


async def _remote_acls(config: Config, name: str, cluster: Cluster, plan: TopicPlan) -> list[Line]:
    where, principal = f"remote {name}", principal_of(cluster.config)
    topics = sorted(t for t, sources in plan.sources.items() if name in sources)
    asked = await _authorized(cluster, topics) if topics else Authorized({}, None)
    lines = []
    for topic in topics:
        code, ops = asked.topics.get(topic, (UNKNOWN, None))
        lines.append(acl_line(where, f"topic {topic}", principal, REMOTE_TOPIC_NEEDS, ops, code))
    if config.groups.include:
        groups = [g for g in await cluster.consumer_groups() if config.groups.selects(g)]
        if not groups:
            why = "no group matches groups.include (or the principal may not DESCRIBE any)"
            lines.append(Line(Level.WARN, where, "acl", why))
        for group in groups:
            code, ops = await _group_operations(cluster, group)
            lines.append(
                acl_line(where, f"group {group}", principal, REMOTE_GROUP_NEEDS, ops, code)
            )
    return lines


# settings ---------------------------------------------------------------------------------


async def _settings(
    config: Config, local: Cluster, remotes: Mapping[str, Cluster], plan: TopicPlan
) -> list[Line]:
    existing = sorted(t for t in plan.mirror if t not in plan.create)
    ours = await local.topic_settings(existing, FIDELITY_SETTINGS)
    theirs = {
        name: await cluster.topic_settings(
            [t for t in plan.mirror if name in plan.sources[t]], FIDELITY_SETTINGS
        )
        for name, cluster in remotes.items()
    }
    lines = []
    for topic in sorted(plan.mirror):
        remote = {n: s[topic] for n, s in theirs.items() if topic in s}
        local_settings = ours.get(topic, {})  # a topic to create gets the remote's (topics.py)
        fills = config.topics.fills(topic)
        lines.append(settings_line(topic, local_settings, remote, fills))
    return lines


async def _broker_values(local: Cluster, names: tuple[str, ...]) -> dict[str, str]:
    """Each setting's weakest value over the local brokers: the one that is not the same on
    all of them is shown as the first broker's that differs from the others' safe value."""
    out = {}
    for name in names:
        try:
            values = await local.broker_settings(name)
        except SyncerError:
            continue
        if values:
            out[name] = min(values.values(), key=_weakness(name))
    return out


def _weakness(name: str) -> Callable[[str], Any]:
    if name in ("min.insync.replicas", "default.replication.factor", "producer.id.expiration.ms"):
        return int  # the lowest is the weakest
    if name.startswith("log.message.timestamp."):
        return int  # the narrowest bound refuses the most
    return lambda v: v != "true"  # "true" sorts first: the weakest of a boolean here


async def _broker_settings(config: Config, local: Cluster) -> list[Line]:
    values = await _broker_values(local, BROKER_SETTINGS)
    if not values:
        return [Line(Level.WARN, "local", "broker settings", "unreadable (DescribeConfigs)")]
    replication = config.topics.replication_factor
    if replication < 1:
        replication = int(values.get("default.replication.factor", "1"))
    return broker_lines(values, replication)


# ahead ------------------------------------------------------------------------------------


async def _ahead(
    config: Config, local: Cluster, remotes: Mapping[str, Cluster], plan: TopicPlan
) -> tuple[list[Line], dict[str, tuple[int, int, int]]]:
    """Per partition: data lost at the source, the first hole in the first fetch of its gap
    (one fetch of at most ``copier.partition_fetch_max_bytes`` per partition: the rest is
    scanned as it is copied); and per topic the oldest and newest timestamps among the
    first batches to copy of its partitions."""
    tps = [TP(t, p) for t, n in sorted(plan.mirror.items()) for p in range(n)]
    known = [tp for tp in tps if tp.topic not in plan.create]
    local_ends = await local.latest(known) if known else {}
    ends: dict[TP, dict[str, RemoteEnds]] = {}
    for name, cluster in remotes.items():
        mine = [tp for tp in tps if name in plan.sources[tp.topic]]
        if mine:
            for tp, (start, end) in (await cluster.ends(mine, isolation=READ_COMMITTED)).items():
                ends.setdefault(tp, {})[name] = RemoteEnds(start, end)
    choices = {tp: choose_remote(local_ends.get(tp, 0), ends.get(tp, {})) for tp in tps}

    async def first_fetch(tp: TP) -> tuple[str | None, int, tuple[int, int] | None] | str:
        choice = choices[tp]
        remote = remotes[choice.remote or ""]
        return await _first_fetch(config, remote, tp, choice.local_end, choice.target)

    scanned = [tp for tp in tps if choices[tp].remote is not None]
    fetched = await map_at_most(FETCHES_AT_ONCE, first_fetch, scanned)
    found = dict(zip(scanned, fetched, strict=True))
    lines: list[Line] = []
    # per topic: the oldest first timestamp, the oldest max timestamp (what the broker keeps
    # our producer state by) and the newest, of its partitions' first batches to copy
    stamps: dict[str, tuple[int, int, int]] = {}
    for tp in tps:
        choice, where = choices[tp], f"{tp.topic}[{tp.partition}]"
        hole = scanned_to = None
        answer = found.get(tp)
        if isinstance(answer, str):
            lines.append(Line(Level.WARN, where, "holes", f"not scanned: {answer}"))
            continue
        if answer is not None:
            hole, scanned_to, first = answer
            if first is not None:
                low, high, newest = stamps.get(tp.topic, (*first, first[1]))
                stamps[tp.topic] = (min(low, first[0]), min(high, first[1]), max(newest, first[1]))
        if config.topics.fills(tp.topic):
            hole = None  # filled, not halted at
        line = ahead_line(
            where, choice.local_end, choice.target, choice.lost_below, hole, scanned_to
        )
        if line is not None:
            lines.append(line)
    return lines, stamps


async def _first_fetch(
    config: Config, remote: Cluster, tp: TP, start: int, target: int
) -> tuple[str | None, int, tuple[int, int] | None] | str:
    """The first hole in one fetch from ``start``, where the scan ended, and the first and
    max timestamps of the first batch to copy; or why the fetch failed."""
    fetched = (
        await remote.fetch(
            await remote.leader_for(tp),
            {tp: start},
            max_wait_ms=0,
            max_bytes=config.copier.partition_fetch_max_bytes,
            partition_max_bytes=config.copier.partition_fetch_max_bytes,
        )
    )[tp]
    if fetched.error_code:
        return str(fetched.error(f"fetch from remote {remote.name}"))
    batches = split_batches(fetched.records)
    found = scan(batches, start, limit=min(target, fetched.stable_end), aborted=fetched.aborted)
    batch = next((b for b in batches if b.next_offset > start), None)
    stamps = None if batch is None else (first_timestamp(batch), batch.max_timestamp)
    return (found.hole.describe() if found.hole else None), found.next_offset, stamps


async def log_preflight(config: Config, timeout_s: float = 60.0) -> None:
    """``syncer run``'s start: the same checks, each WARN and FAIL logged. It refuses
    nothing: what a FAIL means (a refused topic, a halt at a hole) is done by the copy, and
    a cluster that does not answer fails the start as it did before. It runs beside the
    copy, bounded by ``timeout_s``; whatever ends it early is logged, never raised (the
    daemon's task owner only cancels it)."""
    try:
        lines = await asyncio.wait_for(preflight(config), timeout_s)
    except (SyncerError, TimeoutError) as exc:
        log.warning("check at start: could not finish: %s", exc or "timed out")
        return
    except Exception:  # a bug here must not pass unseen, nor stop the copy
        log.exception("check at start failed")
        return
    for line in lines:
        if line.level is Level.FAIL:
            log.error("check FAIL %s %s: %s", line.where, line.what, line.detail)
        elif line.level is Level.WARN:
            log.warning("check WARN %s %s: %s", line.where, line.what, line.detail)
