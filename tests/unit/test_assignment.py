"""The group assignor's pure core: exactly one owner per partition, balanced, sticky."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from syncer.assignment import (
    _rebalance,
    assign,
    decode_group_writer,
    decode_owned,
    decode_writer,
    encode_group_writer,
    encode_owned,
    refusal,
    the_groups_writer,
    weights_from_gaps,
    writer_of,
    writing_otherwise,
)
from syncer.clusters import TP

tps = st.builds(TP, st.sampled_from(["a", "b", "c"]), st.integers(0, 30))


@given(
    st.dictionaries(tps, st.integers(0, 10_000), max_size=80),
    st.lists(st.text("xyz", min_size=1, max_size=3), min_size=1, max_size=6, unique=True),
    st.data(),
)
def test_every_partition_has_exactly_one_owner_and_loads_are_balanced(
    gaps: dict[TP, int], members: list[str], data: st.DataObject
) -> None:
    weights = weights_from_gaps(gaps)
    pool = sorted(gaps) or [TP("gone", 0)]  # a member may claim a partition that no longer exists
    owned = {m: set(data.draw(st.lists(st.sampled_from(pool), max_size=20))) for m in members}
    out = assign(owned, weights)
    assert set(out) == set(members)
    all_assigned = [tp for parts in out.values() for tp in parts]
    assert sorted(all_assigned) == sorted(weights)  # each exactly once
    loads = [sum(weights[tp] for tp in parts) for parts in out.values()]
    heaviest = max(weights.values(), default=0.0)
    assert max(loads) - min(loads) <= heaviest + 1e-9


@given(
    st.dictionaries(tps, st.integers(0, 10_000), min_size=1, max_size=60),
    st.lists(st.text("xyz", min_size=1, max_size=3), min_size=1, max_size=5, unique=True),
)
def test_a_balanced_assignment_is_kept_as_it_is(gaps: dict[TP, int], members: list[str]) -> None:
    weights = weights_from_gaps(gaps)
    first = assign({m: set() for m in members}, weights)
    assert assign(first, weights) == first


def test_a_new_member_takes_a_share_and_the_others_keep_most_of_theirs() -> None:
    weights = {TP("t", p): 1.0 for p in range(24)}
    two = assign({"a": set(), "b": set()}, weights)
    three = assign({**two, "c": set()}, weights)
    assert [len(three[m]) for m in ("a", "b", "c")] == [8, 8, 8]
    assert three["a"] <= two["a"] and three["b"] <= two["b"]  # nothing moved between a and b


def test_one_huge_gap_does_not_leave_a_member_idle() -> None:
    tps = [TP("t", p) for p in range(24)]
    gaps = {tp: 100_000 if tp.partition == 0 else 0 for tp in tps}
    out = assign({"m0": set(tps), "m1": set(), "m2": set()}, weights_from_gaps(gaps))
    heavy_owner = next(m for m, parts in out.items() if TP("t", 0) in parts)
    others = sorted(len(parts) for m, parts in out.items() if m != heavy_owner)
    assert others[1] - others[0] <= 1 and sum(others) == 23  # the light ones split evenly


def test_big_gaps_spread_across_members() -> None:
    gaps = {TP("t", 0): 1_000_000, TP("t", 1): 1_000_000, **{TP("t", p): 0 for p in range(2, 10)}}
    out = assign({"a": set(), "b": set()}, weights_from_gaps(gaps))
    assert {TP("t", 0), TP("t", 1)} & out["a"] and {TP("t", 0), TP("t", 1)} & out["b"]


def _move_by_scanning(
    out: dict[str, set[TP]], load: dict[str, float], weights: dict[TP, float]
) -> None:
    """The rebalancing rule, spelled out by looking at every partition for each move (what
    ``assign`` did before it kept partitions sorted by weight)."""
    order = lambda m: (load[m], len(out[m]), m)  # noqa: E731
    while True:
        low = min(out, key=order)
        for high in sorted(out, key=order, reverse=True):
            spread = load[high] - load[low]
            movable = [tp for tp in out[high] if weights[tp] < spread - 1e-9]
            if movable:
                tp = min(movable, key=lambda t: (abs(spread - 2 * weights[t]), t))
                out[high].remove(tp)
                out[low].add(tp)
                load[high] -= weights[tp]
                load[low] += weights[tp]
                break
        else:
            return


@given(
    st.dictionaries(tps, st.sampled_from([0, 0, 1, 5, 10, 37, 500]), max_size=80),
    st.lists(st.text("xyz", min_size=1, max_size=3), min_size=1, max_size=5, unique=True),
    st.data(),
)
def test_the_moves_are_the_ones_the_rule_picks(
    gaps: dict[TP, int], members: list[str], data: st.DataObject
) -> None:
    """Each move is the one the rule names (closest to half the gap, the first partition
    among equals), found by bisection: the same assignment as by scanning every partition."""
    weights = weights_from_gaps(gaps)
    owner = {tp: data.draw(st.sampled_from([None, *members])) for tp in sorted(weights)}
    out = {m: {tp for tp, o in owner.items() if o == m} for m in members}
    load = {m: sum(weights[tp] for tp in out[m]) for m in members}
    expected = {m: set(parts) for m, parts in out.items()}
    _move_by_scanning(expected, dict(load), weights)
    _rebalance(out, load, weights)
    assert out == expected


def test_a_member_joining_one_that_owns_10_000_partitions_gets_half() -> None:
    weights = {TP(f"t{t:03d}", p): 1.0 for t in range(500) for p in range(20)}
    two = assign({"m0": set(weights), "m1": set()}, weights)
    assert len(two["m0"]) == len(two["m1"]) == 5_000
    three = assign({**two, "m2": set()}, weights)
    assert sorted(len(parts) for parts in three.values()) == [3_333, 3_333, 3_334]


def test_owned_partitions_round_trip_and_junk_is_ignored() -> None:
    owned = {TP("a", 1), TP("a", 0), TP("b", 7)}
    assert decode_owned(encode_owned(owned)) == owned
    assert decode_owned(b"\x00garbage") == set() and decode_owned(None) == set()


# the group's one writer --------------------------------------------------------------------

W1 = writer_of("east-mirror", 7, 0)
W2 = writer_of("east-mirrror", 9, 0)  # a typo in one member's name: another producer id


def test_the_groups_writer_is_the_one_most_members_write_as() -> None:
    writers = {"a": W1, "b": W2, "c": W1}
    assert the_groups_writer(writers, own=W2) == W1
    assert writing_otherwise(writers, W1) == {"b": W2}


def test_a_tie_goes_to_the_leaders_own_writer() -> None:
    writers = {"a": W1, "b": W2}
    assert the_groups_writer(writers, own=W1) == W1
    assert the_groups_writer(writers, own=W2) == W2
    assert the_groups_writer(writers, own="") == W1  # then the first by name


def test_the_members_owning_partitions_keep_their_writer_against_more_newcomers() -> None:
    """Three new processes with a typo beside two running ones: the running ones stay."""
    writers = {"run-1": W1, "run-2": W1, "new-1": W2, "new-2": W2, "new-3": W2}
    assert the_groups_writer(writers, own=W2) == W2  # by head count
    assert the_groups_writer(writers, own=W2, owning=["run-1", "run-2"]) == W1
    assert writing_otherwise(writers, W1) == {m: W2 for m in ("new-1", "new-2", "new-3")}
    # an owner that told no writer (an older version) does not count: the rest decide
    assert the_groups_writer({"old": "", "new": W2}, own=W1, owning=["old"]) == W2


def test_a_member_that_tells_no_writer_is_left_in() -> None:
    """An older version during a rolling upgrade: it cannot say, so it is not refused."""
    assert writing_otherwise({"old": "", "a": W1}, W1) == {}
    assert the_groups_writer({"old": "", "older": ""}, own=W1) == ""


def test_a_member_refuses_itself_only_when_told_another_writer() -> None:
    assert refusal(W2, (W1, 2)) == (W1, 2)
    assert refusal(W1, (W1, 2)) is None
    assert refusal(W2, None) is None  # a leader of an older version told none
    assert refusal("", (W1, 2)) is None  # this member's own not known: not judged
    assert refusal(W2, ("", 0)) is None


def test_the_writer_and_the_groups_writer_round_trip_and_junk_tells_nothing() -> None:
    told = encode_owned([TP("t", 1), TP("t", 0)], W1)
    assert decode_writer(told) == W1 and decode_owned(told) == {TP("t", 0), TP("t", 1)}
    assert decode_writer(encode_owned([TP("t", 0)])) == ""  # none given: none told
    assert decode_group_writer(encode_group_writer(W1, 2)) == (W1, 2)
    assert decode_group_writer(b"") is None and decode_group_writer(None) is None
    junk = (b"\x00not json", b"[]", b'{"writer": 5}', b'{"group_writer": {"writer": "w"}}')
    for data in junk:
        assert decode_writer(data) == "" and decode_group_writer(data) is None
    assert W1 == "'east-mirror' (producer id 7, epoch 0)"
