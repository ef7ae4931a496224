"""Sources agree: which comparison a chunk needs and what two sources' digests say are pure
decisions over values; the comparisons themselves run here with stand-ins for the clusters.
The local log is the reference: a remote that disagrees with it is dropped, and only when
every remote is dropped does the partition halt; a filler below the local end is skipped for
the nearest real record; a remote that takes over from another must agree with what was
written from it."""

from __future__ import annotations

from typing import Any

import pytest

from syncer.agreement import (
    Agreement,
    CheckFailed,
    Comparison,
    Proof,
    SourceDropped,
    Written,
    compare,
    proof_needed,
)
from syncer.batches import Batch, filler_batches, split_batches
from syncer.chunks import Chunk, Fetched
from syncer.clusters import TP, FetchedPartition
from syncer.errors import ClusterError, PartitionHalted
from syncer.holes import RemoteEnds, scan
from syncer.landed import Changed, Divergence
from syncer.partition import PartitionSources
from syncer.sources import SourceHealth
from tests.unit.test_batches import build

TPX = TP("t", 0)

# --- pure decisions -------------------------------------------------------------------------

EAST_10_20 = Written("east", 10, 20, {18: b"a", 19: b"b"})


def test_the_remote_that_wrote_the_records_below_continues_without_a_comparison() -> None:
    assert proof_needed("east", 20, EAST_10_20, checked=True) is Proof.CONTINUES
    assert proof_needed("east", 15, EAST_10_20, checked=True) is Proof.CONTINUES  # resync


def test_another_remote_is_compared_with_what_was_written() -> None:
    assert proof_needed("west", 20, EAST_10_20, checked=True) is Proof.WRITTEN
    assert proof_needed("west", 20, EAST_10_20, checked=False) is Proof.WRITTEN


def test_a_remote_that_failed_since_is_compared_again() -> None:
    assert proof_needed("east", 20, EAST_10_20, checked=False) is Proof.WRITTEN
    single = Written("east", 10, 20)  # one remote: no digests kept
    assert proof_needed("east", 20, single, checked=False) is Proof.LOCAL


def test_at_a_start_or_past_what_was_written_the_local_log_is_the_reference() -> None:
    assert proof_needed("east", 20, None, checked=True) is Proof.LOCAL
    assert proof_needed("east", 25, EAST_10_20, checked=True) is Proof.LOCAL  # end moved
    assert proof_needed("west", 18, EAST_10_20, checked=True) is Proof.LOCAL  # none below


def test_what_is_written_below_the_frontier_is_the_reference() -> None:
    assert EAST_10_20.below(20) == {18: b"a", 19: b"b"}
    assert EAST_10_20.below(19) == {18: b"a"}
    assert EAST_10_20.below(10) == {} and EAST_10_20.below(21) == {}


def test_two_sources_agree_only_on_what_both_hold() -> None:
    assert compare({1: b"a", 2: b"b"}, {2: b"b", 3: b"c"}) == Comparison(1)
    assert compare({1: b"a"}, {1: b"a"}).agrees
    assert not compare({1: b"a"}, {2: b"a"}).agrees  # nothing in common tells nothing
    assert compare({1: b"a", 2: b"b"}, {1: b"x", 2: b"y"}).differing == (1, 2)


# --- comparisons, with stand-ins for the clusters ---------------------------------------------


def answer(raw: bytes, end: int = 100) -> FetchedPartition:
    return FetchedPartition(0, end, end, 0, (), raw)


