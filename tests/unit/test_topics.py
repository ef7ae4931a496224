"""Topic selection and shape checks over plain values."""

from __future__ import annotations

from syncer.admin import TopicSetting
from syncer.config import Config, TopicsConfig
from syncer.topics import (
    TopicPlan,
    as_they_were,
    create_local_topics,
    creation_configs,
    first_to_create,
    plan_topics,
    refuse,
    unfaithful_setting,
)

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


def test_the_topics_of_a_remote_away_are_left_as_they_were() -> None:
    """east did not answer this refresh: its census as last read stands in. Its topics are
    neither grown (west's orders.eu gained partitions: without east's count, it would read
    as the remotes disagreeing, and be refused with its copiers stopped), nor created
    (orders.both, new on both), nor judged anew (audit keeps its refusal); west's own new
    topic is created as usual."""
    local = {"orders.eu": 3, "audit": 1}
    remotes = {
        "east": {"orders.eu": 3, "orders.both": 1, "audit": 1},  # as last read
        "west": {"orders.eu": 5, "orders.both": 1, "orders.west": 2},
    }
    before = TopicPlan(
        mirror={"orders.eu": 3},
        refused={"audit": "local cleanup.policy is compact, remote east's is delete"},
        sources={"orders.eu": ("east", "west")},
    )
    fresh = plan_topics(SELECT, local, remotes, mirrored={"orders.eu"})
    assert "orders.eu" in fresh.refused  # what taking east's old census at its word does
    plan, kept = as_they_were(fresh, remotes, {"east"}, before)
    assert kept == {"orders.eu", "orders.both", "audit"}
    assert plan.mirror == {"orders.eu": 3, "orders.west": 2}
    assert plan.sources == {"orders.eu": ("east", "west"), "orders.west": ("west",)}
    assert plan.create == {"orders.west": 2} and plan.grow == {}
    assert plan.refused == {"audit": "local cleanup.policy is compact, remote east's is delete"}
    assert as_they_were(fresh, remotes, set(), before) == (fresh, set())


def test_missing_topics_are_refused_when_creation_is_off() -> None:
    selection = TopicsConfig(include=(".*",), create_missing=False)
    plan = plan_topics(selection, {}, {"east": {"a": 1, "__consumer_offsets": 50}})
    assert plan.refused == {"a": "missing locally and topics.create_missing is false"}


def test_the_state_topic_skipped_is_never_planned() -> None:
    """A remote that is another deployment's local cluster holds ``_syncer_state``."""
    selection = TopicsConfig(include=(".*",))
    remotes = {"east": {"a": 1, "_syncer_state": 1}}
    mirrors = Config.from_dict(
        {
            "local": {"bootstrap_servers": "l:9092"},
            "remotes": [{"name": "east", "bootstrap_servers": "e:9092"}],
            "topics": {"include": [".*"]},
        }
    ).mirrors
    plan = plan_topics(selection, {"_syncer_state": 1}, remotes, selects=mirrors)
    assert plan.mirror == {"a": 1} and plan.create == {"a": 1} and not plan.refused


DEFAULTS = {
    "message.timestamp.type": "CreateTime",
    "cleanup.policy": "delete",
    "max.message.bytes": "1048588",
    "compression.type": "producer",
}


def judged(local: dict[str, str], remote: dict[str, str] | None = None) -> str | None:
    return unfaithful_setting({**DEFAULTS, **local}, {"east": {**DEFAULTS, **(remote or {})}})


def test_a_local_topic_with_the_defaults_is_faithful() -> None:
    assert judged({}) is None


def test_a_log_append_time_local_topic_is_refused_naming_both_values() -> None:
    assert judged({"message.timestamp.type": "LogAppendTime"}) == (
        "local message.timestamp.type is LogAppendTime, remote east's is CreateTime: the local"
        " broker would replace every record's timestamp with its own clock"
    )
    # a LogAppendTime remote is mirrored (its batches are rewritten with their append time)
    assert judged({}, {"message.timestamp.type": "LogAppendTime"}) is None


def test_local_compaction_of_a_non_compacted_remote_is_refused() -> None:
    reason = judged({"cleanup.policy": "delete,compact"})
    assert reason is not None and reason.startswith(
        "local cleanup.policy is delete,compact, remote east's is delete:"
    )
    assert judged({"cleanup.policy": "compact"}, {"cleanup.policy": "compact,delete"}) is None
    assert judged({"cleanup.policy": "delete"}, {"cleanup.policy": "compact"}) is None


def test_a_lower_local_max_message_bytes_is_refused() -> None:
    reason = judged({"max.message.bytes": "100000"})
    assert reason is not None and reason.startswith(
        "local max.message.bytes is 100000, remote east's is 1048588:"
    )
    assert judged({"max.message.bytes": "2000000"}) is None
    assert judged({"max.message.bytes": "1048588"}) is None


def test_a_local_compression_type_that_recompresses_is_refused() -> None:
    reason = judged({"compression.type": "gzip"})
    assert reason is not None and reason.startswith(
        "local compression.type is gzip, remote east's is producer: the local broker would"
        " recompress"
    )
    assert judged({"compression.type": "lz4"}, {"compression.type": "zstd"}) is not None
    assert judged({"compression.type": "uncompressed"}) is not None
    # the remote's log holds only batches of its type: the same type recompresses nothing
    assert judged({"compression.type": "zstd"}, {"compression.type": "zstd"}) is None
    assert judged({}, {"compression.type": "gzip"}) is None


