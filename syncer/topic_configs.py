"""Keeping the copied settings (``topics.copy_configs``) of mirrored local topics equal to
their remote's after creation: read both sides with where each value comes from, decide
with ``topic_drift.config_sync``, apply with IncrementalAlterConfigs, log one line per
topic and count it in ``TopicDrift`` (status and metrics read it)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence

from syncer.admin import TopicSetting
from syncer.clusters import Cluster
from syncer.errors import ClusterError
from syncer.topic_drift import ConfigSync, TopicDrift, config_sync, disagreement

log = logging.getLogger(__name__)

# a broker applies an altered setting as it replays the metadata log: milliseconds
REPORTED_TRIES = 50
REPORTED_POLL_S = 0.1


class ConfigSyncer:
    """Syncs the copied settings of local topics from the first remote (in the
    configuration's order) that holds each topic, as consumer group offsets are."""

    def __init__(
        self,
        keys: Sequence[str],
        local: Cluster,
        remotes: Mapping[str, Cluster],
        drift: TopicDrift,
    ) -> None:
        self.keys = tuple(keys)
        self.local = local
        self.remotes = remotes
        self.drift = drift
        self._disagreements: dict[str, str] = {}  # topic → the one logged last
        # each topic's source remote and its settings at the last look (applied or held)
        self._seen: dict[str, tuple[str, Mapping[str, TopicSetting]]] = {}
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"<ConfigSyncer [keys: {len(self.keys)}, synced: {sum(self.drift.synced.values())}]>"

    async def sync(
        self, topics: Sequence[str], sources: Mapping[str, tuple[str, ...]]
    ) -> dict[str, dict[str, str]]:
        """Bring each local topic of ``topics`` to its source remote's copied settings; the
        values applied (topic → key → value), which a broker may take a moment to report."""
        applied: dict[str, dict[str, str]] = {}
        if not topics or not self.keys:
            return applied
        async with self._lock:  # a refresh, and partitions asking about a batch too large
            await self._sync(topics, sources, applied)
        return applied

    async def _sync(
        self,
        topics: Sequence[str],
        sources: Mapping[str, tuple[str, ...]],
        applied: dict[str, dict[str, str]],
    ) -> None:
        local = await self.local.topic_setting_sources(topics, self.keys)
        remote = {
            name: await cluster.topic_setting_sources(
                [t for t in topics if name in sources.get(t, ())], self.keys
            )
            for name, cluster in self.remotes.items()
        }
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
        held = dict(change.held)
        if change:
            try:
                await self.local.alter_topic_configs(topic, change.set, change.delete)
            except ClusterError as exc:  # e.g. no ALTER_CONFIGS: judged as they are
                held.update({key: f"the local broker refused it: {exc}" for key in change.changes})
                self._note_held(topic, source, held)
                return {}
            await self._reported(topic, change)
            log.info(
                "topic %s: settings synced from remote %s: %s", topic, source, change.describe()
            )
            self.drift.synced[topic] = self.drift.synced.get(topic, 0) + 1
            self.drift.last_sync[topic] = (time.time(), change.describe())
        self._seen[topic] = (source, theirs)
        self._note_held(topic, source, held)
        return {key: new for key, (_old, new) in change.changes.items() if new is not None}

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
