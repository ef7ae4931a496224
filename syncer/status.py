"""What a running syncer shows: each partition's live figures (``PartitionStatus``, kept up
to date by its copier; its remotes' ends and dropped ones are views of the partition's
``PartitionSources``, which owns them) and ``Snapshot``, a plain value of the whole process
at one moment that ``/status``, ``/readyz`` and ``/metrics`` read, so none of them reaches
into a Syncer."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from syncer.clusters import TP
from syncer.holes import RemoteEnds
from syncer.offsets import GroupStatus
from syncer.partition import furthest_end
from syncer.ratelimit import ByteRate
from syncer.sources import SourceHealth
from syncer.topic_drift import TopicDrift


class State(StrEnum):
    STARTING = "starting"
    COPYING = "copying"
    CAUGHT_UP = "caught-up"
    RETRYING = "retrying"
    HALTED = "halted"
    STOPPED = "stopped"


@dataclass
class PartitionStatus:
    """Live figures of one partition, as status and metrics show them. ``remote_ends`` and
    ``dropped`` are read-only views here: ``PartitionSources`` changes them."""

    tp: TP
    local_end: int = -1
    remote_ends: Mapping[str, RemoteEnds] = field(default_factory=dict)
    state: State = State.STARTING
    error: str | None = None
    # the local end when the copier first read it: records copied are counted from it
    started_at_end: int | None = None
    bytes_copied: int = 0
    retries: int = 0
    served: dict[str, int] = field(default_factory=dict)  # remote → bytes written from it
    errors: dict[str, int] = field(default_factory=dict)  # kind → count
    filled: int = 0  # offsets written as filler records (policy fill)
    coalesced: int = 0  # source batches written inside one batch with others (coalesce_bytes)
    newest_timestamp_ms: int = 0  # of the newest record written (the batch's max timestamp)
    dropped: Mapping[str, str] = field(default_factory=dict)  # remote → why it is not used
    # writes go one at a time: the broker may hold no producer state for the partition
    one_at_a_time: bool = True
    # the newest record written is older than the local brokers' producer.id.expiration.ms
    older_than_producer_expiry: bool = False
    # why the writes wait and are retried (``alignment.waiting_for``: the local brokers'
    # last refusal, e.g. too few in-sync replicas), until a write lands again
    waiting: str | None = None
    # called after each change of ``state`` with the state left (``EventHub.partition_changed``)
    watcher: Callable[[PartitionStatus, State], None] | None = field(
        default=None, repr=False, compare=False
    )

    def __setattr__(self, name: str, value: object) -> None:
        if name != "state":  # the figures a write's answer moves: nothing to tell
            super().__setattr__(name, value)
            return
        before = self.__dict__.get("state")
        super().__setattr__(name, value)
        watcher = self.__dict__.get("watcher")
        if before is not None and before is not value and watcher is not None:
            watcher(self, before)

    @property
    def records_copied(self) -> int:
        """Offsets written locally since the copier started (fillers among them, counted
        apart in ``filled``): the local end it knows now less the end it started at. Not a
        count of answered writes: a write that landed while its answer was lost (a broker
        killed) is in the local end that is read back after it, and counted."""
        return copied_since(self.started_at_end, self.local_end)

    @property
    def remote_end(self) -> int:
        """The furthest end among the remotes still used (``partition.furthest_end``)."""
        return furthest_end(self.remote_ends, self.dropped)

    @property
    def lag(self) -> int:
        return max(0, self.remote_end - self.local_end)

    def copy(self) -> PartitionStatus:
        """These figures now, apart from the live ones (the copier goes on changing those)."""
        return dataclasses.replace(
            self,
            remote_ends=dict(self.remote_ends),
            served=dict(self.served),
            errors=dict(self.errors),
            dropped=dict(self.dropped),
            watcher=None,
        )


def copied_since(started_at_end: int | None, local_end: int) -> int:
    """Offsets written locally between the local end a copier started at and ``local_end``
    (none before the end is first read, nor if the end went back: that partition halts)."""
    if started_at_end is None or local_end < 0:
        return 0
    return max(0, local_end - started_at_end)


@dataclass(frozen=True)
class RemoteStatus:
    """One remote's measured health, as this process sees it at one moment."""

    name: str
    healthy: bool
    state: str  # "healthy" or "backing off"
    lanes: int
    connections: int  # open TCP connections, over all its lanes
    bytes_per_s: float
    served_bytes: int
    served_records: int
    errors: int
    last_error: str | None
    fetched_by_node: dict[int, int] = field(default_factory=dict)  # record bytes per broker
    max_bytes_per_s: float = 0.0  # its bandwidth cap (0: none)
    rate_bytes_per_s: float = 0.0  # record bytes per second fetched, over the last seconds

    @classmethod
    def of(
        cls,
        health: SourceHealth,
        now: float,
        connections: int,
        fetched_by_node: dict[int, int] | None = None,
        rate: ByteRate | None = None,
    ) -> RemoteStatus:
        return cls(
            health.name,
            health.healthy(now),
            health.state(now),
            health.lanes,
            connections,
            health.bytes_per_s,
            health.served_bytes,
            health.served_records,
            health.errors,
            health.last_error,
            dict(fetched_by_node or {}),
            rate.bytes_per_s if rate else 0.0,
            rate.rate(now) if rate else 0.0,
        )


