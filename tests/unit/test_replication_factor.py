"""The brokers' default replication factor, read before a topic is created: asked of each
broker in turn, so one that is hung or down among them fails no creation."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import errors as kafka_errors

from syncer.admin import TopicAdmin
from syncer.config import ClusterConfig

HUNG = 3


class StandInAdmin:
    """Answers DescribeConfigs for a broker with ``default.replication.factor``, except
    the brokers in ``failing``, which raise."""

    def __init__(self, failing: set[int], factor: str = "3") -> None:
        self.failing = failing
        self.factor = factor
        self.asked: list[int] = []

    async def describe_configs(self, resources: list[Any]) -> list[Any]:
        (resource,) = resources
        node = int(resource.name)
        self.asked.append(node)
        if node in self.failing:
            raise kafka_errors.NodeNotReadyError(f"node {node}")
        entries = [("num.partitions", "1"), ("default.replication.factor", self.factor)]
        return [SimpleNamespace(resources=[(0, "", 4, str(node), entries)])]


def admin_of(nodes: list[int], admin: StandInAdmin) -> TopicAdmin:
    topics = TopicAdmin(ClusterConfig("127.0.0.1:1", name="local"), role="local")
    brokers = [SimpleNamespace(nodeId=n) for n in nodes]
    topics._client = SimpleNamespace(  # type: ignore[assignment]
        cluster=SimpleNamespace(brokers=lambda: brokers),
        get_random_node=lambda: random.choice(nodes) if nodes else 7,  # as aiokafka's does
    )
    topics._admin = admin  # type: ignore[assignment]
    return topics


@pytest.mark.parametrize("seed", range(8))
async def test_a_hung_broker_is_passed_over(seed: int) -> None:
    random.seed(seed)  # the brokers are asked in a random order
    stand_in = StandInAdmin({HUNG})
    assert await admin_of([1, 2, HUNG], stand_in)._default_replication_factor() == 3
    assert stand_in.asked[-1] != HUNG


async def test_every_broker_failing_fails_with_the_last_answer() -> None:
    stand_in = StandInAdmin({1, 2, HUNG})
    with pytest.raises(kafka_errors.NodeNotReadyError):
        await admin_of([1, 2, HUNG], stand_in)._default_replication_factor()
    assert sorted(stand_in.asked) == [1, 2, HUNG]


async def test_no_broker_known_asks_the_one_the_client_picks() -> None:
    stand_in = StandInAdmin(set(), factor="2")
    assert await admin_of([], stand_in)._default_replication_factor() == 2
    assert stand_in.asked == [7]


async def test_a_broker_without_the_setting_means_one() -> None:
    stand_in = StandInAdmin(set(), factor="")
    assert await admin_of([1], stand_in)._default_replication_factor() == 1
