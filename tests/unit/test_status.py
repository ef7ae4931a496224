"""The status layer on plain values: what /status and /metrics show of a snapshot."""

from __future__ import annotations

import socket
import threading
import tracemalloc
from collections.abc import Callable

from prometheus_client import CollectorRegistry, generate_latest

from syncer.clusters import TP
from syncer.holes import RemoteEnds
from syncer.metrics import SyncerCollector, exposition
from syncer.offsets import GroupStatus
from syncer.report import PartitionRow, fetch_live, merge_live
from syncer.sources import SourceHealth
from syncer.status import (
    PartitionStatus,
    RemoteStatus,
    Snapshot,
    State,
    copied_since,
    status_document,
)


def snapshot() -> Snapshot:
    copying = PartitionStatus(
        TP("orders", 0),
        local_end=40,
        remote_ends={"east": RemoteEnds(0, 100), "west": RemoteEnds(0, 70)},
        state=State.COPYING,
        served={"east": 4096},
        waiting="local NOT_ENOUGH_REPLICAS (in-sync replicas below min.insync.replicas)",
    )
    halted = PartitionStatus(
        TP("orders", 1),
        local_end=7,
        remote_ends={"east": RemoteEnds(0, 9), "west": RemoteEnds(0, 50)},
        state=State.HALTED,
        error="hole at 7",
        dropped={"west": "disagreed at 3"},
    )
    east = SourceHealth("east", 0, lanes=2, served_bytes=4096, served_records=40)
    west = SourceHealth("west", 1, errors=1, last_error="timeout", unhealthy_until=20.0)
    return Snapshot(
        name="eu",
        partitions=(copying, halted),
        remotes=(RemoteStatus.of(east, 10.0, 3), RemoteStatus.of(west, 10.0, 0)),
        groups={"billing": GroupStatus("east", committed=2)},
        refused=1,
        buffer_used=10,
        buffer_limit=100,
        producer_id_expiration_ms=86_400_000,
    )


def test_the_status_document_shows_the_snapshot() -> None:
    document = status_document(snapshot())
    copying, halted = document["partitions"]
    assert copying["lag"] == 60 and copying["state"] == "copying"
    assert copying["waiting"].startswith("local NOT_ENOUGH_REPLICAS") and halted["waiting"] is None
    assert halted["lag"] == 2  # the dropped remote's end is no target
    assert halted["state"] == "halted" and halted["error"] == "hole at 7"
    east, west = document["remotes"]
    assert east["state"] == "healthy" and east["served_bytes"] == 4096
    assert west["state"] == "backing off" and west["dropped_partitions"] == 1
    assert document["groups"]["billing"]["committed"] == 2
    assert document["producer_id_expiration_ms"] == 86_400_000


def test_metrics_read_one_snapshot_per_scrape() -> None:
    families = {m.name: m for m in SyncerCollector(snapshot).collect()}
    lag = {s.labels["partition"]: s.value for s in families["syncer_partition_lag_records"].samples}
    assert lag == {"0": 60, "1": 2}
    healthy = {s.labels["remote"]: s.value for s in families["syncer_remote_healthy"].samples}
    assert healthy == {"east": 1, "west": 0}
    (connections, _) = families["syncer_remote_connections"].samples
    assert connections.labels["remote"] == "east" and connections.value == 3
    assert families["syncer_topics_refused"].samples[0].value == 1


def test_a_copy_does_not_follow_the_copier() -> None:
    live = PartitionStatus(TP("t", 0), served={"east": 1})
    seen = live.copy()
    live.served["east"] = 2
    live.state = State.HALTED
    assert seen.served == {"east": 1} and seen.state is State.STARTING


def test_records_copied_come_from_the_local_end_not_from_answered_writes() -> None:
    """issue 19: a write that landed while its answer was lost (a broker killed) is in the
    local end read back after it; the summary counted only the answered ones."""
    status = PartitionStatus(TP("t", 0))
    assert status.records_copied == 0  # the local end not read yet
    status.started_at_end = 1_000
    status.local_end = 1_000
    assert status.records_copied == 0
    status.local_end = 78_095 + 1_000  # read back after writes whose answers were lost
    assert status.records_copied == 78_095
    assert status.copy().records_copied == 78_095


def test_copied_since_counts_nothing_before_the_start_nor_below_it() -> None:
    assert copied_since(None, 50) == 0
    assert copied_since(10, -1) == 0
    assert copied_since(10, 5) == 0
    assert copied_since(0, 5) == 5


def test_the_status_table_says_why_a_partition_waits_and_why_one_halted() -> None:
    """``syncer status`` merges each daemon's /status into the cluster's rows."""
    rows = [
        PartitionRow("orders", p, 40, {"east": 100, "west": 70}, 60, "east", "behind")
        for p in (0, 1, 2)
    ]
    live = status_document(snapshot())
    merge_live(rows, [live])
    waiting, halted, unreported = rows
    assert waiting.state == (
        "behind (waiting: local NOT_ENOUGH_REPLICAS (in-sync replicas below min.insync.replicas))"
    )
    assert halted.state == "halted: hole at 7"  # the halt says it all
    assert unreported.state == "behind"
    rows = [PartitionRow("orders", 0, 40, {"east": 100}, 60, "east", "behind")]
    older = {"partitions": [{k: v for k, v in live["partitions"][0].items() if k != "waiting"}]}
    merge_live(rows, [older])  # a daemon from before the field: nothing to add
    assert rows[0].state == "behind"


