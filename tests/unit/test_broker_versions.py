"""A cluster too old for syncer's requests is refused at start with one line: what its
brokers answer in ApiVersions (plain values here) against what syncer sends."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from syncer.errors import BrokerTooOld, ExitCode
from syncer.protocol.versions import kafka_release, refuse_if_too_old, too_old

# api key → (min, max) as brokers of these releases answer ApiVersions (Kafka's own tables)
KAFKA_2_8 = {0: (0, 9), 1: (0, 12), 2: (0, 6), 3: (0, 11), 18: (0, 3), 22: (0, 4)}
KAFKA_4_1 = {0: (3, 13), 1: (4, 17), 2: (1, 10), 3: (0, 13), 18: (0, 4), 22: (0, 5)}
KAFKA_2_2 = {0: (0, 7), 1: (0, 10), 2: (0, 5), 3: (0, 7), 18: (0, 2), 22: (0, 1)}
KAFKA_0_10 = {0: (0, 2), 1: (0, 3), 2: (0, 1), 3: (0, 2), 18: (0, 0)}


def test_kafka_2_8_and_4_1_are_served() -> None:
    assert too_old(KAFKA_2_8) is None
    assert too_old(KAFKA_4_1) is None


def test_kafka_2_2_lacks_fetch_v11() -> None:
    assert too_old(KAFKA_2_2) == (
        "its brokers are Kafka 2.1–2.2 (Fetch up to v10, needs v11);"
        " syncer needs Kafka 2.3 or newer"
    )


def test_kafka_0_10_lacks_everything_of_v2_batches() -> None:
    why = too_old(KAFKA_0_10)
    assert why is not None
    assert why.startswith("its brokers are Kafka 0.10.1–0.10.2 (")
    for part in (
        "Produce up to v2, needs v3",
        "Fetch up to v3, needs v11",
        "ListOffsets up to v1, needs v2",
        "no InitProducerId",
    ):
        assert part in why


def test_each_floor_is_checked_on_its_own() -> None:
    for key, name in ((0, "Produce v3"), (1, "Fetch v11"), (2, "ListOffsets v2")):
        versions = dict(KAFKA_2_8)
        versions[key] = (0, int(name[-1]) - 1 if key != 1 else 10)
        why = too_old(versions)
        assert why is not None and f"needs v{name.split('v')[-1]}" in why
        assert why.count("needs v") == 1  # only the one lacking
    without = {k: v for k, v in KAFKA_2_8.items() if k != 22}
    assert "no InitProducerId" in (too_old(without) or "")


def test_release_names() -> None:
    assert kafka_release(10) == "2.1–2.2"
    assert kafka_release(8) == "2.0"
    assert kafka_release(12) == "2.3+"


class FakeClient:
    """What ``refuse_if_too_old`` asks of aiokafka's client: a node and its ApiVersions."""

    def __init__(self, versions: dict[int, tuple[int, int]]) -> None:
        self.versions = versions

    def get_random_node(self) -> int:
        return 1

    async def send(self, node: int, request: Any) -> Any:
        answer = SimpleNamespace()
        answer.api_versions = [(k, lo, hi) for k, (lo, hi) in self.versions.items()]
        return answer


def test_the_refusal_is_one_line_with_its_exit_code() -> None:
    where = "remote cluster 'old' at 127.0.0.1:9092"
    with pytest.raises(BrokerTooOld) as caught:
        asyncio.run(refuse_if_too_old(FakeClient(KAFKA_2_2), where))  # type: ignore[arg-type]
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith("remote cluster 'old' at 127.0.0.1:9092: its brokers are Kafka 2.1")
    assert "needs Kafka 2.3 or newer" in text
    assert caught.value.exit_code == ExitCode.TOO_OLD == 9
    asyncio.run(refuse_if_too_old(FakeClient(KAFKA_2_8), where))  # type: ignore[arg-type]
