"""The narrowing of ``verify`` over plain records: it names the first divergent offset and
reads little more than the range once."""

from __future__ import annotations

import math
import random
from collections.abc import AsyncIterator

import pytest

from syncer.batches import Record
from syncer.clusters import OFFSET_OUT_OF_RANGE, TP, FetchedPartition
from syncer.errors import ClusterError, OffsetOutOfRange, TransientClusterError
from syncer.protocol.common import NOT_LEADER_OR_FOLLOWER
from syncer.verify import FANOUT, LEAF_RECORDS, RangeReader, compare
from tests.unit.test_batches import build


class Listed(RangeReader):
    """A reader over records in memory, counting what it reads."""

    def __init__(self, records: list[Record]) -> None:
        super().__init__(None, TP("t", 0))  # type: ignore[arg-type]
        self.listed = records
        self.read = 0

    async def records(self, low: int, high: int) -> AsyncIterator[Record]:
        for r in self.listed[low:high]:  # listed at their offsets
            self.read += 1
            if low <= r.offset < high:
                yield r


def records(n: int) -> list[Record]:
    return [Record(o, 1_000 + o, b"k%d" % (o % 97), b"v%d" % o, ()) for o in range(n)]


async def test_the_first_divergence_is_named_and_the_range_read_about_once() -> None:
    n = 40_000
    for planted in (0, 12_345, n - 1):
        source = records(n)
        copy = list(source)
        copy[planted] = Record(planted, 1_000 + planted, b"k", b"planted", ())
        if planted + 1 < n:  # a second difference after it: the first is named
            copy[planted + 1] = Record(planted + 1, 1, b"later", b"x", ())
        local, remote = Listed(copy), Listed(source)
        divergence, rounds = await compare(local, remote, 0, n)
        assert divergence is not None and divergence.offset == planted
        assert "planted" not in divergence.remote and "value of 7 bytes" in divergence.local
        assert rounds == math.ceil(math.log(n / LEAF_RECORDS, FANOUT)) + 1
        # each round reads a 16th of the one before
        assert remote.read <= n * FANOUT / (FANOUT - 1) + LEAF_RECORDS


async def test_identical_ranges_are_read_once() -> None:
    local, remote = Listed(records(5_000)), Listed(records(5_000))
    assert await compare(local, remote, 0, 5_000) == (None, 1)
    assert local.read == remote.read == 5_000


async def test_a_record_one_side_lacks_is_a_divergence() -> None:
    source = records(1_000)
    copy = list(source)
    rng = random.Random(7)
    gone = rng.randrange(1_000)
    copy[gone] = Record(-1, 0, None, None, ())  # not in the range any more
    divergence, _rounds = await compare(Listed(copy), Listed(source), 0, 1_000)
    assert divergence is not None and divergence.offset == gone
    assert divergence.local == "no record"


class Blinking:
    """A cluster whose partition holds ``n`` records in batches of 10 and whose fetches
    answer ``blinks`` times with an error, then ``blinks`` times with nothing, then right."""

    name = "east"

    def __init__(self, n: int, blinks: int) -> None:
        self.batches = [
            build(o, [(b"k", b"v%d" % i) for i in range(o, o + 10)]) for o in range(0, n, 10)
        ]
        self.end = n
        self.answers = ["error"] * blinks + ["empty"] * blinks

    async def leader_for(self, tp: TP) -> int:
        return 1

    async def fetch(
        self, node: int, wants: dict[TP, int], **_: object
    ) -> dict[TP, FetchedPartition]:
        ((tp, offset),) = wants.items()
        answer = self.answers.pop(0) if self.answers else "records"
        if answer == "error":  # NOT_LEADER_OR_FOLLOWER: retriable
            return {tp: FetchedPartition(6, -1, -1, -1, (), b"")}
        records = b"" if answer == "empty" else b"".join(self.batches[offset // 10 :][:3])
        return {tp: FetchedPartition(0, self.end, self.end, 0, (), records)}


async def test_an_error_or_an_empty_answer_below_the_end_is_read_again_not_taken_for_the_end() -> (
    None
):
    reader = RangeReader(Blinking(100, blinks=2), TP("t", 0))  # type: ignore[arg-type]
    seen = [r.offset async for r in reader.records(0, 100)]
    assert seen == list(range(100))
    assert reader.fetches == 4 + 100 // 30 + 1


async def test_the_end_of_the_partition_ends_the_read() -> None:
    reader = RangeReader(Blinking(40, blinks=0), TP("t", 0))  # type: ignore[arg-type]
    assert [r.offset async for r in reader.records(30, 100)] == list(range(30, 40))


class Refusing(Blinking):
    """A cluster whose fetches all answer one error code."""

    def __init__(self, code: int) -> None:
        super().__init__(100, blinks=0)
        self.code = code

    async def fetch(
        self, node: int, wants: dict[TP, int], **_: object
    ) -> dict[TP, FetchedPartition]:
        return {tp: FetchedPartition(self.code, -1, -1, -1, (), b"") for tp in wants}


async def test_an_answer_that_can_never_pass_ends_the_read_with_its_error() -> None:
    reader = RangeReader(Refusing(OFFSET_OUT_OF_RANGE), TP("t", 0))  # type: ignore[arg-type]
    with pytest.raises(ClusterError, match="OffsetOutOfRange") as raised:
        await anext(reader.records(0, 100))
    assert not isinstance(raised.value, TransientClusterError)
    assert isinstance(raised.value, OffsetOutOfRange)  # the landed check tells it apart
    assert reader.fetches == 1  # not retried


async def test_an_answer_whose_leader_moved_is_a_transient_error() -> None:
    reader = RangeReader(Refusing(NOT_LEADER_OR_FOLLOWER), TP("t", 0))  # type: ignore[arg-type]
    with pytest.raises(TransientClusterError, match="fetch of t\\[0\\] at 7"):
        await reader._batches(7)
