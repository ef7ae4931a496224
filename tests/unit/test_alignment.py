"""Invariants 1 and 3 as pure decisions: every produce answer judged, when a write may be sent
behind another, and what landed compared with the source."""

from __future__ import annotations

import pytest

from syncer.alignment import (
    Outcome,
    StateClock,
    compare_landed,
    judge,
    refusal_hint,
    unanswered,
    waiting_for,
)
from syncer.protocol.common import (
    DUPLICATE_SEQUENCE,
    INVALID_RECORD,
    INVALID_TIMESTAMP,
    KAFKA_STORAGE_ERROR,
    MESSAGE_TOO_LARGE,
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER,
    OUT_OF_ORDER_SEQUENCE,
    RECORD_LIST_TOO_LARGE,
    REQUEST_TIMED_OUT,
    UNKNOWN_TOPIC_ID,
)

DAY_MS = 86_400_000


@pytest.mark.parametrize(
    ("code", "base", "retriable", "outcome"),
    [
        (0, 100, False, Outcome.LANDED),
        (0, 101, False, Outcome.MISPLACED),
        (0, 0, False, Outcome.MISPLACED),
        (OUT_OF_ORDER_SEQUENCE, -1, False, Outcome.REFUSED_SEQUENCE),
        (DUPLICATE_SEQUENCE, -1, False, Outcome.DUPLICATE),
        (MESSAGE_TOO_LARGE, -1, False, Outcome.TOO_LARGE),
        (RECORD_LIST_TOO_LARGE, -1, False, Outcome.TOO_LARGE),
        (NOT_LEADER_OR_FOLLOWER, -1, True, Outcome.UNKNOWN),
        (NOT_ENOUGH_REPLICAS, -1, True, Outcome.NOT_LANDED),
        (REQUEST_TIMED_OUT, -1, True, Outcome.UNKNOWN),
        (NOT_ENOUGH_REPLICAS_AFTER_APPEND, -1, True, Outcome.UNKNOWN),
        (KAFKA_STORAGE_ERROR, -1, True, Outcome.UNKNOWN),
        (INVALID_TIMESTAMP, -1, False, Outcome.REFUSED),
        (INVALID_RECORD, -1, False, Outcome.REFUSED),
    ],
)
def test_every_produce_answer_has_one_verdict(
    code: int, base: int, retriable: bool, outcome: Outcome
) -> None:
    verdict = judge(100, code, base, retriable)
    assert verdict.outcome is outcome
    assert verdict.expected == 100
    assert verdict.landed == (outcome is Outcome.LANDED)
    halting = (Outcome.MISPLACED, Outcome.TOO_LARGE, Outcome.REFUSED)
    assert verdict.outcome.halts == (outcome in halting)


@pytest.mark.parametrize("retriable", [False, True])
def test_a_write_to_a_topic_id_the_broker_no_longer_holds_halts_and_is_never_retried(
    retriable: bool,
) -> None:
    # Kafka's client retries UNKNOWN_TOPIC_ID (a metadata error); here it halts whatever a
    # client library says: the log the write was meant for is gone
    verdict = judge(100, UNKNOWN_TOPIC_ID, -1, retriable)
    assert verdict.outcome is Outcome.REFUSED and verdict.outcome.halts
    assert not verdict.landed and verdict.error_code == UNKNOWN_TOPIC_ID


def test_a_misplaced_write_names_both_offsets() -> None:
    verdict = judge(100, 0, 140, False)
    assert (verdict.expected, verdict.landed_at) == (100, 140)


def test_a_request_lost_on_our_side_may_have_landed() -> None:
    assert unanswered(7).outcome is Outcome.UNKNOWN


NOW = 1_700_000_000_000


def test_no_write_is_pipelined_before_one_landed() -> None:
    clock = StateClock(DAY_MS)
    assert not clock.may_pipeline(None, [], NOW)
    assert clock.may_pipeline(NOW - 1000, [NOW, NOW], NOW)


def test_old_timestamps_let_the_state_expire_so_writes_go_one_at_a_time() -> None:
    clock = StateClock(DAY_MS)
    two_days = NOW - 2 * DAY_MS
    assert not clock.may_pipeline(two_days, [], NOW)  # the landed one may expire the state
    assert not clock.may_pipeline(NOW, [two_days], NOW)  # so may one in flight
    assert not clock.may_pipeline(NOW, [NOW, two_days, NOW], NOW)


def test_the_margin_keeps_writes_alone_close_to_the_expiry() -> None:
    """The margin covers the time from the decision to the append of the last write in
    flight: four produce requests ahead of it on its connection, each answered only once
    the in-sync replicas have it (30 s each), and our queue: five minutes."""
    clock = StateClock(DAY_MS)
    assert clock.may_pipeline(NOW - DAY_MS + 301_000, [], NOW)
    assert not clock.may_pipeline(NOW - DAY_MS + 299_000, [], NOW)
    assert not clock.may_pipeline(NOW - DAY_MS + 121_000, [], NOW)  # 2 min: too close
    short = StateClock(5000)  # a test broker's: half of it
    assert short.may_pipeline(NOW - 2000, [], NOW)
    assert not short.may_pipeline(NOW - 3000, [], NOW)


