"""Which topics a process mirrors, and whether each is still the topic it was: planned from
both sides' partition counts and settings, created or grown locally, refused with one line
when a local setting would make readers see something else, and halted when a topic id
changes (a topic deleted and recreated, locally or at a remote). The copied settings of
existing topics follow their remote's on every refresh (``topic_configs``), and a topic
deleted at a remote is reported, never deleted locally. Decisions are the pure functions
of ``topics``, ``topic_ids`` and ``topic_drift``; this is the I/O around them."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial

from syncer.admin import Census
from syncer.clusters import READ_COMMITTED, TP, Cluster
from syncer.config import TopicsConfig
from syncer.errors import SyncerError, TransientClusterError
from syncer.holes import RemoteEnds
from syncer.retry import retried
from syncer.topic_configs import ConfigSyncer, SettingsRead, read_settings
from syncer.topic_drift import TopicDrift, gone_at_remotes
from syncer.topic_ids import (
    LOCAL,
    Judged,
    holding,
    id_changes,
    judged,
    kept_sources,
    learned,
    remote_label,
    without_dropped,
)
from syncer.topics import (
    FIDELITY_SETTINGS,
    TopicPlan,
    as_they_were,
    create_local_topics,
    first_to_create,
    plan_topics,
    refuse,
    unfaithful_setting,
)

log = logging.getLogger(__name__)


@dataclass
class Refresh:
    """What one refresh found: the plan, the topics newly halted (topic → why), and the
    remotes newly dropped for a topic (topic → remote → why: ``topic_ids.judged``)."""

    plan: TopicPlan
    halted: dict[str, str] = field(default_factory=dict)
    dropped: dict[str, dict[str, str]] = field(default_factory=dict)


# a share a broker creates in a few seconds (10,000 took it 40 s)
CREATE_PER_REFRESH = 2_000
# the longest pause between looks at topics just created (their metadata, their leaders):
# a share takes the broker several seconds, and with the retries' usual backoff (up to 5 s)
# each share was seen led up to 5 s after it was (at 10,000 partitions, 4 to 9 s from the
# last look that failed to the next share created; 5 shares in a row)
CREATED_POLL_S = 0.5


class MirroredTopics:
    """The topics mirrored now (name → partitions), their sources, the refused ones and the
    ids first seen of each on every cluster."""

    def __init__(
        self,
        config: TopicsConfig,
        local: Cluster,
        remotes: Mapping[str, Cluster],
        selects: Callable[[str], bool] | None = None,
    ):
        self.config = config
        # the topics mirrored: ``Config.mirrors`` (never syncer's state topic), else the
        # selection's
        self.selects = selects or config.selects
        self.local = local
        self.remotes = remotes
        self.mirror: dict[str, int] = {}
        self.sources: dict[str, tuple[str, ...]] = {}
        self.refused: dict[str, str] = {}
        # each mirrored topic's id as first seen, per cluster ("local", "remote NAME"); the
        # fetchers of a remote fetch by the ids in its dict and the writer writes by the local
        # one's, so these dicts are only added to
        self.ids: dict[str, dict[str, uuid.UUID]] = {LOCAL: {}}
        self.ids.update({remote_label(name): {} for name in remotes})
        self.without_ids: set[str] = set()  # clusters whose brokers report no topic ids
        self.halted: dict[str, str] = {}  # topic → why (its id changed)
        self._counted: dict[str, dict[str, int]] = {}  # each cluster's counts at its last read
        self._last_census: dict[str, Census] = {}  # each cluster's census at its last read
        self.down: dict[str, str] = {}  # remotes that did not answer the last refresh: why
        # with ``staged``, new topics are created CREATE_PER_REFRESH partitions per refresh
        # and the next refresh comes at once while any are ``deferred``. Not in a group: tried
        # on 2026-12-01 (3 members, 10,000 partitions: members joined with the first share,
        # the leader giving out only topics all subscribe to), the first record came at 38.6 s
        # rather than 63.2 s but in-sync at 97.7 s rather than 71.0 s: each share of 2,000
        # waited 20-25 s for its leaders (all 10,000 at once: ~50 s), and 3-4 eager
        # rebalances per member (1 before) each stopped and restarted every copier
        self.staged = False
        self.deferred = 0
        # topic → (why, when): refused by the local cluster as it was created
        self.create_refused: dict[str, tuple[str, float]] = {}
        # settings synced, held back, topics gone at a remote, and ``dropped``: topic →
        # remote → why, its topic there gone or another log while another remote holds the
        # one copied (``topic_ids.judged``), no source of it any more
        self.drift = TopicDrift()
        self.dropped = self.drift.dropped
        self.configs = ConfigSyncer(
            config.copy_configs, local, remotes, self.drift, self.topic_ends
        )
        if config.sync_configs:  # a batch refused as too large asks before it halts
            local.limit_follower = self.followed_limit

    def __repr__(self) -> str:
        return (
            f"<MirroredTopics [mirrored: {len(self.mirror)}, refused: {len(self.refused)},"
            f" halted: {len(self.halted)}]>"
        )

    async def topic_ends(self, topic: str, remote: str | None) -> dict[TP, int] | None:
        """Each partition's end of the mirrored ``topic`` at ``remote`` (None: locally) now;
        None if the cluster does not answer or the topic is not mirrored."""
        count = self.mirror.get(topic)
        cluster = self.local if remote is None else self.remotes.get(remote)
        if not count or cluster is None:
            return None
        try:
            return await cluster.latest([TP(topic, p) for p in range(count)])
        except SyncerError as exc:
            log.info("topic %s: its ends at %s: %s", topic, remote or "local", exc)
            return None

    async def plan(self, copying: set[str]) -> TopicPlan:
        """What to mirror, create, grow or refuse now (``copying``: topics with copiers)."""
        plan = await self._shape(copying)
        existing = [t for t in plan.mirror if t not in plan.create]
        return refuse(plan, await self._unfaithful(existing, plan))

    async def _shape(
        self, copying: set[str], censuses: Mapping[str, Census] | None = None
    ) -> TopicPlan:
        """The plan from the partition counts alone (settings not judged yet)."""
        censuses = censuses or await self._censuses()
        local_counts = censuses[LOCAL].counts
        mirrored = set(self.mirror) | copying
        counts = self._remote_counts(censuses)
        return plan_topics(self.config, local_counts, counts, mirrored, self.selects)

    def _remote_counts(self, censuses: Mapping[str, Census]) -> dict[str, dict[str, int]]:
        """Each remote's partition counts, less the topics it was dropped for: their log
        there is another (or gone), and neither its count nor its settings are followed."""
        counts = {n: censuses[remote_label(n)].counts for n in self.remotes}
        return without_dropped(counts, self.dropped)

    async def _censuses(self, *, stale_ok: bool = False) -> dict[str, Census]:
        """Every cluster's topics (counts and ids), one metadata request each: what a
        refresh plans from and checks the ids against. With ``stale_ok``, a remote that does
        not answer (a transient error: away, paused, restarting) is given its census as last
        read, and named in ``down`` (a refresh leaves its topics as they were); one never
        read, or the local cluster, fails the call as before."""
        clusters = {LOCAL: self.local} | {remote_label(n): c for n, c in self.remotes.items()}
        censuses = {LOCAL: await self.local.topic_census()}
        read = await asyncio.gather(
            *(c.topic_census() for w, c in clusters.items() if w != LOCAL),
            return_exceptions=True,
        )
        down: dict[str, str] = {}
        for (name, where), got in zip(
            ((n, remote_label(n)) for n in self.remotes), read, strict=True
        ):
            if isinstance(got, Census):
                censuses[where] = got
            elif stale_ok and isinstance(got, TransientClusterError) and where in self._last_census:
                censuses[where] = self._last_census[where]
                down[name] = str(got)
            else:
                raise got
        self._note_down(down)
        for where, census in censuses.items():
            if where in self._last_census and census is self._last_census[where]:
                continue  # a remote away: nothing new to read of it
            if census.counts != self._counted.get(where):
                # topics or partitions the client's view may not hold yet: their leaders
                # read once here, not by each new partition's copier finding none known
                await clusters[where].refresh_metadata()
                self._counted[where] = census.counts
            self._last_census[where] = census
        return censuses

    def seed(self, remote: str, census: Census) -> None:
        """``remote``'s topics as read as it was taken in (left out at the start): what the
        next refresh falls back on should the remote not answer it (it is then away, its
        topics left as they were) instead of failing as for a remote never read."""
        self._last_census[remote_label(remote)] = census

    def _answering(self) -> dict[str, Cluster]:
        """The remotes that answered the last refresh (those ``down`` are not asked: each
        ask would wait for its timeout and retries)."""
        return {n: c for n, c in self.remotes.items() if n not in self.down}

    def _note_down(self, down: Mapping[str, str]) -> None:
        """Log each remote that stops answering the refresh, and answers again, once."""
        for name, why in down.items():
            if name not in self.down:
                log.warning(
                    "remote %s did not answer the topic refresh (%s): its topics are left"
                    " as they were (copied on, not created, grown or judged) until it does",
                    name,
                    why,
                )
        for name in self.down.keys() - down.keys():
            log.info("remote %s answers the topic refresh again", name)
        self.down = dict(down)

    def _created(self, census: Census) -> None:
        """The local ``census`` just after topics were created. Staged, their leaders were
        waited for, so the client's view holds them: the next refresh needs no full metadata
        read for them (at 4,000 partitions that read, one in each process's first idle
        minute, was 15% of its idle CPU). In a group no leaders were waited for: the next
        refresh reads them once for all copiers."""
        if self.staged:
            self._counted[LOCAL] = census.counts

    async def _unfaithful(
        self,
        topics: list[str],
        plan: TopicPlan,
        applied: Mapping[str, Mapping[str, str]] | None = None,
        read: SettingsRead | None = None,
    ) -> dict[str, str]:
        """The local ``topics`` whose settings would make readers see something else than
        the remotes' readers (topic → the one line saying which setting). ``applied``: the
        values just set, judged even if a broker does not report them yet. ``read``: the
        settings read before the sync (the local ones of topics it altered are read again)."""
        if read is None:
            read = await read_settings(
                self.local, self.remotes, topics, plan.sources, FIDELITY_SETTINGS
            )
        read = read.only(FIDELITY_SETTINGS)
        local = read.values(read.local)
        altered = [t for t in topics if t in self.configs.altered]
        local.update(await self.local.topic_settings(altered, FIDELITY_SETTINGS))
        self.configs.altered.difference_update(altered)
        for topic, values in (applied or {}).items():
            local.setdefault(topic, {}).update(values)
        remote = {name: read.values(settings) for name, settings in read.remote.items()}
        out = {}
        for topic in topics:
            theirs = {name: remote[name][topic] for name in remote if topic in remote[name]}
            reason = unfaithful_setting(local.get(topic, {}), theirs)
            if reason is not None:
                out[topic] = reason
        return out

    async def refresh(self, copying: set[str]) -> Refresh:
        """Plan, create or grow local topics, sync the copied settings of existing ones,
        judge every one's settings, check every id. The settings are synced before they are
        judged: a limit the remote raised is raised here, not refused."""
        censuses = await self._censuses(stale_ok=True)
        # before the plan: a remote whose topic is another log now is neither counted nor
        # followed (its partition count, its settings)
        early = await self.check_ids(self.mirror, self.sources, censuses)
        plan = await self._shape(copying, censuses)
        kept: set[str] = set()  # a remote away holds them: left as they were
        if self.down:
            remote_counts = self._remote_counts(censuses)
            before = TopicPlan(mirror=self.mirror, refused=self.refused, sources=self.sources)
            plan, kept = as_they_were(plan, remote_counts, self.down, before)
        existing = [
            t
            for t in plan.mirror
            if t not in plan.create and t not in self.halted and t not in kept
        ]
        keys = set(FIDELITY_SETTINGS) | set(self.config.copy_configs)
        read = await read_settings(self.local, self.remotes, existing, plan.sources, keys)
        applied = {}
        if self.config.sync_configs:
            applied = await self.configs.sync(existing, plan.sources, read)
        plan = refuse(plan, await self._unfaithful(existing, plan, applied, read))
        # refused by the local cluster at a creation less than a refresh interval ago: asked
        # again after it, not at the next look (a staged creation looks again at once: the
        # same topics, first by name, would be refused over and over, the rest never made)
        now = time.monotonic()
        again = self.config.refresh_interval_s
        self.create_refused = {
            t: (why, at) for t, (why, at) in self.create_refused.items() if now - at < again
        }
        plan = refuse(plan, {t: why for t, (why, _at) in self.create_refused.items()})
        # a topic copied before and gone locally is not created again: it halts below
        create = {t: n for t, n in plan.create.items() if t not in self.ids[LOCAL]}
        found = create
        if self.staged:
            create = first_to_create(create, CREATE_PER_REFRESH)
        later = found.keys() - create.keys()  # not mirrored yet: no copiers, no ids asked
        self.deferred = len(later)
        grow = {t: n for t, n in plan.grow.items() if t not in self.halted}
        if create:
            wanted = {topic: (plan.sources[topic][0], n) for topic, n in create.items()}
            created, refused = await create_local_topics(
                self.local, self.remotes, wanted, self.config
            )
            for topic, settings in created.items():
                self.configs.seen(topic, wanted[topic][0], settings)
            # a creation policy, a setting or replication factor the local cluster does
            # not take: that topic refused (asked again at the next refresh), not the rest
            why = {t: f"the local cluster refused to create it: {r}" for t, r in refused.items()}
            self.create_refused.update({t: (reason, now) for t, reason in why.items()})
            plan = refuse(plan, why)
            create = {t: n for t, n in create.items() if t not in refused}
        for topic, count in grow.items():
            log.info("growing local topic %s to %d partitions", topic, count)
            await self.local.add_partitions(topic, count)
        if create or grow:  # led, when staged: the next share waits for this one
            await wait_created(self.local, {**create, **grow}, led=create if self.staged else {})
        if create:  # broker defaults we did not set may still break fidelity
            plan = refuse(plan, await self._unfaithful(list(create), plan))
        for topic, reason in plan.refused.items():
            if self.refused.get(topic) != reason:
                log.error("topic %s refused: %s", topic, reason)
        self.refused = dict(plan.refused)
        # before any copier of a new topic fetches: it fetches by the id learned here
        mirror = {t: n for t, n in plan.mirror.items() if t not in later}
        if create or grow:  # the local ids of the topics just created
            censuses[LOCAL] = await self.local.topic_census()
            self._created(censuses[LOCAL])
        late = await self.check_ids(mirror, plan.sources, censuses)
        self.mirror = {t: n for t, n in mirror.items() if t not in self.halted}
        self.sources = kept_sources(plan.sources, self.dropped)
        dropped = {
            t: early.drops.get(t, {}) | late.drops.get(t, {})
            for t in early.drops.keys() | late.drops.keys()
        }
        return Refresh(plan, early.halts | late.halts, dropped)

    @property
    def next_refresh_s(self) -> float:
        """When to refresh again: at once while found topics wait to be created."""
        return 0.0 if self.deferred else self.config.refresh_interval_s

    async def followed_limit(self, topic: str) -> int | None:
        """The local ``topic``'s max.message.bytes after its copied settings followed its
        remote's now: a batch the remote took under a limit it raised since the last
        refresh is copied, not halted on (None: not mirrored, or not reported)."""
        sources = tuple(n for n in self.sources.get(topic, ()) if n not in self.down)
        if not sources or topic in self.halted:
            return None
        applied = await self.configs.sync([topic], {topic: sources})
        limit = applied.get(topic, {}).get("max.message.bytes")
        if limit is None:  # nothing raised now: what the local broker has
            settings = await self.local.topic_settings([topic], ["max.message.bytes"])
            limit = settings.get(topic, {}).get("max.message.bytes")
        return None if limit is None else int(limit)

    async def watch_ids(
        self, halt: Callable[[str, str], None], drop: Callable[[str, str, str], None]
    ) -> None:
        """Check the ids every ``refresh_interval_s`` (a catch-up refreshes only once);
        ``halt`` is told each topic whose id changed, and why; ``drop`` each remote dropped
        for a topic (topic, remote, why)."""
        while True:
            await asyncio.sleep(self.config.refresh_interval_s)
            try:
                found = await self.check_ids()
            except SyncerError as exc:
                log.warning("checking topic ids failed, will try again: %s", exc)
                continue
            for topic, reason in found.halts.items():
                halt(topic, reason)
            for topic, drops in found.drops.items():
                for remote, reason in drops.items():
                    drop(topic, remote, reason)

    async def check_ids(
        self,
        mirror: Mapping[str, int] | None = None,
        sources: Mapping[str, tuple[str, ...]] | None = None,
        censuses: Mapping[str, Census] | None = None,
    ) -> Judged:
        """Ask every cluster the ids of the topics mirrored (and of those it held before);
        the topics whose id changed are halted, or the remotes where it changed or is gone
        dropped for it where another remote still holds it (``topic_ids.judged``; what is
        new is returned), and the ids of topics seen first are remembered. ``censuses``:
        the clusters' topics as just read by the refresh (else read now)."""
        mirror = self.mirror if mirror is None else mirror
        sources = self.sources if sources is None else sources
        asked: dict[str, set[str]] = {LOCAL: set(mirror)}
        for name in self.remotes:
            asked[remote_label(name)] = {t for t in mirror if name in sources.get(t, ())}
        for where, known in self.ids.items():
            asked.setdefault(where, set()).update(known)
            asked[where] -= self.halted.keys()
        censuses = censuses or await self._censuses()
        # a remote left out at the start (not connected yet) has no census: nothing to ask
        asked = {where: topics for where, topics in asked.items() if where in censuses}
        seen = {where: censuses[where].ids_of(asked[where]) for where in asked}
        self._warn_without_ids(seen)
        gone = gone_at_remotes(self.ids, seen, asked, LOCAL)
        self._report_gone(gone)
        # a remote away is judged by its census as last read: it holds what it held then
        holders = holding(self.ids, seen, asked, [remote_label(n) for n in self.remotes])
        found = judged(id_changes(self.ids, seen, asked), gone, sources, holders, self.dropped)
        for topic, reason in found.halts.items():
            self.halted[topic] = reason
            log.error("%s", reason)
        for topic, drops in found.drops.items():
            self.dropped.setdefault(topic, {}).update(drops)
            for reason in drops.values():
                log.error("%s", reason)
        if found.drops:  # also between refreshes (a catch-up's): no setting follows them
            self.sources = kept_sources(self.sources, self.dropped)
        for where, ids in learned(self.ids, seen, self.halted).items():
            self.ids.setdefault(where, {}).update(ids)  # in place: fetchers hold them
        return found

    async def gaps(self, tps: list[TP]) -> dict[TP, int]:
        """Records each partition's local end is behind the furthest remote (for the
        group's assignor)."""
        if not tps:
            return {}
        local = await self.local.latest(tps)
        remote: dict[TP, int] = {}
        for name, cluster in self._answering().items():
            mine = [tp for tp in tps if name in self.sources.get(tp.topic, ())]
            if mine:
                for tp, end in (await cluster.latest(mine, isolation=READ_COMMITTED)).items():
                    remote[tp] = max(remote.get(tp, 0), end)
        return {tp: max(0, remote.get(tp, 0) - local.get(tp, 0)) for tp in tps}

    async def remote_ends(self, tps: Iterable[TP]) -> dict[TP, dict[str, RemoteEnds]]:
        """(start, end) of each partition at every remote that is a source of its topic."""
        out: dict[TP, dict[str, RemoteEnds]] = {}
        for name, cluster in self._answering().items():  # one away: learned by fetching
            mine = [tp for tp in tps if name in self.sources.get(tp.topic, ())]
            if not mine:
                continue
            ends = await retried(
                partial(cluster.ends, mine, isolation=READ_COMMITTED), what=f"ends of remote {name}"
            )
            for tp, (start, end) in ends.items():
                out.setdefault(tp, {})[name] = RemoteEnds(start, end)
        return out

    def _report_gone(self, gone: dict[str, tuple[str, ...]]) -> None:
        """Log a topic deleted at a remote once, and keep it in ``drift`` while it is gone
        (the local topic stays: syncer never deletes one)."""
        for topic, places in gone.items():
            if self.drift.gone.get(topic) != places:
                log.error(
                    "topic %s was deleted on the %s cluster: the local topic is kept as it is"
                    " (syncer never deletes a topic); nothing more is copied from there",
                    topic,
                    " and ".join(places),
                )
        self.drift.gone = gone

    def _warn_without_ids(self, seen: Mapping[str, dict[str, uuid.UUID] | None]) -> None:
        for where, ids in seen.items():
            if ids is None and where not in self.without_ids:
                self.without_ids.add(where)
                log.warning(
                    "the %s cluster reports no topic ids (Kafka 2.8+ does): a topic deleted"
                    " and recreated there is told only by comparing records",
                    where,
                )


