"""The copier's own decisions on plain values (the ones over a partition's remotes are in
test_partition): how long it waits before resuming from the local end after an error."""

from __future__ import annotations

import asyncio
import time

from syncer.config import CopierConfig
from syncer.copier import PartitionCopier, next_backoff

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


class Chunks:
    def stop_polling(self) -> None:
        pass


async def test_a_stop_asked_for_during_a_back_off_ends_the_wait_at_once() -> None:
    # issue 19: a revoked copier sleeping out a 6.4 s back-off held its whole group's
    # rebalance that long; the wait itself is the copier's, so it is driven directly
    copier = object.__new__(PartitionCopier)
    copier._stopping = False
    copier._stop_requested = asyncio.Event()
    copier.chunks = Chunks()  # type: ignore[assignment]
    pausing = asyncio.create_task(copier._pause(30))
    await asyncio.sleep(0.01)
    assert not pausing.done()
    started = time.monotonic()
    copier.request_stop()
    await asyncio.wait_for(pausing, 1)
    assert time.monotonic() - started < 0.5


async def test_a_back_off_without_a_stop_lasts_its_time() -> None:
    copier = object.__new__(PartitionCopier)
    copier._stop_requested = asyncio.Event()
    started = time.monotonic()
    await copier._pause(0.05)
    assert time.monotonic() - started >= 0.05