class Side:
    """A cluster (or a remote's lanes) holding ``raw`` batches; counts its fetches."""

    def __init__(self, raw: bytes, end: int = 100) -> None:
        self.raw = raw
        self.end = end
        self.fetches = 0
        self.listings = 0
        self.name = "side"
        self.cluster = self  # as a remote's lanes: ``lanes[0].cluster``
        self.lanes = [self]
        self.epoch_ends: dict[int, tuple[int, int]] | Exception = {}
        self.epochs_asked: list[int] = []

    async def fetch(self, *args: Any, **kwargs: Any) -> Any:
        self.fetches += 1
        if args and isinstance(args[0], int):  # Cluster.fetch(node, wants, ...): alone
            return {TPX: answer(self.raw, self.end)}
        # Lanes.fetch(tp, offset, max_bytes): a request shared with other partitions, where
        # a broker cuts a batch over the partition's limit unless it comes first (KIP-74)
        return answer(self.raw[:1], self.end)

    async def leader_for(self, tp: TP) -> int:
        return 1

    async def epoch_end(self, tp: TP, epoch: int) -> tuple[int, int]:
        """Where ``epoch`` ends in this side's log (``epoch_ends``: epoch → (the largest
        epoch it holds at or below it, its end))."""
        self.epochs_asked.append(epoch)
        if isinstance(self.epoch_ends, Exception):
            raise self.epoch_ends
        return self.epoch_ends[epoch]

    async def ends(self, tps: Any) -> dict[TP, tuple[int, int]]:
        return {TPX: (0, self.end)}

    async def latest(self, tps: Any) -> dict[TP, int]:
        self.listings += 1
        return {TPX: self.end}


def agreement(
    local: bytes, writer_id: int | None = None, **remotes: bytes
) -> tuple[Agreement, dict[str, Side]]:
    sources = {name: Side(raw) for name, raw in remotes.items()}
    health = {name: SourceHealth(name, rank) for rank, name in enumerate(remotes)}
    check = Agreement(
        TPX,
        Side(local),  # type: ignore[arg-type]
        sources,  # type: ignore[arg-type]
        PartitionSources(TPX, health, {name: RemoteEnds(0, 100) for name in remotes}),
        writer_id,
    )
    return check, sources


def chunk(remote: str, raw: bytes) -> Fetched:
    batches = split_batches(raw)
    first, end = batches[0].base_offset, batches[-1].next_offset
    return Fetched(Chunk(first, None, remote), answer(raw), batches, end, first)


def chunk_at(offset: int, remote: str = "east") -> Fetched:
    return chunk(remote, build(offset, [(b"k", b"next")]))


def stamped(base: int, raw: bytes) -> bytes:
    return base.to_bytes(8, "big") + raw[8:]


def filler(offset: int, why: str) -> bytes:
    ((base, _end, raw),) = filler_batches(offset, offset + 1, 1_600_000_000_000, why, 5, 1)
    return stamped(base, raw)


OURS = build(9, [(b"k", b"ours")])
THEIRS = build(9, [(b"k", b"theirs")])


async def test_a_different_record_below_the_local_end_halts_the_only_remote() -> None:
    check, _ = agreement(OURS, east=THEIRS)
    with pytest.raises(PartitionHalted, match="the local record at offset 9 differs"):
        await check.check(chunk_at(10), 10)


async def test_a_remote_is_compared_from_a_fetch_of_the_partition_alone() -> None:
    """Its lanes' shared requests could answer with a cut slice (``Side``), which compares
    nothing: the partition's batch is read in a fetch of its own."""
    check, _ = agreement(OURS, east=THEIRS)
    with pytest.raises(PartitionHalted, match="the local record at offset 9 differs"):
        await check.check(chunk_at(10), 10)


async def test_an_answer_with_no_whole_batch_below_the_remote_end_fails_the_check() -> None:
    """Not "nothing to compare", which would let the chunk through unchecked: the check
    fails, the remote's health says so, and the chunk is tried again later."""
    check, sources = agreement(OURS, east=THEIRS[:20])  # a batch cut short, end 100
    with pytest.raises(CheckFailed, match="no records below its end 100"):
        await check.check(chunk_at(10), 10)
    assert check.sources.health("east").errors == 1
    assert "east" not in check.checked and not check.sources.dropped
    sources["east"].raw = THEIRS  # its answer whole: now told
    with pytest.raises(PartitionHalted, match="the local record at offset 9 differs"):
        await check.check(chunk_at(10), 10)


