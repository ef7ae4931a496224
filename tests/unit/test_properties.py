"""Properties of the pure parts over random inputs (hypothesis): planning over random ends,
chunk sizes over random gaps, batch rewriting and trimming over random batches."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from syncer.batches import decode, rewrite_for_local, split_batches, trim_for_local
from syncer.chunks import chunk_size
from syncer.planner import RemoteEnds, choose_remote
from tests.unit.test_batches import build

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
