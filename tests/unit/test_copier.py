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
