"""Pure partition assignment for a syncer group: balanced by gap size, sticky across
rebalances. Unit-tested with plain values; the aiokafka assignor in ``coordination`` only
translates to and from the wire format."""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Collection, Iterable, Mapping

from syncer.clusters import TP


def weights_from_gaps(gaps: Mapping[TP, int]) -> dict[TP, float]:
    """Every partition costs 1 (a task, a fetch slot) plus its gap relative to the mean gap, so
    a partition with an average backlog weighs 2 and a caught-up one weighs 1."""
    mean = sum(gaps.values()) / len(gaps) if gaps else 0.0
    return {tp: 1.0 + (gap / mean if mean > 0 else 0.0) for tp, gap in gaps.items()}


def common_topics(subscriptions: Iterable[Iterable[str]]) -> set[str]:
    """The topics every member subscribes to: the only ones the leader gives out. Each
    member refreshes its topics on its own clock, so a topic new at a remote is subscribed
    to by one member before the others, and that member's new subscription starts a
    rebalance at once; aiokafka's member fails for good on an assignment naming a topic it
    has not subscribed to (an assertion in its coordinator; seen with 3 members subscribing
    at different moments). A topic some member still lacks waits for the rebalance that
    member's next subscription starts."""
    common: set[str] | None = None
    for topics in subscriptions:
        common = set(topics) if common is None else common & set(topics)
    return common or set()


def subscribed_gaps(
    topics: Iterable[str],
    partitions_of: Callable[[str], Iterable[int] | None],
    measured: Mapping[TP, int],
) -> dict[TP, int]:
    """Every partition of the topics some member subscribes to, with the gap the leader last
    measured; one it never measured (new, or measuring failed) counts as caught up. A topic
    the leader's metadata does not know yet has no partitions to give."""
    return {
        TP(topic, p): measured.get(TP(topic, p), 0)
        for topic in topics
        for p in (partitions_of(topic) or ())
    }


def assign(owned: Mapping[str, Collection[TP]], weights: Mapping[TP, float]) -> dict[str, set[TP]]:
    """Give every partition in ``weights`` to exactly one member of ``owned`` (member → the
    partitions it owns now).

    Members keep what they own; unowned partitions go, heaviest first, to the least loaded
    member; then single partitions move from the most to the least loaded member while that
    narrows the gap between them. Each move lowers the sum of squared loads, so this ends, and
    it ends with the spread of loads at most one partition's weight. An assignment that is
    already balanced comes back unchanged (sticky)."""
    members = sorted(owned)
    if not members:
        return {}
    out: dict[str, set[TP]] = {m: set() for m in members}
    placed: set[TP] = set()
    for member in members:
        for tp in sorted(owned[member]):
            if tp in weights and tp not in placed:
                out[member].add(tp)
                placed.add(tp)
    load = {m: sum(weights[tp] for tp in out[m]) for m in members}
    for tp in sorted((t for t in weights if t not in placed), key=lambda t: (-weights[t], t)):
        member = min(members, key=lambda m: (load[m], len(out[m]), m))
        out[member].add(tp)
        load[member] += weights[tp]
    _rebalance(out, load, weights)
    return out


def _rebalance(
    out: dict[str, set[TP]], load: dict[str, float], weights: Mapping[TP, float]
) -> None:
    """Move single partitions to the least loaded member, from the most loaded member that
    has one light enough to narrow the gap between the two. Each member's partitions are
    kept sorted by weight, so a move costs a bisection, not a look at every partition: a
    member joining a group of 10,000 partitions takes thousands of moves (looking at all of
    them for each took the leader 16 s, its event loop stopped)."""
    order = lambda m: (load[m], len(out[m]), m)  # noqa: E731
    ranked = {m: sorted((weights[tp], tp) for tp in out[m]) for m in out}
    while True:
        low = min(out, key=order)
        for high in sorted(out, key=order, reverse=True):
            pick = _closest_to_half(ranked[high], load[high] - load[low])
            if pick is not None:
                weight, tp = ranked[high].pop(pick)
                bisect.insort(ranked[low], (weight, tp))
                out[high].remove(tp)
                out[low].add(tp)
                load[high] -= weight
                load[low] += weight
                break
        else:
            return


