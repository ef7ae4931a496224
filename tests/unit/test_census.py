"""The topic census: a Metadata v10 answer decoded by hand only as far as each topic's
name, id and partition count, and what a refresh plans and checks ids from."""

from __future__ import annotations

import uuid
from io import BytesIO

import pytest

from syncer.admin import Census, census
from syncer.protocol.common import NO_ID
from syncer.protocol.metadata import (
    MetadataCensusRequest_v10,
    MetadataResponse_v10,
    TopicCensus,
    TopicCensusRequest,
    TopicMetadata,
    census_of,
    topics_of,
)

A = uuid.UUID("11111111-2222-3333-4444-555555555555")
B = uuid.UUID("aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee")


def answer(topics: list[tuple[object, ...]], *, brokers: int = 2) -> bytes:
    """A Metadata v10 answer's body as aiokafka encodes it."""
    nodes = [(n, f"host{n}", 9092, "rack" if n else None, {}) for n in range(brokers)]
    return bytes(MetadataResponse_v10(0, nodes, "cluster", 1, topics, -1, {}).encode())


def partition(n: int, replicas: list[int]) -> tuple[object, ...]:
    return (0, n, replicas[0], 5, replicas, replicas[:1], replicas[2:], {})


def test_the_census_counts_partitions_and_reads_ids_as_the_full_decoding_does() -> None:
    topics: list[tuple[object, ...]] = [
        (0, "orders", A, False, [partition(p, [1, 2, 3]) for p in range(300)], -1, {}),
        (0, "audit", B, False, [partition(0, [2])], 8, {}),
        (3, "gone", NO_ID, False, [], -1, {}),
        (0, "empty", B, False, None, -1, {}),
    ]
    raw = answer(topics)
    full = topics_of(MetadataResponse_v10.decode(BytesIO(raw)))
    found = census_of(raw)
    assert found.topics == {**full, "empty": TopicMetadata("empty", B, 0, 0)}
    assert found.topics["orders"] == TopicMetadata("orders", A, 300, 0)
    assert found.brokers == 2
    assert TopicCensus.decode(BytesIO(raw)).topics == found.topics


def test_internal_topics_are_not_in_the_census() -> None:
    topics: list[tuple[object, ...]] = [
        (0, "__consumer_offsets", A, True, [partition(0, [1])], -1, {}),
        (0, "orders", B, False, [partition(0, [1])], -1, {}),
    ]
    assert set(census_of(answer(topics)).topics) == {"orders"}


def test_an_answer_cut_short_is_an_error_not_a_smaller_census() -> None:
    raw = answer([(0, "orders", A, False, [partition(p, [1]) for p in range(4)], -1, {})])
    with pytest.raises(ValueError, match="cut short"):
        census_of(raw[:-10])


def test_a_broker_starting_lists_no_brokers() -> None:
    assert census_of(answer([], brokers=0)).brokers == 0


def test_topics_with_errors_are_neither_counted_nor_given_ids() -> None:
    found = census(
        {
            "orders": TopicMetadata("orders", A, 3, 0),
            "new": TopicMetadata("new", NO_ID, 2, 0),
            "leaderless": TopicMetadata("leaderless", B, 1, 5),
        }
    )
    assert found.counts == {"orders": 3, "new": 2}
    assert found.ids == {"orders": A}
    assert found.ids_of(["orders", "new", "elsewhere"]) == {"orders": A}


def test_a_cluster_without_ids_answers_none_for_any_topics() -> None:
    assert Census({"orders": 3}, None).ids_of(["orders"]) is None


def test_the_census_request_asks_every_topic_and_creates_none() -> None:
    built = TopicCensusRequest().build(MetadataCensusRequest_v10)
    assert built.topics is None and built.allow_auto_topic_creation is False
    assert MetadataCensusRequest_v10.RESPONSE_TYPE is TopicCensus


