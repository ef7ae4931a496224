"""Reads of one key asked in the same turn of the event loop, answered by one read of them
all: at 10,000 partitions every copier reads its local end as it starts, and 10,000
one-partition ListOffsets requests were a good part of a start-up."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class NotAnswered(LookupError):
    """A key the read of many left out (``Coalesced`` with ``alone=False``)."""


class Coalesced(Generic[K, V]):
    """``await read(key)`` from any number of tasks: the keys asked before the loop turns
    (or, with ``gather_s``, within that many seconds of the first) are read with one
    ``read_many``. Should that fail (one key's error fails the request), each key is read
    alone, so a caller sees only its own key's error; with ``alone=False`` every caller
    sees that failure, and a key the answer left out fails with ``NotAnswered`` (for reads
    that are only worth asking together: a broker that does not answer is not asked once
    per key). Keys whose callers all gave up are not read."""

    def __init__(
        self,
        read_many: Callable[[list[K]], Awaitable[dict[K, V]]],
        gather_s: float = 0.0,
        *,
        alone: bool = True,
    ) -> None:
        self.read_many = read_many
        self.gather_s = gather_s
        self.alone = alone
        self._waiting: dict[K, list[asyncio.Future[V]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.batches = 0  # read_many calls made

    async def read(self, key: K) -> V:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[V] = loop.create_future()
        if not self._waiting:
            if self.gather_s > 0:
                loop.call_later(self.gather_s, self._flush)
            else:
                loop.call_soon(self._flush)
        self._waiting.setdefault(key, []).append(future)
        return await future

    def _flush(self) -> None:
        waiting, self._waiting = _still_waited_for(self._waiting), {}
        if not waiting:
            return
        task = asyncio.create_task(self._answer(waiting))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, waiting: dict[K, list[asyncio.Future[V]]]) -> None:
        try:
            if len(waiting) > 1 or not self.alone:
                self.batches += 1
                try:
                    got = await self.read_many(list(waiting))
                except Exception as exc:
                    if not self.alone:
                        for futures in waiting.values():
                            _settle(futures, None, exc)
                        return
                    got = {}
                for key in [k for k in waiting if k in got]:
                    _settle(waiting.pop(key), got[key], None)
                if not self.alone:
                    for key, futures in waiting.items():
                        _settle(futures, None, NotAnswered(key))
                    return
            waiting = _still_waited_for(waiting)
            await asyncio.gather(*(self._alone(k, f) for k, f in waiting.items()))
        except BaseException as exc:  # cancelled: nobody may wait forever
            for futures in waiting.values():
                _settle(futures, None, asyncio.CancelledError(str(exc)))
            raise

    async def _alone(self, key: K, futures: list[asyncio.Future[V]]) -> None:
        try:
            value = (await self.read_many([key]))[key]
        except Exception as exc:
            _settle(futures, None, exc)
        else:
            _settle(futures, value, None)


def _still_waited_for(
    waiting: dict[K, list[asyncio.Future[V]]],
) -> dict[K, list[asyncio.Future[V]]]:
    """The keys someone still waits for (a caller that gave up cancelled its future)."""
    return {k: fs for k, fs in waiting.items() if not all(f.done() for f in fs)}


def _settle(futures: list[asyncio.Future[V]], value: V | None, error: BaseException | None) -> None:
    for future in futures:
        if future.done():
            continue  # its caller gave up
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)  # type: ignore[arg-type]
