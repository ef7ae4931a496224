"""The brokers' default replication factor, read before a topic is created: asked of each
broker in turn, so one that is hung, down or refusing among them fails no creation."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import errors as kafka_errors

from syncer import admin as admin_module
from syncer.admin import TopicAdmin
from syncer.config import ClusterConfig
from syncer.errors import TransientClusterError

HUNG, REFUSING = 3, 2
NOT_AUTHORIZED = kafka_errors.ClusterAuthorizationFailedError.errno


class StandInAdmin:
    """Answers DescribeConfigs for a broker with ``default.replication.factor``, except the
    brokers in ``hung`` (raise, as a request to a node not ready does) and in ``refusing``
    (answer with an error code)."""

    def __init__(
        self, hung: set[int], refusing: frozenset[int] = frozenset(), factor: str = "3"
    ) -> None:
        self.hung, self.refusing, self.factor = hung, refusing, factor
        self.asked: list[int] = []

    async def describe_configs(self, resources: list[Any]) -> list[Any]:
        (resource,) = resources
        node = int(resource.name)
        self.asked.append(node)
        if node in self.hung:
            raise kafka_errors.NodeNotReadyError(f"node {node}")
        if node in self.refusing:
            return [SimpleNamespace(resources=[(NOT_AUTHORIZED, "no", 4, str(node), [])])]
        entries = [("num.partitions", "1"), ("default.replication.factor", self.factor)]
        return [SimpleNamespace(resources=[(0, "", 4, str(node), entries)])]


def admin_of(nodes: list[int], stand_in: StandInAdmin) -> TopicAdmin:
    topics = TopicAdmin(ClusterConfig("127.0.0.1:1", name="local"), role="local")
    brokers = [SimpleNamespace(nodeId=n) for n in nodes]
    topics._client = SimpleNamespace(cluster=SimpleNamespace(brokers=lambda: brokers))  # type: ignore[assignment]
    topics._admin = stand_in  # type: ignore[assignment]
    return topics


ORDERS = pytest.mark.parametrize("order", list(itertools.permutations(range(3))), ids=str)


def asked_in(order: tuple[int, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """The brokers are asked in a random order: this one (set once the client is built,
    which shuffles its bootstrap servers)."""

    def shuffle(nodes: list[int]) -> None:
        nodes[:] = [nodes[i] for i in order]

    monkeypatch.setattr(admin_module.random, "shuffle", shuffle)


@ORDERS
async def test_a_hung_or_refusing_broker_is_passed_over(
    order: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in = StandInAdmin({HUNG}, frozenset({REFUSING}))
    topics = admin_of([1, REFUSING, HUNG], stand_in)
    asked_in(order, monkeypatch)
    assert await topics._default_replication_factor() == 3
    assert stand_in.asked[-1] == 1


@ORDERS
async def test_every_broker_failing_fails_with_the_last_answer(
    order: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in = StandInAdmin({1, HUNG}, frozenset({REFUSING}))
    topics = admin_of([1, REFUSING, HUNG], stand_in)
    asked_in(order, monkeypatch)
    with pytest.raises(kafka_errors.KafkaError):  # node-not-ready or not-authorized: the last
        await topics._default_replication_factor()
    assert sorted(stand_in.asked) == [1, REFUSING, HUNG]


async def test_no_broker_known_is_a_cluster_away() -> None:
    with pytest.raises(TransientClusterError, match="no broker known"):
        await admin_of([], StandInAdmin(set()))._default_replication_factor()


async def test_a_broker_without_the_setting_means_one() -> None:
    assert await admin_of([1], StandInAdmin(set(), factor=""))._default_replication_factor() == 1