def _closest_to_half(ranked: list[tuple[float, TP]], spread: float) -> int | None:
    """Where in ``ranked`` ((weight, partition), sorted) is the move that narrows a gap of
    ``spread`` most: a weight below the spread and closest to half of it (the first
    partition among equals); None if none is light enough."""
    movable = bisect.bisect_left(ranked, (spread - 1e-9,))  # the ones before it
    if not movable:
        return None
    above = bisect.bisect_left(ranked, (spread / 2,), 0, movable)  # the first at half or more
    candidates = [above] if above < movable else []
    if above > 0:  # the first of the heaviest below half
        candidates.append(bisect.bisect_left(ranked, (ranked[above - 1][0],), 0, above))
    return min(candidates, key=lambda i: (abs(spread - 2 * ranked[i][0]), ranked[i][1]))


def encode_owned(partitions: Collection[TP], writer: str = "") -> bytes:
    """What a member tells the group leader (the JoinGroup user data): what it owns, and as
    which writer it writes (``writer_of``; empty: not told)."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    told: dict[str, object] = {"owned": {t: sorted(p) for t, p in sorted(by_topic.items())}}
    if writer:
        told["writer"] = writer
    return json.dumps(told).encode()


def decode_owned(user_data: bytes | None) -> set[TP]:
    if not user_data:
        return set()
    try:
        raw = json.loads(user_data)
        return {TP(t, int(p)) for t, parts in raw.get("owned", {}).items() for p in parts}
    except (ValueError, AttributeError, TypeError):
        return set()  # a member of another version: treat as owning nothing


def decode_writer(user_data: bytes | None) -> str:
    """The writer a member told in its JoinGroup user data; empty if it told none (a member
    of a version before the check)."""
    try:
        writer = json.loads(user_data or b"{}").get("writer", "")
    except (ValueError, AttributeError):
        return ""
    return writer if isinstance(writer, str) else ""


def writer_of(deployment: str, producer_id: int, producer_epoch: int) -> str:
    """How a member names the identity it writes with: the deployment ``name`` it loaded it
    for and the producer id and epoch (the ``state_topic`` it came from shows in the id)."""
    return f"{deployment!r} (producer id {producer_id}, epoch {producer_epoch})"


def the_groups_writer(writers: Mapping[str, str], own: str, owning: Collection[str] = ()) -> str:
    """The writer a group's members must share (member → the writer it told; empty: told
    none): the one most of the members ``owning`` partitions now told (the incumbents: a
    deployment's running members are not turned out by newcomers, however many), else the
    one most members told; ties to the leader's own (``own``), then to the first by name.
    Empty if none told one."""
    for among in ([m for m in writers if m in owning], list(writers)):
        counts: dict[str, int] = {}
        for member in among:
            if writers[member]:
                counts[writers[member]] = counts.get(writers[member], 0) + 1
        if counts:
            return min(counts, key=lambda w: (-counts[w], w != own, w))
    return ""


def writing_otherwise(writers: Mapping[str, str], ours: str) -> dict[str, str]:
    """The members that write as another writer than the group's (``ours``; member →
    theirs): they get no partition. Two writers in one group would each stamp their own
    producer id, and the broker keeps writers apart only by the producer id (DESIGN,
    invariant 3). A member that told none is left in: an older version, during a rolling
    upgrade."""
    return {m: w for m, w in writers.items() if w and w != ours}


def encode_group_writer(writer: str, members: int) -> bytes:
    """The SyncGroup user data of every member: the group's writer and how many members
    write as it. A member writing as another refuses itself (``refusal``): also where the
    coordinator hands a static member back its stored assignment without asking the
    leader."""
    return json.dumps({"group_writer": {"writer": writer, "members": members}}).encode()


def decode_group_writer(user_data: bytes | None) -> tuple[str, int] | None:
    """(the group's writer, how many members write as it), or None if not told (a leader
    of a version before the check)."""
    try:
        told = json.loads(user_data or b"{}").get("group_writer")
        return (str(told["writer"]), int(told["members"])) if told else None
    except (ValueError, AttributeError, TypeError, KeyError):
        return None


def refusal(own: str, told: tuple[str, int] | None) -> tuple[str, int] | None:
    """``told`` (the group's writer, ``decode_group_writer``) if this member, writing as
    ``own``, must not write in the group; None if it may (same writer, or either untold)."""
    if told is None or not own or not told[0] or told[0] == own:
        return None
    return told