@dataclass(frozen=True)
class Snapshot:
    """One process's figures at one moment (``Syncer.snapshot()``)."""

    name: str
    partitions: tuple[PartitionStatus, ...]
    remotes: tuple[RemoteStatus, ...]
    groups: dict[str, GroupStatus]  # consumer groups whose offsets are copied
    refused: int  # selected topics not mirrored
    buffer_used: int  # bytes fetched and not yet written
    buffer_limit: int
    # how long the local brokers keep our producer state (0: unknown)
    producer_id_expiration_ms: int
    max_bytes_per_s: float = 0.0  # the cap on all remotes together (0: none)
    rate_bytes_per_s: float = 0.0  # what all remotes together bring, over the last seconds
    topics: TopicDrift = field(default_factory=TopicDrift)  # settings synced, topics gone

    def dropped_partitions(self) -> dict[str, int]:
        """Per remote, the partitions that no longer use it."""
        out: dict[str, int] = {}
        for status in self.partitions:
            for name in status.dropped:
                out[name] = out.get(name, 0) + 1
        return out


def status_document(snapshot: Snapshot) -> dict[str, Any]:
    """A process's live view, as ``/status`` serves it (``syncer status`` reads it)."""
    partitions = [
        {
            "topic": s.tp.topic,
            "partition": s.tp.partition,
            "state": s.state.value,
            "local_end": s.local_end,
            "remote_ends": {n: e.end for n, e in s.remote_ends.items()},
            "lag": s.lag,
            "records_copied": s.records_copied,
            "bytes_copied": s.bytes_copied,
            "filled": s.filled,
            "coalesced_batches": s.coalesced,
            "served": dict(s.served),
            "dropped": dict(s.dropped),
            "one_at_a_time": s.one_at_a_time,
            "older_than_producer_expiry": s.older_than_producer_expiry,
            "waiting": s.waiting,
            "error": s.error,
        }
        for s in snapshot.partitions
    ]
    dropped = snapshot.dropped_partitions()
    remotes = [
        {
            "name": r.name,
            "state": r.state,
            "bytes_per_s": round(r.bytes_per_s),
            "served_bytes": r.served_bytes,
            "served_records": r.served_records,
            "errors": r.errors,
            "last_error": r.last_error,
            "dropped_partitions": dropped.get(r.name, 0),
            "fetched_bytes_by_node": {str(n): size for n, size in r.fetched_by_node.items()},
            "max_bytes_per_s": round(r.max_bytes_per_s),  # its bandwidth cap (0: none)
            "rate_bytes_per_s": round(r.rate_bytes_per_s),
        }
        for r in snapshot.remotes
    ]
    groups = {name: dataclasses.asdict(g) for name, g in sorted(snapshot.groups.items())}
    return {
        "name": snapshot.name,
        # partitions whose data is older than producer_id_expiration_ms write one batch at a
        # time
        "producer_id_expiration_ms": snapshot.producer_id_expiration_ms,
        "partitions": partitions,
        "remotes": remotes,
        "groups": groups,
        # the cap on all remotes together (0: none) and what they bring now
        "max_bytes_per_s": round(snapshot.max_bytes_per_s),
        "rate_bytes_per_s": round(snapshot.rate_bytes_per_s),
        "topics": topics_document(snapshot.topics),
    }


def topics_document(drift: TopicDrift) -> dict[str, Any]:
    """Per topic: copied settings synced from its remote (count, the last change and when),
    changes held back (key → why), the remotes where it was deleted, and the remotes it is
    not copied from any more (remote → why)."""
    return {
        "configs_synced": dict(sorted(drift.synced.items())),
        "last_config_sync": {
            t: {"at": at, "changes": changes}
            for t, (at, changes) in sorted(drift.last_sync.items())
        },
        "configs_held": {t: dict(h) for t, h in sorted(drift.held.items())},
        "gone_at_remote": {t: list(where) for t, where in sorted(drift.gone.items())},
        "remotes_dropped": {t: dict(sorted(d.items())) for t, d in sorted(drift.dropped.items())},
    }


@dataclass(frozen=True)
class Summary:
    """What a run did, for the one-line summary at the end."""

    partitions: int
    records: int
    bytes: int
    halted: int
    refused: int
    seconds: float
    # consumer group offsets (None: no groups chosen, ``groups.include``): the groups seen,
    # the offsets committed locally, and why some could not be copied ("group G: why", or
    # the pass's own failure: a remote that did not list its groups)
    groups: int | None = None
    group_offsets: int = 0
    group_failures: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        statuses: list[PartitionStatus],
        refused: int,
        seconds: float,
        groups: Mapping[str, GroupStatus] | None = None,
        groups_failure: str | None = None,
    ) -> Summary:
        failures = [
            f"group {n}: {g.skipped}" for n, g in sorted((groups or {}).items()) if g.failed
        ]
        return cls(
            partitions=len(statuses),
            records=sum(s.records_copied for s in statuses),
            bytes=sum(s.bytes_copied for s in statuses),
            halted=sum(s.state is State.HALTED for s in statuses),
            refused=refused,
            seconds=seconds,
            groups=None if groups is None else len(groups),
            group_offsets=sum(g.committed for g in (groups or {}).values()),
            group_failures=(*([groups_failure] if groups_failure else []), *failures),
        )

    def line(self) -> str:
        groups = ""
        if self.groups is not None:
            groups = f" ◆ {self.group_offsets} group offsets committed ({self.groups} groups"
            failures = len(self.group_failures)
            groups += f", {failures} failure{'s' * (failures != 1)})" if failures else ")"
        return (
            f"summary ◆ {self.partitions} partitions ◆ {self.records} records"
            f" ◆ {self.bytes / 1e6:.1f} MB copied ◆ {self.halted} halted"
            f" ◆ {self.refused} topics refused{groups} ◆ {self.seconds:.1f}s"
        )
