"""A remote that lost records already copied from it (issue 19, item 4: an unclean leader
election on the remote), on plain values: when its end below what was copied is proof, and
when it may still be a new leader's high watermark catching up."""

from __future__ import annotations

from syncer.clusters import TP
from syncer.holes import RemoteEnds
from syncer.partition import SHRINK_GRACE_S, PartitionSources, Shrink, shrink_verdict
from syncer.sources import SourceHealth

A = TP("orders", 3)


def sources(**ends: tuple[int, int]) -> PartitionSources:
    health = {name: SourceHealth(name, rank) for rank, name in enumerate(ends)}
    return PartitionSources(A, health, {n: RemoteEnds(*e) for n, e in ends.items()})


# --- the rule -------------------------------------------------------------------------------


def test_a_remote_that_holds_what_was_copied_lost_nothing() -> None:
    assert shrink_verdict(500, 500, None, None, 0.0) is Shrink.HOLDS
    assert shrink_verdict(500, 800, None, 0.0, 100.0) is Shrink.HOLDS


def test_an_end_below_on_first_sight_is_no_proof() -> None:
    # a new leader's high watermark trails until its followers fetch (KIP-207)
    assert shrink_verdict(500, 300, None, 10.0, 10.0) is Shrink.WAITING
    assert shrink_verdict(500, 300, None, 10.0, 10.0 + SHRINK_GRACE_S - 0.1) is Shrink.WAITING


def test_an_end_that_stays_below_for_the_grace_lost_the_records() -> None:
    assert shrink_verdict(500, 300, None, 10.0, 10.0 + SHRINK_GRACE_S) is Shrink.LOST
    assert shrink_verdict(500, 499, None, 0.0, 60.0, grace_s=5.0) is Shrink.LOST


def test_a_fetch_answered_out_of_range_below_what_was_held_is_proof_at_once() -> None:
    # out of range is past the log's end, not its high watermark
    assert shrink_verdict(500, 500, 500, None, 0.0) is Shrink.LOST
    assert shrink_verdict(500, 500, 420, None, 0.0) is Shrink.LOST


def test_out_of_range_above_what_was_held_proves_nothing_of_the_copied_records() -> None:
    assert shrink_verdict(500, 500, 700, None, 0.0) is Shrink.HOLDS


# --- one partition's remotes ----------------------------------------------------------------


def test_an_end_that_falls_below_the_local_end_is_lost_only_after_the_grace() -> None:
    s = sources(east=(0, 500))
    assert s.shrunk(500, 0.0) == []
    s.update_end("east", RemoteEnds(0, 300))  # an unclean election, or a trailing HW
    assert s.shrunk(500, 100.0) == []  # first seen below at 100
    assert s.shrunk(500, 100.0 + SHRINK_GRACE_S - 1) == []
    assert s.shrunk(500, 100.0 + SHRINK_GRACE_S) == ["east"]


def test_an_end_that_comes_back_restarts_the_grace() -> None:
    s = sources(east=(0, 500))
    s.update_end("east", RemoteEnds(0, 450))
    assert s.shrunk(500, 0.0) == []
    s.update_end("east", RemoteEnds(0, 520))  # the new leader's high watermark caught up
    assert s.shrunk(500, 30.0) == []
    s.update_end("east", RemoteEnds(0, 450))
    assert s.shrunk(500, 40.0) == []
    assert s.shrunk(500, 40.0 + SHRINK_GRACE_S - 1) == []  # counted from 40, not 0
    assert s.shrunk(500, 40.0 + SHRINK_GRACE_S) == ["east"]


def test_a_remote_merely_behind_another_loses_nothing() -> None:
    # west never held more than 300: the local end came from east
    s = sources(east=(0, 500), west=(0, 300))
    s.update_end("west", RemoteEnds(0, 320))
    assert s.held("west", 500) == 320 and s.held("east", 500) == 500
    assert s.shrunk(500, 0.0) == [] and s.shrunk(500, 1000.0) == []


def test_a_remote_behind_that_falls_below_what_it_held_is_lost_after_the_grace() -> None:
    s = sources(east=(0, 500), west=(0, 320))
    s.update_end("west", RemoteEnds(0, 200))
    assert s.shrunk(500, 0.0) == []
    assert s.shrunk(500, SHRINK_GRACE_S) == ["west"]


def test_out_of_range_at_the_frontier_is_lost_at_once_until_it_answers_again() -> None:
    s = sources(east=(0, 500))
    s.out_of_range("east", 500)
    assert s.shrunk(500, 0.0) == ["east"]
    s.update_end("east", RemoteEnds(0, 510))  # a listing (or a fetch) says it holds them
    assert s.shrunk(500, 0.0) == []


def test_a_dropped_remote_is_not_judged() -> None:
    s = sources(east=(0, 500), west=(0, 500))
    s.out_of_range("east", 500)
    s.drop("east", "its log ends at 300, below 500")
    assert s.shrunk(500, 0.0) == []
