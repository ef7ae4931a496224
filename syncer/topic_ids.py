"""Telling a recreated topic from the one that was copied: pure decisions over topic ids.

A topic deleted and recreated keeps its name and gets a new id. Each mirrored topic's id is
remembered, on the local cluster and on each remote, the first time it is seen; a later look
that finds another id means another log under the same name, and the topic halts. A local
topic that is gone halts too (recreating it would copy everything again into a log that
readers already consumed); a remote topic that is gone is only unusable there for now (its
fetches name the old id and fail), and halts when it reappears with a new id."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass

LOCAL = "local"


def remote_label(name: str) -> str:
    return f"remote {name}"


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
                f"topic {self.topic} (id {self.old}) was deleted on the {self.where} cluster:"
                " its partitions halt rather than copy everything again into a new topic"
            )
        return (
            f"topic {self.topic} was deleted and recreated on the {self.where} cluster: its"
            f" topic id changed from {self.old} to {self.new}; its partitions halt before"
            " anything of the new topic is copied"
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
