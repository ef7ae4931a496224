"""bench-wan's start-up figures, from timed answers (plain values)."""

from __future__ import annotations

from tests.bench.wan import startup
from tests.bench.wan_trace import Answer


def answer(lane: int, partition: int, queued: float, answered: float, nbytes: int = 100) -> Answer:
    return Answer(lane, partition, 0, None, queued, answered, nbytes, 0, 1)


def test_startup_finds_the_last_partition_and_lane_to_get_a_first_answer() -> None:
    answers = [
        answer(0, 0, 1.0, 1.2),
        answer(1, 1, 1.1, 2.5),  # partition 1 waited behind others: answered late
        answer(0, 0, 1.3, 1.6),
        answer(2, 0, 1.3, 1.9),  # lane 2's first answer is its only one
        answer(1, 0, 1.3, 1.5),
        answer(3, 1, 1.3, 3.0, nbytes=0),  # brought nothing: not an answer with data
    ]
    assert startup(answers) == {
        "first_fetch": 1.0,
        "first_answer": 1.2,
        "every_partition_answered": 2.5,
        "every_lane_answered": 1.9,
    }