async def test_a_remote_that_disagrees_with_the_local_log_is_dropped_and_another_serves() -> None:
    check, _ = agreement(OURS, east=THEIRS, west=OURS)  # east listed first, yet wrong
    with pytest.raises(SourceDropped):
        await check.check(chunk_at(10, "east"), 10)
    assert check.sources.dropped == {"east": "records differ from the local log's at offset 9"}
    await check.check(chunk_at(10, "west"), 10)
    assert check.checked == {"west"}
    with pytest.raises(SourceDropped):  # a chunk of east's fetched before: never written
        await check.check(chunk_at(10, "east"), 10)


async def test_when_every_remote_disagrees_with_the_local_log_the_partition_halts() -> None:
    check, _ = agreement(OURS, east=THEIRS, west=build(9, [(b"k", b"other")]))
    with pytest.raises(SourceDropped):
        await check.check(chunk_at(10, "east"), 10)
    with pytest.raises(PartitionHalted, match="every other remote was dropped too"):
        await check.check(chunk_at(10, "west"), 10)
    assert set(check.sources.dropped) == {"east", "west"}


async def test_a_local_filler_where_the_source_holds_aborted_data_is_no_divergence() -> None:
    check, _ = agreement(filler(9, "aborted"), east=build(9, [(b"k", b"aborted")]))
    await check.check(chunk_at(10), 10)  # no halt
    assert "east" in check.checked


async def test_below_a_filler_the_nearest_real_record_is_compared() -> None:
    local = build(7, [(b"k", b"committed")]) + filler(8, "marker")
    check, _ = agreement(local, east=build(7, [(b"k", b"another log"), (b"k", b"x")]))
    with pytest.raises(PartitionHalted, match="the local record at offset 7 differs"):
        await check.check(chunk_at(9), 9)


async def test_below_thousands_of_fillers_the_nearest_real_record_is_still_compared() -> None:
    """An aborted transaction of 5,000 records, filled, lies below the frontier: the first
    windows hold only fillers, and the real record below them is still the reference."""
    fillers = filler_batches(10, 5010, 1_600_000_000_000, "aborted", 5, 1)
    local = build(9, [(b"k", b"committed")]) + b"".join(stamped(b, raw) for b, _e, raw in fillers)
    check, _ = agreement(local, east=build(9, [(b"k", b"another log")]))
    with pytest.raises(PartitionHalted, match="the local record at offset 9 differs"):
        await check.check(chunk_at(5010), 5010)
    same, _ = agreement(local, east=build(9, [(b"k", b"committed")]))
    await same.check(chunk_at(5010), 5010)  # the same log: let through
    assert "east" in same.checked


async def test_a_local_log_of_fillers_only_has_nothing_to_compare() -> None:
    ((base, _end, raw),) = filler_batches(0, 10, 1_600_000_000_000, "aborted", 5, 1)
    check, _ = agreement(stamped(base, raw), east=build(0, [(b"k", b"x")] * 10))
    await check.check(chunk_at(10), 10)  # down to the log's start: no real record to compare
    assert "east" in check.checked


async def test_a_remote_marker_where_the_local_log_holds_a_record_is_another_log() -> None:
    """A remote topic recreated while syncer was stopped, a commit marker of its new log at
    the offset below the local end: a marker is no record, so nothing was compared, and that
    passed as agreeing (the new log written on top of the old one, seen on a real broker)."""
    from tests.unit.test_tail_step import marker

    check, _ = agreement(OURS, east=build(8, [(b"k", b"new log")]) + marker(9))
    with pytest.raises(PartitionHalted, match="the local record at offset 9 differs"):
        await check.check(chunk_at(10), 10)


async def test_where_the_remote_holds_none_of_the_local_records_lower_ones_are_compared() -> None:
    """The remote holds no record at 9 (compacted away there, or another log's gap): the
    local log's next real records below are compared instead, until it holds one; one that
    holds the same record there passes, one that holds another is dropped."""
    local = build(8, [(b"k", b"a"), (b"k", b"b")])  # 8 and 9
    check, _ = agreement(local, east=build(8, [(b"k", b"x")]) + build(10, [(b"k", b"y")]))
    with pytest.raises(PartitionHalted, match="the local record at offset 8 differs"):
        await check.check(chunk_at(10), 10)
    same, _ = agreement(local, east=build(8, [(b"k", b"a")]) + build(10, [(b"k", b"y")]))
    await same.check(chunk_at(10), 10)
    assert "east" in same.checked