def test_an_unknown_expiry_never_relies_on_the_state() -> None:
    assert not StateClock(0).may_pipeline(NOW, [NOW], NOW)


def test_what_landed_is_compared_with_the_source() -> None:
    source = {o: b"r%d" % o for o in range(0, 20)}
    assert compare_landed({o: b"r%d" % o for o in range(5, 10)}, source, 5, 10) is None
    # every local record one offset early: the source's offset 6 at local offset 5
    shifted = {o: b"r%d" % (o + 1) for o in range(5, 10)}
    found = compare_landed(shifted, source, 5, 10)
    assert found is not None and (found.offset, found.source_offset) == (5, 6)
    assert "record from remote offset 6 landed at local offset 5" in found.describe()


def test_a_filler_equals_a_hole_and_nothing_else() -> None:
    source = {0: b"a", 2: b"c"}  # offset 1: a marker or aborted data at the source
    assert compare_landed({0: b"a", 2: b"c"}, source, 0, 3) is None  # local 1: a filler
    found = compare_landed({0: b"a"}, source, 0, 3)  # a filler where the source has c
    assert found is not None and found.offset == 2 and not found.local
    found = compare_landed({0: b"a", 1: b"x", 2: b"c"}, source, 0, 3)
    assert found is not None and found.offset == 1 and found.source_offset is None
    assert "holds a record the source does not have" in found.describe()


def test_plan_says_when_the_data_to_copy_is_older_than_the_producer_expiry() -> None:
    from syncer.report import PartitionRow, producer_state_note

    def row(partition: int, first: int | None) -> PartitionRow:
        return PartitionRow(
            "t", partition, 0, {"east": 10}, 10, "east", "behind", None, first_timestamp=first
        )

    rows = [row(0, NOW - 2 * DAY_MS), row(1, NOW), row(2, None)]
    note = producer_state_note(StateClock(DAY_MS), rows, NOW)
    assert "keep producer state for 86400000 ms" in note
    assert "1 partitions start with records older than that" in note
    assert "no data to copy is older" in producer_state_note(StateClock(DAY_MS), rows[1:], NOW)
    assert "unknown" in producer_state_note(StateClock(0), rows, NOW)


def test_a_refusal_a_local_setting_explains_halts_naming_the_setting() -> None:
    for code in (INVALID_TIMESTAMP, INVALID_RECORD):
        assert judge(5, code, -1, retriable=False).outcome is Outcome.REFUSED
    timestamp = refusal_hint(INVALID_TIMESTAMP)
    assert timestamp is not None and "message.timestamp.before.max.ms" in timestamp
    record = refusal_hint(INVALID_RECORD)
    assert record is not None and "without a key" in record
    assert refusal_hint(MESSAGE_TOO_LARGE) is None  # told by the topic's limit instead


def test_a_partition_short_of_in_sync_replicas_waits_and_says_why() -> None:
    """issue 19: RF 3, min ISR 2, two followers down; the write is retried, never halted."""
    before = judge(100, NOT_ENOUGH_REPLICAS, -1, True)
    after = judge(100, NOT_ENOUGH_REPLICAS_AFTER_APPEND, -1, True)
    assert not before.outcome.halts and not after.outcome.halts
    # refused before the append: not a refused sequence (no foreign producer suspected)
    assert before.outcome is Outcome.NOT_LANDED
    # appended to the leader's log: what landed is read back and checked, never sent again
    assert after.outcome is Outcome.UNKNOWN
    assert waiting_for(NOT_ENOUGH_REPLICAS) == (
        "local NOT_ENOUGH_REPLICAS (in-sync replicas below min.insync.replicas)"
    )
    assert waiting_for(NOT_ENOUGH_REPLICAS_AFTER_APPEND) == (
        "local NOT_ENOUGH_REPLICAS_AFTER_APPEND (appended, then the in-sync replicas fell"
        " below min.insync.replicas)"
    )


def test_a_write_answered_by_a_leader_that_moved_may_have_landed() -> None:
    """An acks=all write the leader appended, answered NOT_LEADER_OR_FOLLOWER when the
    leader moved before its in-sync replicas took it (Kafka's ``DelayedProduce``), may sit
    on the new leader: read back and checked, never simply sent again."""
    verdict = judge(100, NOT_LEADER_OR_FOLLOWER, -1, True)
    assert verdict.outcome is Outcome.UNKNOWN
    assert not verdict.outcome.halts
    assert waiting_for(NOT_LEADER_OR_FOLLOWER) == "local NOT_LEADER_OR_FOLLOWER (the leader moved)"


@pytest.mark.parametrize("code", [NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR])
def test_every_retried_refusal_of_a_local_broker_has_a_reason(code: int) -> None:
    assert judge(100, code, -1, True).outcome in (Outcome.NOT_LANDED, Outcome.UNKNOWN)
    reason = waiting_for(code)
    assert reason is not None and reason.startswith("local ")


def test_a_code_without_a_reason_is_left_to_the_caller_to_name() -> None:
    assert waiting_for(INVALID_TIMESTAMP) is None
    assert waiting_for(0) is None
