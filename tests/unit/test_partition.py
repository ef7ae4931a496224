"""One partition's remotes on plain values: what the scheduler learns and the agreement drops
changes the copier's decisions (where to copy to, what to compare landed writes with, where
an empty partition starts, when nothing can continue), and status reads the same state."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from syncer.clusters import TP
from syncer.errors import PartitionHalted, SourceDataLost
from syncer.holes import RemoteEnds
from syncer.partition import PartitionSources, furthest_end
from syncer.sources import SourceHealth
from syncer.status import PartitionStatus

A = TP("orders", 3)


def sources(**ends: tuple[int, int]) -> PartitionSources:
    """Remotes ranked in the order given, each with its ``(start, end)``."""
    health = {name: SourceHealth(name, rank) for rank, name in enumerate(ends)}
    return PartitionSources(A, health, {n: RemoteEnds(*e) for n, e in ends.items()})


# --- what changes it ------------------------------------------------------------------------


def test_a_remote_not_yet_fetched_holds_nothing() -> None:
    health = {n: SourceHealth(n, rank) for rank, n in enumerate(["east", "west"])}
    s = PartitionSources(A, health, {"west": RemoteEnds(5, 50)})
    assert s.ends == {"west": RemoteEnds(5, 50), "east": RemoteEnds(0, 0)}
    assert s.remotes == ("east", "west") and s.remote_end() == 50


def test_what_a_fetch_learned_moves_the_copy_target() -> None:
    s = sources(east=(0, 100), west=(0, 70))
    s.update_end("west", RemoteEnds(10, 130))
    assert s.ends["west"] == RemoteEnds(10, 130) and s.remote_end() == 130
    s.update_ends({"east": RemoteEnds(0, 150), "west": RemoteEnds(20, 140)})
    assert s.ends == {"east": RemoteEnds(0, 150), "west": RemoteEnds(20, 140)}
    assert s.remote_end() == 150


def test_dropping_the_remote_furthest_ahead_changes_the_copy_target() -> None:
    s = sources(east=(0, 100), west=(0, 70))
    s.drop("east", "records differ from the local log's at offset 9")
    assert s.remote_end() == 70
    assert s.usable() == {"west": RemoteEnds(0, 70)}
    assert s.dropped == {"east": "records differ from the local log's at offset 9"}
    assert not s.every_dropped()


def test_with_every_remote_dropped_there_is_no_target() -> None:
    s = sources(east=(0, 100), west=(0, 70))
    s.drop("east", "differs")
    s.drop("west", "differs too")
    assert s.every_dropped() and s.remote_end() == -1 and s.usable() == {}


def test_nobody_changes_the_state_through_its_views() -> None:
    s = sources(east=(0, 100))
    with pytest.raises(TypeError):
        s.ends["east"] = RemoteEnds(0, 1)  # type: ignore[index]
    with pytest.raises(TypeError):
        s.dropped["east"] = "why"  # type: ignore[index]
    with pytest.raises(TypeError):
        s.healths["east"] = SourceHealth("east", 9)  # type: ignore[index]


def test_the_health_is_the_shared_one_and_counts_what_landed() -> None:
    east = SourceHealth("east", 0)
    s = PartitionSources(A, {"east": east})
    assert s.health("east") is east  # one per remote per process: every partition sees it
    s.served("east", 4096, 40)
    s.served("", 100, 1)  # fillers that align a start: no remote's
    assert (east.served_bytes, east.served_records) == (4096, 40)
    with pytest.raises(KeyError):
        s.health("north")


# --- status reads the same state ------------------------------------------------------------


def test_status_shows_the_live_state_and_a_snapshot_stays_as_it_was() -> None:
    s = sources(east=(0, 100), west=(0, 70))
    status = PartitionStatus(A, local_end=40, remote_ends=s.ends, dropped=s.dropped)
    seen = status.copy()
    s.drop("east", "differs")
    s.update_end("west", RemoteEnds(0, 80))
    assert status.remote_end == s.remote_end() == 80 and status.lag == 40
    assert status.dropped == {"east": "differs"}
    assert seen.remote_end == 100 and seen.dropped == {} and seen.lag == 60


# --- the copier's decisions -----------------------------------------------------------------


def test_landed_writes_are_compared_with_the_remote_furthest_ahead() -> None:
    s = sources(east=(0, 70), west=(0, 100))
    assert s.landed_reference() == "west"
    s.drop("west", "differs")
    assert s.landed_reference() == "east"


def test_on_a_tie_the_remote_listed_first_is_the_reference() -> None:
    assert sources(east=(0, 100), west=(0, 100)).landed_reference() == "east"
    assert sources(west=(0, 100), east=(0, 100)).landed_reference() == "west"


def test_with_every_remote_dropped_landed_writes_are_still_checked() -> None:
    s = sources(east=(0, 70), west=(0, 100))
    s.drop("east", "differs")
    s.drop("west", "differs")
    assert s.landed_reference() == "west"


def test_an_empty_partition_is_aligned_to_the_lowest_remote_start() -> None:
    assert sources(east=(40, 100), west=(25, 90)).start_to_align() == 25
    assert sources(east=(40, 100), west=(0, 90)).start_to_align() is None  # west holds 0
    assert sources(east=(0, 0)).start_to_align() is None  # nothing anywhere yet


def test_a_dropped_remote_holding_offset_0_does_not_keep_the_start() -> None:
    s = sources(east=(40, 100), west=(0, 90))
    s.drop("west", "differs")
    assert s.start_to_align() == 40


def test_a_remote_start_above_the_local_end_with_no_other_holder_is_lost_below_it() -> None:
    halt = sources(east=(10, 100), west=(12, 80)).stuck(5)
    assert isinstance(halt, SourceDataLost)
    assert str(halt) == (
        "orders[3]: records 5..9 are gone at every remote (start 10 is beyond the local end 5)"
    )


def test_a_dropped_remote_that_still_holds_the_frontier_does_not_save_it() -> None:
    s = sources(east=(0, 100), west=(10, 100))
    assert s.stuck(5) is None
    s.drop("east", "differs")
    assert isinstance(s.stuck(5), SourceDataLost)


def test_dropping_every_remote_halts_with_each_reason() -> None:
    s = sources(east=(0, 100), west=(0, 70))
    s.drop("east", "records differ from the local log's at offset 9")
    assert s.stuck(50) is None  # west still serves
    s.drop("west", "records differ from remote east's at offset 12")
    halt = s.stuck(50)
    assert type(halt) is PartitionHalted
    assert str(halt) == (
        "orders[3]: every remote was dropped as a source:"
        " east: records differ from the local log's at offset 9;"
        " west: records differ from remote east's at offset 12"
    )


def test_caught_up_or_backing_off_is_no_halt() -> None:
    assert sources(east=(0, 100)).stuck(100) is None  # caught up: wait for more
    assert sources(east=(0, 100)).stuck(40) is None  # holds it: the scheduler waits its turn


# --- properties -----------------------------------------------------------------------------

NAMES = ["a", "b", "c"]
SPANS = st.tuples(st.integers(0, 100), st.integers(0, 100)).map(lambda se: (min(se), max(se)))


@given(
    spans=st.lists(SPANS, min_size=1, max_size=3),
    dropped=st.sets(st.sampled_from(NAMES)),
    frontier=st.integers(0, 100),
)
def test_the_decisions_see_only_the_remotes_not_dropped(
    spans: list[tuple[int, int]], dropped: set[str], frontier: int
) -> None:
    s = sources(**dict(zip(NAMES, spans, strict=False)))
    for name in sorted(dropped & set(s.remotes)):
        s.drop(name, "differs")
    usable = {n: e for n, e in s.ends.items() if n not in s.dropped}
    assert s.usable() == usable
    assert s.remote_end() == max((e.end for e in usable.values()), default=-1)
    assert s.remote_end() == furthest_end(s.ends, s.dropped)
    assert s.landed_reference() in (usable or s.ends)
    halt = s.stuck(frontier)
    ahead = [e for e in usable.values() if e.end > frontier]
    if not usable:
        assert type(halt) is PartitionHalted
    elif ahead and all(e.start > frontier for e in ahead):
        assert isinstance(halt, SourceDataLost)
        assert f"start {min(e.start for e in ahead)} " in str(halt)
    else:
        assert halt is None


def test_the_remotes_listed_when_nothing_continues_are_the_healthy_ones_seen_behind() -> None:
    s = sources(east=(0, 20), west=(0, 5), north=(0, 10), south=(0, 3))
    s.health("south").failed(0.0, "RequestTimedOutError")  # backs off: not asked
    s.drop("north", "records differ")  # dropped: never asked
    assert s.behind(10, 0.0) == ["west"]
    assert s.behind(4, 0.0) == []
    assert s.behind(5, 0.0) == ["west"]  # ends there: listed too (ranges may wait for east)
    assert s.behind(25, 0.0) == ["east", "west"]
    assert s.behind(10, s.health("south").unhealthy_until) == ["west", "south"]
