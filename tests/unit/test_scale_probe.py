"""bench-scale's probe and trace on plain values: when a topic counts as led, answering,
started and in sync, and the per-member assignment times read from a log."""

from __future__ import annotations

import datetime
from pathlib import Path

from tests.bench.scale_probe import new_timeline
from tests.bench.scale_trace import assignments


def test_a_topic_is_led_only_once_every_partition_has_a_leader() -> None:
    timeline = new_timeline(["a", "b"], partitions=2, want=3)
    timeline.look(1.0, {"a": 1}, {})
    timeline.look(2.0, {"a": 2, "b": 2}, {"a": [0]})
    assert timeline.topics["a"].seen == 1.0
    assert timeline.topics["a"].led == 2.0
    assert timeline.topics["a"].answering is None  # one partition failed to answer
    assert timeline.latest(lambda t: t.led) == 2.0


def test_first_record_and_in_sync_per_topic_and_for_all() -> None:
    timeline = new_timeline(["a", "b"], partitions=2, want=3)
    timeline.look(1.0, {"a": 2, "b": 2}, {"a": [0, 0], "b": [0, 0]})
    timeline.look(2.0, {"a": 2, "b": 2}, {"a": [3, 1], "b": [0, 0]})
    timeline.look(3.0, {"a": 2, "b": 2}, {"a": [3, 3], "b": [3, 0]})
    assert timeline.latest(lambda t: t.done) is None  # b is not in sync yet
    timeline.look(4.0, {"a": 2, "b": 2}, {"a": [3, 3], "b": [3, 3]})
    summary = timeline.summary()
    assert summary["all_answering_s"] == 1.0
    assert summary["first_record_s"] == 2.0
    assert summary["in_sync_s"] == 4.0
    assert timeline.topics["a"].done == 3.0
    assert summary["topic_led_to_in_sync_max_s"] == 3.0  # b: led at 1, in sync at 4


def test_a_time_once_set_is_kept() -> None:
    timeline = new_timeline(["a"], partitions=1, want=1)
    timeline.look(1.0, {"a": 1}, {"a": [1]})
    timeline.look(2.0, {}, {})  # a look that failed says nothing new
    assert timeline.topics["a"].led == 1.0 and timeline.topics["a"].done == 1.0


def test_assignments_read_from_a_members_log(tmp_path: Path) -> None:
    log = tmp_path / "m.log"
    log.write_text(
        "2026-12-01 05:44:30,676 INFO syncer.coordination group g: member m2 owns 3000"
        " partitions (3000 new)\n"
        "2026-12-01 05:44:31,000 INFO syncer.leaders local: leaders moved\n"
        "2026-12-01 05:44:34,054 INFO syncer.coordination group g: member m2 owns 1000"
        " partitions (0 new)\n"
    )
    launched = datetime.datetime(2026, 12, 1, 5, 44, 0, 255_000, tzinfo=datetime.UTC)
    got = assignments(log, launched)
    assert [n for _s, n in got] == [3000, 1000]
    assert abs(got[0][0] - 30.421) < 1e-6 and abs(got[1][0] - 33.799) < 1e-6


def test_the_longest_silence_is_the_widest_gap_between_answered_looks() -> None:
    timeline = new_timeline(["a"], partitions=1, want=1)
    timeline.answered = [1.0, 1.5, 6.5, 7.0, 20.0]
    assert timeline.longest_silence() == 13.0
    assert timeline.longest_silence(until=7.0) == 5.0