def test_a_settings_read_narrows_to_keys_and_gives_the_values_reported() -> None:
    from syncer.admin import TopicSetting
    from syncer.topic_configs import SettingsRead

    read = SettingsRead(
        {
            "orders": {
                "retention.ms": TopicSetting("1", True),
                "cleanup.policy": TopicSetting(None, False),
            }
        },
        {"east": {"orders": {"retention.ms": TopicSetting("2", False, "2")}}},
    )
    narrow = read.only({"cleanup.policy"})
    assert narrow.local == {"orders": {"cleanup.policy": TopicSetting(None, False)}}
    assert narrow.remote == {"east": {"orders": {}}}
    assert read.values(read.local) == {"orders": {"retention.ms": "1"}}
    assert read.values(read.remote["east"]) == {"orders": {"retention.ms": "2"}}


class _Cluster:
    """A cluster's census as a test sets it, counting the full metadata reads; ``away``
    (an error) is raised instead of answering."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts
        self.full_reads = 0
        self.away: Exception | None = None

    async def topic_census(self) -> Census:
        if self.away is not None:
            raise self.away
        return Census(dict(self.counts), {})

    async def refresh_metadata(self) -> None:
        self.full_reads += 1


async def test_the_full_metadata_is_read_only_when_a_census_counts_differently() -> None:
    from syncer.config import TopicsConfig
    from syncer.mirroring import MirroredTopics

    local, east = _Cluster({"orders": 3}), _Cluster({"orders": 3, "audit": 1})
    topics = MirroredTopics(TopicsConfig(sync_configs=False), local, {"east": east})  # type: ignore[arg-type]
    await topics._censuses()
    await topics._censuses()
    assert (local.full_reads, east.full_reads) == (1, 1)  # the first look, then nothing new
    east.counts["orders"] = 4
    await topics._censuses()
    await topics._censuses()
    assert (local.full_reads, east.full_reads) == (1, 2)
    east.counts["new"] = 2
    found = await topics._censuses()
    assert east.full_reads == 3 and found["remote east"].counts["new"] == 2


async def test_topics_created_and_led_need_no_full_metadata_read_at_the_next_refresh() -> None:
    from syncer.config import TopicsConfig
    from syncer.mirroring import MirroredTopics

    for staged, reads in ((True, 1), (False, 2)):
        local, east = _Cluster({}), _Cluster({"orders": 3})
        topics = MirroredTopics(TopicsConfig(sync_configs=False), local, {"east": east})  # type: ignore[arg-type]
        topics.staged = staged
        await topics._censuses()  # the refresh's first look: nothing local yet
        local.counts["orders"] = 3  # created, and (staged) waited for until led
        topics._created(await local.topic_census())
        await topics._censuses()  # the next refresh
        assert local.full_reads == reads, staged


async def test_a_remote_away_is_given_its_last_census_only_in_a_refresh_and_only_if_transient() -> (
    None
):
    from syncer.config import TopicsConfig
    from syncer.errors import ClusterError, TransientClusterError
    from syncer.mirroring import MirroredTopics

    local, east, west = _Cluster({"orders": 3}), _Cluster({"orders": 3}), _Cluster({"new": 1})
    remotes = {"east": east, "west": west}
    topics = MirroredTopics(TopicsConfig(sync_configs=False), local, remotes)  # type: ignore[arg-type]
    east.away = TransientClusterError("east: topic census: no answer")
    with pytest.raises(TransientClusterError):  # never read: nothing to stand in
        await topics._censuses(stale_ok=True)
    east.away = None
    await topics._censuses(stale_ok=True)
    assert topics.down == {}
    east.away, east.counts["orders"] = TransientClusterError("east: no answer"), 4
    found = await topics._censuses(stale_ok=True)
    assert found["remote east"].counts == {"orders": 3}  # as last read
    assert topics.down == {"east": "east: no answer"} and east.full_reads == 1
    assert list(topics._answering()) == ["west"]
    with pytest.raises(TransientClusterError):  # outside a refresh: as before
        await topics._censuses()
    east.away = ClusterError("east: not authorized")  # not transient: fails the refresh
    with pytest.raises(ClusterError, match="not authorized"):
        await topics._censuses(stale_ok=True)
    east.away = None
    found = await topics._censuses(stale_ok=True)
    assert found["remote east"].counts == {"orders": 4} and topics.down == {}
