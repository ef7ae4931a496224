"""Source choice over measured health, with plain values."""

from __future__ import annotations

from syncer.holes import RemoteEnds
from syncer.sources import (
    BACKOFF_MAX_S,
    MAX_BUSY,
    SourceHealth,
    lead_for,
    pick_source,
    tail_source,
    usable_sources,
)

ENDS = {"a": RemoteEnds(0, 100), "b": RemoteEnds(0, 200), "c": RemoteEnds(150, 300)}


def health(**rates: float) -> dict[str, SourceHealth]:
    out = {n: SourceHealth(n, rank) for rank, n in enumerate(ENDS)}
    for name, rate in rates.items():
        out[name].bytes_per_s = rate
    return out


def test_only_remotes_that_hold_the_offset_are_usable() -> None:
    assert usable_sources(50, ENDS, health(), (), 0.0) == ["a", "b"]
    assert usable_sources(160, ENDS, health(), (), 0.0) == ["b", "c"]
    assert usable_sources(120, ENDS, health(), ("b",), 0.0) == []


def test_the_faster_remote_takes_the_chunk_until_it_is_busier() -> None:
    h = health(a=10e6, b=2e6)
    assert pick_source(50, ENDS, h, {}, (), 0.0) == "a"
    assert pick_source(50, ENDS, h, {"a": 1}, (), 0.0) == "a"  # 5 MB/s a chunk beats 2
    assert pick_source(50, ENDS, h, {"a": MAX_BUSY}, (), 0.0) == "b"  # a has enough queued


def test_an_unmeasured_remote_is_tried_and_ties_go_to_the_first_listed() -> None:
    assert pick_source(50, ENDS, health(b=3e6), {}, (), 0.0) == "a"
    assert pick_source(50, ENDS, health(), {}, (), 0.0) == "a"


def test_a_failing_remote_backs_off_and_comes_back() -> None:
    h = health()
    h["a"].failed(100.0, "boom")
    h["a"].failed(100.0, "boom again")
    assert not h["a"].healthy(101.0) and h["a"].healthy(102.0)  # 1 s, then 2 s
    assert pick_source(50, ENDS, h, {}, (), 101.0) == "b"
    assert pick_source(50, ENDS, h, {}, (), 102.5) == "a"
    h["a"].succeeded(1000, 1.0)
    assert h["a"].failures_in_row == 0 and h["a"].errors == 2


def test_fetches_under_way_at_a_failure_fail_with_it_not_after_it() -> None:
    h = health()
    h["a"].failed(100.0, "link cut", started=99.0)
    for late in (100.1, 100.2, 100.3):  # the other chunks in flight on the cut link
        h["a"].failed(late, "link cut", started=99.5)
    assert h["a"].errors == 4 and h["a"].failures_in_row == 1
    assert h["a"].healthy(101.0)  # one incident: one second of back-off
    h["a"].failed(101.5, "still down", started=101.2)  # a new attempt failed: it doubles
    assert h["a"].failures_in_row == 2 and not h["a"].healthy(103.0)


def test_the_tail_is_polled_at_the_remote_furthest_ahead() -> None:
    assert tail_source(ENDS, health(), (), 0.0) == "c"
    assert tail_source(ENDS, health(), ("c",), 0.0) == "b"
    assert tail_source({}, {}, (), 0.0) is None


def test_a_remote_with_more_lanes_takes_more_chunks() -> None:
    h = health(a=2e6, b=2e6)
    h["b"].lanes = 4
    assert pick_source(50, ENDS, h, {"b": 2}, (), 0.0) == "b"  # 8 MB/s over 3 beats 2 over 1
    assert pick_source(50, ENDS, h, {"a": MAX_BUSY, "b": 4 * MAX_BUSY - 1}, (), 0.0) == "b"
    assert pick_source(50, ENDS, h, {"a": MAX_BUSY, "b": 4 * MAX_BUSY}, (), 0.0) is None


def test_a_long_run_of_failures_backs_off_at_most_the_maximum() -> None:
    east = SourceHealth("east", 0)
    for i in range(5_000):  # a remote that failed every fetch for a long time
        east.failed(float(i), "UnknownTopicOrPartitionError")
    assert east.unhealthy_until == 4_999 + BACKOFF_MAX_S


def test_no_tail_poll_while_every_remote_backs_off() -> None:
    east = SourceHealth("east", 0)
    east.failed(0.0, "down")
    ends = {"east": RemoteEnds(0, 10)}
    assert tail_source(ends, {"east": east}, (), 0.5) is None  # backing off: no tight loop
    assert tail_source(ends, {"east": east}, (), 1.5) == "east"


