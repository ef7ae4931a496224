"""Which topics halt when topic ids change: plain values, no broker."""

from __future__ import annotations

import uuid

from syncer.topic_ids import (
    LOCAL,
    IdChange,
    Judged,
    holding,
    id_changes,
    judged,
    kept_sources,
    learned,
    remote_label,
    without_dropped,
)

OLD, NEW, OTHER = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
EAST, WEST = remote_label("east"), remote_label("west")


def test_the_same_ids_change_nothing() -> None:
    known = {LOCAL: {"t": OLD}, EAST: {"t": OTHER}}
    seen = {LOCAL: {"t": OLD}, EAST: {"t": OTHER}}
    assert id_changes(known, seen, {LOCAL: ["t"], EAST: ["t"]}) == []


def test_a_remote_topic_recreated_is_a_change_naming_both_ids() -> None:
    known = {LOCAL: {"t": OLD, "u": OLD}, EAST: {"t": OTHER, "u": OTHER}}
    seen = {LOCAL: {"t": OLD, "u": OLD}, EAST: {"t": NEW, "u": OTHER}}
    (change,) = id_changes(known, seen, {LOCAL: ["t", "u"], EAST: ["t", "u"]})
    assert change == IdChange("t", EAST, OTHER, NEW)
    text = change.describe()
    assert "topic t" in text and "remote east" in text and str(OTHER) in text and str(NEW) in text


def test_a_local_topic_recreated_or_gone_is_a_change() -> None:
    known = {LOCAL: {"t": OLD, "u": OLD}}
    seen = {LOCAL: {"t": NEW}}
    changes = id_changes(known, seen, {LOCAL: ["t", "u"]})
    assert changes == [IdChange("t", LOCAL, OLD, NEW), IdChange("u", LOCAL, OLD, None)]
    assert "was deleted on the local cluster" in changes[1].describe()


def test_a_remote_topic_gone_is_not_a_change_yet() -> None:
    # its fetches name the old id and fail; it halts when it comes back with another id
    known = {EAST: {"t": OLD}}
    assert id_changes(known, {EAST: {}}, {EAST: ["t"]}) == []
    assert id_changes(known, {EAST: {"t": NEW}}, {EAST: ["t"]}) == [IdChange("t", EAST, OLD, NEW)]


def test_topics_not_asked_about_and_clusters_without_ids_are_not_judged() -> None:
    known = {LOCAL: {"t": OLD}, WEST: {"t": OLD}}
    assert id_changes(known, {LOCAL: {}, WEST: None}, {LOCAL: [], WEST: ["t"]}) == []


def test_a_topic_first_seen_is_learned_and_a_known_id_is_never_replaced() -> None:
    known = {LOCAL: {"t": OLD}}
    after = learned(known, {LOCAL: {"t": NEW, "u": NEW}, EAST: {"u": OTHER}, WEST: None})
    assert after == {LOCAL: {"t": OLD, "u": NEW}, EAST: {"u": OTHER}}
    assert known == {LOCAL: {"t": OLD}}  # the input is left as it was


def test_nothing_is_learned_of_a_halted_topic() -> None:
    assert learned({}, {EAST: {"t": NEW, "u": NEW}}, halted={"t"}) == {EAST: {"u": NEW}}


BOTH = {"t": ("east", "west")}


def test_a_remote_recreated_while_another_holds_the_log_is_dropped_not_halted() -> None:
    change = IdChange("t", WEST, OLD, NEW)
    found = judged([change], {}, BOTH, {"t": ["east"]}, {})
    assert found.halts == {}
    why = found.drops["t"]["west"]
    assert why.startswith(change.what()) and str(OLD) in why and str(NEW) in why
    assert why.endswith("not used for this topic any more: remote east holds the log copied")


def test_a_remote_recreated_with_no_other_holding_the_log_halts_as_before() -> None:
    change = IdChange("t", WEST, OLD, NEW)
    # east is a source but holds another id (or none known): no holder
    assert judged([change], {}, BOTH, {}, {}) == Judged({"t": change.describe()}, {})
    # one that holds it but is no source of the topic does not count either
    assert judged([change], {}, {"t": ("west",)}, {"t": ["east"]}, {}).halts == {
        "t": change.describe()
    }


def test_a_remote_topic_gone_is_dropped_while_another_holds_it_else_left_for_now() -> None:
    found = judged([], {"t": (WEST,)}, {"t": ("east",)}, {"t": ["east"]}, {})
    assert found == Judged(
        {},
        {
            "t": {
                "west": "topic t was deleted on the remote west cluster; it is not used for"
                " this topic any more: remote east holds the log copied"
            }
        },
    )
    assert judged([], {"t": (WEST,)}, {"t": ()}, {}, {}) == Judged({}, {})


def test_a_local_change_halts_whatever_the_remotes_hold() -> None:
    local, remote = IdChange("t", LOCAL, OLD, None), IdChange("t", WEST, OLD, NEW)
    found = judged([remote, local], {}, BOTH, {"t": ["east"]}, {})
    assert found == Judged({"t": local.describe()}, {})


def test_a_remote_dropped_before_is_not_judged_again_nor_counted_as_holding() -> None:
    west = IdChange("t", WEST, OLD, NEW)
    before = {"t": {"west": "deleted at west"}}
    assert judged([west], {}, BOTH, {"t": ["east"]}, before) == Judged({}, {})
    # east recreated too: west, dropped (though its census showed the old id), is no
    # holder: the topic halts
    east = IdChange("t", EAST, OLD, OTHER)
    found = judged([east, west], {}, BOTH, {"t": ["west"]}, before)
    assert found == Judged({"t": east.describe()}, {})


def test_the_last_holder_gone_after_the_others_were_dropped_halts() -> None:
    found = judged([], {"t": (EAST,)}, BOTH, {}, {"t": {"west": "recreated at west"}})
    assert found.drops == {}
    assert found.halts == {
        "t": "topic t was deleted on the remote east cluster, the last that held the log"
        " copied (west: recreated at west)"
    }


def test_several_holders_are_named_and_several_moved_remotes_dropped_at_once() -> None:
    north = remote_label("north")
    changes = [IdChange("t", EAST, OLD, NEW), IdChange("t", north, OLD, OTHER)]
    sources = {"t": ("east", "north", "south", "west")}
    found = judged(changes, {}, sources, {"t": ["south", "west"]}, {})
    assert found.halts == {} and sorted(found.drops["t"]) == ["east", "north"]
    for why in found.drops["t"].values():
        assert why.endswith("remote south and remote west hold the log copied")


def test_holders_hold_the_id_remembered_and_clusters_without_ids_hold_nothing() -> None:
    known = {EAST: {"t": OLD, "u": OLD}, WEST: {"t": OLD}}
    seen = {EAST: {"t": OLD, "u": NEW}, WEST: None}
    asked = {EAST: ["t", "u"], WEST: ["t"]}
    assert holding(known, seen, asked, [EAST, WEST]) == {"t": ["east"]}


def test_a_dropped_remote_is_neither_counted_nor_a_source_of_that_topic() -> None:
    dropped = {"t": {"west": "recreated"}}
    counts = {"east": {"t": 1, "u": 3}, "west": {"t": 2, "u": 3}}
    assert without_dropped(counts, dropped) == {"east": {"t": 1, "u": 3}, "west": {"u": 3}}
    sources = {"t": ("east", "west"), "u": ("east", "west")}
    assert kept_sources(sources, dropped) == {"t": ("east",), "u": ("east", "west")}
