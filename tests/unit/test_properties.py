"""Properties of the pure parts over random inputs (hypothesis): planning over random ends,
chunk sizes over random gaps, chunking and reassembly over random batch layouts with holes
(two remotes answering in random order, one of them failing now and then), batch rewriting
and trimming over random batches."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from syncer.batches import Batch, decode, rewrite_for_local, split_batches, trim_for_local
from syncer.chunks import ChunkScheduler, chunk_size
from syncer.clusters import TP, FetchedPartition
from syncer.config import CopierConfig
from syncer.errors import TransientClusterError
from syncer.holes import Filler, RemoteEnds, choose_remote, scan
from syncer.partition import PartitionSources
from syncer.sources import SourceHealth
from tests.unit.test_batches import build
from tests.unit.test_rebuild import log_append_time

ENDS = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d"]),
    st.tuples(st.integers(0, 1000), st.integers(0, 1000)).map(
        lambda se: RemoteEnds(min(se), max(se))
    ),
    max_size=4,
)


@given(local_end=st.integers(0, 1000), remotes=ENDS)
def test_the_chosen_remote_holds_the_local_end_and_is_furthest_ahead(
    local_end: int, remotes: dict[str, RemoteEnds]
) -> None:
    choice = choose_remote(local_end, remotes)
    holders = {n: e for n, e in remotes.items() if e.start <= local_end < e.end}
    ahead = {n: e for n, e in remotes.items() if e.end > local_end}
    if choice.remote is not None:
        chosen = remotes[choice.remote]
        assert chosen.start <= local_end < chosen.end  # never skips an offset
        assert chosen.end == max(e.end for e in holders.values()) == choice.target
        assert choice.lost_below is None
    elif ahead:
        assert not holders  # nobody holds local_end: that is loss, and said so
        assert choice.lost_below == min(e.start for e in ahead.values()) > local_end
    else:
        assert choice.gap == 0 and choice.lost_below is None


@given(remaining=st.integers(1, 10**6), holders=st.integers(1, 64), full=st.integers(64, 10**5))
def test_chunks_cover_any_gap_exactly_with_sizes_in_bounds(
    remaining: int, holders: int, full: int
) -> None:
    covered, steps = 0, 0
    while covered < remaining:
        size = chunk_size(remaining - covered, holders, full)
        assert 1 <= size <= min(full, remaining - covered)
        covered += size
        steps += 1
        assert steps <= remaining  # always progresses
    assert covered == remaining


RECORDS = st.lists(
    st.tuples(st.binary(max_size=20) | st.none(), st.binary(max_size=100) | st.none()),
    min_size=1,
    max_size=25,
)


@given(records=RECORDS, base=st.integers(0, 2**40), codec=st.sampled_from([0, 1]))
def test_rewriting_keeps_every_record_and_field(
    records: list[tuple[bytes | None, bytes | None]], base: int, codec: int
) -> None:
    (batch,) = split_batches(build(base, records, codec=codec, transactional=True))
    raw = rewrite_for_local(batch, 5, 1)
    out = raw[:0] + base.to_bytes(8, "big") + raw[8:]  # the broker stamps the base offset
    (rewritten,) = split_batches(out)
    assert rewritten.crc_ok() and not rewritten.is_transactional
    assert (rewritten.producer_id, rewritten.producer_epoch) == (5, 1)
    assert rewritten.max_timestamp == batch.max_timestamp
    assert decode(rewritten) == decode(batch)


@given(
    records=RECORDS,
    base=st.integers(0, 2**40),
    cut=st.integers(0, 24),
    codec=st.sampled_from([0, 1]),
)
def test_trimming_keeps_exactly_the_records_from_the_cut(
    records: list[tuple[bytes | None, bytes | None]], base: int, cut: int, codec: int
) -> None:
    (batch,) = split_batches(build(base, records, codec=codec))
    first = base + min(cut, len(records) - 1)
    raw = trim_for_local(batch, first, 5, 1)
    stamped = first.to_bytes(8, "big") + raw[8:]
    (trimmed,) = split_batches(stamped)
    assert trimmed.crc_ok() and trimmed.base_offset == first
    assert decode(trimmed) == [r for r in decode(batch) if r.offset >= first]


# a partition's log: batches of 1-12 records, each after a hole of 0-4 offsets (compaction
# removed whole batches there)
LAYOUTS = st.lists(st.tuples(st.integers(0, 4), st.integers(1, 12)), min_size=1, max_size=40)
SMALL = CopierConfig(partition_fetch_max_bytes=600, max_chunks=4, retry_backoff_ms=1)


@dataclass
class Log:
    """What a broker holds, and how it answers a fetch: whole batches from the one holding
    the offset (or the first after it), at least one, about ``max_bytes`` of them or fewer."""

    batches: list[bytes]
    end: int
    rng: random.Random
    fails: float  # the share of fetches that fail

    @classmethod
    def of(cls, layout: list[tuple[int, int]], rng: random.Random, fails: float) -> Log:
        batches, offset = [], 0
        for hole, records in layout:
            offset += hole
            batches.append(build(offset, [(b"k", b"v%d" % (offset + i)) for i in range(records)]))
            offset += records
        return cls(batches, offset, rng, fails)

    config = SMALL

    async def fetch(
        self, tp: TP, offset: int, max_bytes: int | None = None, **_: object
    ) -> FetchedPartition:
        for _ in range(self.rng.randrange(6)):
            await asyncio.sleep(0)  # answers come back in any order
        if self.rng.random() < self.fails:
            raise TransientClusterError("link cut")
        # a broker may answer short of what was asked (its response limit across partitions)
        limit = 1 if self.rng.random() < 0.3 else (max_bytes or SMALL.partition_fetch_max_bytes)
        out = b""
        for raw in self.batches:
            (batch,) = split_batches(raw)
            if batch.last_offset >= offset and (not out or len(out) < limit):
                out += raw
        return FetchedPartition(0, self.end, self.end, 0, (), out)


async def reassemble(remotes: dict[str, Log]) -> list[tuple[str, int, int, bytes]]:
    """Copy the partition the way the copier does (the scheduler, then ``scan`` with the
    fill policy from the frontier on); what would be written, in order."""
    end = next(iter(remotes.values())).end
    health = {name: SourceHealth(name, rank) for rank, name in enumerate(remotes)}
    ends = {name: RemoteEnds(0, end) for name in remotes}
    sources = PartitionSources(TP("t", 0), health, ends)
    scheduler = ChunkScheduler(TP("t", 0), remotes, sources, SMALL)  # type: ignore[arg-type]
    written: list[tuple[str, int, int, bytes]] = []
    frontier = 0
    try:
        while frontier < end:
            scheduler.launch(frontier, end)
            got = await scheduler.next_ready(frontier)
            if got is None:  # every remote backing off after a failure
                for source in health.values():
                    source.unhealthy_until = 0.0
                continue
            found = scan(got.batches, frontier, limit=got.fetched.stable_end, fill=True)
            assert found.hole is None and found.trim_first is None
            for item in found.writable:
                if isinstance(item, Filler):
                    written.append(("filler", item.base_offset, item.next_offset, b""))
                else:
                    assert isinstance(item, Batch)
                    written.append(("batch", item.base_offset, item.next_offset, bytes(item.raw)))
            frontier = found.next_offset
            got.ticket.release()
    finally:
        await scheduler.close()
    return written


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=LAYOUTS, seed=st.integers(0, 2**32), fails=st.sampled_from([0.0, 0.2]))
def test_chunks_from_two_remotes_reassemble_into_the_log_with_fillers_at_its_holes(
    layout: list[tuple[int, int]], seed: int, fails: float
) -> None:
    rng = random.Random(seed)
    remotes = {"steady": Log.of(layout, rng, 0.0), "flaky": Log.of(layout, rng, fails)}
    written = asyncio.run(asyncio.wait_for(reassemble(remotes), 20))  # a stall fails
    expected, offset = [], 0
    for raw in remotes["steady"].batches:
        (batch,) = split_batches(raw)
        if batch.base_offset > offset:
            expected.append(("filler", offset, batch.base_offset, b""))
        expected.append(("batch", batch.base_offset, batch.next_offset, raw))
        offset = batch.next_offset
    assert written == expected  # every offset once, in order, each batch as the remote has it


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    count=st.integers(1, 600),
    size=st.integers(0, 3_000),
    fill=st.binary(min_size=1, max_size=8),
    cut=st.integers(0, 599),
    codec=st.sampled_from([0, 1, 2, 3, 4]),
    append_time=st.booleans(),
)
def test_trimming_large_compressible_records_keeps_every_one_in_every_codec(
    count: int, size: int, fill: bytes, cut: int, codec: int, append_time: bool
) -> None:
    # values that compress to almost nothing: the shape that made the old builder refuse
    records = [(b"k%d" % i, (fill * (size // len(fill) + 1))[:size]) for i in range(count)]
    base = 1_000
    raw = build(base, records, codec=codec)
    (batch,) = split_batches(log_append_time(raw) if append_time else raw)
    first = base + min(cut, count - 1)
    out = trim_for_local(batch, first, 5, 1)
    (trimmed,) = split_batches(first.to_bytes(8, "big") + out[8:])
    assert trimmed.crc_ok() and trimmed.attributes & 0x0F == codec  # CreateTime, same codec
    assert trimmed.record_count == base + count - first
    assert decode(trimmed) == [r for r in decode(batch) if r.offset >= first]
    if first == base:  # the whole batch: what the copy path sends
        copied = rewrite_for_local(batch, 5, 1)
        (whole,) = split_batches(first.to_bytes(8, "big") + copied[8:])
        assert decode(whole) == decode(trimmed)
