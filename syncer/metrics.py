"""Prometheus metrics of one ``Syncer``, read from its live state at scrape time (nothing on
the data path counts twice): one registry per Syncer, so several can live in one process.

Names follow Prometheus conventions: ``syncer_`` prefix, base units, ``_total`` counters."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from syncer.copier import State

if TYPE_CHECKING:
    from syncer.syncer import Syncer

PARTITION = ["topic", "partition"]


class SyncerCollector(Collector):
    def __init__(self, syncer: Syncer) -> None:
        self.syncer = syncer

    def collect(self) -> Iterator[Metric]:
        yield from self._partitions()
        yield from self._remotes()
        refused = GaugeMetricFamily(
            "syncer_topics_refused", "Selected topics not mirrored (partition counts differ)"
        )
        refused.add_metric([], len(self.syncer.refused))
        yield refused
        buffered = GaugeMetricFamily(
            "syncer_buffer_bytes", "Bytes fetched and not yet written (the process's budget)"
        )
        buffered.add_metric([], self.syncer.memory.used)
        yield buffered
        limit = GaugeMetricFamily("syncer_buffer_limit_bytes", "copier.buffer_bytes")
        limit.add_metric([], self.syncer.memory.limit)
        yield limit

    def _partitions(self) -> Iterator[Metric]:
        local = GaugeMetricFamily(
            "syncer_partition_local_end_offset", "Local log-end offset", labels=PARTITION
        )
        remote = GaugeMetricFamily(
            "syncer_partition_remote_end_offset",
            "Remote log-end offset (last stable offset)",
            labels=[*PARTITION, "remote"],
        )
        lag = GaugeMetricFamily(
            "syncer_partition_lag_records",
            "Records the furthest remote holds that local does not",
            labels=PARTITION,
        )
        records = CounterMetricFamily(
            "syncer_partition_records_copied", "Records written to local", labels=PARTITION
        )
        nbytes = CounterMetricFamily(
            "syncer_partition_bytes_copied", "Bytes written to local", labels=PARTITION
        )
        served = CounterMetricFamily(
            "syncer_partition_served_bytes",
            "Bytes written to local, by the remote they came from",
            labels=[*PARTITION, "remote"],
        )
        state = GaugeMetricFamily(
            "syncer_partition_state",
            "1 for the partition's copier state",
            labels=[*PARTITION, "state"],
        )
        halted = GaugeMetricFamily(
            "syncer_partition_halted", "1 when the partition stopped on an error", labels=PARTITION
        )
        dropped = GaugeMetricFamily(
            "syncer_partition_remote_dropped",
            "1 when a remote is no longer used for the partition (it disagreed)",
            labels=[*PARTITION, "remote"],
        )
        retries = CounterMetricFamily(
            "syncer_partition_retries", "Transient errors retried", labels=PARTITION
        )
        for status in self.syncer.statuses():
            key = [status.tp.topic, str(status.tp.partition)]
            local.add_metric(key, max(status.local_end, 0))
            for name, ends in status.remote_ends.items():
                remote.add_metric([*key, name], ends.end)
            lag.add_metric(key, status.lag)
            records.add_metric(key, status.records_copied)
            nbytes.add_metric(key, status.bytes_copied)
            for name, size in status.served.items():
                served.add_metric([*key, name], size)
            for each in State:
                state.add_metric([*key, each.value], 1 if status.state is each else 0)
            halted.add_metric(key, 1 if status.state is State.HALTED else 0)
            for name in status.dropped:
                dropped.add_metric([*key, name], 1)
            retries.add_metric(key, status.retries)
        yield from (local, remote, lag, records, nbytes, served, state, halted, dropped, retries)

    def _remotes(self) -> Iterator[Metric]:
        now = time.monotonic()
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
        for name, health in self.syncer.health.items():
            served.add_metric([name], health.served_bytes)
            served_records.add_metric([name], health.served_records)
            errors.add_metric([name], health.errors)
            healthy.add_metric([name], 1 if health.healthy(now) else 0)
            rate.add_metric([name], health.bytes_per_s)
        yield from (served, served_records, errors, healthy, rate)


def registry_for(syncer: Syncer) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SyncerCollector(syncer))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