def many(count: int) -> Snapshot:
    """``count`` caught-up partitions of one remote, 20 to a topic (bench-scale's shape)."""
    partitions = tuple(
        PartitionStatus(
            TP(f"scale.t{n // 20:03d}", n % 20),
            local_end=10,
            remote_ends={"east": RemoteEnds(0, 10)},
            state=State.CAUGHT_UP,
            served={"east": 100},
        )
        for n in range(count)
    )
    return Snapshot("x", partitions, (), {}, 0, 0, 1, 0)


def peak_mib(work: Callable[[], object]) -> float:
    """The most memory Python held for objects while ``work`` ran, in MiB."""
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def test_a_scrape_of_10000_partitions_holds_one_family_at_a_time() -> None:
    # bench-scale's peak RSS at 10,000 partitions was the first /metrics scrape (~70 MiB
    # more for ~1.5 s): 48.5 MiB of samples held at once when all families were built first
    partitions = many(10_000)  # built before the count starts
    collector = SyncerCollector(lambda: partitions)
    counted: list[int] = []

    def collect() -> None:
        for family in collector.collect():
            counted.append(len(family.samples))

    assert peak_mib(collect) < 25
    assert sum(counted) > 10_000 * 12  # every partition's samples were made


def test_the_exposition_is_prometheus_text_formatted_a_family_at_a_time() -> None:
    # 2,000 partitions, not 10,000: the peaks scale with the count (at 10,000: 38.2 MiB
    # against generate_latest's 43.5, 68.8 with all families built first), and tracemalloc
    # made the larger case 18 s of the unit tests
    partitions = many(2_000)
    registry = CollectorRegistry()
    registry.register(SyncerCollector(lambda: partitions))
    text: list[bytes] = []
    ours = peak_mib(lambda: text.append(exposition(registry)))
    # generate_latest of the whole registry keeps a string per sample to the end (8.7 MiB
    # here against 7.7)
    assert ours < 0.95 * peak_mib(lambda: generate_latest(registry))
    assert text[0] == generate_latest(registry)


def test_live_figures_from_something_that_is_not_a_syncer_daemon_are_one_line() -> None:
    """``syncer status --daemon`` pointed at a port that answers no HTTP (a Kafka broker's),
    or HTTP that is not a daemon's ``/status``: a line each, no traceback."""

    def serve(answer: bytes) -> tuple[socket.socket, threading.Thread]:
        server = socket.create_server(("127.0.0.1", 0))

        def answer_once() -> None:
            connection, _ = server.accept()
            connection.recv(65536)
            connection.sendall(answer)
            connection.close()

        thread = threading.Thread(target=answer_once, daemon=True)
        thread.start()
        return server, thread

    garbage, first = serve(b"\x00\x00\x00\x10not http at all\r\n\r\n")
    listed, second = serve(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n[1, 2]")
    with garbage, listed:
        urls = [f"127.0.0.1:{s.getsockname()[1]}" for s in (garbage, listed)]
        docs, problems = fetch_live(urls, timeout=5)
        first.join(5)
        second.join(5)
    assert docs == []
    assert problems[0].startswith(f"no live figures from http://{urls[0]}: not an HTTP answer (")
    assert problems[1] == f"no live figures from http://{urls[1]}: not a syncer daemon's /status"


def test_the_summary_counts_group_offsets_and_names_each_group_not_copied() -> None:
    """A catch-up's summary tells its offsets pass: committed, and each group whose offsets
    could not be copied (which makes a catch-up exit 5: ``cli._catch_up_exit_code``); a
    group left alone (members locally) is no failure. Without groups chosen, the line is
    as it always was."""
    from syncer.cli import _catch_up_exit_code, _group_lines
    from syncer.errors import ExitCode
    from syncer.status import Summary

    copied = PartitionStatus(TP("orders", 0), started_at_end=0, local_end=100)
    groups = {
        "billing": GroupStatus("east", committed=4, waiting=2),
        "audit": GroupStatus("east", skipped="the group has members locally (Stable)"),
        "ops": GroupStatus("west", skipped="copying its offsets failed: no answer", failed=True),
    }
    summary = Summary.of([copied], 0, 2.0, groups, "remote north did not list its groups: x")
    assert summary.group_offsets == 4 and summary.groups == 3
    assert summary.group_failures == (
        "remote north did not list its groups: x",
        "group ops: copying its offsets failed: no answer",
    )
    assert "◆ 4 group offsets committed (3 groups, 2 failures) ◆" in summary.line()
    assert _catch_up_exit_code(summary) == ExitCode.HALTED
    assert _group_lines(groups, summary) == [
        "remote north did not list its groups: x",
        "group ops: copying its offsets failed: no answer",
        "group audit: left alone: the group has members locally (Stable)",
        "group billing: 2 offsets beyond the local end (committed at remote east after the"
        " catch-up took its ends) not copied",
    ]

    fine = Summary.of([copied], 0, 2.0, {"billing": groups["billing"], "audit": groups["audit"]})
    assert _catch_up_exit_code(fine) == ExitCode.OK
    assert "◆ 4 group offsets committed (2 groups) ◆" in fine.line()
    plain = Summary.of([copied], 0, 2.0)
    assert "group" not in plain.line() and _catch_up_exit_code(plain) == ExitCode.OK