async def test_a_remote_that_failed_since_it_was_checked_is_compared_again() -> None:
    same = build(9, [(b"k", b"same")])
    check, sources = agreement(same, east=same)
    first = chunk_at(10)
    await check.check(first, 10)
    check.written(first)
    assert sources["east"].fetches == 1
    await check.check(chunk_at(11), 11)  # checked: the next chunks are written as they come
    assert sources["east"].fetches == 1
    check.sources.health("east").failed(0.0, "link cut")  # ... its topic deleted and recreated?
    sources["east"].raw = build(9, [(b"k", b"another log")])
    with pytest.raises(PartitionHalted, match="deleted and recreated"):
        await check.check(chunk_at(11), 11)


async def test_a_remote_taking_over_must_agree_with_what_was_written_before_it() -> None:
    same = build(9, [(b"k", b"same")])
    check, sources = agreement(same, east=same, west=same)
    east = chunk("east", build(10, [(b"k", b"e%d" % i) for i in range(10)]))
    await check.check(east, 10)
    check.written(east)  # offsets 10..19 from east
    fetches = sources["west"].fetches
    # west's next batch begins below the frontier: it overlaps what east wrote, and differs
    west = chunk("west", build(15, [(b"k", b"w%d" % i) for i in range(10)]))
    with pytest.raises(SourceDropped):
        await check.check(west, 20)
    assert check.sources.dropped == {
        "west": "records differ from those written from remote east at offset 19"
    }
    assert sources["west"].fetches == fetches  # the overlap told: no fetch needed


async def test_a_remote_taking_over_at_a_batch_border_is_fetched_below_it() -> None:
    same = build(9, [(b"k", b"same")])
    check, sources = agreement(same, east=same, west=same)
    east = chunk("east", build(10, [(b"k", b"e%d" % i) for i in range(10)]))
    await check.check(east, 10)
    check.written(east)
    sources["west"].raw = build(10, [(b"k", b"e%d" % i) for i in range(10)])  # the same log
    await check.check(chunk_at(20, "west"), 20)
    assert check.checked == {"east", "west"} and not check.sources.dropped
    sources["west"].raw = build(10, [(b"k", b"w%d" % i) for i in range(10)])
    check.sources.health("west").failed(0.0, "link cut")
    with pytest.raises(SourceDropped):
        await check.check(chunk_at(20, "west"), 20)


async def test_a_chunk_fetched_from_below_its_start_is_compared_without_a_fetch() -> None:
    """A chunk whose remote may differ from the one before it is fetched from one offset
    below its start (``Chunk.lead``): its answer carries the batch below, compared as strictly
    as one fetched for the check, and none of that batch is written."""
    same = build(9, [(b"k", b"same")])
    check, sources = agreement(same, east=same, west=same)
    east = chunk("east", build(10, [(b"k", b"e%d" % i) for i in range(10)]))
    await check.check(east, 10)
    check.written(east)  # offsets 10..19 from east
    fetches = sources["west"].fetches
    below = build(10, [(b"k", b"e%d" % i) for i in range(10)])
    west = chunk("west", below + build(20, [(b"k", b"w")]))
    await check.check(west, 20)
    assert "west" in check.checked and sources["west"].fetches == fetches
    written = scan(west.batches, 20, limit=100).writable
    assert [b.base_offset for b in written if isinstance(b, Batch)] == [20]
    other = chunk("west", build(10, [(b"k", b"x%d" % i) for i in range(10)]) + build(20, []))
    with pytest.raises(SourceDropped, match="at offset 19"):
        await check.check(other, 20)
    assert sources["west"].fetches == fetches


async def test_a_chunk_that_was_not_let_through_is_not_the_reference() -> None:
    same = build(9, [(b"k", b"same")])
    check, _ = agreement(same, east=same, west=same)
    stale = chunk("west", build(0, [(b"k", b"old")] * 10))  # wholly below the frontier
    await check.check(stale, 10)
    check.written(stale)
    assert check.last is None


# --- which log changed, when a remote's record below the copied end differs (issue 19) ------


