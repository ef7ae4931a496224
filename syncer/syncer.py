"""``Syncer``: the library's front door. Connects to the clusters, decides which topics are
mirrored, runs one copier per partition, and stops cleanly.

    async with Syncer(config) as syncer:
        summary = await syncer.catch_up()

It never installs signal handlers, logging handlers or touches the event loop policy (the
CLI does that), and its metrics go to its own registry, or the one the host passes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
from functools import partial
from typing import TYPE_CHECKING

from syncer.admin import Census
from syncer.alignment import StateClock
from syncer.assignment import decode_writer, writer_of, writing_otherwise
from syncer.budget import ByteBudget
from syncer.clusters import TP, ClusterSet, Reached, in_order
from syncer.config import Config
from syncer.coordination import GroupMember, WriterRefused
from syncer.copier import PartitionCopier
from syncer.errors import PartitionHalted, SyncerError, UnreachableError
from syncer.events import DEFAULT_MAX_QUEUED, EventHub, Subscription
from syncer.fetcher import Fetcher
from syncer.holes import RemoteEnds
from syncer.identity import WriterIdentity, load_identity
from syncer.lanes import Lanes, fetch_sizes
from syncer.metrics import Instruments
from syncer.mirroring import MirroredTopics
from syncer.offsets import OffsetCopier, copies_offsets
from syncer.partition import PartitionSources
from syncer.ratelimit import ByteRate
from syncer.retry import retried
from syncer.sources import SourceHealth
from syncer.status import PartitionStatus, RemoteStatus, Snapshot, State, Summary
from syncer.tasks import cancel_and_wait, unless_stopped, waiting_at
from syncer.topic_ids import LOCAL, remote_label
from syncer.topics import TopicPlan
from syncer.writer import Writer
from syncer.writes import lowered_state_clock, read_state_clock

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)

# a catch-up beside a group that is rebalancing waits this long for it to settle before
# reading how its members write (DescribeGroups tells their metadata only then)
REBALANCE_WAIT_S = 15.0
SETTLED_STATES = ("Stable", "Empty", "Dead")

# a topic refresh that failed (the local or a remote cluster away) is tried again after this,
# doubling while it keeps failing, up to the refresh interval: at start no partition is
# copied until one succeeds (at 30 s, a cluster back in 2 s cost a member half a minute)
REFRESH_RETRY_S = 1.0
STATE_CLOCK_S = 60.0  # producer.id.expiration.ms read again at least this often
REACH_RETRY_S = 30.0  # between attempts to connect a remote left out at the start


class Syncer:
    """Keeps the local cluster's selected partitions identical to the remotes'. ``config``
    is checked as a file's would be (``ConfigError`` lists every problem); the metrics go
    into ``registry`` (a fresh one if None: ``self.registry``)."""

    def __init__(self, config: Config, registry: CollectorRegistry | None = None) -> None:
        self.config = config = config.validate()
        self.hub = EventHub()  # what ``events()`` subscribes to
        self.clusters = ClusterSet(config)  # local, remotes and their lanes: one lifecycle
        self.local = self.clusters.local
        self.remotes = self.clusters.remotes
        self.copiers: dict[TP, PartitionCopier] = {}
        self.copiers_changed = 0  # copiers made and dropped so far (``syncer.heap``)
        self._tasks: dict[TP, asyncio.Task[PartitionStatus]] = {}
        self._fetchers: dict[str, Lanes] = {}
        self._writer: Writer | None = None
        self._identity: WriterIdentity | None = None
        self.state_clock = StateClock(0)  # read from the local brokers at start
        self._started_at = time.monotonic()
        self._stop = asyncio.Event()
        # set once a topic refresh left nothing to create: every local topic of the first
        # plan exists (``syncer run``'s check waits for it, not to slow the creation)
        self.planned = asyncio.Event()
        self._running: contextlib.AsyncExitStack | None = None  # what start opened
        self.topics = MirroredTopics(config.topics, self.local, self.remotes, config.mirrors)
        self.member: GroupMember | None = None
        # remotes left out at start, connected since (with their topics as then read)
        self._reached: dict[str, tuple[Reached, Census]] = {}
        self._nudge = asyncio.Event()  # set when one is: the refresh loop takes it in
        # one measured health per remote, shared by every partition of this process
        self.health = {
            r.name: SourceHealth(r.name, rank, r.connections, watcher=self.hub.remote_changed)
            for rank, r in enumerate(config.remotes)
        }
        self.memory = ByteBudget(config.copier.buffer_bytes)
        # bandwidth: each remote's cap and the process's (0: none), and the rates under them
        now = time.monotonic()
        self.rates = {r.name: ByteRate(r.max_bytes_per_second, now) for r in config.remotes}
        self.rate = ByteRate(config.copier.max_bytes_per_second, now)
        self.instruments = Instruments(registry)
        self.registry = self.instruments.attach(self.snapshot)
        self._grouped = False  # run() shares partitions through the group; catch_up() does not
        # a catch-up beside the running members of its group leaves the group offsets to
        # them (two copiers could move a commit back): the group, or None
        self.group_offsets_left_to: str | None = None
        mirrored_now = lambda: dict(self.topics.mirror)  # noqa: E731
        self.offsets = OffsetCopier(
            config.groups, self.local, self.remotes, mirrored_now, lambda: self.topics.sources
        )
        if config.coordination.enabled:
            self.member = GroupMember(
                config, self._on_assigned, self._on_revoked, self._on_member_failed
            )
            self.offsets.may_copy = self._copies_group_offsets
        self.offsets.dropped = lambda: {
            tp: tuple(c.status.dropped) for tp, c in self.copiers.items() if c.status.dropped
        }

    def _copies_group_offsets(self) -> bool:
        """In a group, one member copies them (``copies_offsets``); a catch-up does unless
        the group's members run beside it (``group_offsets_left_to``)."""
        if not self._grouped or self.member is None:
            return self.group_offsets_left_to is None
        member = self.member
        return copies_offsets(self.topics.mirror, member.assigned, member.may_write())

    @property
    def refused(self) -> dict[str, str]:
        """Selected topics not mirrored: topic → why (partition counts, settings)."""
        return self.topics.refused

    @property
    def halted_topics(self) -> dict[str, str]:
        """Topics halted because their id changed: topic → why."""
        return self.topics.halted

    def __repr__(self) -> str:
        states = collections.Counter(c.status.state.value for c in self.copiers.values())
        shown = ", ".join(f"{k}: {v}" for k, v in sorted(states.items())) or "idle"
        return f"<Syncer {self.config.name} [{shown}]>"

    async def __aenter__(self) -> Syncer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to every cluster, load the writer identity, and start the writer and the
        fetchers; idempotent. Should any of it fail, what was started is stopped. Outside a
        group, a remote that is unreachable while another answers is left out (``run``
        tries it again and takes it in once it answers; ``catch_up`` raises its
        ``UnreachableError``)."""
        if self._running is not None:
            return
        self._started_at = time.monotonic()
        async with contextlib.AsyncExitStack() as stack:
            # in a group every remote must answer: its leader hands out only the topics
            # every member mirrors, so a member without one remote would hold that remote's
            # own topics back from the whole group
            await self.clusters.start(required=self.config.coordination.enabled)
            stack.push_async_callback(self.clusters.stop)
            if not self.remotes:  # not one answers: a wrong address, most likely
                raise next(iter(self.clusters.unreachable.values()))
            self._identity = await retried(
                partial(load_identity, self.local, self.config.state_topic, self.config.name),
                what="loading the writer identity",
            )
            if self.member is not None:  # told at each join: the leader refuses another
                identity = self._identity
                self.member.assignor.writer = writer_of(
                    self.config.name, identity.producer_id, identity.producer_epoch
                )
            self.state_clock = await read_state_clock(self.local)
            watch = asyncio.create_task(self._watch_state_clock(), name="state-clock")
            watch.add_done_callback(_died_loudly)
            stack.push_async_callback(cancel_and_wait, watch)
            for name in self.remotes:
                self._fetchers[name] = await stack.enter_async_context(self._lanes(name))
            self._writer = await stack.enter_async_context(
                Writer(
                    self.local,
                    max_in_flight=self.config.copier.max_in_flight,
                    may_write=self._may_write,
                    observe=self.instruments.produce_seconds.observe,
                    topic_ids=self.topics.ids[LOCAL],  # learned before a topic's copiers start
                )
            )
            self._running = stack.pop_all()

    def _lanes(self, remote: str) -> Lanes:
        """A fetcher on each lane of ``remote``, sized by its own fetch limits."""
        sizes = fetch_sizes(self.config.copier, self.remotes[remote].config)
        observe = self.instruments.fetch_seconds.labels(remote).observe
        ids = self.topics.ids[remote_label(remote)]
        caps = (self.rates[remote], self.rate)
        lanes = self.clusters.lanes(remote)
        fetchers = [Fetcher(c, sizes, observe, ids, caps) for c in lanes]
        return Lanes(fetchers, wanted=self.config.mirrors)

    def open_connections(self) -> dict[str, int]:
        """Open TCP connections per remote, over all its lanes."""
        return self.clusters.open_connections()

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
        running, self._running = self._running, None
        if running is not None:
            await running.aclose()  # the writer, the fetchers, then the clusters
        self.hub.close()  # subscribers read what is queued, then their iteration ends

    def events(self, max_queued: int = DEFAULT_MAX_QUEUED) -> Subscription:
        """A new subscription to this Syncer's events (``syncer.events``) until ``stop()``;
        at most ``max_queued`` unread, the oldest dropped (counted)."""
        return self.hub.subscribe(max_queued)

    async def _finish(self, tasks: list[asyncio.Task[PartitionStatus]]) -> None:
        """Wait for stopping copiers to drain, bounded; cancel the ones that do not."""
        tasks = [t for t in tasks if not t.done()]
        if tasks:
            timeout = self.config.copier.shutdown_timeout_s
            _done, late = await asyncio.wait(tasks, timeout=timeout)
            if late:
                where = ", ".join(sorted(f"{t.get_name()} in {waiting_at(t)}" for t in late))
                log.warning("%d copiers did not drain within %.0f s: %s", len(late), timeout, where)
            await cancel_and_wait(*late, msg="shutdown timeout")

    async def _watch_state_clock(self) -> None:
        """The local brokers' ``producer.id.expiration.ms`` read again at every topic
        refresh interval, in both modes: lowered while we copy (it is a dynamic setting; a
        broker may restart with a lower one), the copiers' writes are pipelined only while
        their records are fresh by the new value. The broker checks for expired producers
        every ``producer.id.expiration.check.interval.ms`` (10 minutes by default), so a
        change is seen here (every minute at most) well before the state it expires is
        gone, at the default."""
        while True:
            await asyncio.sleep(min(self.config.topics.refresh_interval_s, STATE_CLOCK_S))
            lowered = await lowered_state_clock(self.local, self.state_clock)
            if lowered is None:
                continue
            log.warning(
                "local brokers now keep producer state for %d ms (was %d): writes are"
                " pipelined only while their records are newer than that",
                lowered.expiration_ms,
                self.state_clock.expiration_ms,
            )
            self.state_clock = lowered
            for copier in self.copiers.values():
                copier.use_state_clock(lowered)

    # the two modes ----------------------------------------------------------------------

    async def catch_up(self) -> Summary:
        """Snapshot the remote ends now and copy until the local ends reach them. Every
        selected partition, in this process (a group, if configured, is not joined; running
        beside the group's members is safe: the shared writer identity dedupes)."""
        await self.start()
        if self.clusters.unreachable:  # its ends are part of the snapshot
            raise next(iter(self.clusters.unreachable.values()))
        if self.config.coordination.enabled:
            await self._refuse_another_writer(self.config.coordination.group)
        await self.refresh_topics()
        if self._stop.is_set():  # asked to stop while starting: no copier starts
            return self.summary()
        targets = {tp: c.status.remote_end for tp, c in self.copiers.items()}
        for tp, copier in self.copiers.items():
            if tp.topic not in self.halted_topics:
                self._spawn(tp, copier.run(until=targets[tp]))
        # no topic refresh runs during a catch-up: the ids are still checked
        ids = self.topics.watch_ids(self._halt_topic, self._drop_remote)
        watcher = asyncio.create_task(ids, name="topic-ids")
        try:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        finally:
            await cancel_and_wait(watcher)
        if self.config.groups.include:
            try:
                await self.offsets.copy_once()  # the local log now reaches the remote ends
            except SyncerError as exc:  # the summary names it (a group's, or the pass's)
                log.warning("copying consumer group offsets: %s", exc)
        return self.summary()

    async def _refuse_another_writer(self, group: str) -> None:
        """A catch-up beside the running members of ``group`` must write as they do: with
        another producer id (another ``name`` or ``state_topic``) the broker keeps the two
        apart by nothing, and the same offsets land twice (``WriterRefused``, exit 3). A
        group that cannot be described is not checked (said in the log)."""
        identity = self._identity
        assert identity is not None, "started"
        own = writer_of(self.config.name, identity.producer_id, identity.producer_epoch)
        deadline = time.monotonic() + REBALANCE_WAIT_S
        try:
            state, told = await self.local.group_user_data(group)
            while state not in SETTLED_STATES and time.monotonic() < deadline:
                await asyncio.sleep(1.0)  # metadata is told only once the group is stable
                state, told = await self.local.group_user_data(group)
        except SyncerError as exc:
            log.warning("group %s: reading how its members write: %s; not checked", group, exc)
            return
        if told:
            self.group_offsets_left_to = group
        if state not in SETTLED_STATES:
            log.warning("group %s: still %s: how its members write not checked", group, state)
            return
        others = writing_otherwise({m: decode_writer(data) for m, data in told.items()}, own)
        if others:
            theirs, members = collections.Counter(others.values()).most_common(1)[0]
            raise WriterRefused(group, own, theirs, members)

    async def run(self) -> Summary:
        """Copy continuously until ``stop()`` (or ``request_stop()``). With
        ``coordination.group`` set, only the partitions the group assigns to this process;
        should its membership fail for good (another process took its instance id), the
        copy drains and this raises why (a ``ConfigError``)."""
        await self.start()
        self._grouped = self.member is not None
        self.topics.staged = self.member is None  # see MirroredTopics.staged: not in a group
        # the group's coordinator asked for while the first refresh creates the local topics
        side = [asyncio.create_task(self.member.announce(self.local))] if self.member else []
        if self.clusters.unreachable:
            side.append(asyncio.create_task(self._reach_left_out(), name="reach-remotes"))
        if self.config.groups.include:
            side.append(asyncio.create_task(self.offsets.run(self._stop), name="group-offsets"))
        try:
            await self._run_until_stopped()
        finally:
            await cancel_and_wait(*side)
            for reached, _census in self._reached.values():  # connected, never taken in
                await reached.opened.aclose()
            self._reached.clear()
        if self.member is not None and self.member.failed is not None:
            raise self.member.failed
        return self.summary()

    async def _run_until_stopped(self) -> None:
        failed = 0  # topic refreshes failed in a row (a cluster away: tried again sooner)
        while not self._stop.is_set():
            await self._adopt_reached()
            try:
                await unless_stopped(self.refresh_topics(), self._stop, "topic-refresh")
                failed = 0
            except SyncerError as exc:
                if not exc.retriable:
                    raise
                failed += 1
                log.warning("topic refresh failed, will try again: %s", exc)
            if self._stop.is_set():
                break
            if not self.topics.deferred:
                self.planned.set()
            if self._grouped:
                await self._share_through_group()
            else:
                for tp, copier in self.copiers.items():
                    if tp not in self._tasks and tp.topic not in self.halted_topics:
                        self._spawn(tp, copier.run())
            wait = self.topics.next_refresh_s
            if failed:  # 1, 2, 4 ... s, up to the refresh interval
                wait = min(wait, REFRESH_RETRY_S * 2 ** min(failed - 1, 10))
            await self._sleep(wait)
        for copier in self.copiers.values():
            copier.request_stop()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def _reach_left_out(self) -> None:
        """Try the remotes left out at the start, all at once, every ``REACH_RETRY_S``
        until each has answered, its topics read too; each one reached wakes the refresh
        loop, where ``_adopt_reached`` takes it in."""
        for name, exc in self.clusters.unreachable.items():
            log.warning(
                "remote %s left out at start (%s): copying from the others, and trying it"
                " again every %.0f s",
                name,
                exc,
                REACH_RETRY_S,
            )
        while True:
            left = sorted(self.clusters.unreachable.keys() - self._reached.keys())
            if not left:
                return
            await asyncio.gather(*(self._reach(name) for name in left))
            await asyncio.sleep(REACH_RETRY_S)

    async def _reach(self, name: str) -> None:
        try:
            reached = await self.clusters.reach(name)
        except UnreachableError as exc:
            log.info("remote %s still left out: %s", name, exc)
            return
        except Exception as exc:  # credentials refused, too old ...: what an operator fixes
            log.error("remote %s left out: %s", name, exc)
            return
        try:  # read once here, so that the refresh that takes it in has a census to fall
            census = await reached.lanes[0].topic_census()  # back on should it go away
        except Exception as exc:
            await reached.opened.aclose()
            log.info("remote %s still left out: its topics not read: %s", name, exc)
            return
        self._reached[name] = (reached, census)
        self._nudge.set()

    async def _adopt_reached(self) -> None:
        """Take in the remotes reached since the last refresh, with their fetchers: the
        refresh then reads their topics, and copiers of the topics they hold start again
        with them (``_renew_copiers``), as for a remote that comes to hold a topic."""
        for name in list(self._reached):
            assert self._running is not None
            reached, census = self._reached.pop(name)
            self.clusters.adopt(reached)
            self.topics.seed(name, census)
            self._fetchers[name] = await self._running.enter_async_context(self._lanes(name))
            in_order(self._fetchers, self.remotes)
            log.warning("remote %s answers now: its topics join the copy", name)

    async def _sleep(self, seconds: float) -> None:
        """Until the next refresh: ``seconds``, or less if a stop is asked for or a remote
        left out at the start answers."""
        stopped = asyncio.ensure_future(self._stop.wait())
        nudged = asyncio.ensure_future(self._nudge.wait())
        try:
            await asyncio.wait(
                (stopped, nudged), timeout=seconds, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            await cancel_and_wait(stopped, nudged)
        self._nudge.clear()

    def request_stop(self) -> None:
        """Ask ``run`` to drain and return; safe to call from a signal handler."""
        self._stop.set()
        for copier in self.copiers.values():
            copier.request_stop()

    # coordination -----------------------------------------------------------------------

    async def _share_through_group(self) -> None:
        """Tell the group leader's assignor the gaps, and keep the subscription current."""
        assert self.member is not None
        tps = [TP(t, p) for t, n in self.topics.mirror.items() for p in range(n)]
        try:
            self.member.update_gaps(await self.topics.gaps(tps))
        except SyncerError as exc:
            log.info("could not measure gaps for the assignor: %s", exc)
        await self.member.subscribe(self.topics.mirror)

    def _on_member_failed(self, failed: SyncerError) -> None:
        self.request_stop()  # the member logged why; ``run`` raises it once drained

    async def _on_assigned(self, assigned: set[TP]) -> None:
        self.instruments.rebalances.inc()
        for tp in sorted(assigned):
            self._start_copier(tp)

    def _start_copier(self, tp: TP) -> None:
        """A copier for ``tp``, owned through the group, unless one still runs."""
        if tp in self._tasks and not self._tasks[tp].done():
            return
        self.copiers[tp] = self._copier(tp, {})
        if tp.topic in self.halted_topics:
            self._halt_copier(tp, self.halted_topics[tp.topic])
            return
        self._spawn(tp, self.copiers[tp].run())

    async def _on_revoked(self, revoked: set[TP]) -> None:
        """Stop the revoked partitions' copiers before the group moves them elsewhere."""
        tasks = []
        for tp in revoked:
            copier = self.copiers.pop(tp, None)
            if copier is not None:
                self.copiers_changed += 1
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
        return await self.topics.plan({tp.topic for tp in self.copiers})

    async def refresh_topics(self) -> TopicPlan:
        """Find selected topics, create or grow local ones, and make a copier per new
        partition with the remotes' current ends. A topic refused (shape or settings) gets
        no copier; one refused while it is copied has its copiers stopped; one whose id
        changed halts."""
        found = await self.topics.refresh({tp.topic for tp in self.copiers})
        for tp, copier in self.copiers.items():
            if tp.topic in found.plan.refused:
                copier.request_stop()  # e.g. a local setting changed while we copied
        for topic, reason in found.halted.items():
            self._halt_topic(topic, reason)
        for topic, drops in found.dropped.items():
            for remote, reason in drops.items():
                self._drop_remote(topic, remote, reason)
        await self._renew_copiers()
        if self._grouped:
            return found.plan  # copiers come and go with the group's assignment
        new = [
            TP(t, p)
            for t, n in self.topics.mirror.items()
            for p in range(n)
            if TP(t, p) not in self.copiers
        ]
        if new:
            ends = await self.topics.remote_ends(new)
            for tp in new:
                self.copiers[tp] = self._copier(tp, ends.get(tp, {}))
        return found.plan

    async def _renew_copiers(self) -> None:
        """A copier's remotes are those holding its topic when it was made. A remote that
        holds it since (created there later, or away when the copier was made) would
        otherwise never serve it, even once the others are gone: copiers of such a topic
        stop, drain, and are made again with every remote holding it. The local log is
        the checkpoint, so each goes on at the local end; a renewed copier's new remote
        serves only once its records agree with the local log, as any remote does."""
        gained: dict[str, set[str]] = {}
        draining: dict[TP, asyncio.Task[PartitionStatus]] = {}
        for tp, copier in self.copiers.items():
            more = set(self.topics.sources.get(tp.topic, ())) - set(copier.fetchers)
            if more and tp.topic in self.topics.mirror and self._running_task(tp):
                gained.setdefault(tp.topic, set()).update(more)
                draining[tp] = self._tasks[tp]
        if not draining:
            return
        for topic, names in sorted(gained.items()):
            log.info(
                "topic %s: now also held by remote %s: its copiers start again with it",
                topic,
                ", ".join(sorted(names)),
            )
        for tp in draining:
            self.copiers[tp].request_stop()
        await self._finish(list(draining.values()))
        if self._stop.is_set():
            return  # stopping: their statuses stay for the summary
        renewed = [
            tp  # not revoked or made again meanwhile, nor halted (its status says why)
            for tp, task in draining.items()
            if self._tasks.get(tp) is task
            and self.copiers[tp].status.state is not State.HALTED
            and tp.topic not in self.halted_topics
        ]
        for tp in renewed:
            del self._tasks[tp]
            del self.copiers[tp]
        if self._grouped:  # made again here if still owned; else below, with the new ones
            assert self.member is not None
            for tp in renewed:
                if tp in self.member.assigned:
                    self._start_copier(tp)

    def _running_task(self, tp: TP) -> bool:
        task = self._tasks.get(tp)
        return task is not None and not task.done()

    def _halt_topic(self, topic: str, reason: str) -> None:
        """Halt every partition of ``topic`` (it stays in ``halted_topics``, so copiers made
        for it later halt too)."""
        for tp in [tp for tp in self.copiers if tp.topic == topic]:
            self._halt_copier(tp, reason)

    def _drop_remote(self, topic: str, remote: str, reason: str) -> None:
        """``remote`` serves ``topic`` no more (``MirroredTopics.dropped``): each copier of
        it that uses it drops it, and halts if it was its last."""
        for tp, copier in list(self.copiers.items()):
            if tp.topic != topic or remote not in copier.fetchers:
                continue
            if remote in copier.sources.dropped:
                continue
            try:
                copier.agreement.drop_for_topic(remote, reason)
            except PartitionHalted as exc:
                self._halt_copier(tp, exc)

    def _halt_copier(self, tp: TP, reason: str | PartitionHalted) -> None:
        """Halt ``tp``'s copier and end its task at once: whatever it awaits, it writes
        nothing more (its queued writes are dropped by the halt)."""
        if isinstance(reason, str):
            reason = PartitionHalted(f"{tp.topic}[{tp.partition}]: {reason}")
        self.copiers[tp].halt(reason)
        task = self._tasks.get(tp)
        if task is not None and not task.done():
            task.cancel(f"topic {tp.topic} halted")

    def _copier(self, tp: TP, ends: dict[str, RemoteEnds]) -> PartitionCopier:
        assert self._writer is not None and self._identity is not None
        self.copiers_changed += 1
        named = self.topics.sources.get(tp.topic) or tuple(ends) or tuple(self._fetchers)
        dropped = self.topics.dropped.get(tp.topic, {})  # its log there gone or another
        sources = tuple(n for n in named if n not in dropped) or named  # none: it halts
        fetchers = {name: self._fetchers[name] for name in sources}
        health = {name: self.health[name] for name in fetchers}
        copier = PartitionCopier(
            tp,
            self.local,
            self._writer,
            fetchers,
            self._identity,
            self.config.copier,
            PartitionSources(tp, health, ends),
            self.memory,
            fill_holes=self.config.topics.fills(tp.topic),
            align_start=self.config.topics.align_start,
            state_clock=self.state_clock,
        )
        copier.status.watcher = self.hub.partition_changed
        return copier

    # reporting --------------------------------------------------------------------------

    def statuses(self) -> list[PartitionStatus]:
        return [c.status for _tp, c in sorted(self.copiers.items())]

    def snapshot(self) -> Snapshot:
        """This process's figures now, as a plain value (for /status, /readyz, /metrics)."""
        now = time.monotonic()
        connections = self.open_connections()
        fetched = self.clusters.fetched_bytes()
        return Snapshot(
            name=self.config.name,
            partitions=tuple(s.copy() for s in self.statuses()),
            remotes=tuple(
                self._left_out(
                    RemoteStatus.of(
                        health, now, connections.get(name, 0), fetched.get(name), self.rates[name]
                    )
                )
                for name, health in self.health.items()
            ),
            max_bytes_per_s=self.rate.bytes_per_s,
            rate_bytes_per_s=self.rate.rate(now),
            groups={n: dataclasses.replace(g) for n, g in self.offsets.groups.items()},
            refused=len(self.refused),
            buffer_used=self.memory.used,
            buffer_limit=self.memory.limit,
            producer_id_expiration_ms=self.state_clock.expiration_ms,
            topics=self.topics.drift.copy(),
        )

    def _left_out(self, status: RemoteStatus) -> RemoteStatus:
        """A remote left out at the start is shown so until it is taken in."""
        exc = self.clusters.unreachable.get(status.name)
        if exc is None:
            return status
        return dataclasses.replace(
            status, healthy=False, state="left out at start", last_error=str(exc)
        )

    def summary(self) -> Summary:
        seconds = time.monotonic() - self._started_at
        groups = self.offsets.groups if self.config.groups.include else None
        failure = self.offsets.failure if groups is not None else None
        return Summary.of(self.statuses(), len(self.refused), seconds, groups, failure)


def _died_loudly(task: asyncio.Task[None]) -> None:
    """A background task that should run until cancelled ended: say why (a bug)."""
    if not task.cancelled() and task.exception() is not None:
        log.error("task %s ended: %r", task.get_name(), task.exception())
