"""Waiting for local topics just created: looked at often enough that a share of topics is
seen led soon after it is (the retries' usual backoff, up to 5 s, left each share of a
10,000-partition start waiting seconds after its leaders were ready)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import pytest

from syncer.admin import Census
from syncer.clusters import TP
from syncer.errors import TransientClusterError
from syncer.mirroring import CREATED_POLL_S, wait_created


class Local:
    """A local cluster whose topics show up after ``counts_after`` looks at the metadata
    and are led after ``led_after`` looks at their ends."""

    def __init__(self, counts: dict[str, int], counts_after: int, led_after: int) -> None:
        self.counts = counts
        self.counts_after = counts_after
        self.led_after = led_after
        self.looks = {"counts": 0, "latest": 0, "full": 0}
        self.asked: list[TP] = []

    async def topic_census(self) -> Census:
        self.looks["counts"] += 1
        return Census(self.counts if self.looks["counts"] > self.counts_after else {}, {})

    async def refresh_metadata(self) -> None:
        self.looks["full"] += 1

    async def latest(self, tps: Iterable[TP]) -> dict[TP, int]:
        self.looks["latest"] += 1
        self.asked = list(tps)
        if self.looks["latest"] <= self.led_after:
            raise TransientClusterError("list offsets: NotLeaderForPartitionError (error 6)")
        return dict.fromkeys(self.asked, 0)


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every pause the retries take, taken at once."""
    taken: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float, *args: Any) -> None:
        taken.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    return taken


def test_leaders_are_looked_at_no_more_than_the_poll_apart(pauses: list[float]) -> None:
    local = Local({"a": 3, "b": 2}, counts_after=2, led_after=8)
    asyncio.run(wait_created(local, {"a": 3, "b": 2}, led={"a": 3, "b": 2}))  # type: ignore[arg-type]
    assert local.looks == {"counts": 3, "latest": 9, "full": 1}
    assert len(pauses) == 2 + 8
    # eight failed looks in a row: the usual backoff would be near its 5 s cap by now
    assert max(pauses) <= CREATED_POLL_S
    assert CREATED_POLL_S <= 0.5
    assert sorted(local.asked) == [TP("a", 0), TP("a", 1), TP("a", 2), TP("b", 0), TP("b", 1)]


def test_not_staged_waits_for_the_counts_only(pauses: list[float]) -> None:
    local = Local({"a": 3}, counts_after=1, led_after=100)
    asyncio.run(wait_created(local, {"a": 3}, led={}))  # type: ignore[arg-type]
    assert local.looks == {"counts": 2, "latest": 0, "full": 1}  # one full read, at the end
