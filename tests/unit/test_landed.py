"""Where a remote's log no longer matches what was copied from it (issue 19, item 4): the
first record that differs, on plain digests, and what a remote that ends below the copied
end is told to have lost, read from stand-ins for the clusters."""

from __future__ import annotations

from typing import Any

from syncer.clusters import TP, FetchedPartition
from syncer.landed import Divergence, Shrunk, confirm_shrink, first_difference, where_replaced
from tests.unit.test_batches import build

TPX = TP("t", 0)
D1, D2, D3 = b"1" * 16, b"2" * 16, b"3" * 16


# --- the first record that differs ----------------------------------------------------------


def test_the_first_record_that_differs_above_an_equal_one_is_surely_the_first() -> None:
    ours = {10: D1, 11: D1, 12: D1, 13: D1}
    theirs = {10: D1, 11: D1, 12: D2, 13: D3}
    assert first_difference(ours, theirs, 10) == (12, True)


def test_a_difference_at_the_lowest_record_read_may_go_further_down() -> None:
    assert first_difference({10: D1, 11: D1}, {10: D2, 11: D2}, 5) == (10, False)
    # unless the comparison began where both logs start
    assert first_difference({10: D1, 11: D1}, {10: D2, 11: D2}, 10) == (10, True)


def test_only_the_records_both_hold_are_compared() -> None:
    # a filler (not visible) locally, the remote's hole: nothing to compare at 11
    assert first_difference({10: D1, 12: D1}, {10: D1, 11: D3, 12: D2}, 10) == (12, True)
    assert first_difference({10: D1}, {10: D1, 11: D2}, 10) == (None, True)


# --- what the halt says ---------------------------------------------------------------------


def test_a_remote_that_only_lost_its_tail_is_named_truncated_at_its_end() -> None:
    text = Shrunk("t[0]", "east", 300, 500).describe()
    assert text.startswith("t[0]: remote east's log ends at 300, below the 500 copied from it")
    assert "no longer matches what was copied (truncated at offset 300:" in text
    assert "unclean leader election" in text and "foreign producer" not in text


def test_a_remote_whose_records_below_its_end_differ_names_the_first_one() -> None:
    text = Shrunk("t[0]", "east", 450, 500, differs_at=300).describe()
    assert "(truncated and replaced at offset 300:" in text
    text = Shrunk("t[0]", "east", 450, 500, differs_at=300, exact=False).describe()
    assert "at offset 300 or below:" in text


def test_a_divergence_names_where_the_remote_was_replaced_when_it_was_searched() -> None:
    found = Divergence("t[0]", "east", 499, 500, copied_from="east")
    assert "replaced at offset 499 or below" in found.describe()
    searched = Divergence("t[0]", "east", 499, 500, copied_from="east", first=300, exact=True)
    text = searched.describe()
    assert text.startswith("t[0]: the local record at offset 499 differs from remote east's")
    assert "replaced at offset 300:" in text
    unsure = Divergence("t[0]", "east", 499, 500, copied_from="east", first=300)
    assert "replaced at offset 300 or below:" in unsure.describe()


# --- read from the clusters -----------------------------------------------------------------


class Log:
    """A cluster holding one partition's ``raw`` batches, from ``start`` to ``end``."""

    name = "log"

    def __init__(self, raw: bytes, end: int, start: int = 0) -> None:
        self.raw, self.start, self.end = raw, start, end

    async def leader_for(self, tp: TP) -> int:
        return 1

    async def fetch(self, node: int, wants: Any, **kwargs: Any) -> Any:
        return {TPX: FetchedPartition(0, self.end, self.end, self.start, (), self.raw)}

    async def ends(self, tps: Any) -> dict[TP, tuple[int, int]]:
        return {TPX: (self.start, self.end)}

    async def latest(self, tps: Any) -> dict[TP, int]:
        return {TPX: self.end}


COPIED = [(b"k", b"r%d" % i) for i in range(6)]
LOCAL = Log(build(0, COPIED), 6)


async def shrink(remote: Log, held: int = 6) -> Any:
    return await confirm_shrink(LOCAL, remote, TPX, "t[0]", "east", held)  # type: ignore[arg-type]


async def test_a_remote_that_holds_what_was_copied_is_no_shrink() -> None:
    ends, found = await shrink(Log(build(0, [*COPIED, (b"k", b"more")]), 7))
    assert (ends.start, ends.end) == (0, 7) and found is None


async def test_a_remote_cut_short_holding_what_was_copied_below_its_end() -> None:
    ends, found = await shrink(Log(build(0, COPIED[:4]), 4))
    assert ends.end == 4
    assert found == Shrunk("t[0]", "east", 4, 6)


async def test_a_remote_cut_short_and_written_again_names_where_it_was_replaced() -> None:
    replaced = build(0, [*COPIED[:3], (b"k", b"new history")])
    _ends, found = await shrink(Log(replaced, 4))
    assert found == Shrunk("t[0]", "east", 4, 6, differs_at=3, exact=True)


async def test_a_remote_that_holds_nothing_any_more_is_cut_at_its_end() -> None:
    _ends, found = await shrink(Log(b"", 0))
    assert found == Shrunk("t[0]", "east", 0, 6)


async def test_where_a_remote_was_replaced_is_searched_below_the_record_that_differs() -> None:
    replaced = Log(build(0, [*COPIED[:2], *[(b"k", b"new")] * 4]), 6)
    found = await where_replaced(LOCAL, replaced, TPX, 0, 5)  # type: ignore[arg-type]
    assert found == (2, True)
    # nothing differs where it was searched: the record compared first stays, not surely first
    assert await where_replaced(LOCAL, LOCAL, TPX, 0, 5) == (5, False)  # type: ignore[arg-type]
