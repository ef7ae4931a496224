"""Members of a group that subscribe to different topics for a moment (each refreshes its
topics on its own clock): the leader gives out only the topics every member subscribes to,
since aiokafka's member fails for good on an assignment of a topic it has not subscribed to."""

from __future__ import annotations

from typing import Any

from aiokafka.coordinator.protocol import ConsumerProtocol

from syncer.assignment import common_topics
from syncer.clusters import TP
from syncer.coordination import GapStickyAssignor


class Metadata:
    """The leader's view of the local cluster: topic → partition count."""

    def __init__(self, partitions: dict[str, int]) -> None:
        self.partitions = partitions

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        count = self.partitions.get(topic)
        return None if count is None else set(range(count))


def plan(subscriptions: dict[str, list[str]], owned: dict[str, bytes] | None = None) -> Any:
    """The leader's assignment for members subscribed as given, decoded as each member's
    coordinator decodes its SyncGroup answer."""
    members = {
        m: ConsumerProtocol.METADATA.decode(
            ConsumerProtocol.METADATA(0, topics, (owned or {}).get(m, b"")).encode()
        )
        for m, topics in subscriptions.items()
    }
    out = GapStickyAssignor().assign(Metadata({"a": 4, "b": 4, "c": 2}), members)
    return {
        m: set(ConsumerProtocol.ASSIGNMENT.decode(a.encode()).partitions()) for m, a in out.items()
    }


def test_common_topics_are_those_every_member_subscribes_to() -> None:
    assert common_topics([["a", "b", "c"], ["a", "b"], ["b", "a", "d"]]) == {"a", "b"}
    assert common_topics([["a"], ["b"]]) == set()
    assert common_topics([["a", "b"]]) == {"a", "b"}
    assert common_topics([]) == set()


def test_no_member_is_given_a_topic_it_has_not_subscribed_to() -> None:
    # m1 has created and subscribed to the second share already, m2 and m3 not yet
    subscriptions = {"m1": ["a", "b"], "m2": ["a"], "m3": ["a"]}
    shares = plan(subscriptions)
    for member, parts in shares.items():
        assert {tp.topic for tp in parts} <= set(subscriptions[member]), member
    # every partition of the common topic has exactly one owner, none of "b" yet
    everything = [tp for parts in shares.values() for tp in parts]
    assert sorted(everything) == [TP("a", p) for p in range(4)]


def test_a_topic_is_given_out_once_every_member_subscribes_to_it() -> None:
    shares = plan({"m1": ["a", "b"], "m2": ["a", "b"], "m3": ["b", "a"]})
    everything = [tp for parts in shares.values() for tp in parts]
    assert sorted(everything) == sorted(
        [TP("a", p) for p in range(4)] + [TP("b", p) for p in range(4)]
    )
    assert [len(parts) for parts in shares.values()] == [3, 3, 2]


def test_an_owned_partition_of_a_topic_not_all_subscribe_to_is_not_kept() -> None:
    # m1 owned b-0 in a group whose new member m2 has not subscribed to b yet
    owned = {"m1": b'{"owned": {"a": [0, 1], "b": [0]}}'}
    shares = plan({"m1": ["a", "b"], "m2": ["a"]}, owned)
    assert TP("b", 0) not in shares["m1"]
    assert shares["m1"] | shares["m2"] == {TP("a", p) for p in range(4)}
