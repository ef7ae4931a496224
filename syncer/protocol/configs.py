"""IncrementalAlterConfigs v0 (Kafka 2.3+): set or delete single settings of a resource and
leave its others alone. aiokafka has only AlterConfigs, which replaces every dynamic setting
of the resource with the ones sent: syncing one key with it would drop the others (an
operator's own local settings among them)."""

from __future__ import annotations

from collections.abc import Mapping

from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Boolean, Int8, Int16, Int32, Schema, String

INCREMENTAL_ALTER_CONFIGS = 44
TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC
OP_SET = 0
OP_DELETE = 1


class IncrementalAlterConfigsResponse_v0(Response):  # type: ignore[misc]
    API_KEY = INCREMENTAL_ALTER_CONFIGS
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "responses",
            Array(
                ("error_code", Int16),
                ("error_message", String("utf-8")),
                ("resource_type", Int8),
                ("resource_name", String("utf-8")),
            ),
        ),
    )


class IncrementalAlterConfigsRequest_v0(RequestStruct):  # type: ignore[misc]
    API_KEY = INCREMENTAL_ALTER_CONFIGS
    API_VERSION = 0
    RESPONSE_TYPE = IncrementalAlterConfigsResponse_v0
    SCHEMA = Schema(
        (
            "resources",
            Array(
                ("resource_type", Int8),
                ("resource_name", String("utf-8")),
                (
                    "configs",
                    Array(
                        ("name", String("utf-8")),
                        ("config_operation", Int8),
                        ("value", String("utf-8")),
                    ),
                ),
            ),
        ),
        ("validate_only", Boolean),
    )


class AlterTopicConfigsRequest(Request[IncrementalAlterConfigsRequest_v0]):  # type: ignore[misc]
    """Set ``set`` and delete ``delete`` (back to the broker's default) on one topic."""

    API_KEY = INCREMENTAL_ALTER_CONFIGS

    def __init__(self, topic: str, set: Mapping[str, str], delete: tuple[str, ...]) -> None:
        self.topic = topic
        self.configs: list[tuple[str, int, str | None]] = [
            (k, OP_SET, v) for k, v in sorted(set.items())
        ]
        self.configs += [(k, OP_DELETE, None) for k in sorted(delete)]

    def build(
        self, request_struct_class: type[IncrementalAlterConfigsRequest_v0]
    ) -> IncrementalAlterConfigsRequest_v0:
        return request_struct_class([(TOPIC_RESOURCE, self.topic, self.configs)], False)


def alter_errors(response: IncrementalAlterConfigsResponse_v0) -> list[tuple[int, str]]:
    """(error code, message) of each resource the broker refused to alter."""
    return [(code, message or "") for code, message, *_ in response.responses if code]
