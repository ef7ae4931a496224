"""Keeping the copied settings (``topics.copy_configs``) of mirrored local topics equal to
their remote's after creation: read both sides with where each value comes from, decide
with ``topic_drift.config_sync``, apply with IncrementalAlterConfigs, log one line per
topic and count it in ``TopicDrift`` (status and metrics read it)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from syncer.admin import TopicSetting
from syncer.clusters import TP, Cluster
from syncer.errors import ClusterError
from syncer.topic_drift import (
    ConfigSync,
    TopicDrift,
    compaction_begins,
    config_sync,
    disagreement,
)

log = logging.getLogger(__name__)

# a broker applies an altered setting as it replays the metadata log: milliseconds
REPORTED_TRIES = 50
REPORTED_POLL_S = 0.1
# a remote's switch to compaction is marked (its ends read) this long after it was first
# seen at the earliest: its brokers apply a topic setting within milliseconds of another
MARK_AFTER_S = 5.0


Settings = dict[str, dict[str, TopicSetting]]  # topic → key → its value and source


@dataclass(frozen=True)
class SettingsRead:
    """Topic settings read from the local cluster and from each remote (by name)."""

    local: Settings
    remote: dict[str, Settings]

    def only(self, keys: Collection[str]) -> SettingsRead:
        """The same read with only ``keys``."""

        def of(settings: Settings) -> Settings:
            return {t: {k: v for k, v in s.items() if k in keys} for t, s in settings.items()}

        return SettingsRead(of(self.local), {n: of(s) for n, s in self.remote.items()})

    def values(self, where: Settings) -> dict[str, dict[str, str]]:
        """The values reported (None ones left out), as ``topic_settings`` answers."""
        return {
            t: {k: v.value for k, v in s.items() if v.value is not None} for t, s in where.items()
        }


async def read_settings(
    local: Cluster,
    remotes: Mapping[str, Cluster],
    topics: Sequence[str],
    sources: Mapping[str, tuple[str, ...]],
    keys: Collection[str],
) -> SettingsRead:
    """``keys`` of ``topics`` on the local cluster and on each remote that is a source of
    them: one DescribeConfigs per cluster, which a refresh shares between syncing the
    copied settings and judging the fidelity ones (at 500 topics each read was a tenth of
    an idle process's CPU)."""
    here = await local.topic_setting_sources(topics, keys)
    there = {
        name: await cluster.topic_setting_sources(
            [t for t in topics if name in sources.get(t, ())], keys
        )
        for name, cluster in list(remotes.items())  # a remote may be taken in meanwhile
    }
    return SettingsRead(here, there)


def as_seen(
    theirs: Mapping[str, TopicSetting],
    last_seen: Mapping[str, TopicSetting] | None,
    waiting: Collection[str],
) -> dict[str, TopicSetting]:
    """The remote's settings to remember as seen: ``theirs``, but for the keys whose change
    is ``waiting``, what was seen before (or nothing): remembered now, the next look would
    take the local value for one changed locally and hold it for good."""
    seen = {key: value for key, value in theirs.items() if key not in waiting}
    for key in waiting:
        if last_seen is not None and key in last_seen:
            seen[key] = last_seen[key]
    return seen


class ConfigSyncer:
    """Syncs the copied settings of local topics from the first remote (in the
    configuration's order) that holds each topic, as consumer group offsets are."""

    def __init__(
        self,
        keys: Sequence[str],
        local: Cluster,
        remotes: Mapping[str, Cluster],
        drift: TopicDrift,
        ends: Callable[[str, str | None], Awaitable[dict[TP, int] | None]] | None = None,
    ) -> None:
        self.keys = tuple(keys)
        # (topic, a remote, or None: local) → each partition's end there now, None if not
        # read; no ``ends``: a remote's switch to compaction is followed at once
        self.ends = ends
        # topic → (source, its ends when read, when the switch was seen) of a switch to
        # compaction waiting for the copy (``_caught_up``)
        self._marks: dict[str, tuple[str, dict[TP, int] | None, float]] = {}
        self.local = local
        self.remotes = remotes
        self.drift = drift
        self._disagreements: dict[str, str] = {}  # topic → the one logged last
        # each topic's source remote and its settings at the last look (applied or held)
        self._seen: dict[str, tuple[str, Mapping[str, TopicSetting]]] = {}
        self._lock = asyncio.Lock()
        # local topics altered since a fidelity check last read them again
        self.altered: set[str] = set()

    def __repr__(self) -> str:
        return f"<ConfigSyncer [keys: {len(self.keys)}, synced: {sum(self.drift.synced.values())}]>"

    async def sync(
        self,
        topics: Sequence[str],
        sources: Mapping[str, tuple[str, ...]],
        read: SettingsRead | None = None,
    ) -> dict[str, dict[str, str]]:
        """Bring each local topic of ``topics`` to its source remote's copied settings; the
        values applied (topic → key → value), which a broker may take a moment to report.
        ``read``: both sides' settings as just read (with at least the copied keys), else
        read now. The topics altered are added to ``altered``."""
        applied: dict[str, dict[str, str]] = {}
        if not topics or not self.keys:
            return applied
        async with self._lock:  # a refresh, and partitions asking about a batch too large
            if read is None:
                read = await read_settings(self.local, self.remotes, topics, sources, self.keys)
            await self._sync(topics, read.only(self.keys), applied)
        return applied

    async def _sync(
        self, topics: Sequence[str], read: SettingsRead, applied: dict[str, dict[str, str]]
    ) -> None:
        local, remote = read.local, read.remote
        for topic in topics:
            theirs = {name: remote[name][topic] for name in remote if topic in remote[name]}
            if theirs and topic in local:
                self._note_disagreement(topic, theirs)
                source = next(iter(theirs))  # remotes are in the configuration's order
                changed = await self._follow(topic, source, theirs[source], local[topic])
                if changed:
                    applied[topic] = changed

    async def _follow(
        self,
        topic: str,
        source: str,
        theirs: Mapping[str, TopicSetting],
        ours: Mapping[str, TopicSetting],
    ) -> dict[str, str]:
        """Apply the changes ``config_sync`` decides (the values applied); the remote's
        settings are remembered as seen unless the local broker refused them (then they are
        tried again)."""
        seen_source, seen = self._seen.get(topic, (source, None))
        last_seen = seen if seen_source == source else None
        change = config_sync(self.keys, theirs, ours, source, last_seen)
        if "cleanup.policy" in change.changes and compaction_begins(theirs, ours):
            if not await self._caught_up(topic, source):
                change = config_sync(self.keys, theirs, ours, source, last_seen, caught_up=False)
        else:
            self._marks.pop(topic, None)
        held = {**change.held, **change.waiting}
        if change:
            try:
                await self.local.alter_topic_configs(topic, change.set, change.delete)
            except ClusterError as exc:  # e.g. no ALTER_CONFIGS: judged as they are
                held.update({key: f"the local broker refused it: {exc}" for key in change.changes})
                self._note_held(topic, source, held)
                return {}
            self.altered.add(topic)
            if "cleanup.policy" in change.changes:
                self._marks.pop(topic, None)  # a later switch waits for its own mark
            await self._reported(topic, change)
            log.info(
                "topic %s: settings synced from remote %s: %s", topic, source, change.describe()
            )
            self.drift.synced[topic] = self.drift.synced.get(topic, 0) + 1
            self.drift.last_sync[topic] = (time.time(), change.describe())
        self._seen[topic] = (source, as_seen(theirs, last_seen, change.waiting))
        self._note_held(topic, source, held)
        return {key: new for key, (_old, new) in change.changes.items() if new is not None}

    async def _caught_up(self, topic: str, source: str) -> bool:
        """Has the copy of ``topic`` caught up with the remote ``source`` started compacting
        it? Its mark (every partition's end there) is read at a look ``MARK_AFTER_S`` or more
        after the one that first saw the change: by then each of the remote's brokers
        applies it, so every record past the mark has a key. Then True once every
        partition ends locally at or past its mark, however busy the topic is since. False
        while no ends are known."""
        if self.ends is None:
            return True
        now = time.monotonic()
        mark = self._marks.get(topic)
        if mark is None or mark[0] != source:
            self._marks[topic] = (source, None, now)  # seen: the mark at a later look
            return False
        _source, ends, seen_at = mark
        if ends is None:
            if now - seen_at < MARK_AFTER_S:  # a look sooner than a refresh (a batch too
                return False  # large, a staged creation): not yet
            ends = await self.ends(topic, source)
            if ends is None:
                return False
            self._marks[topic] = (source, ends, seen_at)
        local = await self.ends(topic, None)
        return local is not None and all(local.get(tp, -1) >= end for tp, end in ends.items())

    async def _reported(self, topic: str, change: ConfigSync) -> None:
        """Wait (bounded) until the local broker reports ``change``: whoever asks next (the
        fidelity check, a partition with a batch too large) reads the new values."""
        for _ in range(REPORTED_TRIES):
            now = (await self.local.topic_setting_sources([topic], change.changes)).get(topic, {})
            if change.shown_in(now):
                return
            await asyncio.sleep(REPORTED_POLL_S)
        log.warning("topic %s: the local broker does not report the settings synced yet", topic)

    def seen(self, topic: str, source: str, settings: Mapping[str, TopicSetting]) -> None:
        """Remember the source's settings a local topic was created with: a later change
        of a fidelity setting at the remote is then told from a local one."""
        self._seen[topic] = (source, settings)

    def _note_held(self, topic: str, source: str, held: dict[str, str]) -> None:
        """Log each change held back once (until it changes), and keep them for status."""
        for key, why in held.items():
            if self.drift.held.get(topic, {}).get(key) != why:
                log.warning("topic %s: %s of remote %s not synced: %s", topic, key, source, why)
        if held:
            self.drift.held[topic] = held
        else:
            self.drift.held.pop(topic, None)

    def _note_disagreement(
        self, topic: str, theirs: Mapping[str, Mapping[str, TopicSetting]]
    ) -> None:
        differ = disagreement(self.keys, theirs)
        if differ and self._disagreements.get(topic) != differ:
            log.warning(
                "topic %s: remotes set copied settings differently (%s); following %s",
                topic,
                differ,
                next(iter(theirs)),
            )
        self._disagreements[topic] = differ
