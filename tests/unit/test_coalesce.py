"""Reads asked together go out as one; one key's error reaches only its own caller."""

from __future__ import annotations

import asyncio

import pytest

from syncer.coalesce import Coalesced, NotAnswered


class Ends:
    """Stands in for a broker's ListOffsets: one call per request, an error for ``bad``."""

    def __init__(self, bad: set[str] | None = None) -> None:
        self.bad = bad or set()
        self.requests: list[list[str]] = []

    async def read(self, keys: list[str]) -> dict[str, int]:
        self.requests.append(sorted(keys))
        await asyncio.sleep(0)
        if self.bad & set(keys):
            raise ValueError(f"bad: {sorted(self.bad & set(keys))}")
        return {k: len(k) for k in keys}


async def test_reads_asked_in_one_turn_go_out_as_one_request() -> None:
    ends = Ends()
    ends_of = Coalesced(ends.read)
    got = await asyncio.gather(*(ends_of.read(k) for k in ("a", "bb", "ccc", "a")))
    assert got == [1, 2, 3, 1]
    assert ends.requests == [["a", "bb", "ccc"]]  # once, each key once
    assert await ends_of.read("dddd") == 4  # a later turn: a request of its own
    assert ends.requests[1:] == [["dddd"]]


async def test_reads_asked_within_the_gathering_time_go_out_as_one_request() -> None:
    ends = Ends()
    ends_of = Coalesced(ends.read, gather_s=0.05)
    first = asyncio.create_task(ends_of.read("a"))
    await asyncio.sleep(0.01)  # a later turn, within the gathering time
    second = asyncio.create_task(ends_of.read("bb"))
    assert await asyncio.gather(first, second) == [1, 2]
    assert ends.requests == [["a", "bb"]]


async def test_one_keys_error_reaches_only_its_caller() -> None:
    ends = Ends(bad={"bb"})
    ends_of = Coalesced(ends.read)
    results = await asyncio.gather(
        *(ends_of.read(k) for k in ("a", "bb", "ccc")), return_exceptions=True
    )
    assert results[0] == 1 and results[2] == 3
    assert isinstance(results[1], ValueError)
    assert ends.requests[0] == ["a", "bb", "ccc"]  # together first, then each alone


async def test_a_caller_that_gives_up_leaves_the_others_answered() -> None:
    ends = Ends()
    ends_of = Coalesced(ends.read)
    impatient = asyncio.create_task(ends_of.read("a"))
    patient = asyncio.create_task(ends_of.read("bb"))
    await asyncio.sleep(0)
    impatient.cancel()
    assert await patient == 2
    with pytest.raises(asyncio.CancelledError):
        await impatient


async def test_read_only_together_a_failure_reaches_every_caller_in_one_request() -> None:
    """``alone=False``: a broker that fails the listing is not asked again once per key; a
    key the answer left out fails with ``NotAnswered``."""
    ends = Ends(bad={"bb"})
    ends_of = Coalesced(ends.read, alone=False)
    results = await asyncio.gather(*(ends_of.read(k) for k in ("a", "bb")), return_exceptions=True)
    assert all(isinstance(r, ValueError) for r in results)
    assert ends.requests == [["a", "bb"]]

    async def leaves_out_bb(keys: list[str]) -> dict[str, int]:
        return {k: len(k) for k in keys if k != "bb"}

    partial_of = Coalesced(leaves_out_bb, alone=False)
    results = await asyncio.gather(
        *(partial_of.read(k) for k in ("a", "bb")), return_exceptions=True
    )
    assert results[0] == 1 and isinstance(results[1], NotAnswered)


async def test_keys_whose_callers_all_gave_up_are_not_read() -> None:
    ends = Ends()
    ends_of = Coalesced(ends.read, gather_s=0.05)
    gone = asyncio.create_task(ends_of.read("a"))
    kept = asyncio.create_task(ends_of.read("bb"))
    await asyncio.sleep(0.01)
    gone.cancel()
    assert await kept == 2
    assert ends.requests == [["bb"]]
