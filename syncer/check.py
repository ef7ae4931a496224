"""``syncer check``: the preflight's verdicts, as pure functions over what the brokers said.

Each check gives one ``Line`` (OK / WARN / FAIL, where, what, why). A FAIL is something that
makes syncer refuse, halt or fail: a cluster that does not answer or refuses our
credentials, an ACL the local principal lacks, a topic refused for its shape or a setting,
data already lost at the source, a hole ahead with ``on_hole: halt``. A WARN weakens a
guarantee or slows the copy without stopping it. Gathering (``syncer.preflight``) asks the
brokers; nothing here talks to a cluster.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum

from rich.console import Console
from rich.table import Table
from rich.text import Text

from syncer.alignment import StateClock
from syncer.cluster_ids import same_cluster
from syncer.config import ClusterConfig
from syncer.errors import ExitCode
from syncer.protocol.acl import Operation
from syncer.protocol.versions import release_guess, too_old
from syncer.topics import TopicPlan, unfaithful_setting

TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
UNKNOWN_TOPIC_OR_PARTITION = 3

# what syncer does on the local cluster: writes (and reads back what landed, agreement.py),
# judges the topic's settings (DescribeConfigs); CREATE only for a topic it must create
LOCAL_TOPIC_NEEDS = (
    Operation.DESCRIBE,
    Operation.READ,
    Operation.WRITE,
    Operation.DESCRIBE_CONFIGS,
)
# identity.py sends CreateTopics for the state topic at every start (the broker checks CREATE
# before it looks whether the topic exists), writes the identity and reads it back
STATE_TOPIC_NEEDS = (Operation.CREATE, Operation.DESCRIBE, Operation.READ, Operation.WRITE)
# a remote's topics are read, and their settings judged against the local ones
REMOTE_TOPIC_NEEDS = (Operation.DESCRIBE, Operation.READ, Operation.DESCRIBE_CONFIGS)
COORDINATION_GROUP_NEEDS = (Operation.DESCRIBE, Operation.READ)  # join, sync, heartbeat
REMOTE_GROUP_NEEDS = (Operation.DESCRIBE,)  # OffsetFetch of its committed offsets


class Level(StrEnum):
    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"


@dataclass(frozen=True, slots=True)
class Line:
    """One row of the check: its level, where (a cluster, a topic, a partition), what was
    checked, and what was found (for WARN and FAIL: what it means and what to do)."""

    level: Level
    where: str
    what: str
    detail: str


def exit_code(lines: Iterable[Line]) -> int:
    """``CHECK_FAILED`` if any line is a FAIL; WARNs do not change it."""
    return ExitCode.CHECK_FAILED if any(li.level is Level.FAIL for li in lines) else ExitCode.OK


def principal_of(config: ClusterConfig) -> str:
    """The principal the brokers see, as far as the settings tell it."""
    if config.security_protocol.startswith("SASL") and config.sasl_username:
        return f"User:{config.sasl_username}"
    if config.ssl_certfile:
        return f"the subject of {config.ssl_certfile}"
    if config.security_protocol == "PLAINTEXT":
        return "User:ANONYMOUS"
    return "our principal"


# clusters ---------------------------------------------------------------------------------


def reach_line(where: str, security: str, problem: str | None) -> Line:
    """Did the cluster answer (its bootstrap, TLS handshake and SASL authentication)?"""
    if problem is not None:
        return Line(Level.FAIL, where, "connect", problem)
    return Line(Level.OK, where, "connect", f"answers ({security})")


def same_cluster_line(
    where: str, local_id: str | None, remote_id: str | None, shared_topic: bool
) -> Line | None:
    """FAIL if a remote is the local cluster under another address, WARN if it only tells
    its cluster id (``cluster_ids.same_cluster``); None if neither."""
    same = same_cluster(local_id, remote_id, shared_topic)
    if same is None:
        return None
    return Line(Level.FAIL if same.certain else Level.WARN, where, "cluster", same.detail)


def version_line(where: str, versions: Mapping[int, tuple[int, int]]) -> Line:
    """The Kafka release its ApiVersions tell, and FAIL below what syncer needs."""
    why = too_old(versions)
    if why is not None:
        return Line(Level.FAIL, where, "version", why)
    shown = {"Produce": 0, "Fetch": 1, "ListOffsets": 2, "Metadata": 3}
    maxima = ", ".join(f"{n} v{versions[k][1]}" for n, k in shown.items() if k in versions)
    return Line(Level.OK, where, "version", f"Kafka {release_guess(versions)} ({maxima})")


# ACLs -------------------------------------------------------------------------------------


def acl_line(
    where: str,
    resource: str,
    principal: str,
    needed: Collection[Operation],
    granted: frozenset[Operation] | None,
    error_code: int = 0,
) -> Line:
    """Does ``principal`` hold ``needed`` on ``resource`` (``topic x``, ``group g``), as the
    broker's authorized operations say? A refused describe means at least DESCRIBE is
    missing (the broker tells nothing more)."""
    names = "/".join(op.name for op in needed)
    if error_code in (TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED):
        return Line(
            Level.FAIL,
            where,
            "acl",
            f"missing ACL: {principal} may not DESCRIBE {resource} (needs {names})",
        )
    if granted is None:
        return Line(Level.WARN, where, "acl", f"the broker did not say what {resource} allows")
    missing = [op.name for op in needed if op not in granted]
    if missing:
        return Line(
            Level.FAIL,
            where,
            "acl",
            f"missing ACL: ALLOW {principal} {'/'.join(missing)} on {resource}",
        )
    return Line(Level.OK, where, "acl", f"{names} on {resource}")


def create_line(where: str, topic: str, principal: str, refusal: str | None) -> Line:
    """A topic syncer must create: did the broker accept a CreateTopics with validate_only
    (it authorizes CREATE on the cluster or the topic first; nothing is created)?"""
    if refusal is not None:
        return Line(
            Level.FAIL,
            where,
            "acl",
            f"missing ACL: ALLOW {principal} CREATE on topic {topic} (or the cluster): {refusal}",
        )
    return Line(Level.OK, where, "acl", f"CREATE on topic {topic} (missing: will be created)")


def idempotent_line(
    where: str,
    principal: str,
    cluster: frozenset[Operation] | None,
    writes_all: bool,
    write_implies: bool,
) -> Line:
    """May the principal allocate an idempotent producer id? IDEMPOTENT_WRITE on the
    cluster, or (Kafka 3.0+) WRITE on a topic."""
    if cluster is not None and Operation.IDEMPOTENT_WRITE in cluster:
        return Line(Level.OK, where, "acl", "IDEMPOTENT_WRITE on the cluster")
    if write_implies and writes_all:
        return Line(Level.OK, where, "acl", "idempotent writes (WRITE on the topics, Kafka 3.0+)")
    if cluster is None or (write_implies and not writes_all):
        # not told (no DESCRIBE on the cluster), or the topic lines already FAIL on WRITE
        return Line(Level.WARN, where, "acl", "cannot tell IDEMPOTENT_WRITE on the cluster")
    return Line(
        Level.FAIL, where, "acl", f"missing ACL: ALLOW {principal} IDEMPOTENT_WRITE on the cluster"
    )


# topics -----------------------------------------------------------------------------------


def plan_lines(plan: TopicPlan) -> list[Line]:
    """Partition counts: a refused topic FAILs with its reason."""
    lines = [
        Line(Level.FAIL, f"topic {t}", "partitions", why) for t, why in sorted(plan.refused.items())
    ]
    for topic, count in sorted(plan.mirror.items()):
        if topic in plan.create:
            detail = f"missing locally: will be created with {count} partitions"
        else:
            detail = f"{count} partitions on each side"
        lines.append(Line(Level.OK, f"topic {topic}", "partitions", detail))
    return lines


def settings_line(
    topic: str,
    local: Mapping[str, str],
    remotes: Mapping[str, Mapping[str, str]],
    fills: bool,
) -> Line:
    """A local setting that would make readers see something else FAILs (the topic would
    be refused); a remote one syncer cannot carry over WARNs."""
    where = f"topic {topic}"
    reason = unfaithful_setting(local, remotes)
    if reason is not None:
        return Line(Level.FAIL, where, "settings", reason)
    for name, remote in remotes.items():
        policy = remote.get("cleanup.policy", "")
        if "compact" in policy and not fills:
            return Line(
                Level.WARN,
                where,
                "settings",
                f"remote {name} compacts it (cleanup.policy={policy}): its compaction gaps"
                " are holes, and with on_hole: halt a partition halts at the first one",
            )
    return Line(Level.OK, where, "settings", "faithful")


# local broker settings ----------------------------------------------------------------------


def broker_lines(settings: Mapping[str, str], replication_factor: int) -> list[Line]:
    """The local brokers' settings that weaken the guarantees (docs/exactness.md, "What the local
    cluster must be set to"); ``settings``: each setting's value on the brokers (one value
    when they agree; the weakest when not is the caller's choice)."""
    where, what = "local", "broker settings"
    lines = []
    if settings.get("unclean.leader.election.enable") == "true":
        lines.append(
            Line(
                Level.WARN,
                where,
                what,
                "unclean.leader.election.enable=true: a stale replica elected leader drops"
                " records syncer confirmed (the partition halts); set it to false",
            )
        )
    isr = settings.get("min.insync.replicas")
    if isr == "1" and replication_factor > 1:
        lines.append(
            Line(
                Level.WARN,
                where,
                what,
                f"min.insync.replicas=1 with replication factor {replication_factor}: an"
                " acknowledged record may live on one broker only; set it to 2",
            )
        )
    if settings.get("auto.create.topics.enable") == "true":
        lines.append(
            Line(
                Level.WARN,
                where,
                what,
                "auto.create.topics.enable=true: a producer could create a mirrored topic"
                " first with another partition count (it is then refused); set it to false",
            )
        )
    if not lines:
        lines.append(Line(Level.OK, where, what, "unclean election off, topics not auto-created"))
    return lines