def diverged(**known: Any) -> Divergence:
    return Divergence("t[0]", "east", 40, 100, **known)


def test_a_local_record_of_another_producer_is_a_foreign_write() -> None:
    found = diverged(local_writer=9, our_writer=77, remote_end=100)
    assert found.changed is Changed.LOCAL
    assert "not written by this deployment (producer id 9, ours is 77)" in found.describe()
    assert "the local record at offset 40 differs from remote east's" in found.describe()
    assert "foreign producer" in found.describe()


def test_a_local_record_of_ours_that_the_remote_no_longer_holds_blames_the_remote() -> None:
    found = diverged(local_writer=77, our_writer=77, remote_end=120)
    assert found.changed is Changed.REMOTE
    text = found.describe()
    assert "remote east's log no longer matches what was copied" in text
    assert "truncated or replaced at offset 40 or below" in text
    assert text.startswith("t[0]: the local record at offset 40 differs from remote east's")
    assert "foreign producer" not in text


def test_a_record_copied_from_the_remote_itself_blames_the_remote() -> None:
    found = diverged(copied_from="east")
    assert found.changed is Changed.REMOTE
    assert "east's (copied from it): remote east's log no longer matches" in found.describe()
    other = diverged(copied_from="west")
    assert "copied from remote west" in other.describe()


def test_a_remote_that_ends_below_what_was_copied_is_blamed_even_unread() -> None:
    found = diverged(remote_end=60)  # an unclean election left it shorter
    assert found.changed is Changed.REMOTE
    assert "it ends at 60, below the 100 copied" in found.describe()


def test_with_nothing_known_both_causes_are_named() -> None:
    found = diverged(remote_end=100)
    assert found.changed is Changed.UNKNOWN
    assert "a foreign producer wrote into the local partition, or the remote" in found.describe()
    # our own producer id unknown (unreadable): the local writer alone tells nothing
    assert diverged(local_writer=9, remote_end=100).changed is Changed.UNKNOWN


async def test_the_only_remote_no_longer_holding_what_was_copied_halts_naming_the_remote() -> None:
    ours = build(9, [(b"k", b"copied")], producer_id=77)
    check, _ = agreement(ours, 77, east=THEIRS)
    with pytest.raises(PartitionHalted) as halted:
        await check.check(chunk_at(10), 10)
    assert "remote east's log no longer matches what was copied" in str(halted.value)
    assert "offset 9" in str(halted.value) and "foreign" not in str(halted.value)


async def test_a_local_record_of_another_producer_halts_as_a_foreign_write() -> None:
    theirs = build(9, [(b"k", b"someone else's")], producer_id=9)
    check, _ = agreement(theirs, 77, east=THEIRS)
    with pytest.raises(PartitionHalted, match="not written by this deployment"):
        await check.check(chunk_at(10), 10)


# --- a remote whose log lost records copied from it (issue 19, item 4) ------------------------


async def test_the_only_remote_out_of_range_below_the_local_end_halts_naming_both() -> None:
    check, sides = agreement(OURS, east=OURS)
    sides["east"].end = 10  # it holds the copied record at 9, not the ones up to 12
    check.sources.out_of_range("east", 12)
    with pytest.raises(PartitionHalted) as halted:
        await check.check_ends(12)
    text = str(halted.value)
    assert "remote east's log ends at 10, below the 12 copied from it" in text
    assert "(truncated at offset 10:" in text


async def test_a_shrunk_remote_is_dropped_while_another_still_serves() -> None:
    check, sides = agreement(OURS, east=OURS, west=OURS)
    sides["east"].end = 10
    check.sources.out_of_range("east", 12)
    await check.check_ends(12)  # no halt
    assert check.sources.dropped == {"east": "its log ends at 10, below 12"}
    assert check.sources.ends["east"] == RemoteEnds(0, 10)


async def test_out_of_range_from_a_remote_that_still_ends_past_the_copy_drops_nothing() -> None:
    check, _ = agreement(OURS, east=OURS)  # ends at 100: its start moved, or an answer raced
    check.sources.out_of_range("east", 12)
    await check.check_ends(12)
    assert check.sources.dropped == {} and check.sources.shrunk(12, 0.0) == []


