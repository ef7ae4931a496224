"""The copier's own decisions on plain values (the ones over a partition's remotes are in
test_partition): how long it waits before resuming from the local end after an error."""

from __future__ import annotations

from syncer.config import CopierConfig
from syncer.copier import next_backoff

CONFIG = CopierConfig(retry_backoff_ms=200, retry_backoff_max_ms=1_000)


def test_errors_in_a_row_with_nothing_copied_double_the_wait_up_to_the_cap() -> None:
    waits = [0.2]
    for _ in range(4):
        waits.append(next_backoff(waits[-1], False, CONFIG))
    assert waits == [0.2, 0.4, 0.8, 1.0, 1.0]


def test_records_copied_since_the_last_error_start_the_wait_over() -> None:
    assert next_backoff(0.8, True, CONFIG) == 0.2
    assert next_backoff(1.0, True, CONFIG) == 0.2


def test_the_first_error_ever_waits_the_first_step() -> None:
    assert next_backoff(0.0, False, CONFIG) == 0.2


def test_an_error_after_a_healthy_stretch_longer_than_the_cap_starts_the_wait_over() -> None:
    # issue 19: the first error after a long run waited out what was left of an old backoff
    assert next_backoff(1.0, False, CONFIG, healthy_s=1.5) == 0.2
    assert next_backoff(1.0, False, CONFIG, healthy_s=0.5) == 1.0  # not healthy for long
    assert next_backoff(0.4, False, CONFIG, healthy_s=0.5) == 0.8


def test_a_leader_that_moved_is_retried_after_the_first_step_however_many_came_before() -> None:
    waits = [1.0]
    for _ in range(3):
        waits.append(next_backoff(waits[-1], False, CONFIG, leader_moved=True))
    assert waits == [1.0, 0.2, 0.2, 0.2]
    # and the errors after it grow from there again if nothing is copied
    assert next_backoff(waits[-1], False, CONFIG) == 0.4
