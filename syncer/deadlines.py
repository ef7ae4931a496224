"""Deadlines for many waiting things on one timer: at 10,000 partitions, a timer per queued
fetch (created when it is queued, cancelled when it is sent, every few seconds for each
partition) was most of what an idle process did."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Deadline(Generic[T]):
    """One item's place among the deadlines; ``cancel`` lets go of the item at once (the
    place itself leaves the heap when its time comes)."""

    __slots__ = ("item",)

    def __init__(self, item: T) -> None:
        self.item: T | None = item

    def cancel(self) -> None:
        self.item = None


class Deadlines(Generic[T]):
    """Calls ``overdue(item)`` once ``wait_s`` has passed since ``add(item)`` unless its
    deadline was cancelled, up to ``wait_s / 20`` late: the one timer fires at the earliest
    deadline, but no sooner than that after its last firing, so it does not fire once per
    item."""

    def __init__(self, wait_s: float, overdue: Callable[[T], None]) -> None:
        self.wait_s = wait_s
        self.overdue = overdue
        # (when, order, place): compared as tuples in C, the order breaking ties
        self._heap: list[tuple[float, int, Deadline[T]]] = []
        self._order = itertools.count()
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, item: T) -> Deadline[T]:
        """Start ``item``'s wait."""
        loop = asyncio.get_running_loop()
        deadline, at = Deadline(item), loop.time() + self.wait_s
        heapq.heappush(self._heap, (at, next(self._order), deadline))
        if self._timer is None:
            self._timer = loop.call_at(at, self._fire)
        return deadline

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._heap.clear()

    def _fire(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._timer = None
        while self._heap and self._heap[0][0] <= now:
            item = heapq.heappop(self._heap)[2].item
            if item is not None:
                self.overdue(item)
        if self._heap:
            at = max(self._heap[0][0], now + self.wait_s / 20)
            self._timer = loop.call_at(at, self._fire)
