"""The steady bench's bookkeeping (``tests/bench/steady.py``): the ABBA order puts every
copier once early and once late, and a copier's rounds pool into one row."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncer.config import Config
from tests.bench.steady import (
    Latencies,
    pooled,
    ratios_of,
    rounds_of,
    row_of,
    syncer_config,
    timeline_file,
    wait_for_group,
)


def test_abba_runs_each_copier_early_and_late_on_topics_of_their_own() -> None:
    rounds = rounds_of(["syncer", "floor", "mm2"], "abba")
    assert [copier for _n, copier, _t in rounds] == [
        "syncer",
        "floor",
        "mm2",
        "mm2",
        "floor",
        "syncer",
    ]
    # the positions of each copier add up alike: a drift along the run falls on all
    positions = {
        c: sum(i for i, (_n, x, _t) in enumerate(rounds) if x == c) for c in ("syncer", "mm2")
    }
    assert positions == {"syncer": 5, "mm2": 5}
    topics = [t for _n, _c, t in rounds]
    assert (
        len(set(topics)) == 6 and topics[0] == "steady.syncer" and topics[-1] == "steady.syncer.2"
    )
    assert rounds_of(["syncer", "mm2"], "once") == [
        ("syncer", "syncer", "steady.syncer"),
        ("mm2", "mm2", "steady.mm2"),
    ]


def test_the_first_rounds_timeline_keeps_its_old_names() -> None:
    assert timeline_file("syncer") == "steady-timeline-syncer.json"
    assert timeline_file("syncer", "readers") == "steady-timeline-syncer-readers.json"
    assert timeline_file("syncer #2", "readers") == "steady-timeline-syncer-2-readers.json"


def test_a_copiers_rounds_pool_into_one_row() -> None:
    early = Latencies([1.0, 2.0], [0.5, 0.5], [0.5, 1.5], unmatched=1)
    late = Latencies([3.0, 4.0], [0.5, 0.5], [2.5, 3.5])
    mm2 = Latencies([2.0] * 4, [0.5] * 4, [1.0] * 4)
    together = pooled({"syncer": early, "mm2": mm2, "syncer #2": late})
    assert sorted(together) == ["mm2", "syncer"]
    assert together["syncer"].hop == [0.5, 1.5, 2.5, 3.5] and together["syncer"].unmatched == 1
    rows = {name: row_of(latencies, 0.2) for name, latencies in together.items()}
    assert rows["syncer"]["hop_p50_ms"] == 2.5  # of the four, not of either round
    ratios = ratios_of(rows)
    assert ratios["hop p50 (syncer / MM2)"] == 2.5 and ratios["CPU (syncer / MM2)"] == 1.0
    assert "hop p50 (floor / MM2)" not in ratios
    group = {"syncer*2": {**rows["syncer"], "hop_p50_ms": 0.5}}
    assert ratios_of(rows | group)["hop p50 (syncer*2 / MM2)"] == 0.5 / rows["mm2"]["hop_p50_ms"]


def test_a_floor_with_work_runs_on_a_topic_kafka_takes() -> None:
    # floor+N: the floor with N µs of busy Python before each write; '+' is no topic char
    rounds = rounds_of(["floor", "floor+100"], "abba")
    assert [(n, t) for n, _c, t in rounds] == [
        ("floor", "steady.floor"),
        ("floor+100", "steady.floor-100"),
        ("floor+100 #2", "steady.floor-100.2"),
        ("floor #2", "steady.floor.2"),
    ]
    assert [c for _n, c, _t in rounds][1] == "floor+100"


def test_a_group_of_syncer_processes_runs_on_a_topic_kafka_takes_as_one_group() -> None:
    # syncer*N: N processes in one group on the local cluster; '*' is no topic char
    rounds = rounds_of(["syncer", "syncer*2"], "once")
    assert rounds == [
        ("syncer", "syncer", "steady.syncer"),
        ("syncer*2", "syncer*2", "steady.syncer-x2"),
    ]
    alone = Config.from_dict(syncer_config("l:9092", "e:9092", "steady.syncer", 1))
    group = Config.from_dict(syncer_config("l:9092", "e:9092", "steady.syncer-x2", 2))
    assert not alone.coordination.enabled
    assert group.coordination.enabled and group.coordination.group == "bench-steady.syncer-x2"
    assert group.topics.include == ("steady.syncer-x2",)


def test_a_group_is_measured_only_once_its_leader_shared_the_partitions_among_all(
    tmp_path: Path,
) -> None:
    logs = [tmp_path / "syncer*2-0.log", tmp_path / "syncer*2-1.log"]
    logs[0].write_text("group leader: 8 partitions to 1 members, loads 8.00\n")
    with pytest.raises(RuntimeError, match="group of 2 syncer processes never shared"):
        wait_for_group(logs, timeout=1.0, settle_s=0)
    logs[1].write_text("group leader: 8 partitions to 2 members, loads 4.00 / 4.00\n")
    wait_for_group(logs, timeout=1.0, settle_s=0)  # returns
