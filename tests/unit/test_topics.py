"""Topic selection and shape checks over plain values."""

from __future__ import annotations

from syncer.config import TopicsConfig
from syncer.topics import plan_topics

SELECT = TopicsConfig(include=("orders\\..*", "audit"), exclude=(".*\\.tmp",))


def test_selected_topics_are_mirrored_created_or_refused() -> None:
    plan = plan_topics(
        SELECT,
        local_counts={"orders.eu": 3, "orders.us": 2},
        remote_counts={
            "east": {"orders.eu": 3, "orders.us": 4, "orders.x.tmp": 1, "other": 1, "audit": 1},
            "west": {"orders.eu": 3, "orders.new": 2, "audit": 2},
        },
    )
    assert plan.mirror == {"orders.eu": 3, "orders.new": 2}
    assert plan.create == {"orders.new": 2}
    assert plan.sources["orders.eu"] == ("east", "west")
    assert plan.refused == {
        "audit": "remotes disagree on the partition count (east=1, west=2)",
        "orders.us": "partition counts differ: local has 2, remote has 4",
    }


def test_a_mirrored_topic_that_gains_partitions_grows_locally() -> None:
    plan = plan_topics(SELECT, {"orders.eu": 3}, {"east": {"orders.eu": 5}}, mirrored={"orders.eu"})
    assert plan.grow == {"orders.eu": 5} and plan.mirror == {"orders.eu": 5}


def test_missing_topics_are_refused_when_creation_is_off() -> None:
    selection = TopicsConfig(include=(".*",), create_missing=False)
    plan = plan_topics(selection, {}, {"east": {"a": 1, "__consumer_offsets": 50}})
    assert plan.refused == {"a": "missing locally and topics.create_missing is false"}