async def test_nothing_is_listed_while_every_remote_holds_what_was_copied() -> None:
    check, sides = agreement(OURS, east=OURS)
    await check.check_ends(12)
    assert sides["east"].listings == 0 and check.sources.dropped == {}
    check.sources.out_of_range("east", 12)
    await check.check_ends(12)
    assert sides["east"].listings == 1 and check.sources.dropped == {}


async def test_a_remote_seen_ending_below_the_copy_has_its_next_records_compared() -> None:
    check, _ = agreement(OURS, east=OURS)
    first = chunk_at(10)
    await check.check(first, 10)
    check.written(first)
    assert proof_needed("east", 11, check.last, "east" in check.checked) is Proof.CONTINUES
    check.sources.update_end("east", RemoteEnds(0, 9))  # a new leader: its HW, or a loss
    await check.check_ends(11)  # within the grace: no halt, no drop
    assert check.sources.dropped == {}
    assert proof_needed("east", 11, check.last, "east" in check.checked) is Proof.LOCAL


# --- the check without a read, for the copier's step in the fetcher's turn (issue 23) -------


async def test_check_now_lets_through_only_what_needs_no_read() -> None:
    same = build(9, [(b"k", b"same")])
    check, sources = agreement(same, east=same)
    assert not check.check_now(chunk_at(10), 10)  # not checked yet: the local log is read
    assert check.last is None and not check.checked  # and nothing changed
    first = chunk_at(10)
    await check.check(first, 10)
    check.written(first)
    fetches = sources["east"].fetches
    nxt = chunk_at(11)
    assert check.check_now(nxt, 11)  # the remote that wrote the records below continues
    check.written(nxt)
    assert check.last is not None and check.last.high == 12
    check.sources.health("east").failed(0.0, "link cut")
    assert not check.check_now(chunk_at(12), 12)  # failed since: compared again, by check
    assert sources["east"].fetches == fetches


async def east_continuing() -> tuple[Agreement, dict[str, Side]]:
    """east wrote 10 and continues; west holds the same records, 10..59, for the samples."""
    same = build(9, [(b"k", b"same")])
    check, sources = agreement(same, east=same, west=same)
    sources["west"].raw = b"".join(build(o, [(b"k", b"next")]) for o in range(10, 60))
    first = chunk_at(10)
    await check.check(first, 10)
    check.written(first)
    return check, sources


async def test_check_now_leaves_a_due_sample_of_another_remote_to_check() -> None:
    check, sources = await east_continuing()
    passed = 0
    for offset in range(11, 11 + 40):
        got = chunk_at(offset)
        if check.check_now(got, offset):
            passed += 1
        else:
            before = sources["west"].fetches
            await check.check(got, offset)  # every SAMPLE_EVERY chunks: west is read
            assert sources["west"].fetches == before + 1
        check.written(got)
    assert passed == 39  # one sample due in 40 chunks, read by ``check``


async def test_after_writes_found_landed_a_remote_sent_again_is_compared_with_the_local() -> None:
    """east's write of 10..19 lost its answer but landed (above the high watermark at
    first); the same offsets sent again from west, which holds another history there, were
    answered as a duplicate of east's (the broker matches sequences, not records). What
    ``written`` noted last is west's chunk, but the local log holds east's. Once the local
    end is read past them and found to be the reference remote's (east's), the next chunk
    of west must be compared with the local log, not continue unchecked."""
    same = build(9, [(b"k", b"same")])
    theirs = build(10, [(b"k", b"w%d" % i) for i in range(10)])
    check, sources = agreement(same, east=same, west=same)
    east = chunk("east", build(10, [(b"k", b"e%d" % i) for i in range(10)]))
    await check.check(east, 10)
    check.written(east)  # its answer lost
    west = chunk("west", theirs)
    await check.check(west, 10)  # below 10 both agree with the local log
    check.written(west)  # answered as a duplicate: east's records are what landed
    check.local.raw = build(10, [(b"k", b"e%d" % i) for i in range(10)])  # type: ignore[attr-defined]
    check.local.end = 20  # type: ignore[attr-defined]
    sources["west"].raw = theirs + build(20, [(b"k", b"w20")])
    check.local_checked()  # local 10..19 found identical to the reference's (east's)
    with pytest.raises(SourceDropped, match="differ from the local log's at offset 19"):
        await check.check(chunk("west", build(20, [(b"k", b"w20")])), 20)


