"""A fetch answer as a plain value: one partition's record bytes and ends, and its
``FetchOutcome``, decided here from the error code, so that no caller judges Kafka's
numbers."""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

from aiokafka import errors as kafka_errors

from syncer.connection import error_for, is_retriable
from syncer.errors import ClusterError, TransientClusterError
from syncer.leaders import LEADER_MOVED_CODES
from syncer.protocol import UNKNOWN_TOPIC_ID

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
OFFSET_OUT_OF_RANGE: int = kafka_errors.OffsetOutOfRangeError.errno  # below start, past end


class FetchOutcome(Enum):
    """What a fetch answer means for the one who asked, decided from its error code."""

    OK = "ok"  # records (or none) from the offset asked
    RETRY = "retry"  # Kafka says it may pass (a timeout, a partition not available yet)
    LEADER_MOVED = "leader moved"  # another broker leads now: refresh metadata, ask again
    OUT_OF_RANGE = "out of range"  # the log no longer holds the offset, or ends before it
    TOPIC_GONE = "topic gone"  # the topic id asked is not there: deleted, maybe recreated
    FAILED = "failed"  # any other error: asking again will not help
    # the leader named a read replica (no records), or the read replica asked answered an
    # error: ask again at once where ``fetch_node`` now says (nothing about the log itself)
    REROUTED = "rerouted"

    @property
    def retriable(self) -> bool:
        """May the same fetch succeed if asked again (after a metadata refresh)?"""
        return self in (FetchOutcome.RETRY, FetchOutcome.LEADER_MOVED, FetchOutcome.REROUTED)


def fetch_outcome(code: int) -> FetchOutcome:
    """The outcome of a fetch answer that carries ``code``."""
    if code == 0:
        return FetchOutcome.OK
    if code in LEADER_MOVED_CODES:
        return FetchOutcome.LEADER_MOVED
    if code == OFFSET_OUT_OF_RANGE:
        return FetchOutcome.OUT_OF_RANGE
    if code == UNKNOWN_TOPIC_ID:
        return FetchOutcome.TOPIC_GONE
    if is_retriable(code):
        return FetchOutcome.RETRY
    return FetchOutcome.FAILED


class FetchedPartition(NamedTuple):
    """One partition of a fetch response, records still as raw bytes (a named tuple: one is
    made per partition of every answer, ahead of its records' write)."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: tuple[tuple[int, int], ...]
    records: bytes | memoryview  # a view of a poll's answer (``read_fetch_v13``)
    preferred_read_replica: int = -1  # named by the leader (KIP-392); -1: none
    from_follower: bool = False  # answered by a broker that does not lead the partition

    @property
    def stable_end(self) -> int:
        return self.last_stable_offset if self.last_stable_offset >= 0 else self.high_watermark

    @property
    def outcome(self) -> FetchOutcome:
        """A follower's error says only that it cannot serve us (it lags: OFFSET_OUT_OF_RANGE;
        it is no replica now: NOT_LEADER_OR_FOLLOWER), never that the log lost the offset:
        KIP-392's client asks the leader then, and so do we."""
        if not self.error_code and (self.preferred_read_replica < 0 or self.records):
            return FetchOutcome.OK  # nearly every answer
        if self.error_code and self.from_follower:
            return FetchOutcome.REROUTED
        if not self.error_code and self.preferred_read_replica >= 0 and not self.records:
            return FetchOutcome.REROUTED
        return fetch_outcome(self.error_code)

    def error(self, context: str) -> ClusterError:
        """Our error for a failed answer, to raise or to quote: transient exactly when the
        outcome is retriable (aiokafka 0.14 knows no leader epochs, so it would not say)."""
        error = error_for(self.error_code, context)
        if self.outcome.retriable and not isinstance(error, TransientClusterError):
            return TransientClusterError(str(error))
        return error
