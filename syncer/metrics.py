"""Prometheus metrics of one ``Syncer``, read from its live state at scrape time (nothing on
the data path counts twice). They go into the registry the host passes (``Syncer(config,
registry=...)``) or a fresh one, never prometheus_client's global ``REGISTRY``: several
Syncers live in one process, each in its own registry (two in one registry clash loudly).

Names follow Prometheus conventions: ``syncer_`` prefix, base units, ``_total`` counters."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from syncer.retry import RETRIES
from syncer.status import PartitionStatus, Snapshot, State
from syncer.topic_ids import remote_name

PARTITION = ["topic", "partition"]


class SyncerCollector(Collector):
    """Reads one snapshot per scrape from ``snapshot`` (``Syncer.snapshot``)."""

    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self.read_snapshot = snapshot

    def describe(self) -> Iterator[Metric]:
        """Nothing: a registry that describes on register (the global one) would otherwise
        collect, and so take a snapshot of a Syncer still being built."""
        return iter(())

    def collect(self) -> Iterator[Metric]:
        snapshot = self.read_snapshot()
        yield from self._partitions(snapshot)
        yield from self._remotes(snapshot)
        yield from self._topics(snapshot)
        refused = GaugeMetricFamily(
            "syncer_topics_refused",
            "Selected topics not mirrored (partition counts or settings differ)",
        )
        refused.add_metric([], snapshot.refused)
        yield refused
        retries = CounterMetricFamily(
            "syncer_cluster_retries",
            "Cluster operations retried after a transient error (process-wide)",
            labels=["operation"],
        )
        for operation, count in sorted(RETRIES.items()):
            retries.add_metric([operation], count)
        yield retries
        buffered = GaugeMetricFamily(
            "syncer_buffer_bytes", "Bytes fetched and not yet written (the process's budget)"
        )
        buffered.add_metric([], snapshot.buffer_used)
        yield buffered
        limit = GaugeMetricFamily("syncer_buffer_limit_bytes", "copier.buffer_bytes")
        limit.add_metric([], snapshot.buffer_limit)
        yield limit
        committed = CounterMetricFamily(
            "syncer_group_offsets_committed",
            "Consumer group offsets copied from a remote and committed locally",
            labels=["group", "remote"],
        )
        for name, group in sorted(snapshot.groups.items()):
            committed.add_metric([name, group.source], group.committed)
        yield committed

    def _topics(self, snapshot: Snapshot) -> Iterator[Metric]:
        synced = CounterMetricFamily(
            "syncer_topic_configs_synced",
            "Times a local topic's copied settings were changed to follow its remote",
            labels=["topic"],
        )
        held = GaugeMetricFamily(
            "syncer_topic_configs_held",
            "Copied settings a remote changed that are not applied locally (1; why: /status, log)",
            labels=["topic", "key"],
        )
        gone = GaugeMetricFamily(
            "syncer_topic_gone_at_remote",
            "Mirrored topics deleted at a remote (1; the local topic is kept)",
            labels=["topic", "remote"],
        )
        dropped = GaugeMetricFamily(
            "syncer_topic_remote_dropped",
            "Remotes a mirrored topic is not copied from any more: its log there deleted or"
            " recreated while another remote holds the one copied (1; why: /status, log)",
            labels=["topic", "remote"],
        )
        drift = snapshot.topics
        for topic, count in sorted(drift.synced.items()):
            synced.add_metric([topic], count)
        for topic, keys in sorted(drift.held.items()):
            for key in sorted(keys):
                held.add_metric([topic, key], 1)
        for topic, places in sorted(drift.gone.items()):
            for where in places:
                gone.add_metric([topic, remote_name(where)], 1)
        for topic, remotes in sorted(drift.dropped.items()):
            for name in sorted(remotes):
                dropped.add_metric([topic, name], 1)
        yield from (synced, held, gone, dropped)

    def _partitions(self, snapshot: Snapshot) -> Iterator[Metric]:
        """One family at a time, each built from every partition and yielded before the next
        is built: the exposition formats a family and lets it go, so at 10,000 partitions a
        scrape holds one family's samples, not all thirteen's (~170,000 at once, ~70 MiB)."""
        now_ms = time.time() * 1000
        statuses = snapshot.partitions
        for name, kind, documentation, extra, add in _PARTITION_FAMILIES:
            family = kind(name, documentation, labels=[*PARTITION, *extra])
            for status in statuses:
                add(family, [status.tp.topic, str(status.tp.partition)], status, now_ms)
            yield family
        errors = CounterMetricFamily(
            "syncer_errors", "Errors met by copiers, by kind", labels=["kind"]
        )
        by_kind: dict[str, int] = {}
        for status in statuses:
            for kind_name, count in status.errors.items():
                by_kind[kind_name] = by_kind.get(kind_name, 0) + count
        for health in snapshot.remotes:
            if health.errors:
                by_kind["fetch"] = by_kind.get("fetch", 0) + health.errors
        for kind_name, count in sorted(by_kind.items()):
            errors.add_metric([kind_name], count)
        yield errors

    def _remotes(self, snapshot: Snapshot) -> Iterator[Metric]:
        served = CounterMetricFamily(
            "syncer_remote_served_bytes",
            "Bytes written to local from this remote",
            labels=["remote"],
        )
        served_records = CounterMetricFamily(
            "syncer_remote_served_records",
            "Records written to local from this remote",
            labels=["remote"],
        )
        errors = CounterMetricFamily(
            "syncer_remote_fetch_errors", "Fetches from this remote that failed", labels=["remote"]
        )
        healthy = GaugeMetricFamily(
            "syncer_remote_healthy",
            "0 while the remote is backed off after errors",
            labels=["remote"],
        )
        rate = GaugeMetricFamily(
            "syncer_remote_fetch_throughput_bytes_per_second",
            "Moving average of the remote's fetch throughput",
            labels=["remote"],
        )
        lanes = GaugeMetricFamily(
            "syncer_remote_lanes",
            "Clients reading the remote (remotes[].connections)",
            labels=["remote"],
        )
        connections = GaugeMetricFamily(
            "syncer_remote_connections",
            "Open TCP connections to the remote's brokers",
            labels=["remote"],
        )
        fetched = CounterMetricFamily(
            "syncer_remote_fetched_bytes",
            "Record bytes fetched from this remote, by the broker (node id) that served them:"
            " with client_rack, the nearby follower's share",
            labels=["remote", "node"],
        )
        cap = GaugeMetricFamily(
            "syncer_remote_max_bytes_per_second",
            "The remote's bandwidth cap (remotes[].max_bytes_per_second; 0: none)",
            labels=["remote"],
        )
        taken = GaugeMetricFamily(
            "syncer_remote_rate_bytes_per_second",
            "Record bytes per second fetched from the remote over the last 5 s",
            labels=["remote"],
        )
        for remote in snapshot.remotes:
            name = remote.name
            cap.add_metric([name], remote.max_bytes_per_s)
            taken.add_metric([name], remote.rate_bytes_per_s)
            for node, size in sorted(remote.fetched_by_node.items()):
                fetched.add_metric([name, str(node)], size)
            connections.add_metric([name], remote.connections)
            lanes.add_metric([name], remote.lanes)
            served.add_metric([name], remote.served_bytes)
            served_records.add_metric([name], remote.served_records)
            errors.add_metric([name], remote.errors)
            healthy.add_metric([name], 1 if remote.healthy else 0)
            rate.add_metric([name], remote.bytes_per_s)
        yield from (served, served_records, errors, healthy, rate, lanes, connections, fetched)
        yield from (cap, taken)
        yield GaugeMetricFamily(
            "syncer_fetch_max_bytes_per_second",
            "The cap on all remotes together (copier.max_bytes_per_second; 0: none)",
            value=snapshot.max_bytes_per_s,
        )
        yield GaugeMetricFamily(
            "syncer_fetch_rate_bytes_per_second",
            "Record bytes per second fetched from all remotes over the last 5 s",
            value=snapshot.rate_bytes_per_s,
        )


# request latencies on loopback are milliseconds; over a long link, seconds
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Instruments:
    """What is counted as it happens (the rest is read from live state at scrape time)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.fetch_seconds = Histogram(
            "syncer_fetch_duration_seconds",
            "Fetch requests to a remote, from send to answer",
            ["remote"],
            registry=self.registry,
            buckets=LATENCY_BUCKETS,
        )
        self.produce_seconds = Histogram(
            "syncer_produce_duration_seconds",
            "Produce requests to the local cluster, from send to answer",
            registry=self.registry,
            buckets=LATENCY_BUCKETS,
        )
        self.rebalances = Counter(
            "syncer_rebalances", "Group assignments received", registry=self.registry
        )
        self._collector: SyncerCollector | None = None

    def attach(self, snapshot: Callable[[], Snapshot]) -> CollectorRegistry:
        """This registry, with the figures ``snapshot`` gives read at each scrape."""
        if self._collector is None:
            self._collector = SyncerCollector(snapshot)
            self.registry.register(self._collector)
        return self.registry


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry in Prometheus' text format, formatted and encoded one family at a time
    (``generate_latest`` of the whole registry keeps a string per sample until the end: at
    10,000 partitions ~160,000 of them beside the text)."""
    return b"".join(generate_latest(_Just(metric)) for metric in registry.collect())


class _Just(Collector):
    """One family, as a collector ``generate_latest`` formats."""

    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> Iterator[Metric]:
        yield self.metric


Family = GaugeMetricFamily | CounterMetricFamily
AddSamples = Callable[[Family, list[str], PartitionStatus, float], None]


def _each_remote_end(family: Family, key: list[str], status: PartitionStatus, _: float) -> None:
    for name, ends in status.remote_ends.items():
        family.add_metric([*key, name], ends.end)


def _each_served(family: Family, key: list[str], status: PartitionStatus, _: float) -> None:
    for name, size in status.served.items():
        family.add_metric([*key, name], size)


def _each_state(family: Family, key: list[str], status: PartitionStatus, _: float) -> None:
    for each in State:
        family.add_metric([*key, each.value], 1 if status.state is each else 0)


def _each_dropped(family: Family, key: list[str], status: PartitionStatus, _: float) -> None:
    for name in status.dropped:
        family.add_metric([*key, name], 1)


def _lag_seconds(family: Family, key: list[str], status: PartitionStatus, now_ms: float) -> None:
    if not status.lag:
        family.add_metric(key, 0.0)
    elif status.newest_timestamp_ms > 0:  # unknown until this process copied one
        family.add_metric(key, max(0.0, (now_ms - status.newest_timestamp_ms) / 1000))


def _one(value: Callable[[PartitionStatus], float]) -> AddSamples:
    def add(family: Family, key: list[str], status: PartitionStatus, _: float) -> None:
        family.add_metric(key, value(status))

    return add


Gauge, Count = GaugeMetricFamily, CounterMetricFamily
# name, kind, help, labels after topic and partition, how a partition adds its samples
_PARTITION_FAMILIES: list[tuple[str, type[Family], str, list[str], AddSamples]] = [
    (
        "syncer_partition_local_end_offset",
        Gauge,
        "Local log-end offset",
        [],
        _one(lambda s: max(s.local_end, 0)),
    ),
    (
        "syncer_partition_remote_end_offset",
        Gauge,
        "Remote log-end offset (last stable offset)",
        ["remote"],
        _each_remote_end,
    ),
    (
        "syncer_partition_lag_records",
        Gauge,
        "Records the furthest remote holds that local does not",
        [],
        _one(lambda s: s.lag),
    ),
    (
        "syncer_partition_records_copied",
        Count,
        "Records written to local",
        [],
        _one(lambda s: s.records_copied),
    ),
    (
        "syncer_partition_bytes_copied",
        Count,
        "Bytes written to local",
        [],
        _one(lambda s: s.bytes_copied),
    ),
    (
        "syncer_partition_served_bytes",
        Count,
        "Bytes written to local, by the remote they came from",
        ["remote"],
        _each_served,
    ),
    ("syncer_partition_state", Gauge, "1 for the partition's copier state", ["state"], _each_state),
    (
        "syncer_partition_halted",
        Gauge,
        "1 when the partition stopped on an error",
        [],
        _one(lambda s: 1 if s.state is State.HALTED else 0),
    ),
    (
        "syncer_partition_remote_dropped",
        Gauge,
        "1 when a remote is no longer used for the partition (it disagreed)",
        ["remote"],
        _each_dropped,
    ),
    (
        "syncer_partition_retries",
        Count,
        "Transient errors retried",
        [],
        _one(lambda s: s.retries),
    ),
    (
        "syncer_partition_lag_seconds",
        Gauge,
        "While behind: age of the newest record copied (its timestamp); 0 when in sync",
        [],
        _lag_seconds,
    ),
    (
        "syncer_partition_filled_offsets",
        Count,
        "Offsets written as filler records (holes in the source, policy fill)",
        [],
        _one(lambda s: s.filled),
    ),
    (
        "syncer_partition_coalesced_batches",
        Count,
        "Source batches written inside one local batch with their neighbours (coalesce_bytes)",
        [],
        _one(lambda s: s.coalesced),
    ),
]
