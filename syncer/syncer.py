"""``Syncer``: the library's front door. Connects to the clusters, decides which topics are
mirrored, runs one copier per partition, and stops cleanly.

    async with Syncer(config) as syncer:
        summary = await syncer.catch_up()

It never installs signal handlers or touches the event loop policy; the CLI does that.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial

from syncer.alignment import StateClock
from syncer.budget import ByteBudget
from syncer.clusters import READ_COMMITTED, TP, Cluster
from syncer.config import ClusterConfig, Config, CopierConfig
from syncer.coordination import GroupMember
from syncer.copier import PartitionCopier
from syncer.errors import ClusterError, PartitionHalted, SyncerError
from syncer.fetcher import Fetcher, Lanes
from syncer.identity import WriterIdentity, load_identity
from syncer.metrics import Instruments
from syncer.offsets import OffsetCopier
from syncer.planner import RemoteEnds
from syncer.retry import retried
from syncer.sources import SourceHealth
from syncer.status import PartitionStatus, RemoteStatus, Snapshot, State
from syncer.topic_ids import LOCAL, id_changes, learned, remote_label
from syncer.topics import (
    FIDELITY_SETTINGS,
    TopicPlan,
    create_local_topic,
    plan_topics,
    refuse,
    unfaithful_setting,
)
from syncer.writer import Writer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Summary:
    """What a run did, for the one-line summary at the end."""

    partitions: int
    records: int
    bytes: int
    halted: int
    refused: int
    seconds: float

    def line(self) -> str:
        return (
            f"shutdown ◆ {self.partitions} partitions ◆ {self.records} records"
            f" ◆ {self.bytes / 1e6:.1f} MB copied ◆ {self.halted} halted"
            f" ◆ {self.refused} topics refused ◆ {self.seconds:.1f}s"
        )


class Syncer:
    """Keeps the local cluster's selected partitions identical to the remotes'."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.local = Cluster(config.local, role="local")
        self.remotes = {r.name: Cluster(r, role="remote") for r in config.remotes}
        # lanes beyond the first: more clients of a remote, each with its own connections
        self._extra_lanes = {
            r.name: [Cluster(r, role="remote", lane=i) for i in range(1, r.connections)]
            for r in config.remotes
        }
        self.copiers: dict[TP, PartitionCopier] = {}
        self.refused: dict[str, str] = {}
        self._tasks: dict[TP, asyncio.Task[PartitionStatus]] = {}
        self._fetchers: dict[str, Lanes] = {}
        self._writer: Writer | None = None
        self._identity: WriterIdentity | None = None
        self.state_clock = StateClock(0)  # read from the local brokers at start
        self._started_at = time.monotonic()
        self._stop = asyncio.Event()
        self._started = False
        self._mirrored: dict[str, int] = {}
        self._sources: dict[str, tuple[str, ...]] = {}
        # each mirrored topic's id as first seen, per cluster ("local", "remote NAME"); the
        # fetchers of a remote fetch by the ids in its dict and the writer writes by the local
        # one's, so these dicts are only added to
        self._topic_ids: dict[str, dict[str, uuid.UUID]] = {LOCAL: {}}
        self._topic_ids.update({remote_label(r.name): {} for r in config.remotes})
        self._without_ids: set[str] = set()  # clusters whose brokers report no topic ids
        self.halted_topics: dict[str, str] = {}  # topic → why (its id changed)
        self.member: GroupMember | None = None
        # one measured health per remote, shared by every partition of this process
        self.health = {
            r.name: SourceHealth(r.name, rank, lanes=r.connections)
            for rank, r in enumerate(config.remotes)
        }
        self.memory = ByteBudget(config.copier.buffer_bytes)
        self.instruments = Instruments()
        self._grouped = False  # run() shares partitions through the group; catch_up() does not
        self.offsets = OffsetCopier(config.groups, self.local, self.remotes, self._mirrored_now)
        if config.coordination.enabled:
            self.member = GroupMember(config, self._on_assigned, self._on_revoked)

    def _mirrored_now(self) -> dict[str, int]:
        return dict(self._mirrored)

    def __repr__(self) -> str:
        states: dict[str, int] = {}
        for copier in self.copiers.values():
            states[copier.status.state.value] = states.get(copier.status.state.value, 0) + 1
        shown = ", ".join(f"{k}: {v}" for k, v in sorted(states.items())) or "idle"
        return f"<Syncer {self.config.name} [{shown}]>"

    async def __aenter__(self) -> Syncer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to every cluster and load the writer identity."""
        if self._started:
            return
        self._started_at = time.monotonic()
        try:
            await self.local.start()
            # lanes connect at once: over a long link, one after another adds up
            results = await asyncio.gather(
                *(remote.start() for remote in self._remote_clusters()), return_exceptions=True
            )
            for result in results:
                if isinstance(result, BaseException):
                    raise result
        except SyncerError:
            await self._close_clusters()
            raise
        self._identity = await retried(
            partial(load_identity, self.local, self.config.state_topic, self.config.name),
            what="loading the writer identity",
        )
        self.state_clock = await read_state_clock(self.local)
        self._writer = Writer(
            self.local,
            max_in_flight=self.config.copier.max_in_flight,
            may_write=self._may_write,
            observe=self.instruments.produce_seconds.observe,
            topic_ids=self._topic_ids[LOCAL],  # learned before a copier of a topic starts
        )
        self._writer.start()
        for name, cluster in self.remotes.items():
            sizes = self._fetch_sizes(cluster.config)
            lanes = [cluster, *self._extra_lanes[name]]
            observe = self.instruments.fetch_seconds.labels(name).observe
            ids = self._topic_ids[remote_label(name)]
            self._fetchers[name] = Lanes([Fetcher(lane, sizes, observe, ids) for lane in lanes])
            self._fetchers[name].start()
        self._started = True

    def _remote_clusters(self) -> list[Cluster]:
        return [c for n, first in self.remotes.items() for c in (first, *self._extra_lanes[n])]

    def _fetch_sizes(self, remote: ClusterConfig) -> CopierConfig:
        copier = self.config.copier
        return dataclasses.replace(
            copier,
            fetch_max_bytes=remote.fetch_max_bytes or copier.fetch_max_bytes,
            partition_fetch_max_bytes=(
                remote.partition_fetch_max_bytes or copier.partition_fetch_max_bytes
            ),
        )

    def open_connections(self) -> dict[str, int]:
        """Open TCP connections per remote, over all its lanes."""
        return {
            name: sum(c.open_connections() for c in (first, *self._extra_lanes[name]))
            for name, first in self.remotes.items()
        }

    def _may_write(self) -> bool:
        return not self._grouped or self.member is None or self.member.may_write()

    async def stop(self) -> None:
        """Drain in-flight writes, bounded by ``copier.shutdown_timeout_s``; idempotent."""
        self._stop.set()
        for copier in self.copiers.values():
            copier.request_stop()
        await self._finish(list(self._tasks.values()))
        if self.member is not None:
            await self.member.stop()
        if self._writer is not None:
            await self._writer.stop()
        for fetcher in self._fetchers.values():
            await fetcher.stop()
        await self._close_clusters()
        self._started = False

    async def _finish(self, tasks: list[asyncio.Task[PartitionStatus]]) -> None:
        """Wait for stopping copiers to drain, bounded; cancel the ones that do not."""
        tasks = [t for t in tasks if not t.done()]
        if tasks:
            _done, late = await asyncio.wait(tasks, timeout=self.config.copier.shutdown_timeout_s)
            for task in late:
                task.cancel("shutdown timeout")
            await asyncio.gather(*late, return_exceptions=True)

    async def _close_clusters(self) -> None:
        for cluster in (self.local, *self._remote_clusters()):
            await cluster.stop()

    # the two modes ----------------------------------------------------------------------

    async def catch_up(self) -> Summary:
        """Snapshot the remote ends now and copy until the local ends reach them. Every
        selected partition, in this process (a group, if configured, is not joined; running
        beside the group's members is safe: the shared writer identity dedupes)."""
        await self.start()
        await self.refresh_topics()
        targets = {tp: c.status.remote_end for tp, c in self.copiers.items()}
        for tp, copier in self.copiers.items():
            if tp.topic not in self.halted_topics:
                self._spawn(tp, copier.run(until=targets[tp]))
        # no topic refresh runs during a catch-up: the ids are still checked
        watcher = asyncio.create_task(self._watch_topic_ids(), name="topic-ids")
        try:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        if self.config.groups.include:
            try:
                await self.offsets.copy_once()  # the local log now reaches the remote ends
            except SyncerError as exc:
                log.warning("copying consumer group offsets: %s", exc)
        return self.summary()

    async def run(self) -> Summary:
        """Copy continuously until ``stop()`` (or ``request_stop()``). With
        ``coordination.group`` set, only the partitions the group assigns to this process."""
        await self.start()
        self._grouped = self.member is not None
        offsets = None
        if self.config.groups.include:
            offsets = asyncio.create_task(self.offsets.run(self._stop), name="group-offsets")
        try:
            await self._run_until_stopped()
        finally:
            if offsets is not None:
                offsets.cancel()
                await asyncio.gather(offsets, return_exceptions=True)
        return self.summary()

    async def _run_until_stopped(self) -> None:
        while not self._stop.is_set():
            try:
                await self.refresh_topics()
            except SyncerError as exc:
                if not exc.retriable:
                    raise
                log.warning("topic refresh failed, will try again: %s", exc)
            if self._grouped:
                await self._share_through_group()
            else:
                for tp, copier in self.copiers.items():
                    if tp not in self._tasks and tp.topic not in self.halted_topics:
                        self._spawn(tp, copier.run())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.config.topics.refresh_interval_s)
        for copier in self.copiers.values():
            copier.request_stop()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    def request_stop(self) -> None:
        """Ask ``run`` to drain and return; safe to call from a signal handler."""
        self._stop.set()
        for copier in self.copiers.values():
            copier.request_stop()

    # coordination -----------------------------------------------------------------------

    async def _share_through_group(self) -> None:
        """Tell the group leader's assignor the gaps, and keep the subscription current."""
        assert self.member is not None
        tps = [TP(t, p) for t, n in self._mirrored.items() for p in range(n)]
        try:
            self.member.update_gaps(await self._gaps(tps))
        except SyncerError as exc:
            log.info("could not measure gaps for the assignor: %s", exc)
        await self.member.subscribe(self._mirrored)

    async def _gaps(self, tps: list[TP]) -> dict[TP, int]:
        if not tps:
            return {}
        local = await self.local.latest(tps)
        remote: dict[TP, int] = {}
        for name, cluster in self.remotes.items():
            mine = [tp for tp in tps if name in self._sources.get(tp.topic, ())]
            if mine:
                for tp, end in (await cluster.latest(mine, isolation=READ_COMMITTED)).items():
                    remote[tp] = max(remote.get(tp, 0), end)
        return {tp: max(0, remote.get(tp, 0) - local.get(tp, 0)) for tp in tps}

    async def _on_assigned(self, assigned: set[TP]) -> None:
        self.instruments.rebalances.inc()
        for tp in sorted(assigned):
            if tp in self._tasks and not self._tasks[tp].done():
                continue
            self.copiers[tp] = self._copier(tp, {})
            if tp.topic in self.halted_topics:
                self._halt_copier(tp, self.halted_topics[tp.topic])
                continue
            self._spawn(tp, self.copiers[tp].run())

    async def _on_revoked(self, revoked: set[TP]) -> None:
        """Stop the revoked partitions' copiers before the group moves them elsewhere."""
        tasks = []
        for tp in revoked:
            copier = self.copiers.pop(tp, None)
            if copier is not None:
                copier.request_stop()
            task = self._tasks.pop(tp, None)
            if task is not None:
                tasks.append(task)
        await self._finish(tasks)

    def _spawn(self, tp: TP, work: object) -> None:
        name = f"copier-{tp.topic}-{tp.partition}"
        self._tasks[tp] = asyncio.create_task(work, name=name)  # type: ignore[arg-type]

    # topics -----------------------------------------------------------------------------

    async def plan(self) -> TopicPlan:
        local_counts = await self.local.partition_counts()
        remote_counts = {n: await c.partition_counts() for n, c in self.remotes.items()}
        mirrored = set(self._mirrored) | {tp.topic for tp in self.copiers}
        plan = plan_topics(self.config.topics, local_counts, remote_counts, mirrored)
        existing = [t for t in plan.mirror if t not in plan.create]
        return refuse(plan, await self._unfaithful(existing, plan))

    async def _unfaithful(self, topics: list[str], plan: TopicPlan) -> dict[str, str]:
        """The local ``topics`` whose settings would make readers see something else than
        the remotes' readers (topic → the one line saying which setting)."""
        local = await self.local.topic_settings(topics, FIDELITY_SETTINGS)
        remote = {
            name: await cluster.topic_settings(
                [t for t in topics if name in plan.sources[t]], FIDELITY_SETTINGS
            )
            for name, cluster in self.remotes.items()
        }
        out = {}
        for topic in topics:
            theirs = {name: remote[name][topic] for name in remote if topic in remote[name]}
            reason = unfaithful_setting(local.get(topic, {}), theirs)
            if reason is not None:
                out[topic] = reason
        return out

    async def refresh_topics(self) -> TopicPlan:
        """Find selected topics, create or grow local ones, and make a copier per new
        partition with the remotes' current ends. A topic refused (shape or settings) gets
        no copier; one refused while it is copied has its copiers stopped."""
        plan = await self.plan()
        # a topic copied before and gone locally is not created again: it halts below
        create = {t: n for t, n in plan.create.items() if t not in self._topic_ids[LOCAL]}
        grow = {t: n for t, n in plan.grow.items() if t not in self.halted_topics}
        for topic, count in create.items():
            source = self.remotes[plan.sources[topic][0]]
            await create_local_topic(self.local, source, topic, count, self.config.topics)
        for topic, count in grow.items():
            log.info("growing local topic %s to %d partitions", topic, count)
            await self.local.add_partitions(topic, count)
        if create or grow:
            await retried(
                _Check(self.local, {**create, **grow}), what="waiting for new local topics"
            )
        if create:  # broker defaults we did not set may still break fidelity
            plan = refuse(plan, await self._unfaithful(list(create), plan))
        self._note_refused(plan)
        # before any copier of a new topic fetches: it fetches by the id learned here
        await self._check_topic_ids(plan.mirror, plan.sources)
        self._mirrored = {t: n for t, n in plan.mirror.items() if t not in self.halted_topics}
        self._sources = dict(plan.sources)
        if self._grouped:
            return plan  # copiers come and go with the group's assignment
        new = [
            TP(t, p)
            for t, n in self._mirrored.items()
            for p in range(n)
            if TP(t, p) not in self.copiers
        ]
        if new:
            ends = await self._remote_ends(new, plan)
            for tp in new:
                self.copiers[tp] = self._copier(tp, ends.get(tp, {}))
        return plan

    def _note_refused(self, plan: TopicPlan) -> None:
        for topic, reason in plan.refused.items():
            if self.refused.get(topic) != reason:
                log.error("topic %s refused: %s", topic, reason)
            for tp, copier in self.copiers.items():
                if tp.topic == topic:
                    copier.request_stop()  # e.g. a local setting changed while we copied
        self.refused = dict(plan.refused)

    async def _check_topic_ids(
        self, mirror: Mapping[str, int], sources: Mapping[str, tuple[str, ...]]
    ) -> None:
        """Ask every cluster the ids of the topics mirrored (and of those it held before);
        halt each topic whose id changed, and remember the ids of topics seen first."""
        asked: dict[str, set[str]] = {LOCAL: set(mirror)}
        for name in self.remotes:
            asked[remote_label(name)] = {t for t in mirror if name in sources.get(t, ())}
        for where, known in self._topic_ids.items():
            asked.setdefault(where, set()).update(known)
            asked[where] -= self.halted_topics.keys()
        clusters = {LOCAL: self.local} | {remote_label(n): c for n, c in self.remotes.items()}
        seen = {where: await clusters[where].topic_ids(asked[where]) for where in asked}
        for where, ids in seen.items():
            if ids is None and where not in self._without_ids:
                self._without_ids.add(where)
                log.warning(
                    "the %s cluster reports no topic ids (Kafka 2.8+ does): a topic deleted"
                    " and recreated there is told only by comparing records",
                    where,
                )
        for change in id_changes(self._topic_ids, seen, asked):
            self._halt_topic(change.topic, change.describe())
        for where, ids in learned(self._topic_ids, seen, self.halted_topics).items():
            self._topic_ids.setdefault(where, {}).update(ids)  # in place: fetchers hold them

    async def _watch_topic_ids(self) -> None:
        """Check topic ids every ``topics.refresh_interval_s`` (catch-up, which does not
        refresh topics)."""
        while True:
            await asyncio.sleep(self.config.topics.refresh_interval_s)
            try:
                await self._check_topic_ids(self._mirrored, self._sources)
            except SyncerError as exc:
                log.warning("checking topic ids failed, will try again: %s", exc)

    def _halt_topic(self, topic: str, reason: str) -> None:
        """Halt every partition of ``topic``, now and whenever one is made again."""
        if topic in self.halted_topics:
            return
        self.halted_topics[topic] = reason
        log.error("%s", reason)
        for tp in [tp for tp in self.copiers if tp.topic == topic]:
            self._halt_copier(tp, reason)

    def _halt_copier(self, tp: TP, reason: str) -> None:
        """Halt ``tp``'s copier and end its task at once: whatever it awaits, it writes
        nothing more (its queued writes are dropped by the halt)."""
        self.copiers[tp].halt(PartitionHalted(f"{tp.topic}[{tp.partition}]: {reason}"))
        task = self._tasks.get(tp)
        if task is not None and not task.done():
            task.cancel(f"topic {tp.topic} halted")

    async def _remote_ends(
        self, tps: Iterable[TP], plan: TopicPlan
    ) -> dict[TP, dict[str, RemoteEnds]]:
        out: dict[TP, dict[str, RemoteEnds]] = {}
        for name, cluster in self.remotes.items():
            mine = [tp for tp in tps if name in plan.sources.get(tp.topic, ())]
            if not mine:
                continue
            ends = await retried(
                partial(cluster.ends, mine, isolation=READ_COMMITTED), what=f"ends of remote {name}"
            )
            for tp, (start, end) in ends.items():
                out.setdefault(tp, {})[name] = RemoteEnds(start, end)
        return out

    def _copier(self, tp: TP, ends: dict[str, RemoteEnds]) -> PartitionCopier:
        assert self._writer is not None and self._identity is not None
        sources = self._sources.get(tp.topic) or tuple(ends) or tuple(self._fetchers)
        fetchers = {name: self._fetchers[name] for name in sources}
        health = {name: self.health[name] for name in fetchers}
        return PartitionCopier(
            tp,
            self.local,
            self._writer,
            fetchers,
            self._identity,
            self.config.copier,
            ends,
            health,
            self.memory,
            fill_holes=self.config.topics.fills(tp.topic),
            align_start=self.config.topics.align_start,
            state_clock=self.state_clock,
        )

    # reporting --------------------------------------------------------------------------

    def statuses(self) -> list[PartitionStatus]:
        return [c.status for _tp, c in sorted(self.copiers.items())]

    def snapshot(self) -> Snapshot:
        """This process's figures now, as a plain value (for /status, /readyz, /metrics)."""
        now = time.monotonic()
        connections = self.open_connections()
        return Snapshot(
            name=self.config.name,
            partitions=tuple(s.copy() for s in self.statuses()),
            remotes=tuple(
                RemoteStatus.of(health, now, connections.get(name, 0))
                for name, health in self.health.items()
            ),
            groups={n: dataclasses.replace(g) for n, g in self.offsets.groups.items()},
            refused=len(self.refused),
            buffer_used=self.memory.used,
            buffer_limit=self.memory.limit,
            producer_id_expiration_ms=self.state_clock.expiration_ms,
        )

    def summary(self) -> Summary:
        statuses = self.statuses()
        return Summary(
            partitions=len(statuses),
            records=sum(s.records_copied for s in statuses),
            bytes=sum(s.bytes_copied for s in statuses),
            halted=sum(s.state is State.HALTED for s in statuses),
            refused=len(self.refused),
            seconds=time.monotonic() - self._started_at,
        )


