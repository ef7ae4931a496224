"""Where a record's hop goes (tests/bench/hop_timeline.py): the floor's notes (floor.py
--notes) set beside the readers' arrivals, on plain values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.floor import Notes
from tests.bench.hop_timeline import floor_steps, main

TOPIC = "steady.floor"


def readers(counted_from_ms: float = 0.0) -> dict[str, object]:
    # (partition, offset, arrival ms, create ms): offsets 10 and 11 of partition 0, counted
    return {
        "remote": [[0, 10, 1000.0, 990], [0, 11, 1000.5, 990]],
        "local": [[0, 10, 1003.0, 990], [0, 11, 1003.0, 990]],
        "counted_from_ms": counted_from_ms,
    }


def test_each_record_is_set_beside_the_answer_and_the_write_that_carried_it() -> None:
    notes = [
        ["fetch", TOPIC, 0, 10, 0.9995],  # the answer from offset 10, decoded 0.5 ms early
        ["written", TOPIC, 0, 10, 1.0001],
        ["answered", TOPIC, 0, 10, 1.0021],
    ]
    found = floor_steps(readers(), notes, TOPIC)
    assert found["answer decoded - remote arrival"] == pytest.approx([-0.5, -1.0])
    assert found["written - answer decoded"] == pytest.approx([0.6, 0.6])
    assert found["written - remote arrival"] == pytest.approx([0.1, -0.4])
    assert found["answered - written"] == pytest.approx([2.0, 2.0])
    assert found["local arrival - written"] == pytest.approx([2.9, 2.9])
    assert found["hop"] == pytest.approx([3.0, 2.5])


def test_records_not_counted_or_not_noted_are_left_out() -> None:
    notes = [["fetch", TOPIC, 0, 11, 1.0], ["written", TOPIC, 0, 11, 1.0002]]
    assert floor_steps(readers(), notes, TOPIC)["hop"] == pytest.approx([2.5])  # 10: no note
    assert not floor_steps(readers(counted_from_ms=995), notes, TOPIC)  # created before


def test_the_floors_notes_are_written_as_the_timeline_reads_them(tmp_path: Path) -> None:
    notes = Notes(TOPIC)
    notes.note("written", 3, 42)
    notes.dump(str(tmp_path / "notes.json"))
    ((kind, topic, partition, offset, at),) = json.loads((tmp_path / "notes.json").read_text())[
        "rows"
    ]
    assert (kind, topic, partition, offset) == ("written", TOPIC, 3, 42)
    assert at > 1.7e9  # wall-clock seconds, as the readers' arrivals are wall-clock ms


def test_the_floors_round_is_printed_step_by_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = [["fetch", TOPIC, 0, 10, 0.9995], ["written", TOPIC, 0, 10, 1.0001]]
    (tmp_path / "steady-timeline-floor-readers.json").write_text(json.dumps(readers()))
    (tmp_path / "steady-timeline-floor.json").write_text(json.dumps({"rows": notes}))
    monkeypatch.setattr("sys.argv", ["hop_timeline", str(tmp_path), "--copier", "floor"])
    main()
    hop = [line for line in capsys.readouterr().out.splitlines() if line.startswith("hop ")]
    assert hop and hop[0].split()[1:3] == ["2", "3.000"]  # two records, p50 of 2.5 and 3.0
