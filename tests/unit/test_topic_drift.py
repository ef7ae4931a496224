"""Topic settings that do not drift, over plain values: which copied settings a local topic
changes to follow its remote (SET / DELETE by where each value comes from), which changes
are held back because the copy would stop being faithful, remotes that disagree, topics
deleted at a remote, a batch refused as too large asking the topic to follow first, and
what status, metrics and the status table show."""

from __future__ import annotations

import uuid

import pytest

from syncer import topic_configs
from syncer.admin import TopicSetting
from syncer.clusters import TP
from syncer.errors import PartitionHalted, TransientClusterError
from syncer.metrics import Instruments, exposition
from syncer.protocol.common import MESSAGE_TOO_LARGE
from syncer.report import topic_notes
from syncer.status import Snapshot, status_document
from syncer.topic_configs import ConfigSyncer, as_seen
from syncer.topic_drift import (
    WAITS_FOR_THE_COPY,
    TopicDrift,
    compaction_begins,
    config_sync,
    disagreement,
    gone_at_remotes,
)
from syncer.writes import PartitionWrites
from tests.unit.test_writes import (
    ProduceResult,
    StandInLocal,
    StandInWriter,
    batch,
    unreachable_check,
    writes,
)

KEYS = ("cleanup.policy", "retention.ms", "max.message.bytes", "compression.type")


def own(value: str, default: str | None = None) -> TopicSetting:
    """Set on the topic itself; ``default``: what it would be without."""
    return TopicSetting(value, True, default)


def inherited(value: str) -> TopicSetting:
    return TopicSetting(value, False, value)


BEFORE = {  # the remote's settings at the last look: its broker's defaults
    "cleanup.policy": inherited("delete"),
    "max.message.bytes": inherited("1048588"),
    "compression.type": inherited("producer"),
}


def test_a_value_the_remote_sets_is_set_locally() -> None:
    remote = {"retention.ms": own("60000")}
    sync = config_sync(KEYS, remote, {"retention.ms": own("3600000", "604800000")})
    assert sync.set == {"retention.ms": "60000"} and sync.delete == () and not sync.held
    assert sync.describe() == "retention.ms 3600000 → 60000"
    # a local default equal to the remote's value still gets it set explicitly
    sync = config_sync(KEYS, remote, {"retention.ms": inherited("60000")})
    assert sync.set == {"retention.ms": "60000"}


def test_an_equal_explicit_value_changes_nothing() -> None:
    sync = config_sync(KEYS, {"retention.ms": own("60000")}, {"retention.ms": own("60000")})
    assert not sync and sync.describe() == ""


def test_a_value_the_remote_no_longer_sets_is_deleted_locally() -> None:
    sync = config_sync(
        KEYS, {"retention.ms": inherited("604800000")}, {"retention.ms": own("60000", "86400000")}
    )
    assert sync.delete == ("retention.ms",) and sync.set == {}
    assert sync.describe() == "retention.ms 60000 → 86400000"  # the local broker's default


def test_broker_defaults_are_never_copied() -> None:
    """Both inherit: the brokers' defaults may differ, nothing is set (as at creation)."""
    sync = config_sync(
        KEYS, {"retention.ms": inherited("1000")}, {"retention.ms": inherited("604800000")}
    )
    assert not sync and not sync.held


def test_only_the_copied_keys_and_never_the_timestamp_type() -> None:
    remote = {"segment.ms": own("1000"), "message.timestamp.type": own("LogAppendTime")}
    local = {"segment.ms": inherited("9"), "message.timestamp.type": own("CreateTime")}
    assert not config_sync((*KEYS, "message.timestamp.type"), remote, local)


def test_a_key_missing_from_either_answer_is_left_alone() -> None:
    assert not config_sync(KEYS, {"retention.ms": own("1")}, {})
    assert not config_sync(KEYS, {}, {"retention.ms": own("1")})


def test_a_raised_max_message_bytes_is_raised_locally() -> None:
    remote = {"max.message.bytes": own("4194304")}
    sync = config_sync(KEYS, remote, {"max.message.bytes": inherited("1048588")}, "e", BEFORE)
    assert sync.set == {"max.message.bytes": "4194304"}