def test_a_remote_dropped_for_its_topic_is_no_source_and_the_last_one_halts() -> None:
    """``drop_for_topic``: the remote's topic is gone or another log (``topic_ids.judged``),
    told from outside the copier's task."""
    check, _ = agreement(OURS, east=OURS, west=OURS)
    check.drop_for_topic("west", "topic t was deleted on the remote west cluster")
    assert check.sources.dropped == {"west": "topic t was deleted on the remote west cluster"}
    with pytest.raises(
        PartitionHalted,
        match=r"t\[0\]: recreated at east; every other remote was dropped too \(west: topic t",
    ):
        check.drop_for_topic("east", "recreated at east")


async def test_a_remote_dropped_while_its_chunk_is_compared_is_not_let_through() -> None:
    """A drop from outside lands while the check awaits a comparison: the chunk, which
    would otherwise pass and be written, is refused."""
    check, _ = agreement(OURS, east=OURS, west=OURS)
    read = check.local.fetch

    async def drop_then_read(*args: Any, **kwargs: Any) -> Any:
        check.drop_for_topic("east", "its topic there was recreated")
        return await read(*args, **kwargs)

    check.local.fetch = drop_then_read  # type: ignore[method-assign]
    with pytest.raises(SourceDropped, match="its topic there was recreated"):
        await check.check(chunk_at(10, "east"), 10)
    assert "east" not in check.checked


async def test_a_remote_dropped_while_its_continuing_chunk_is_sampled_is_not_let_through() -> None:
    """The remote that wrote the records below continues unread but for a sample every
    ``SAMPLE_EVERY`` chunks, compared with the other remote: a drop from outside that lands
    while the sample is read refuses the chunk."""
    check, sources = await east_continuing()
    offset = 11
    while check.check_now(got := chunk_at(offset), offset):  # continues until a sample is due
        check.written(got)
        offset += 1
    read = sources["west"].fetch

    async def drop_then_read(*args: Any, **kwargs: Any) -> Any:
        check.drop_for_topic("east", "its topic there was recreated")
        return await read(*args, **kwargs)

    sources["west"].fetch = drop_then_read  # type: ignore[method-assign]
    with pytest.raises(SourceDropped, match="its topic there was recreated"):
        await check.check(got, offset)
    assert check._passed is None


def in_epoch(epoch: int, raw: bytes) -> bytes:
    """``raw`` (one batch) as a leader of ``epoch`` appended it (outside the CRC)."""
    return raw[:12] + epoch.to_bytes(4, "big", signed=True) + raw[16:]


async def test_a_remote_whose_leader_epoch_moved_must_still_hold_what_was_copied() -> None:
    """Records 10..19 were written from east in its leader epoch 5; its next chunk comes in
    epoch 7. A leader elected cleanly starts epoch 7 at or past 20 (it has everything
    committed): the copy goes on, asked once. One elected uncleanly starts it at its own log
    end, below: chunks of the old leader and of the new one would each pass as continuing
    the log, two histories spliced; the remote is dropped (here the only one: a halt)."""
    same = build(9, [(b"k", b"same")])
    check, sources = agreement(same, east=same)
    first = chunk("east", in_epoch(5, build(10, [(b"k", b"e%d" % i) for i in range(10)])))
    await check.check(first, 10)
    check.written(first)
    assert check.check_now(chunk("east", in_epoch(5, build(20, [(b"k", b"next")]))), 20)
    moved = chunk("east", in_epoch(7, build(20, [(b"k", b"new leader")])))
    assert not check.check_now(moved, 20)  # the copier's task asks where epoch 5 ends
    sources["east"].epoch_ends = {5: (5, 20)}
    await check.check(moved, 20)
    assert sources["east"].epochs_asked == [5] and not check.sources.dropped
    check.written(moved)  # written in epoch 7 now: its next chunks ask nothing
    assert check.check_now(chunk("east", in_epoch(7, build(21, [(b"k", b"more")]))), 21)

    cut, cut_sources = agreement(same, east=same)
    await cut.check(first, 10)
    cut.written(first)
    cut_sources["east"].epoch_ends = {5: (5, 14)}  # the new leader had only 10..13
    with pytest.raises(PartitionHalted, match="truncated or replaced at offset 14:"):
        await cut.check(moved, 20)
    assert cut.sources.dropped["east"] == (
        "its leader epoch 5, of the records copied from it up to offset 20, ends at offset"
        " 14: its log no longer holds them (an unclean leader election there)"
    )