async def wait_created(local: Cluster, wanted: Mapping[str, int], led: Mapping[str, int]) -> None:
    """Until the local metadata shows the ``wanted`` topics with their partition counts, and
    every partition of ``led`` answers from its leader; looked at least every
    ``CREATED_POLL_S``. The looks are censuses (``Cluster.topic_census``), and the client's
    full view is read once they pass: a full read every look, at 10,000 partitions and in
    each of three group members, took the CPU the broker creating them needed."""
    await retried(
        _Check(local, dict(wanted)), what="waiting for local topics", max_s=CREATED_POLL_S
    )
    await local.refresh_metadata()  # the leaders of what was created, for its copiers
    if led:
        tps = [TP(t, p) for t, n in led.items() for p in range(n)]
        await retried(
            partial(local.latest, tps), what="waiting for local leaders", max_s=CREATED_POLL_S
        )


class _Check:
    """Callable for ``retried``: succeeds once the local cluster's census shows the topics
    with their partition counts."""

    def __init__(self, local: Cluster, wanted: dict[str, int]) -> None:
        self.local = local
        self.wanted = wanted

    async def __call__(self) -> None:
        counts = (await self.local.topic_census()).counts
        for topic, count in self.wanted.items():
            if counts.get(topic, 0) < count:
                raise TransientClusterError(f"local topic {topic} not ready yet")