def test_a_chunk_that_may_follow_another_remote_is_fetched_from_one_offset_below() -> None:
    assert lead_for(50, "east", "west", others=True, log_start=0) == 1  # after west's chunk
    assert lead_for(50, "east", "east", others=True, log_start=0) == 0  # east continues
    assert lead_for(50, "east", None, others=True, log_start=0) == 1  # unknown: may differ
    assert lead_for(50, "east", None, others=False, log_start=0) == 0  # the only one
    assert lead_for(50, "east", "west", others=True, log_start=50) == 0  # nothing below
    assert lead_for(0, "east", "west", others=True, log_start=0) == 0


def test_the_remote_before_keeps_the_next_chunk_while_it_has_room_and_is_as_fast() -> None:
    # a chunk from another remote than the one before it carries a batch more (its lead)
    h = health(a=2e6, b=2e6)
    assert pick_source(50, ENDS, h, {"b": 1}, (), 0.0) == "a"  # by score alone
    assert pick_source(50, ENDS, h, {"b": 1}, (), 0.0, before="b") == "b"  # keeps it
    # no room left on it, or far slower per chunk in flight: the best takes it
    assert pick_source(50, ENDS, h, {"b": MAX_BUSY}, (), 0.0, before="b") == "a"
    slow = health(a=10e6, b=2e6)
    assert pick_source(50, ENDS, slow, {"b": 1}, (), 0.0, before="b") == "a"
    # a remote that does not hold the offset, or is excluded, is never kept
    assert pick_source(160, ENDS, health(), {}, (), 0.0, before="a") == "b"
    assert pick_source(50, ENDS, h, {}, ("b",), 0.0, before="b") == "a"


def test_a_partition_stays_at_home_while_the_other_remotes_are_busy_with_their_own() -> None:
    # the process has MAX_BUSY or more chunks in flight on each: every link is busy
    h = health(a=2e6, b=2e6)
    h["a"].chunks, h["b"].chunks = 5, 4
    assert pick_source(50, ENDS, h, {"a": 1}, (), 0.0, before="a") == "a"
    # no room at home for this partition: it waits rather than take a turn on b's link
    assert pick_source(50, ENDS, h, {"a": MAX_BUSY}, (), 0.0, before="a") is None
    # with no home yet (the local log, or a chunk already written, is below it), the least
    # loaded remote takes it
    assert pick_source(50, ENDS, h, {"a": 1}, (), 0.0) == "b"


def test_a_partition_moves_to_a_remote_whose_link_would_idle() -> None:
    # b's own partitions are done: fewer than MAX_BUSY chunks in flight on it
    h = health(a=2e6, b=2e6)
    h["a"].chunks, h["b"].chunks = 5, MAX_BUSY - 1
    assert pick_source(50, ENDS, h, {"a": 1}, (), 0.0, before="a") == "b"
    assert pick_source(50, ENDS, h, {"a": MAX_BUSY}, (), 0.0, before="a") == "b"
    # its next chunk stays there (b is its home now), and home itself idling keeps it too
    assert pick_source(50, ENDS, h, {"b": 1}, (), 0.0, before="b") == "b"
    h["a"].chunks = 1
    assert pick_source(50, ENDS, h, {"a": 1}, (), 0.0, before="a") == "a"


def test_a_slower_home_keeps_its_partition_while_every_link_is_busy() -> None:
    # moving would make no link busier, only take a turn from another partition
    h = health(a=10e6, b=1e6)
    h["a"].chunks, h["b"].chunks = 4, 4
    assert pick_source(50, ENDS, h, {"b": 1}, (), 0.0, before="b") == "b"
    assert pick_source(50, ENDS, h, {"b": MAX_BUSY}, (), 0.0, before="b") is None
    # where its own link would idle as well, a far faster one takes it (as with no home)
    h["a"].chunks, h["b"].chunks = 1, 1
    assert pick_source(50, ENDS, h, {"b": 1}, (), 0.0, before="b") == "a"


def test_a_failing_or_excluded_home_is_not_waited_for() -> None:
    h = health(a=2e6, b=2e6)
    h["a"].chunks, h["b"].chunks = 4, 4
    h["b"].failed(0.0, "link cut")  # it backs off: its partitions go to the others
    assert pick_source(50, ENDS, h, {"b": MAX_BUSY}, (), 0.5, before="b") == "a"
    assert pick_source(50, ENDS, h, {"b": MAX_BUSY}, ("b",), 2.0, before="b") == "a"
