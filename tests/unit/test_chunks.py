import asyncio
import contextlib
import itertools

from syncer.budget import ByteBudget
from syncer.chunk_plan import Chunk, Fetched
from syncer.chunk_sizes import TAIL_SPLIT_FLOOR, BatchShape, chunk_size
from syncer.chunks import ONE_SOURCE_HOLD_S, ChunkScheduler
from syncer.clusters import TP, FetchedPartition
from syncer.config import CopierConfig
from syncer.holes import RemoteEnds
from syncer.partition import PartitionSources
from syncer.sources import MAX_BUSY, SourceHealth

FULL = 1024


def test_a_long_gap_is_cut_into_full_fetches() -> None:
    assert chunk_size(1_000_000, 2, FULL) == FULL
    assert chunk_size(4 * FULL, 2, FULL) == FULL


def test_the_end_of_the_gap_is_shared_in_halving_chunks() -> None:
    sizes, remaining = [], 3 * FULL
    while remaining:
        sizes.append(chunk_size(remaining, 2, FULL))
        remaining -= sizes[-1]
    assert sizes[:2] == [3 * FULL // 4, 3 * FULL // 4 * 3 // 4]  # a quarter each time
    assert sizes == sorted(sizes, reverse=True)  # never a big chunk after a small one
    assert min(sizes[:-1]) >= FULL // TAIL_SPLIT_FLOOR
    assert sum(sizes) == 3 * FULL


def test_more_holders_make_smaller_last_chunks() -> None:
    assert chunk_size(2 * FULL, 4, FULL) < chunk_size(2 * FULL, 2, FULL)


def test_never_more_than_is_left() -> None:
    assert chunk_size(5, 2, FULL) == 5
    assert chunk_size(1, 3, FULL) == 1


CONFIG = CopierConfig(partition_fetch_max_bytes=1024 * 1024, max_chunks=8)


class NeverAnswers:
    """A fetcher whose fetches stay in flight: what the scheduler launched can be looked at."""

    config = CONFIG

    async def fetch(
        self, tp: TP, offset: int, max_bytes: int | None = None, **kwargs: object
    ) -> None:
        await asyncio.Event().wait()


# batches of 64 records of 1 KiB, as a producer with batch.size 65536 writes them
BENCH_BATCHES = BatchShape(64, 64 * 1024 + 600)


def scheduler_for(
    lanes: dict[str, int], memory: ByteBudget | None = None, shape: BatchShape | None = None
) -> ChunkScheduler:
    """A scheduler whose fetches never answer; ``shape``: the batches' shape as if learned
    (None: the first chunk goes out alone to learn it)."""
    health = {n: SourceHealth(n, rank, lanes=k) for rank, (n, k) in enumerate(lanes.items())}
    sources = PartitionSources(TP("t", 0), health, {n: RemoteEnds(0, 100_000) for n in lanes})
    scheduler = ChunkScheduler(
        TP("t", 0),
        {n: NeverAnswers() for n in lanes},  # type: ignore[misc]
        sources,
        CONFIG,
        memory,
    )
    scheduler.plan.sizes.shape = shape
    return scheduler


def launched(scheduler: ChunkScheduler) -> list[Chunk]:
    chunks = sorted(scheduler.plan.inflight.values(), key=lambda c: c.start)
    assert chunks[0].start == 0
    for before, after in itertools.pairwise(chunks):
        assert before.end == after.start, chunks  # neither a duplicate nor a hole
    return chunks


async def test_chunks_launched_at_once_never_overlap() -> None:
    scheduler = scheduler_for({"east": 1, "west": 1}, shape=BENCH_BATCHES)
    scheduler.launch(0, 100_000)
    try:
        chunks = launched(scheduler)
        assert len(chunks) == 2 * MAX_BUSY
        assert {c.remote for c in chunks} == {"east", "west"}
    finally:
        await scheduler.close()


async def test_one_remote_over_one_lane_reads_with_one_open_fetch() -> None:
    scheduler = scheduler_for({"east": 1})
    scheduler.launch(0, 100_000)
    try:
        assert [(c.start, c.end) for c in launched(scheduler)] == [(0, None)]
    finally:
        await scheduler.close()


async def test_one_remote_over_many_lanes_reads_cut_chunks_on_every_lane() -> None:
    scheduler = scheduler_for({"east": 16}, ByteBudget(64 << 20), BENCH_BATCHES)  # room for all
    scheduler.launch(0, 100_000)
    try:
        chunks = launched(scheduler)
        assert len(chunks) == MAX_BUSY * 16  # the reorder budget grows with the lanes
        assert all(c.end is not None for c in chunks)
    finally:
        await scheduler.close()


async def test_fetches_wait_for_room_in_the_process_budget() -> None:
    memory = ByteBudget(3 * 1024 * 1024)  # room for about three chunks of 1 MiB
    scheduler = scheduler_for({"east": 1, "west": 1}, memory, BENCH_BATCHES)
    # a second partition, same process
    other = scheduler_for({"east": 1, "west": 1}, memory, BENCH_BATCHES)
    try:
        scheduler.launch(0, 100_000)
        # fetches went out until the budget was full, and not one more
        tickets = [c.ticket.nbytes for c in scheduler.plan.inflight.values()]
        assert 3 <= len(tickets) <= 4 and memory.used >= memory.limit
        assert memory.used - tickets[-1] < memory.limit
        other.launch(0, 100_000)  # holds nothing of the budget: it waits for room
        assert not other.plan.inflight and other.starved
        waiting = asyncio.create_task(memory.room())
        await asyncio.sleep(0)
        assert not waiting.done()
        await scheduler.close()  # the first partition gives its share back
        await asyncio.wait_for(waiting, 1)
        other.launch(0, 100_000)
        assert other.plan.inflight and not other.starved
        assert min(c.start for c in other.plan.inflight.values()) == 0
    finally:
        await scheduler.close()
        await other.close()
    assert memory.used == 0  # every reservation given back


async def test_a_partition_holding_chunks_fetches_its_frontier_past_the_budget() -> None:
    memory = ByteBudget(1)
    scheduler = scheduler_for({"east": 1, "west": 1}, memory)
    try:
        scheduler.launch(0, 100_000)  # the first chunk fills the budget
        (first,) = scheduler.plan.inflight.values()
        scheduler.plan.inflight.clear()  # as if it came back, and chunks after it are ready
        scheduler.plan.ready[5000] = Fetched(
            Chunk(5000, 6000, "west"),
            None,
            [],
            6000,
            5000,  # type: ignore[arg-type]
        )
        first.ticket.release()
        memory.reserve(10)
        scheduler.launch(0, 100_000)  # budget full, but without its frontier it never frees
        assert [c.start for c in scheduler.plan.inflight.values()] == [0]
    finally:
        scheduler.plan.ready.clear()
        await scheduler.close()


async def test_long_polls_of_caught_up_partitions_hold_none_of_the_budget() -> None:
    memory = ByteBudget(1024 * 1024)
    idle = [scheduler_for({"east": 1}, memory) for _ in range(100)]
    behind = scheduler_for({"east": 1}, memory)
    try:
        for scheduler in idle:
            scheduler.sources.update_end("east", RemoteEnds(0, 500))
            scheduler.launch(500, 500)  # caught up: one long poll each
        assert all(len(s.plan.inflight) == 1 for s in idle) and memory.used == 0
        behind.launch(0, 100_000)
        assert behind.plan.inflight and not behind.starved
    finally:
        for scheduler in (*idle, behind):
            await scheduler.close()


async def test_bytes_being_written_stay_in_the_budget_until_answered() -> None:
    memory = ByteBudget(2 << 20)
    memory.reserve(2 << 20)
    answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    memory.release_when_done(2 << 20, answer)
    assert not memory.has_room()  # the write is in flight: its bytes are still held
    answer.set_result(0)
    await asyncio.sleep(0)
    assert memory.used == 0 and memory.has_room()
    memory.reserve(10)
    memory.release_when_done(10, None)  # nothing in flight: at once
    assert memory.used == 0


class DrainsSlowly(NeverAnswers):
    """A fetch that takes a moment to finish once cancelled (as a fetcher draining)."""

    async def fetch(
        self, tp: TP, offset: int, max_bytes: int | None = None, **kwargs: object
    ) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(0.2)
            raise


async def test_a_copier_cancelled_while_its_chunks_close_stays_cancelled() -> None:
    scheduler = scheduler_for({"east": 1})
    scheduler.fetchers = {"east": DrainsSlowly()}  # type: ignore[dict-item]
    scheduler.launch(0, 100_000)
    closing = asyncio.create_task(scheduler.close())
    await asyncio.sleep(0.05)  # it waits for the cancelled fetch to end
    closing.cancel()  # the copier itself is cancelled (shutdown timeout, revocation)
    with contextlib.suppress(asyncio.CancelledError):
        await closing
    assert closing.cancelled()


def ready(scheduler: ChunkScheduler, start: int, end: int, remote: str) -> Fetched:
    size = 100
    got = Fetched(
        Chunk(start, end, remote, ticket=scheduler.memory.ticket(size)),
        FetchedPartition(0, end, end, 0, (), b"x" * size),
        [],
        end,
        start,
    )
    scheduler.plan.ready[start] = got
    return got


async def test_chunks_of_a_dropped_remote_are_thrown_away_not_handed_out() -> None:
    scheduler = scheduler_for({"east": 1, "west": 1})
    ready(scheduler, 0, 50, "west")
    ready(scheduler, 50, 100, "west")
    ready(scheduler, 100, 150, "east")
    scheduler.sources.drop("west", "records differ")
    try:
        assert await scheduler.next_ready(0) is None  # nothing of west's, nothing in flight
        assert list(scheduler.plan.ready) == [100]
        assert scheduler.memory.used == 100  # west's bytes given back, east's kept
        scheduler.launch(0, 150)
        assert all(c.remote == "east" for c in scheduler.plan.inflight.values())
        assert min(c.start for c in scheduler.plan.inflight.values()) == 0  # refetched
    finally:
        await scheduler.close()
    assert scheduler.memory.used == 0


async def test_a_ticket_released_twice_gives_its_bytes_back_once() -> None:
    memory = ByteBudget(1000)
    ticket = memory.ticket(300)
    other = memory.ticket(200)
    ticket.settle(120)  # the fetch brought less than reserved
    assert memory.used == 320 and ticket.nbytes == 120
    ticket.release()
    ticket.release()
    assert memory.used == 200  # not 80: the second release gave nothing back
    other.release()
    assert memory.used == 0


async def test_a_ticket_handed_to_a_write_is_released_by_its_answer_only() -> None:
    memory = ByteBudget(1000)
    ticket = memory.ticket(400)
    answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    ticket.release_when_done(answer)
    ticket.release()  # the scheduler closing: the write still holds the bytes
    assert memory.used == 400
    answer.set_result(0)
    await asyncio.sleep(0)
    assert memory.used == 0
    ticket.release_when_done(None)
    assert memory.used == 0  # and never again


async def test_a_chunk_taken_and_never_written_gives_its_bytes_back_at_close() -> None:
    scheduler = scheduler_for({"east": 1, "west": 1})
    ready(scheduler, 0, 50, "east")
    written = ready(scheduler, 50, 100, "west")
    got = await scheduler.next_ready(0)
    assert got is not None and got.chunk.start == 0
    assert await scheduler.next_ready(50) is written  # the first is dropped, not written
    answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    written.ticket.release_when_done(answer)
    await scheduler.close()
    assert scheduler.memory.used == 100  # the written one waits for its answer
    answer.set_result(0)
    await asyncio.sleep(0)
    assert scheduler.memory.used == 0


class Answers:
    """A fetcher that answers from a list, noting whether it was let hold each empty poll."""

    config = CONFIG

    def __init__(self, *records: bytes) -> None:
        self.answers = [FetchedPartition(0, 10, 10, 0, (), r) for r in records]
        self.held: list[bool] = []
        self.hold_s: list[float | None] = []

    async def fetch(
        self, tp, offset, max_bytes=None, *, poll=False, hold, hold_s=None, answered=None, take=None
    ):  # type: ignore[no-untyped-def]
        self.held.append(hold())
        self.hold_s.append(hold_s)
        return self.answers.pop(0)


async def test_the_first_empty_poll_after_records_comes_back_so_the_copier_knows_it_caught_up() -> (
    None
):
    """Held, the empty answer after new records would leave the partition "copying" for a
    whole hold (up to the chunk timeout, 15 s): it comes back at once; the next is held."""
    fetcher = Answers(b"records", b"", b"", b"more", b"")
    health = {"east": SourceHealth("east", 0)}
    sources = PartitionSources(TP("t", 0), health, {"east": RemoteEnds(0, 10)})
    scheduler = ChunkScheduler(TP("t", 0), {"east": fetcher}, sources, CONFIG)  # type: ignore[dict-item]
    for _ in range(5):
        scheduler._counted(await scheduler._ask(Chunk(10, None, "east"), None, True), 0.0)
    assert fetcher.held == [False, False, True, True, False]
    await scheduler.close()


async def test_a_partition_with_one_remote_lets_its_empty_polls_be_held_long() -> None:
    """With one remote there is none to turn to: its quiet copier need not wake every chunk
    timeout (10,000 idle partitions woke 700 copiers a second). With two, the fetcher's
    bound stands, so a remote that stalls gives way to the other within it."""
    health = {"east": SourceHealth("east", 0), "west": SourceHealth("west", 1)}
    one, two = Answers(b""), Answers(b"", b"")
    sources = PartitionSources(TP("t", 0), health, {"east": RemoteEnds(0, 10)})
    alone = ChunkScheduler(TP("t", 0), {"east": one}, sources, CONFIG)  # type: ignore[dict-item]
    await alone._ask(Chunk(10, None, "east"), None, True)
    both = ChunkScheduler(TP("t", 0), {"east": two, "west": two}, sources, CONFIG)  # type: ignore[dict-item]
    await both._ask(Chunk(10, None, "east"), None, True)
    assert one.hold_s == [ONE_SOURCE_HOLD_S] and two.hold_s == [None]
    await alone.close()
    await both.close()
