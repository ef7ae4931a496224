"""A fetched chunk reaches its copier in the loop turn after its answer (issue 23, the hop):
the fetcher calls the fetch's ``answered`` as it hands the answer back, so the chunk's task
and then the copier run in the next turn; not through ``asyncio.wait``'s callbacks, two turns
later. A fetch that fails still wakes the copier, and so does a stop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatchBuilder

from syncer.chunks import ChunkScheduler
from syncer.clusters import TP, FetchedPartition
from syncer.config import CopierConfig
from syncer.errors import TransientClusterError
from syncer.holes import RemoteEnds
from syncer.partition import PartitionSources
from syncer.sources import SourceHealth

CONFIG = CopierConfig(partition_fetch_max_bytes=1024 * 1024, max_chunks=8)
TAIL = 10  # the remote's end: the copier is caught up, its chunk a long poll


def records(base: int, count: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=1,
        producer_epoch=0,
        base_sequence=0,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(i, timestamp=0, key=b"k", value=b"v", headers=[])
    raw = bytearray(builder.build())
    raw[0:8] = base.to_bytes(8, "big")
    return bytes(raw)


class Remote:
    """A fetcher whose one fetch is answered when the test says, as the real one does: the
    answer's future is set, then ``answered()`` called, in the same turn."""

    config = CONFIG

    def __init__(self) -> None:
        self.answer: asyncio.Future[FetchedPartition] | None = None
        self.answered: Callable[[], None] = lambda: None

    async def fetch(self, tp: TP, offset: int, max_bytes: int | None = None, **kw: Any) -> Any:
        self.answer = asyncio.get_running_loop().create_future()
        self.answered = kw["answered"]
        return await self.answer

    def release(self, tp: TP) -> None:
        pass


async def waiting_copier() -> tuple[Remote, ChunkScheduler, asyncio.Task[Any]]:
    remote = Remote()
    health = {"east": SourceHealth("east", 0)}
    sources = PartitionSources(TP("t", 0), health, {"east": RemoteEnds(0, TAIL)})
    scheduler = ChunkScheduler(TP("t", 0), {"east": remote}, sources, CONFIG)  # type: ignore[dict-item]
    scheduler.launch(TAIL, TAIL)
    copier = asyncio.create_task(scheduler.next_ready(TAIL))
    for _ in range(3):
        await asyncio.sleep(0)  # the fetch waits for its answer, the copier for the fetch
    assert remote.answer is not None and not copier.done()
    return remote, scheduler, copier


async def test_an_answer_reaches_the_copier_in_the_next_loop_turn() -> None:
    remote, scheduler, copier = await waiting_copier()
    assert remote.answer is not None
    remote.answer.set_result(FetchedPartition(0, TAIL + 3, TAIL + 3, 0, (), records(TAIL, 3)))
    remote.answered()
    await asyncio.sleep(0)  # one turn: the chunk's task, then the copier, then this
    assert copier.done()
    got = copier.result()
    assert got is not None and got.chunk.start == TAIL
    await scheduler.close()


async def test_a_failed_fetch_still_wakes_the_copier() -> None:
    remote, scheduler, copier = await waiting_copier()
    assert remote.answer is not None
    remote.answer.set_exception(TransientClusterError("broker gone"))  # no ``answered``
    for _ in range(3):
        await asyncio.sleep(0)
    assert scheduler.sources.health("east").failures_in_row == 1
    assert copier.done() and copier.result() is None  # its only remote backs off
    await scheduler.close()


async def test_a_stop_wakes_a_copier_whose_poll_is_out() -> None:
    _remote, scheduler, copier = await waiting_copier()
    scheduler.stop_polling()
    assert await asyncio.wait_for(copier, 1) is None
    await scheduler.close()
