"""Which topics halt when topic ids change: plain values, no broker."""

from __future__ import annotations

import uuid

from syncer.topic_ids import LOCAL, IdChange, id_changes, learned, remote_label

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
