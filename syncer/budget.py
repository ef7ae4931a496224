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