def producer_state_line(expiration_ms: int | None, oldest_ms: int | None, now_ms: int) -> Line:
    """``producer.id.expiration.ms`` against the oldest record to copy (the max timestamp of
    the first batch after each local end): records older than it are written one batch at a
    time (``alignment.StateClock``); nothing is lost, the copy is slower."""
    where, what = "local", "producer.id.expiration.ms"
    if not expiration_ms:
        return Line(
            Level.WARN,
            where,
            what,
            "unreadable (DescribeConfigs on the cluster): every partition writes one batch"
            " at a time",
        )
    if oldest_ms is not None and not StateClock(expiration_ms).fresh(oldest_ms, now_ms):
        age_h = (now_ms - oldest_ms) / 3_600_000
        return Line(
            Level.WARN,
            where,
            what,
            f"{expiration_ms} ms, and the oldest record to copy is {age_h:.1f} h old: older"
            " records are written one batch at a time per partition",
        )
    return Line(Level.OK, where, what, f"{expiration_ms} ms: no record to copy is older")


# the timestamps a local topic takes (Kafka's LogValidator): ``before`` and ``after`` since
# Kafka 3.6, ``difference`` (both ways) before it and deprecated since
LONG_MAX = 2**63 - 1  # a bound not set
TIMESTAMP_BOUNDS = (
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "message.timestamp.difference.max.ms",
)