async def read_state_clock(local: Cluster) -> StateClock:
    """The local brokers' ``producer.id.expiration.ms`` (the lowest): how long a broker keeps
    our producer state after the newest timestamp we wrote. Unreadable (no DescribeConfigs
    on the cluster), no write is pipelined behind another: the fence is never relied on."""
    try:
        values = await local.broker_settings("producer.id.expiration.ms")
    except ClusterError as exc:
        values, why = {}, str(exc)
    else:
        why = "no broker answered"
    if not values:
        log.warning(
            "cannot read producer.id.expiration.ms of the local brokers (%s): every partition"
            " writes one batch at a time",
            why,
        )
        return StateClock(0)
    clock = StateClock(min(int(v) for v in values.values()))
    log.info("local brokers keep producer state for %d ms", clock.expiration_ms)
    return clock


class _Check:
    """Callable for ``retried``: succeeds once the local cluster's metadata shows the topics
    with their partition counts."""

    def __init__(self, local: Cluster, wanted: dict[str, int]) -> None:
        self.local = local
        self.wanted = wanted

    async def __call__(self) -> None:
        from syncer.errors import TransientClusterError

        counts = await self.local.partition_counts()
        for topic, count in self.wanted.items():
            if counts.get(topic, 0) < count:
                raise TransientClusterError(f"local topic {topic} not ready yet")
