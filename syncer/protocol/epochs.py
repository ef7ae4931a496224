"""OffsetsForLeaderEpoch v3 (Kafka 2.3+), as a consumer asks it (replica id -1, answered by
the leader): where a leader epoch ends in a partition's log. aiokafka has no such request.
Kafka's consumers ask it after a leader change to tell whether the log they read was cut
back (KIP-320); syncer asks it when a remote's batches carry another leader epoch than the
last ones it wrote from that remote."""

from __future__ import annotations

from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Int16, Int32, Int64, Schema, String

OFFSET_FOR_LEADER_EPOCH = 23
CONSUMER = -1  # the replica id of a client: the leader answers
NO_EPOCH = -1  # current_leader_epoch unknown: not fenced by it


class OffsetForLeaderEpochResponse_v3(Response):  # type: ignore[misc]
    API_KEY = OFFSET_FOR_LEADER_EPOCH
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "topics",
            Array(
                ("topic", String("utf-8")),
                (
                    "partitions",
                    Array(
                        ("error_code", Int16),
                        ("partition", Int32),
                        ("leader_epoch", Int32),
                        ("end_offset", Int64),
                    ),
                ),
            ),
        ),
    )


class OffsetForLeaderEpochRequest_v3(RequestStruct):  # type: ignore[misc]
    API_KEY = OFFSET_FOR_LEADER_EPOCH
    API_VERSION = 3
    RESPONSE_TYPE = OffsetForLeaderEpochResponse_v3
    SCHEMA = Schema(
        ("replica_id", Int32),
        (
            "topics",
            Array(
                ("topic", String("utf-8")),
                (
                    "partitions",
                    Array(
                        ("partition", Int32),
                        ("current_leader_epoch", Int32),
                        ("leader_epoch", Int32),
                    ),
                ),
            ),
        ),
    )


class EpochEndRequest(Request[OffsetForLeaderEpochRequest_v3]):  # type: ignore[misc]
    """Where ``epoch`` ends in ``topic[partition]``'s log."""

    API_KEY = OFFSET_FOR_LEADER_EPOCH

    def __init__(self, topic: str, partition: int, epoch: int) -> None:
        self.topic, self.partition, self.epoch = topic, partition, epoch

    def build(
        self, request_struct_class: type[OffsetForLeaderEpochRequest_v3]
    ) -> OffsetForLeaderEpochRequest_v3:
        partitions = [(self.partition, NO_EPOCH, self.epoch)]
        return request_struct_class(CONSUMER, [(self.topic, partitions)])


def epoch_end(response: OffsetForLeaderEpochResponse_v3) -> tuple[int, int, int]:
    """(error code, the largest epoch at or below the one asked that the log holds, where
    that epoch ends: the start of the next one, or the log end if it is the leader's
    current epoch); (code, -1, -1) if the log holds none at or below it."""
    ((_topic, ((code, _partition, epoch, end),)),) = response.topics
    return int(code), int(epoch), int(end)
