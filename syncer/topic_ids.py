"""Telling a recreated topic from the one that was copied: pure decisions over topic ids.

A topic deleted and recreated keeps its name and gets a new id. Each mirrored topic's id is
remembered, on the local cluster and on each remote, the first time it is seen; a later look
that finds another id means another log under the same name, and the topic halts. A local
topic that is gone halts too (recreating it would copy everything again into a log that
readers already consumed); a remote topic that is gone is only unusable there for now (its
fetches name the old id and fail), and halts when it reappears with a new id. Where
another of the topic's remotes still holds the log remembered, a remote whose topic is gone
or another log is dropped for that topic instead (``judged``): the copy goes on from the
others, which neither count nor follow it (partition count, settings). A remote fetched by
id never serves the new log; one fetched by name (Kafka before 3.1) is held to the record
comparison until the look that drops it."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass

LOCAL = "local"


def remote_label(name: str) -> str:
    return f"remote {name}"


def remote_name(label: str) -> str:
    """The remote's name in its ``remote_label``."""
    return label.removeprefix("remote ")


@dataclass(frozen=True, slots=True)
class IdChange:
    """``topic`` on cluster ``where`` is no longer the log whose id was remembered."""

    topic: str
    where: str  # "local" or "remote NAME"
    old: uuid.UUID
    new: uuid.UUID | None  # None: the topic is gone there

    def describe(self) -> str:
        if self.new is None:
            return (
                f"{self.what()}: its partitions halt rather than copy everything again into a"
                " new topic"
            )
        return f"{self.what()}; its partitions halt before anything of the new topic is copied"

    def what(self) -> str:
        """What happened, without what it leads to."""
        if self.new is None:
            return f"topic {self.topic} (id {self.old}) was deleted on the {self.where} cluster"
        return (
            f"topic {self.topic} was deleted and recreated on the {self.where} cluster: its"
            f" topic id changed from {self.old} to {self.new}"
        )


def id_changes(
    known: Mapping[str, Mapping[str, uuid.UUID]],
    seen: Mapping[str, Mapping[str, uuid.UUID] | None],
    asked: Mapping[str, Collection[str]],
    *,
    gone_halts: Collection[str] = (LOCAL,),
) -> list[IdChange]:
    """The topics whose id on a cluster differs from the one remembered. ``seen``: cluster →
    the ids it reported for the topics it was ``asked`` about (None: it reports no ids).
    A topic asked about and absent is a change only on a cluster in ``gone_halts``."""
    changes = []
    for where, ids in seen.items():
        if ids is None:
            continue
        remembered = known.get(where, {})
        for topic in sorted(asked.get(where, ())):
            old = remembered.get(topic)
            if old is None:
                continue
            new = ids.get(topic)
            if new != old and (new is not None or where in gone_halts):
                changes.append(IdChange(topic, where, old, new))
    return changes


def learned(
    known: Mapping[str, Mapping[str, uuid.UUID]],
    seen: Mapping[str, Mapping[str, uuid.UUID] | None],
    halted: Collection[str] = (),
) -> dict[str, dict[str, uuid.UUID]]:
    """What is remembered after ``seen``: ids of topics not known yet are added; a known id
    is never replaced (the first id seen is the log that is copied), and nothing is learned
    of a ``halted`` topic."""
    out = {where: dict(ids) for where, ids in known.items()}
    for where, ids in seen.items():
        for topic, topic_id in (ids or {}).items():
            if topic not in halted:
                out.setdefault(where, {}).setdefault(topic, topic_id)
    return out


@dataclass(frozen=True, slots=True)
class Judged:
    """What the changes seen mean: topics to halt (topic → why), and remotes to drop for a
    topic (topic → remote → why) that the topic's other remotes outlive."""

    halts: dict[str, str]
    drops: dict[str, dict[str, str]]