def test_a_fidelity_setting_the_remote_did_not_change_is_judged_not_repaired() -> None:
    """A local max.message.bytes lowered by hand (or a process's first look, which cannot
    tell): left as it is, so the topic is refused loudly as before; retention still syncs."""
    remote = {"max.message.bytes": own("4194304"), "retention.ms": own("1")}
    local = {"max.message.bytes": own("1000000"), "retention.ms": inherited("7")}
    for last_seen in (None, remote):
        sync = config_sync(KEYS, remote, local, "east", last_seen)
        assert sync.set == {"retention.ms": "1"}
        assert "the remote did not change it" in sync.held["max.message.bytes"]


def test_max_message_bytes_is_never_lowered() -> None:
    """The remote keeps the batches its old limit took: a lower local limit would refuse
    their copies."""
    lowered = config_sync(
        KEYS,
        {"max.message.bytes": own("100000")},
        {"max.message.bytes": own("4194304")},
        "e",
        {"max.message.bytes": own("4194304")},
    )
    assert not lowered and "never lowered (4194304 → 100000)" in lowered.held["max.message.bytes"]
    back_to_default = config_sync(
        KEYS,
        {"max.message.bytes": inherited("1048588")},
        {"max.message.bytes": own("4194304", "1048588")},
    )
    assert not back_to_default and "max.message.bytes" in back_to_default.held


def test_compression_never_becomes_a_codec_but_may_go_back_to_producer() -> None:
    to_codec = config_sync(
        KEYS, {"compression.type": own("gzip")}, {"compression.type": inherited("producer")}
    )  # ``producer`` is faithful to any codec: nothing to change, nothing held
    assert not to_codec and not to_codec.held
    back = config_sync(
        KEYS,
        {"compression.type": inherited("producer")},
        {"compression.type": own("gzip", "producer")},
        "east",
        {"compression.type": own("gzip")},
    )
    assert back.delete == ("compression.type",)


def test_a_remote_that_changes_its_codec_has_the_local_topic_keep_batches_as_sent() -> None:
    """The remote went from gzip to zstd: it holds batches of both. The local topic, gzip
    like the remote's was, would recompress the zstd ones (refused as unfaithful for good);
    set to ``producer`` it keeps each as it is sent."""
    sync = config_sync(
        KEYS,
        {"compression.type": own("zstd")},
        {"compression.type": own("gzip", "producer")},
        "east",
        {"compression.type": own("gzip")},
    )
    assert sync.set == {"compression.type": "producer"} and not sync.held
    assert sync.describe() == "compression.type gzip → producer"


def test_a_delete_to_an_unfaithful_local_default_is_held() -> None:
    """The local brokers compact by default, the remote's do not: deleting the local
    topic's ``delete`` would start compacting records the remote keeps."""
    sync = config_sync(
        KEYS,
        {"cleanup.policy": inherited("delete")},
        {"cleanup.policy": own("delete", "compact")},
        "east",
        {"cleanup.policy": own("delete")},
    )
    assert not sync
    assert sync.held["cleanup.policy"] == (
        "local cleanup.policy is compact, remote east's is delete: local compaction would"
        " remove records the remote keeps"
    )


def test_compaction_set_at_the_remote_is_followed_once_the_copy_caught_up() -> None:
    remote = {"cleanup.policy": own("compact"), "retention.ms": own("60000")}
    local = {"cleanup.policy": inherited("delete"), "retention.ms": inherited("604800000")}
    assert compaction_begins(remote, local)
    sync = config_sync(KEYS, remote, local, "e", BEFORE)
    assert sync.set == {"cleanup.policy": "compact", "retention.ms": "60000"}
    # lagging: the remote may hold keyless records below its end, which a compacted local
    # topic would refuse; the other settings go on
    sync = config_sync(KEYS, remote, local, "e", BEFORE, caught_up=False)
    assert sync.set == {"retention.ms": "60000"} and not sync.held
    assert sync.waiting == {"cleanup.policy": WAITS_FOR_THE_COPY}


@pytest.mark.parametrize(
    ("theirs", "ours", "begins"),
    [
        ("compact", "delete", True),
        ("compact,delete", "delete", True),
        ("delete, compact", "delete", True),
        ("compact", "compact,delete", False),  # the local topic compacts already
        ("delete", "compact", False),  # it stops compacting: no record refused
        ("delete", "delete", False),
    ],
)
def test_compaction_begins_only_where_the_local_topic_does_not_compact(
    theirs: str, ours: str, begins: bool
) -> None:
    remote, local = {"cleanup.policy": own(theirs)}, {"cleanup.policy": own(ours)}
    assert compaction_begins(remote, local) is begins
    sync = config_sync(KEYS, remote, local, "e", BEFORE, caught_up=False)
    assert bool(sync.waiting) is begins
    assert compaction_begins({}, local) is False  # not reported: nothing begins


