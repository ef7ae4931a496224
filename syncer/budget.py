"""Bytes fetched and not yet written (or written and not yet answered), for the whole
process: fetches go out while there is room, so memory stays flat however many partitions
are copied at once."""

from __future__ import annotations

import asyncio
from typing import Any


class ByteBudget:
    """``reserve`` before a fetch (what it may bring), ``settle`` when its size is known,
    ``release`` once it is written or dropped. Never blocks: a caller that must fetch (the
    chunk every write of a partition waits for) reserves past the limit, so progress never
    waits on memory held by other partitions."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0
        self._room: asyncio.Event | None = None  # made on first wait, inside a running loop

    def __repr__(self) -> str:
        return f"<ByteBudget {self.used}/{self.limit}>"

    def has_room(self) -> bool:
        return self.used < self.limit

    def reserve(self, nbytes: int) -> int:
        self.used += nbytes
        self.peak = max(self.peak, self.used)
        return nbytes

    def settle(self, reserved: int, actual: int) -> int:
        self.release(reserved - actual)
        self.peak = max(self.peak, self.used)
        return actual

    def release(self, nbytes: int) -> None:
        self.used -= nbytes
        if self._room is not None and self.has_room():
            self._room.set()

    def release_when_done(self, nbytes: int, future: asyncio.Future[Any] | None) -> None:
        """Release ``nbytes`` once ``future`` (the last write sent for them) is done."""
        if not nbytes:
            return
        if future is None or future.done():
            self.release(nbytes)
        else:
            future.add_done_callback(lambda _future: self.release(nbytes))

    async def room(self) -> None:
        """Wait until there is room again."""
        while not self.has_room():
            if self._room is None:
                self._room = asyncio.Event()
            self._room.clear()
            await self._room.wait()

    def ticket(self, nbytes: int) -> Ticket:
        """Reserve ``nbytes`` as one ticket: what one chunk holds, released once."""
        return Ticket(self, self.reserve(nbytes))


class Ticket:
    """The bytes one chunk holds in a ``ByteBudget``, from its fetch until its writes are
    answered. It passes from the chunk scheduler to the copier with the chunk; whoever holds
    it last releases it. Released once however often it is released: a chunk thrown away
    after the copier arranged its release must not give its bytes back twice."""

    __slots__ = ("_budget", "_released", "nbytes")

    def __init__(self, budget: ByteBudget | None, nbytes: int) -> None:
        self._budget = budget
        self.nbytes = nbytes
        self._released = False

    def __repr__(self) -> str:
        state = "released" if self._released else "held"
        return f"<Ticket {self.nbytes} bytes {state}>"

    @classmethod
    def empty(cls) -> Ticket:
        """A ticket for no bytes of no budget (a chunk made outside a scheduler)."""
        return cls(None, 0)

    @property
    def released(self) -> bool:
        return self._released

    def settle(self, actual: int) -> None:
        """The fetch brought ``actual`` bytes: hold that many instead of the reservation."""
        if self._released:
            return
        if self._budget is not None:
            self._budget.settle(self.nbytes, actual)
        self.nbytes = actual

    def release(self) -> None:
        """Give the bytes back now, unless they are given back already (or arranged to be)."""
        if self._released:
            return
        self._released = True
        if self._budget is not None:
            self._budget.release(self.nbytes)

    def release_when_done(self, future: asyncio.Future[Any] | None) -> None:
        """Give the bytes back once ``future`` (the last write sent for them) is done. From
        now on a ``release`` does nothing: the write's answer releases them."""
        if self._released:
            return
        if future is None or future.done():
            self.release()
            return
        self._released = True
        budget, nbytes = self._budget, self.nbytes
        if budget is not None:
            future.add_done_callback(lambda _future: budget.release(nbytes))