def timestamp_line(
    topic: str, bounds: Mapping[str, str], oldest_ms: int | None, newest_ms: int | None, now_ms: int
) -> Line | None:
    """FAIL if the local topic, by its timestamp ``bounds`` (``TIMESTAMP_BOUNDS`` by name,
    effective values), would refuse a record among the first to copy of its partitions
    (``oldest_ms`` / ``newest_ms``: the extremes of their first batches' timestamps): its
    partition would halt there. None if it takes them (or nothing is known)."""

    def bound(name: str) -> int | None:
        # Kafka 3.6+ (LogConfig): the bound unless it is unset (Long.MAX), then the old
        # difference.max.ms, which brokers before 3.6 apply both ways
        for key in (name, TIMESTAMP_BOUNDS[2]):
            value = bounds.get(key)
            if value and int(value) != LONG_MAX:
                return int(value)
        return None

    def refused(setting: str, limit_ms: int, by_ms: int, how: str) -> Line:
        limit_h, by_h = limit_ms / 3_600_000, by_ms / 3_600_000
        return Line(
            Level.FAIL,
            f"topic {topic}",
            "timestamps",
            f"the local topic refuses records more than {limit_h:.1f} h {how} ({setting}),"
            f" and a record to copy is {by_h:.1f} h {how}: its partition would halt there",
        )

    before, after = bound(TIMESTAMP_BOUNDS[0]), bound(TIMESTAMP_BOUNDS[1])
    if oldest_ms is not None and before is not None and now_ms - oldest_ms > before:
        return refused(TIMESTAMP_BOUNDS[0], before, now_ms - oldest_ms, "old")
    if newest_ms is not None and after is not None and newest_ms - now_ms > after:
        return refused(TIMESTAMP_BOUNDS[1], after, newest_ms - now_ms, "ahead of its clock")
    return None


# what lies ahead --------------------------------------------------------------------------


def ahead_line(
    where: str,
    local_end: int,
    target: int,
    lost_below: int | None,
    hole: str | None,
    scanned_to: int | None,
) -> Line | None:
    """Data lost at the source (every remote ahead starts above the local end) FAILs; so
    does a hole found in the first fetch of the gap with ``on_hole: halt``
    (``scanned_to``: the end of what was scanned, None if nothing was). In sync: no line."""
    if lost_below is not None:
        return Line(
            Level.FAIL,
            where,
            "source",
            f"data lost at the source: local ends at {local_end}, the remotes start at"
            f" {lost_below}",
        )
    if hole is not None:
        return Line(Level.FAIL, where, "holes", f"{hole} (on_hole: halt)")
    if scanned_to is not None and scanned_to < target:
        return Line(
            Level.OK,
            where,
            "holes",
            f"none in {local_end}..{scanned_to} (first fetch only) of {local_end}..{target}",
        )
    if target > local_end:
        return Line(Level.OK, where, "holes", f"none in {local_end}..{target}")
    return None


# output -------------------------------------------------------------------------------------

_STYLES = {Level.OK: "green", Level.WARN: "yellow", Level.FAIL: "bold red"}


def print_lines(lines: list[Line], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps([asdict(li) for li in lines], indent=2))
        return
    table = Table(title="check")
    for column in ("result", "where", "check", "detail"):
        table.add_column(column)
    for li in lines:
        table.add_row(Text(li.level.value, style=_STYLES[li.level]), li.where, li.what, li.detail)
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(table)
    counts = {lvl: sum(li.level is lvl for li in lines) for lvl in Level}
    console.print(", ".join(f"{n} {lvl.value}" for lvl, n in counts.items()))