class Ends:
    """Each partition's end per cluster (``None``: local), as a test sets them; the reads
    asked, in order."""

    def __init__(self) -> None:
        self.now: dict[str | None, dict[TP, int]] = {"east": {}, None: {}}
        self.asked: list[str | None] = []

    async def __call__(self, topic: str, remote: str | None) -> dict[TP, int] | None:
        self.asked.append(remote)
        return dict(self.now[remote])


async def test_a_switch_to_compaction_waits_for_the_copy_to_reach_its_mark(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The mark is the remote's ends at a look some seconds after the one that saw the
    switch (each remote broker applies it by then); the copy reaching it is enough, however
    far the remote has gone since (a busy topic is never caught up all at once)."""
    ends = Ends()
    syncer = ConfigSyncer(KEYS, None, {}, TopicDrift(), ends)  # type: ignore[arg-type]
    t0, t1 = TP("t", 0), TP("t", 1)
    ends.now["east"] = {t0: 100, t1: 50}
    ends.now[None] = {t0: 100, t1: 50}
    assert not await syncer._caught_up("t", "east")  # first seen: no mark yet
    assert not await syncer._caught_up("t", "east")  # looked again at once: not yet
    assert ends.asked == []
    monkeypatch.setattr(topic_configs, "MARK_AFTER_S", 0.0)  # as if seconds had passed
    ends.now["east"] = {t0: 120, t1: 60}
    ends.now[None] = {t0: 110, t1: 60}
    assert not await syncer._caught_up("t", "east")  # marked at 120 / 60; local at 110
    assert ends.asked == ["east", None]
    ends.now["east"] = {t0: 900, t1: 900}  # busy since: the mark stands
    ends.now[None] = {t0: 120, t1: 61}
    assert await syncer._caught_up("t", "east")
    assert ends.asked == ["east", None, None]
    # from another remote now: its own mark, one look later
    assert not await syncer._caught_up("t", "west")
    ends.now[None] = {t0: 120}  # a partition's end not answered: not caught up
    ends.now["east"] = {t0: 1, t1: 1}
    syncer._marks["t"] = ("east", {t0: 1, t1: 1}, 0.0)
    assert not await syncer._caught_up("t", "east")


class Altered:
    """A local cluster that takes every change and reports it at once."""

    def __init__(self) -> None:
        self.now: dict[str, TopicSetting] = {"cleanup.policy": inherited("delete")}
        self.altered: list[dict[str, str]] = []

    async def alter_topic_configs(
        self, topic: str, set: dict[str, str], delete: tuple[str, ...]
    ) -> None:
        self.altered.append(dict(set))
        self.now.update({key: own(value) for key, value in set.items()})

    async def topic_setting_sources(self, topics: list[str], keys: object) -> object:
        return {topic: dict(self.now) for topic in topics}


async def test_a_mark_is_dropped_when_the_switch_is_made_or_undone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A later switch to compaction (after one back to delete) waits for a mark of its
    own: the old one, long passed, would let it through at once."""
    monkeypatch.setattr(topic_configs, "MARK_AFTER_S", 0.0)
    ends, local = Ends(), Altered()
    syncer = ConfigSyncer(("cleanup.policy",), local, {}, TopicDrift(), ends)  # type: ignore[arg-type]
    compacting, deleting = (
        {"cleanup.policy": own("compact")},
        {"cleanup.policy": inherited("delete")},
    )
    syncer.seen("t", "east", deleting)
    ends.now["east"], ends.now[None] = {TP("t", 0): 10}, {TP("t", 0): 5}
    await syncer._follow("t", "east", compacting, local.now)  # seen: no mark yet
    await syncer._follow("t", "east", compacting, local.now)  # marked at 10, local at 5
    assert syncer._marks["t"][1] == {TP("t", 0): 10} and local.altered == []
    await syncer._follow("t", "east", deleting, local.now)  # undone at the remote
    assert "t" not in syncer._marks
    await syncer._follow("t", "east", compacting, local.now)
    await syncer._follow("t", "east", compacting, local.now)  # its own mark
    ends.now[None] = {TP("t", 0): 10}
    await syncer._follow("t", "east", compacting, local.now)
    assert local.altered == [{"cleanup.policy": "compact"}]
    assert "t" not in syncer._marks  # made: a later switch marks again


def test_a_waiting_change_is_not_remembered_as_seen() -> None:
    """Remembered, the next look would find the remote unchanged and the local topic
    different, and hold the change for good as made locally."""
    before = {"cleanup.policy": inherited("delete"), "retention.ms": inherited("1")}
    theirs = {"cleanup.policy": own("compact"), "retention.ms": own("2")}
    assert as_seen(theirs, before, {"cleanup.policy"}) == {
        "cleanup.policy": inherited("delete"),
        "retention.ms": own("2"),
    }
    assert as_seen(theirs, None, {"cleanup.policy"}) == {"retention.ms": own("2")}
    assert as_seen(theirs, before, ()) == theirs
    local = {"cleanup.policy": inherited("delete"), "retention.ms": own("2")}
    later = config_sync(KEYS, theirs, local, "e", as_seen(theirs, before, {"cleanup.policy"}))
    assert later.set == {"cleanup.policy": "compact"} and not later.held
    remembered = config_sync(KEYS, theirs, local, "e", theirs)  # what it would have been
    assert not remembered.set and "cleanup.policy" in remembered.held


def test_an_unknown_local_default_holds_a_fidelity_setting_only() -> None:
    remote = {"retention.ms": inherited("1"), "max.message.bytes": inherited("1048588")}
    local = {"retention.ms": own("5"), "max.message.bytes": own("2000000")}
    sync = config_sync(KEYS, remote, local, "e", {"max.message.bytes": own("2000000")})
    assert sync.delete == ("retention.ms",) and set(sync.held) == {"max.message.bytes"}
    assert sync.held["max.message.bytes"] == "the value it would have locally is unknown"


def test_synonyms_give_the_default_a_delete_falls_back_to() -> None:
    synonyms = [
        ("retention.ms", "60000", 1),  # DYNAMIC_TOPIC_CONFIG: the topic's own
        ("log.retention.ms", "86400000", 4),  # STATIC_BROKER_CONFIG
        ("log.retention.hours", "168", 5),
    ]
    assert TopicSetting.of("60000", 1, synonyms) == TopicSetting("60000", True, "86400000")
    assert TopicSetting.of("86400000", 4, synonyms[1:]) == inherited("86400000")
    assert TopicSetting.of("60000", 1, synonyms[:1]) == TopicSetting("60000", True, None)


def test_remotes_that_set_copied_settings_differently_are_named() -> None:
    remotes = {
        "east": {"retention.ms": own("1"), "cleanup.policy": inherited("delete")},
        "west": {"retention.ms": inherited("7"), "cleanup.policy": inherited("delete")},
    }
    assert disagreement(KEYS, remotes) == "retention.ms: east=1, west=default"
    assert disagreement(KEYS, {"east": remotes["east"]}) == ""
    assert disagreement(KEYS, {"east": remotes["east"], "w": remotes["east"]}) == ""


def test_a_topic_missing_at_a_remote_it_was_copied_from_is_gone() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    known = {
        "local": {"t": a, "u": b},
        "remote east": {"t": a, "u": b},
        "remote west": {"t": a},
        "remote old": {"t": a},
    }
    seen = {"local": {}, "remote east": {"u": b}, "remote west": {}, "remote old": None}
    asked = {"local": {"t", "u"}, "remote east": {"t", "u"}, "remote west": {"t"}}
    gone = gone_at_remotes(known, seen, asked, "local")
    assert gone == {"t": ("remote east", "remote west")}
    # a topic not asked about (halted) is not reported gone
    assert gone_at_remotes(known, seen, {"remote east": {"u"}}, "local") == {}


def test_a_sync_is_shown_once_the_broker_reports_it() -> None:
    change = config_sync(
        KEYS,
        {"retention.ms": own("1"), "retention.bytes": inherited("-1")},
        {"retention.ms": inherited("7"), "retention.bytes": own("5", "-1")},
        "e",
    )
    assert change.set == {"retention.ms": "1"} and change.delete == ()  # not a copied key
    change = config_sync(
        (*KEYS, "retention.bytes"),
        {"retention.ms": own("1"), "retention.bytes": inherited("-1")},
        {"retention.ms": inherited("7"), "retention.bytes": own("5", "-1")},
    )
    assert change.delete == ("retention.bytes",)
    before = {"retention.ms": inherited("7"), "retention.bytes": own("5", "-1")}
    halfway = {"retention.ms": own("1", "7"), "retention.bytes": own("5", "-1")}
    after = {"retention.ms": own("1", "7"), "retention.bytes": inherited("-1")}
    assert not change.shown_in(before) and not change.shown_in(halfway)
    assert change.shown_in(after)


class FollowingLocal(StandInLocal):
    """A local cluster whose topic follows its remote's limit: ``limit`` once asked."""

    def __init__(self, limit: int | None) -> None:
        super().__init__(0)
        self.limit = limit
        self.asked = 0

    async def followed_limit(self, topic: str) -> int | None:
        self.asked += 1
        return self.limit


async def refused_as_too_large(limit: int | None) -> tuple[PartitionWrites, FollowingLocal]:
    local = FollowingLocal(limit)
    w = writes(writer := StandInWriter(), local)
    await w.checked_local_end(unreachable_check)
    w.submit(batch(0), b"raw")  # 100 bytes
    writer.sent[0].set_result(ProduceResult(MESSAGE_TOO_LARGE, -1))
    with pytest.raises(TransientClusterError, match="too large for the local topic"):
        await w.drain(0)
    assert w.status.waiting is not None and "refused as too large" in w.status.waiting
    return w, local


async def test_a_batch_too_large_is_retried_once_the_local_limit_followed_the_remote() -> None:
    """The remote took it under a limit it raised since the last refresh: the local topic
    follows now, before the partition resumes, and the batch is sent again."""
    w, local = await refused_as_too_large(limit=100)
    assert await w.checked_local_end(unreachable_check) == 0 and local.asked == 1
    w.submit(batch(0), b"raw")
    w.writer.sent[1].set_result(ProduceResult(0, 0))  # type: ignore[attr-defined]
    await w.drain(0)
    assert w.too_large is None and w.status.waiting is None and w.confirmed == 10
    local.end = 10
    assert await w.checked_local_end(unreachable_check) == 10 and local.asked == 1  # not asked


@pytest.mark.parametrize("limit", [99, None])
async def test_a_batch_still_too_large_after_following_halts(limit: int | None) -> None:
    """The local limit is the remote's (or settings do not follow): halt, as before."""
    w, _local = await refused_as_too_large(limit)
    with pytest.raises(
        PartitionHalted, match=r"batch at offset 0 \(100 bytes\) is larger than the local topic's"
    ):
        await w.checked_local_end(unreachable_check)


def test_status_metrics_and_the_status_table_show_the_drift() -> None:
    drift = TopicDrift(
        synced={"t": 2},
        last_sync={"t": (1.0, "retention.ms 1 → 2")},
        held={"t": {"max.message.bytes": "never lowered"}},
        gone={"u": ("remote east",)},
        dropped={"u": {"east": "topic u was deleted on the remote east cluster; ..."}},
    )
    snapshot = Snapshot("x", (), (), {}, 0, 0, 0, 0, topics=drift)
    document = status_document(snapshot)
    assert document["topics"] == {
        "configs_synced": {"t": 2},
        "last_config_sync": {"t": {"at": 1.0, "changes": "retention.ms 1 → 2"}},
        "configs_held": {"t": {"max.message.bytes": "never lowered"}},
        "gone_at_remote": {"u": ["remote east"]},
        "remotes_dropped": {"u": {"east": "topic u was deleted on the remote east cluster; ..."}},
    }
    metrics = exposition(Instruments().attach(lambda: snapshot)).decode().splitlines()
    assert 'syncer_topic_configs_synced_total{topic="t"} 2.0' in metrics
    assert 'syncer_topic_configs_held{key="max.message.bytes",topic="t"} 1.0' in metrics
    assert 'syncer_topic_gone_at_remote{remote="east",topic="u"} 1.0' in metrics
    assert 'syncer_topic_remote_dropped{remote="east",topic="u"} 1.0' in metrics
    assert topic_notes([document]) == [
        "topic t: settings synced 2x, last: retention.ms 1 → 2",
        "topic t: max.message.bytes not synced: never lowered",
        "topic u: deleted on the remote east cluster (kept locally)",
        "topic u: remote east not used: topic u was deleted on the remote east cluster; ...",
    ]
    assert topic_notes([{"partitions": []}]) == []  # a daemon from before