def judged(
    changes: Collection[IdChange],
    gone: Mapping[str, Collection[str]],
    sources: Mapping[str, Collection[str]],
    holders: Mapping[str, Collection[str]],
    dropped: Mapping[str, Mapping[str, str]],
) -> Judged:
    """``changes`` (``id_changes``) and the remote topics ``gone`` (topic → cluster labels)
    judged. A topic whose local id changed halts. A remote whose topic is another log
    (recreated) or gone is dropped for the topic while one of its other ``sources`` is
    still among ``holders`` (those holding the id remembered: topic → remote names) and not
    ``dropped`` already (topic → remote → why; not judged again). With none left, a
    recreated one halts the topic, as before; a gone one is left unusable for now (it halts
    if it comes back, with another id), unless remotes were dropped for the topic before:
    then no remote holds the log copied, and the topic halts."""
    halts: dict[str, str] = {}
    moved: dict[str, dict[str, IdChange | None]] = {}  # None: gone
    for change in changes:
        if change.where == LOCAL:
            halts.setdefault(change.topic, change.describe())
        else:
            moved.setdefault(change.topic, {})[remote_name(change.where)] = change
    for topic, places in gone.items():
        for where in places:
            moved.setdefault(topic, {}).setdefault(remote_name(where), None)
    drops: dict[str, dict[str, str]] = {}
    for topic, remotes in moved.items():
        before = set(dropped.get(topic, ()))
        new = {n: change for n, change in remotes.items() if n not in before}
        if topic in halts or not new:
            continue
        left = [
            n
            for n in sources.get(topic, ())
            if n not in new and n not in before and n in holders.get(topic, ())
        ]
        if left:
            drops[topic] = {n: _dropped_why(topic, n, c, left) for n, c in new.items()}
        elif recreated := [c for c in new.values() if c is not None]:
            halts[topic] = recreated[0].describe()
        elif before:  # gone at the last that held it, the others dropped before
            name = next(iter(new))
            others = "; ".join(f"{n}: {why}" for n, why in dropped[topic].items())
            halts[topic] = (
                f"topic {topic} was deleted on the remote {name} cluster, the last that held"
                f" the log copied ({others})"
            )
    return Judged(halts, drops)


def holding(
    known: Mapping[str, Mapping[str, uuid.UUID]],
    seen: Mapping[str, Mapping[str, uuid.UUID] | None],
    asked: Mapping[str, Collection[str]],
    remotes: Collection[str],
) -> dict[str, list[str]]:
    """Topic → the ``remotes`` (by name; given by label) that hold it under the id
    remembered, of the topics they were ``asked`` about. A cluster that reports no ids
    holds nothing here."""
    out: dict[str, list[str]] = {}
    for where in remotes:
        ids, remembered = seen.get(where), known.get(where, {})
        if ids is None:
            continue
        for topic in asked.get(where, ()):
            if topic in remembered and ids.get(topic) == remembered[topic]:
                out.setdefault(topic, []).append(remote_name(where))
    return out


def without_dropped(
    counts: Mapping[str, Mapping[str, int]], dropped: Mapping[str, Collection[str]]
) -> dict[str, dict[str, int]]:
    """Each remote's partition counts (remote → topic → count) less the topics it was
    ``dropped`` for (topic → remote names)."""
    return {
        name: {t: n for t, n in topics.items() if name not in dropped.get(t, ())}
        for name, topics in counts.items()
    }


def kept_sources(
    sources: Mapping[str, Collection[str]], dropped: Mapping[str, Collection[str]]
) -> dict[str, tuple[str, ...]]:
    """``sources`` (topic → remote names) less the remotes ``dropped`` for each topic."""
    return {
        t: tuple(n for n in names if n not in dropped.get(t, ())) for t, names in sources.items()
    }


def _dropped_why(topic: str, remote: str, change: IdChange | None, left: list[str]) -> str:
    what = change.what() if change else f"topic {topic} was deleted on the remote {remote} cluster"
    others = " and ".join(f"remote {n}" for n in left)
    held = "holds" if len(left) == 1 else "hold"
    return f"{what}; it is not used for this topic any more: {others} {held} the log copied"
