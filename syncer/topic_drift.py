"""How a mirrored topic drifts from its remote after it was created, as pure decisions over
values: which copied settings to set or delete locally (and which not, because the local
copy would stop being faithful), whether remotes disagree, and which topics are gone at a
remote. ``mirroring`` does the I/O around them."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from syncer.admin import TopicSetting
from syncer.topics import FIDELITY_SETTINGS, compacts, unfaithful_setting

# copied settings that syncer never syncs: it owns them on every local topic
NOT_SYNCED = {
    "message.timestamp.type": "every local topic keeps CreateTime (the remote's timestamps)",
}


@dataclass(frozen=True)
class ConfigSync:
    """What to change on one local topic so that its copied settings are its source remote's:
    ``set`` (key → value) and ``delete`` (back to the local broker's default), each change
    as (old, new) effective values for the log line, the changes ``held`` back (key →
    why: applying them would make the local copy unfaithful), and those ``waiting`` (key →
    why) for the copy to catch up: not remembered as seen, so made once it has."""

    set: dict[str, str] = field(default_factory=dict)
    delete: tuple[str, ...] = ()
    changes: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    held: dict[str, str] = field(default_factory=dict)
    waiting: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.set or self.delete)

    def shown_in(self, now: Mapping[str, TopicSetting]) -> bool:
        """Does a local topic whose settings are ``now`` show these changes applied?"""
        for key, value in self.set.items():
            setting = now.get(key)
            if setting is None or not setting.explicit or setting.value != value:
                return False
        return not any((s := now.get(key)) is not None and s.explicit for key in self.delete)

    def describe(self) -> str:
        """``key old → new`` for every applied change, comma-separated."""
        return ", ".join(
            f"{key} {_shown(old)} → {_shown(new)}"
            for key, (old, new) in sorted(self.changes.items())
        )


def _same(remote: TopicSetting, before: TopicSetting | None) -> bool:
    """Is ``remote`` what was seen ``before``? Never seen counts as the same: at its first
    look a process cannot tell a remote change from a local one."""
    return before is None or (remote.value, remote.explicit) == (before.value, before.explicit)


def _shown(value: str | None) -> str:
    return "(default)" if value is None else value  # a DELETE whose default is not reported


WAITS_FOR_THE_COPY = (
    "waits until the copy has caught up: a compacted local topic refuses records without"
    " a key, which the remote took before it compacted"
)


def compaction_begins(
    remote: Mapping[str, TopicSetting], local: Mapping[str, TopicSetting]
) -> bool:
    """Does the remote compact the topic where the local one does not (yet)? Following it
    waits for the copy to catch up (``config_sync``'s ``caught_up``)."""
    theirs, ours = remote.get("cleanup.policy"), local.get("cleanup.policy")
    if theirs is None or ours is None or theirs.value is None or ours.value is None:
        return False
    return compacts(theirs.value) and not compacts(ours.value)


def config_sync(
    keys: Iterable[str],
    remote: Mapping[str, TopicSetting],
    local: Mapping[str, TopicSetting],
    remote_name: str = "remote",
    last_seen: Mapping[str, TopicSetting] | None = None,
    *,
    caught_up: bool = True,
) -> ConfigSync:
    """The changes that make the local topic's ``keys`` follow the remote's.

    The rule, by the source the brokers report (DescribeConfigs ``config_source``): a key
    the remote sets on the topic itself (DYNAMIC_TOPIC_CONFIG) is SET locally when the local
    topic does not set it to the same value; a key the remote does not set on the topic
    (its value comes from the remote broker's defaults: it never was set, or was deleted)
    is DELETEd locally when the local topic sets it, so the local broker's default applies
    again. Broker-level defaults are never copied, as at creation. A key missing from either
    answer is left alone.

    Fidelity first. A setting of ``FIDELITY_SETTINGS`` is synced only when the remote's
    changed since this process's ``last_seen`` look at it (None: never looked): a local
    topic that differs while the remote did not change was changed locally (or before this
    process started), and is judged as it is (refused loudly when unfaithful, as before),
    never repaired in silence. A change is also held back when the local topic would then
    hold something else than the remote (``topics.unfaithful_setting`` on the value it
    would have; for a DELETE, the local default the broker reports as a synonym; unknown:
    held), and two more are never made: max.message.bytes is never lowered (the remote
    still holds the batches it took under its old limit, and the copy of one would be
    refused) and compression.type never becomes a codec (the remote holds batches of its
    old codec, which the local broker would recompress; ``producer`` keeps every batch as
    it is sent): a remote that changes its codec has the local topic set to ``producer``
    (a local codec other than the remote's new one would be refused as recompressing).

    A remote that starts compacting (``delete`` → ``compact``) is followed only once the
    copy has ``caught_up`` with it, read after these settings: the records it took before
    may have no key, and a compacted local topic refuses such a record (a halt). Past its
    end then, the remote refuses keyless records too. Until then the change is ``waiting``."""
    to_set: dict[str, str] = {}
    to_delete: list[str] = []
    changes: dict[str, tuple[str | None, str | None]] = {}
    held: dict[str, str] = {}
    waiting: dict[str, str] = {}
    for key in sorted(set(keys) - NOT_SYNCED.keys()):
        theirs, ours = remote.get(key), local.get(key)
        if theirs is None or ours is None:
            continue
        if theirs.explicit:
            if ours.explicit and ours.value == theirs.value:
                continue
            new = theirs.value
        elif ours.explicit:
            new = ours.default
        else:
            continue
        if key == "compression.type" and ours.value == "producer" and new != "producer":
            continue  # ``producer`` keeps every batch as it is sent: faithful to any codec
        value = theirs.value if theirs.explicit else None  # set; None: deleted
        codec_changed = ours.value not in (None, "producer") and new not in (None, "producer")
        if key == "compression.type" and codec_changed and new != ours.value:
            new = value = "producer"  # batches of both codecs, each kept as it is sent
        why = _unsafe(key, ours.value, new, theirs.value, remote_name)
        if why is None and key in FIDELITY_SETTINGS and _same(theirs, (last_seen or {}).get(key)):
            why = (
                "the remote did not change it since the last look: the local topic differs"
                " on its own (changed locally, or before this process started)"
            )
        if why is not None:
            held[key] = why
            continue
        if key == "cleanup.policy" and not caught_up and compaction_begins(remote, local):
            waiting[key] = WAITS_FOR_THE_COPY
            continue
        changes[key] = (ours.value, new)
        if value is not None:
            to_set[key] = value
        else:
            to_delete.append(key)
    return ConfigSync(to_set, tuple(to_delete), changes, held, waiting)


def _unsafe(
    key: str, old: str | None, new: str | None, remote: str | None, remote_name: str
) -> str | None:
    """Why the local ``key`` must not go from ``old`` to ``new`` (the remote's is ``remote``)."""
    if key not in FIDELITY_SETTINGS:
        return None
    if new is None or remote is None:
        return "the value it would have locally is unknown"
    if key == "max.message.bytes" and old is not None and int(new) < int(old):
        return f"never lowered ({old} → {new}): the remote keeps the batches its old limit took"
    if key == "compression.type" and new != "producer":
        return (
            f"not set to {new}: the local broker would recompress the batches the remote"
            " holds in another codec (producer keeps each batch as it is sent)"
        )
    return unfaithful_setting({key: new}, {remote_name: {key: remote}})


def disagreement(keys: Iterable[str], remotes: Mapping[str, Mapping[str, TopicSetting]]) -> str:
    """The copied settings the remotes set differently on one topic (``key: a=1, b=default``;
    empty if they agree): the first remote is followed, this is logged."""
    if len(remotes) < 2:
        return ""
    parts = []
    for key in sorted(keys):
        values = {
            name: (s.value if s.explicit else None)
            for name, settings in remotes.items()
            if (s := settings.get(key)) is not None
        }
        if len(set(values.values())) > 1:
            shown = ", ".join(f"{n}={v or 'default'}" for n, v in values.items())
            parts.append(f"{key}: {shown}")
    return "; ".join(parts)


def gone_at_remotes(
    known: Mapping[str, Mapping[str, uuid.UUID]],
    seen: Mapping[str, Mapping[str, uuid.UUID] | None],
    asked: Mapping[str, Collection[str]],
    local: str,
) -> dict[str, tuple[str, ...]]:
    """Topic → the remote clusters (their labels) where a topic copied from them is gone:
    its id remembered there, asked about, and missing from the answer. The ``local``
    cluster is not judged here (a topic gone locally halts, ``topic_ids``), nor is a
    cluster that reports no ids."""
    out: dict[str, list[str]] = {}
    for where, ids in seen.items():
        if where == local or ids is None:
            continue
        for topic in sorted(set(asked.get(where, ())) & known.get(where, {}).keys()):
            if topic not in ids:
                out.setdefault(topic, []).append(where)
    return {topic: tuple(places) for topic, places in out.items()}


@dataclass
class TopicDrift:
    """What the process did about drifting topics, for status and metrics: per topic, the
    settings changes applied (count, and the last one with its wall-clock time), changes held
    back, the remotes where it is gone, and the remotes it is not copied from any more (its
    log there gone or another, while another remote holds the one copied: remote → why)."""

    synced: dict[str, int] = field(default_factory=dict)
    last_sync: dict[str, tuple[float, str]] = field(default_factory=dict)  # (time, describe)
    held: dict[str, dict[str, str]] = field(default_factory=dict)
    gone: dict[str, tuple[str, ...]] = field(default_factory=dict)
    dropped: dict[str, dict[str, str]] = field(default_factory=dict)

    def copy(self) -> TopicDrift:
        return TopicDrift(
            dict(self.synced),
            dict(self.last_sync),
            {t: dict(h) for t, h in self.held.items()},
            dict(self.gone),
            {t: dict(d) for t, d in self.dropped.items()},
        )
