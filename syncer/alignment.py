"""Invariants 1 (alignment) and 3 (one copy of each offset), as pure decisions.

A write sent for source offset ``o`` is *judged* from the broker's answer: it landed at
``o``, it landed elsewhere (halt at once, naming both offsets), it did not land, or nobody
can tell (a timeout, a cut connection: the copier then compares what the local log holds
with the source before it writes again).

The broker fences duplicates only while it holds our producer state for the partition
(``ProducerStateManager``): for a producer id it holds no state for, any sequence is
accepted (KIP-360), and it drops the state once ``now - lastTimestamp >=
producer.id.expiration.ms``, where ``lastTimestamp`` is the appended batch's max timestamp —
the source's CreateTime, which syncer keeps. So a write may be sent while others of the
same partition are unanswered only while an accepted write proves the state is there and
none of the timestamps involved lets it expire before the next batch arrives; otherwise a
refused batch would let its successors land at its offsets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from syncer.protocol.common import (
    DUPLICATE_SEQUENCE,
    FENCED_LEADER_EPOCH,
    INVALID_RECORD,
    INVALID_TIMESTAMP,
    KAFKA_STORAGE_ERROR,
    LEADER_NOT_AVAILABLE,
    MESSAGE_TOO_LARGE,
    NETWORK_EXCEPTION,
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER,
    OUT_OF_ORDER_SEQUENCE,
    RECORD_LIST_TOO_LARGE,
    REQUEST_TIMED_OUT,
    UNKNOWN_LEADER_EPOCH,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
)

# refused before anything was appended: the write did not land (UNKNOWN_TOPIC_OR_PARTITION
# also answers a write the leader appended when the topic is deleted while it waits: the log
# it may be in is gone, and a topic recreated halts the partition, by topic id or end)
NOT_APPENDED = {
    UNKNOWN_TOPIC_OR_PARTITION,
    LEADER_NOT_AVAILABLE,
    NOT_ENOUGH_REPLICAS,
    FENCED_LEADER_EPOCH,
    UNKNOWN_LEADER_EPOCH,
}
TOO_LARGE = {MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE}
# the broker may have appended it (to the leader's log) without being able to say so.
# NOT_LEADER_OR_FOLLOWER is one of them: an acks=all write the leader appended waits for its
# in-sync replicas (Kafka's ``DelayedProduce``), and if the leader moves meanwhile it is
# answered so (``Partition.checkEnoughReplicasReachOffset`` with no local leader log), though
# a follower that took it before the move holds it, now as the new leader's, perhaps above
# its high watermark: sent again while the broker holds no producer state for us, it would
# land twice
MAYBE_APPENDED = {
    REQUEST_TIMED_OUT,
    NETWORK_EXCEPTION,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER,
}
# the log the write named by topic id is gone (the topic was deleted, or recreated under its
# name): nothing was appended, and no later try can put it in that log; halt. Kafka's own
# client retries it (a metadata error), so this is decided here, not by ``retriable``
LOG_GONE = {UNKNOWN_TOPIC_ID}


# why the writes of a partition wait, for the refusals a local broker answers while it cannot
# take them yet: Kafka's name and what it means here. NOT_ENOUGH_REPLICAS is Kafka's
# ``Partition.appendRecordsToLeader`` refusing an acks=all write while the ISR is smaller than
# min.insync.replicas; ..._AFTER_APPEND is ``checkEnoughReplicasReachOffset`` answering a write
# it had appended (the high watermark covers it) once the ISR shrank below that
WAIT_REASONS = {
    NOT_ENOUGH_REPLICAS: (
        "NOT_ENOUGH_REPLICAS",
        "in-sync replicas below min.insync.replicas",
    ),
    NOT_ENOUGH_REPLICAS_AFTER_APPEND: (
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        "appended, then the in-sync replicas fell below min.insync.replicas",
    ),
    NOT_LEADER_OR_FOLLOWER: ("NOT_LEADER_OR_FOLLOWER", "the leader moved"),
    FENCED_LEADER_EPOCH: ("FENCED_LEADER_EPOCH", "the leader moved"),
    UNKNOWN_LEADER_EPOCH: ("UNKNOWN_LEADER_EPOCH", "the leader moved"),
    LEADER_NOT_AVAILABLE: ("LEADER_NOT_AVAILABLE", "no leader elected yet"),
    UNKNOWN_TOPIC_OR_PARTITION: ("UNKNOWN_TOPIC_OR_PARTITION", "the broker does not know it yet"),
    REQUEST_TIMED_OUT: ("REQUEST_TIMED_OUT", "the replicas did not acknowledge in time"),
    NETWORK_EXCEPTION: ("NETWORK_EXCEPTION", "the leader lost its connection to a replica"),
    KAFKA_STORAGE_ERROR: ("KAFKA_STORAGE_ERROR", "a log directory of the leader failed"),
}


# what the local topic's settings have to do with a write refused for good, for the refusals
# a setting there explains (Kafka's LogValidator): said with the halt, so that the operator
# knows what to change
REFUSAL_HINTS = {
    INVALID_TIMESTAMP: (
        "a record's timestamp lies outside what the local topic takes"
        " (message.timestamp.before.max.ms / message.timestamp.after.max.ms, or"
        " message.timestamp.difference.max.ms before Kafka 3.6); the remote took it:"
        " widen the local bounds to copy it"
    ),
    INVALID_RECORD: (
        "the local broker found a record invalid: in a compacted topic, one without a key"
        " (which the remote took before it compacted), else see the broker's message"
    ),
}


def refusal_hint(error_code: int) -> str | None:
    """What the local topic's settings have to do with a write refused with ``error_code``
    for good (None: nothing known)."""
    return REFUSAL_HINTS.get(error_code)


def waiting_for(error_code: int) -> str | None:
    """Why a partition's writes wait after a local broker answered ``error_code`` to one of
    them, as its status shows it until a write lands (None: a code without a reason here,
    which the caller names in its own words)."""
    known = WAIT_REASONS.get(error_code)
    if known is None:
        return None
    name, meaning = known
    return f"local {name} ({meaning})"


class Outcome(Enum):
    LANDED = "landed at its source offset"
    MISPLACED = "landed at another offset"
    REFUSED_SEQUENCE = "refused: our sequence does not continue the partition's"
    DUPLICATE = "refused as a duplicate of an earlier write"
    TOO_LARGE = "refused: larger than the local topic allows"
    NOT_LANDED = "refused before it was appended (worth another try)"
    UNKNOWN = "no answer that says whether it landed"
    REFUSED = "refused"

    @property
    def halts(self) -> bool:
        return self in (Outcome.MISPLACED, Outcome.TOO_LARGE, Outcome.REFUSED)


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    expected: int  # the source offset the write was sent for
    landed_at: int | None = None  # where the broker says it put it
    error_code: int = 0

    @property
    def landed(self) -> bool:
        return self.outcome is Outcome.LANDED


def judge(expected: int, error_code: int, base_offset: int, retriable: bool) -> Verdict:
    """The verdict on one produce answer for a write sent for source offset ``expected``.
    ``retriable``: what Kafka says of ``error_code`` (unused when it is 0)."""
    if error_code == 0:
        if base_offset == expected:
            return Verdict(Outcome.LANDED, expected, base_offset)
        return Verdict(Outcome.MISPLACED, expected, base_offset)
    if error_code == OUT_OF_ORDER_SEQUENCE:
        return Verdict(Outcome.REFUSED_SEQUENCE, expected, error_code=error_code)
    if error_code == DUPLICATE_SEQUENCE:
        return Verdict(Outcome.DUPLICATE, expected, error_code=error_code)
    if error_code in TOO_LARGE:
        return Verdict(Outcome.TOO_LARGE, expected, error_code=error_code)
    if error_code in LOG_GONE:
        return Verdict(Outcome.REFUSED, expected, error_code=error_code)
    if error_code in NOT_APPENDED:
        return Verdict(Outcome.NOT_LANDED, expected, error_code=error_code)
    if error_code in MAYBE_APPENDED or retriable:
        return Verdict(Outcome.UNKNOWN, expected, error_code=error_code)
    return Verdict(Outcome.REFUSED, expected, error_code=error_code)


def unanswered(expected: int) -> Verdict:
    """The verdict on a write whose request failed or timed out on our side: it may have
    been appended all the same."""
    return Verdict(Outcome.UNKNOWN, expected)


STATE_MARGIN_MS = 300_000  # see StateClock.margin_ms


@dataclass(frozen=True, slots=True)
class StateClock:
    """When the broker may have dropped our producer state: its
    ``producer.id.expiration.ms`` (the lowest of the local brokers'; 0 when unknown: then
    the state is never relied on), less a margin for the time a batch takes to reach it."""

    expiration_ms: int

    @property
    def margin_ms(self) -> int:
        # the time from the decision to send a batch behind others to the broker's append
        # of the last of them: our queue, the wire, and the requests ahead of it on its
        # connection, which the broker reads one at a time, each answered only once its
        # in-sync replicas have it (up to the produce timeout, 30 s: four of them, two
        # minutes); at most half the expiry (a broker that forgets after seconds)
        return min(self.expiration_ms // 2, STATE_MARGIN_MS)

    def fresh(self, timestamp_ms: int, now_ms: int) -> bool:
        """Will state last set by a batch of max timestamp ``timestamp_ms`` still be there
        for the next batch?"""
        return now_ms - timestamp_ms < self.expiration_ms - self.margin_ms

    def may_pipeline(self, proven_at: int | None, in_flight: Iterable[int], now_ms: int) -> bool:
        """May a write be sent while the writes with max timestamps ``in_flight`` are
        unanswered? Only while the last answered write landed (``proven_at``: its max
        timestamp; None when no write was answered since the copier last resynced) and every
        timestamp the state could be left at is fresh: if one of the unanswered writes is
        refused, the state must still be there to refuse its successors."""
        if proven_at is None or self.expiration_ms <= 0:
            return False
        return all(self.fresh(t, now_ms) for t in (proven_at, *in_flight))


@dataclass(frozen=True, slots=True)
class Disagreement:
    """The first local offset whose record is not what a reader of the source sees there."""

    offset: int
    local: bool  # does the local log hold a visible record there?
    source_offset: int | None  # where the source holds the local record, if nearby

    def describe(self) -> str:
        if self.source_offset is not None:
            return (
                f"record from remote offset {self.source_offset} landed at local offset"
                f" {self.offset}"
            )
        if not self.local:
            return f"local offset {self.offset} holds no record where the source has one"
        return f"local offset {self.offset} holds a record the source does not have there"


def compare_landed(
    local: Mapping[int, bytes], source: Mapping[int, bytes], low: int, high: int
) -> Disagreement | None:
    """Compare what landed locally in ``[low, high)`` with the source, as a reader sees
    them: offset → record digest of each visible record (markers, aborted data and fillers
    are not visible records, so a filler in a hole of the source equals the hole). ``source``
    may reach wider than ``[low, high)``: it names where a misplaced record came from."""
    for offset in range(low, high):
        ours = local.get(offset)
        if ours == source.get(offset):
            continue
        if ours is None:
            return Disagreement(offset, False, None)
        where = next((o for o, d in sorted(source.items()) if d == ours), None)
        return Disagreement(offset, True, where)
    return None