def test_every_remote_of_a_topic_is_judged_and_missing_settings_are_not() -> None:
    local = {**DEFAULTS, "max.message.bytes": "2000000"}
    remotes = {"east": DEFAULTS, "west": {**DEFAULTS, "max.message.bytes": "3000000"}}
    reason = unfaithful_setting(local, remotes)
    assert reason is not None and "remote west's is 3000000" in reason
    assert unfaithful_setting({"max.message.bytes": "1"}, {"east": {}}) is None


def test_refused_topics_leave_every_other_part_of_the_plan() -> None:
    plan = plan_topics(
        SELECT,
        local_counts={"orders.eu": 3, "audit": 1},
        remote_counts={"east": {"orders.eu": 3, "orders.new": 2, "audit": 1}},
    )
    out = refuse(plan, {"orders.eu": "local max.message.bytes is 1, remote east's is 2: no"})
    assert out.mirror == {"orders.new": 2, "audit": 1} and out.create == {"orders.new": 2}
    assert set(out.sources) == {"orders.new", "audit"}
    assert out.refused == {"orders.eu": "local max.message.bytes is 1, remote east's is 2: no"}
    assert refuse(plan, {}) is plan


def test_a_created_local_topic_is_always_create_time() -> None:
    copied = {"cleanup.policy": "compact", "message.timestamp.type": "LogAppendTime"}
    assert creation_configs(copied) == {
        "cleanup.policy": "compact",
        "message.timestamp.type": "CreateTime",
    }
    assert creation_configs({})["message.timestamp.type"] == "CreateTime"


class _Remote:
    """Stands in for a remote: its topics' settings, and how often they were asked."""

    def __init__(self, settings: dict[str, dict[str, TopicSetting]]) -> None:
        self.settings = settings
        self.asked: list[list[str]] = []

    async def topic_setting_sources(
        self, topics: list[str], keys: object
    ) -> dict[str, dict[str, TopicSetting]]:
        self.asked.append(sorted(topics))
        return {t: self.settings[t] for t in topics if t in self.settings}


class _Local:
    def __init__(self, refuses: dict[str, str] | None = None) -> None:
        self.created: list[list[tuple[str, int, dict[str, str]]]] = []
        self.refuses = refuses or {}

    async def create_topics(
        self, topics: list[tuple[str, int, dict[str, str]]], replication_factor: int
    ) -> dict[str, str]:
        self.created.append(list(topics))
        return {t: why for t, why in self.refuses.items() if any(t == n for n, *_ in topics)}


async def test_new_local_topics_are_created_in_one_go_with_each_sources_copied_settings() -> None:
    east = _Remote(
        {
            "a": {"retention.ms": TopicSetting("1000", True), "x": TopicSetting("1", False)},
            "b": {},
        }
    )
    west = _Remote({"c": {"cleanup.policy": TopicSetting("compact", True)}})
    local = _Local()
    wanted = {"a": ("east", 3), "b": ("east", 1), "c": ("west", 2)}
    read, refused = await create_local_topics(
        local,  # type: ignore[arg-type]
        {"east": east, "west": west},  # type: ignore[dict-item]
        wanted,
        SELECT,
    )
    assert refused == {}
    assert east.asked == [["a", "b"]] and west.asked == [["c"]]  # one request per source
    assert local.created == [
        [
            ("a", 3, {"retention.ms": "1000", "message.timestamp.type": "CreateTime"}),
            ("b", 1, {"message.timestamp.type": "CreateTime"}),
            ("c", 2, {"cleanup.policy": "compact", "message.timestamp.type": "CreateTime"}),
        ]
    ]
    assert read["a"]["x"] == TopicSetting("1", False) and read["b"] == {}  # as read


async def test_a_topic_the_local_cluster_refuses_to_create_is_named_not_the_others() -> None:
    """A creation policy, or a setting the local brokers do not take: that topic is refused
    (``MirroredTopics`` refuses it and asks again at the next refresh), the others made."""
    east = _Remote({"a": {}, "b": {}})
    local = _Local({"b": "PolicyViolationError: topics named b are not allowed"})
    wanted = {"a": ("east", 1), "b": ("east", 1)}
    read, refused = await create_local_topics(
        local,  # type: ignore[arg-type]
        {"east": east},  # type: ignore[dict-item]
        wanted,
        SELECT,
    )
    assert set(read) == {"a"}
    assert refused == {"b": "PolicyViolationError: topics named b are not allowed"}


def test_new_topics_are_created_a_share_at_a_time_in_name_order() -> None:
    create = {f"t{i}": 20 for i in range(10)} | {"big": 5_000}
    assert first_to_create(create, 100) == {"big": 5_000}  # 'big' sorts first, alone
    rest = {t: n for t, n in create.items() if t != "big"}
    assert first_to_create(rest, 100) == {f"t{i}": 20 for i in range(5)}
    assert first_to_create(rest, 10) == {"t0": 20}  # at least one, whatever its size
    assert first_to_create({}, 100) == {}