async def test_a_remote_that_holds_no_record_of_the_epoch_copied_is_dropped() -> None:
    same = build(9, [(b"k", b"same")])
    check, sources = agreement(same, east=same, west=same)
    first = chunk("east", in_epoch(5, build(10, [(b"k", b"e%d" % i) for i in range(10)])))
    await check.check(first, 10)
    check.written(first)
    sources["east"].epoch_ends = {5: (3, 8)}  # its log's epochs up to 5: 3, ending at 8
    with pytest.raises(SourceDropped):
        await check.check(chunk("east", in_epoch(7, build(20, [(b"k", b"x")]))), 20)
    assert "is not in its log" in check.sources.dropped["east"]


async def test_where_an_epoch_ends_is_asked_again_when_the_remote_does_not_answer() -> None:
    same = build(9, [(b"k", b"same")])
    check, sources = agreement(same, east=same)
    first = chunk("east", in_epoch(5, build(10, [(b"k", b"e%d" % i) for i in range(10)])))
    await check.check(first, 10)
    check.written(first)
    sources["east"].epoch_ends = ClusterError("east: not authorized")  # asked again later
    moved = chunk("east", in_epoch(7, build(20, [(b"k", b"x")])))
    with pytest.raises(CheckFailed, match="leader epoch 5"):
        await check.check(moved, 20)
    assert check.sources.health("east").errors == 1 and not check.sources.dropped
    sources["east"].epoch_ends = {5: (5, 20)}
    await check.check(moved, 20)
    assert not check.sources.dropped


async def test_a_remote_that_keeps_no_leader_epochs_is_compared_with_the_local_log() -> None:
    """Kafka 2.8 keeps no leader epochs for a topic of a message format before 0.11 and
    answers (-1, -1) with no error: that tells nothing, so the chunk is compared with the
    local log instead (here equal: let through) rather than the remote dropped."""
    same = build(9, [(b"k", b"same")])
    check, sources = agreement(same, east=same)
    first = chunk("east", in_epoch(5, build(10, [(b"k", b"e%d" % i) for i in range(10)])))
    await check.check(first, 10)
    check.written(first)
    sources["east"].raw = build(19, [(b"k", b"e9")])
    sources["east"].epoch_ends = {5: (-1, -1)}
    fetches = sources["east"].fetches
    await check.check(chunk("east", in_epoch(7, build(20, [(b"k", b"x")]))), 20)
    assert not check.sources.dropped and sources["east"].fetches == fetches + 1


async def test_a_chunk_of_an_older_epoch_than_the_last_written_asks_nothing() -> None:
    """After a resync the frontier may fall back below where a newer epoch began: a chunk of
    the older epoch again is no leader change (and relabelling what was written by it made
    a later, newer chunk ask where the older epoch ends, below what was written: a false
    drop)."""
    same = build(9, [(b"k", b"same")])
    check, sources = agreement(same, east=same)
    spanning = chunk(
        "east",
        in_epoch(5, build(10, [(b"k", b"a")] * 5)) + in_epoch(6, build(15, [(b"k", b"b")] * 5)),
    )
    await check.check(spanning, 10)
    check.written(spanning)  # epoch 6, to 20
    older = chunk("east", in_epoch(5, build(12, [(b"k", b"a")] * 3)))
    assert check.check_now(older, 12)
    assert check.check_now(chunk("east", in_epoch(6, build(20, [(b"k", b"c")]))), 20)
    assert sources["east"].epochs_asked == []
