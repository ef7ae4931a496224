"""What a principal may do, as the brokers say it (KIP-430): Metadata v10 asked with
``include_topic_authorized_operations`` and ``include_cluster_authorized_operations``, and
DescribeGroups v3 with ``include_authorized_operations`` (aiokafka's struct). Each answers a
bit field over Kafka's ``AclOperation`` codes; the broker fills it from its authorizer, so
no ACL is guessed here. The cluster's field is only filled up to Metadata v10 (Kafka's
``KafkaApis.handleTopicMetadataRequest``), and only for a principal with DESCRIBE on the
cluster (0 otherwise)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import IntEnum

from aiokafka.protocol.admin import DescribeGroupsRequest_v3, DescribeGroupsResponse_v3
from aiokafka.protocol.api import Request

from syncer.protocol.common import METADATA, NO_ID
from syncer.protocol.metadata import MetadataRequest_v10, MetadataResponse_v10

DESCRIBE_GROUPS = 15
# the schema's default: the broker did not fill the field (not asked, or a version without it)
NOT_PROVIDED = -(2**31)


class Operation(IntEnum):
    """Kafka's ``AclOperation`` codes: bit ``1 << code`` of an authorized-operations field."""

    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


def granted(bits: int) -> frozenset[Operation] | None:
    """The operations a bit field grants; None if the broker did not fill it."""
    if bits == NOT_PROVIDED:
        return None
    return frozenset(op for op in Operation if bits & (1 << op))


class AuthorizedOperationsRequest(Request[MetadataRequest_v10]):  # type: ignore[misc]
    """Metadata v10 of the named topics with what the principal may do on each and on the
    cluster; never creates a topic."""

    API_KEY = METADATA

    def __init__(self, topics: list[str]) -> None:
        self.topics = topics

    def build(self, request_struct_class: type[MetadataRequest_v10]) -> MetadataRequest_v10:
        topics: list[tuple[uuid.UUID, str, dict[int, bytes]]] = [
            (NO_ID, t, {}) for t in self.topics
        ]
        return request_struct_class(topics, False, True, True, {})


@dataclass(frozen=True, slots=True)
class Authorized:
    """One answer: per topic asked, (error code, the operations granted or None), and the
    cluster's operations (None: not given)."""

    topics: dict[str, tuple[int, frozenset[Operation] | None]]
    cluster: frozenset[Operation] | None


def authorized_of(response: MetadataResponse_v10) -> Authorized:
    topics = {}
    for error_code, name, _id, _internal, _partitions, ops, *_ in response.topics:
        if name is not None:
            topics[name] = (int(error_code), None if error_code else granted(int(ops)))
    return Authorized(topics, granted(int(response.cluster_authorized_operations)))


class GroupOperationsRequest_v3(DescribeGroupsRequest_v3):  # type: ignore[misc]
    # aiokafka 0.14 pairs its v3 request with the v2 answer, which has no
    # authorized_operations (the field's bytes are left unread): the v3 answer here
    RESPONSE_TYPE = DescribeGroupsResponse_v3


class GroupOperationsRequest(Request[GroupOperationsRequest_v3]):  # type: ignore[misc]
    """DescribeGroups v3 of ``groups`` with what the principal may do on each."""

    API_KEY = DESCRIBE_GROUPS

    def __init__(self, groups: list[str]) -> None:
        self.groups = groups

    def build(
        self, request_struct_class: type[GroupOperationsRequest_v3]
    ) -> GroupOperationsRequest_v3:
        return request_struct_class(self.groups, True)


def group_operations_of(
    response: DescribeGroupsResponse_v3,
) -> dict[str, tuple[int, frozenset[Operation] | None]]:
    """Group → (error code, the operations granted; None with an error)."""
    out = {}
    for code, group, *_rest, ops in response.groups:
        out[group] = (int(code), None if code else granted(int(ops)))
    return out
