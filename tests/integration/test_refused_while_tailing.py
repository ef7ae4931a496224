"""A partition with nothing more to copy waits for its next poll, and the remote holds an
empty poll for minutes (``chunks.ONE_SOURCE_HOLD_S``, 300 s) so that idle partitions cost
nothing. A write refused meanwhile must be acted on as it is answered, not when that poll
ends: seen in bench-scale's group of 3 (10,000 partitions of one batch each), where one
member's writes were refused for 3.8 s while its group lease lapsed and 329 of its
partitions then sat at local end 0 for 5 minutes.

Which poll is held depends on the order answers come in (an empty poll answered after the
records' makes the next one held); here every empty poll is held, and the writer refuses
every write (as it does while the lease has lapsed) when a partition's one batch is copied.
Once it writes again the partition must be whole within seconds, every record at its
source offset (read back with kcat)."""

from __future__ import annotations

import asyncio
import time
from functools import partial

import pytest

from syncer import Syncer
from syncer.chunks import ChunkScheduler
from tests.kafka_helpers import (
    create_topic,
    first_status,
    kcat_lines,
    make_config,
    produce,
    read_partition,
    until,
)

RECORDS = 5


async def test_a_refused_last_write_is_written_again_without_waiting_for_the_poll(
    local: str, east: str, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ChunkScheduler, "_holds", lambda self: not self._stopping)
    await create_topic(east, topic)
    await create_topic(local, topic)
    batch = [(b"k", f"r{n}".encode()) for n in range(RECORDS)]
    await produce(east, topic, batch, linger_ms=200)  # one batch, then nothing more
    syncer = Syncer(make_config(local, {"east": east}, [topic]))
    refusing = True
    syncer._may_write = lambda: not refusing  # type: ignore[method-assign]
    status = partial(first_status, syncer)

    async with syncer:
        run = asyncio.create_task(syncer.run())
        try:
            await until(lambda: status("waiting") is not None, "refused write judged", 30)
            await asyncio.sleep(1)  # refused again as it is retried
            assert status("local_end") == 0
            refusing = False
            writing_again = time.monotonic()
            await until(lambda: status("local_end") == RECORDS, "records copied", 60)
            took = time.monotonic() - writing_again
            assert took < 20, f"whole {took:.0f} s after the writer wrote again"
        finally:
            syncer.request_stop()
            await run
    copied, source = await read_partition(local, topic), await read_partition(east, topic)
    assert copied == source and len(copied) == RECORDS
    by_kcat = await asyncio.to_thread(kcat_lines, local, topic, 0)
    assert by_kcat == [f"{r.offset} k {(r.value or b'').decode()}" for r in source]
