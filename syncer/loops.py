"""The shape Fetcher and Writer share: one background task that gathers what copiers want
into requests, and the request tasks it starts. ``start()`` is idempotent; ``stop()`` cancels
them all and cancels what still waits."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Coroutine
from typing import Any


class RequestLoop(abc.ABC):
    def __init__(self, name: str) -> None:
        self.name = name
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._requests: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._requests) if t is not None]
        self._task = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._cancel_waiting()

    def _spawn(self, request: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(request)
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    @abc.abstractmethod
    async def _run(self) -> None:
        """Wait for ``_wakeup``, gather what waits into requests, ``_spawn`` them."""

    @abc.abstractmethod
    def _cancel_waiting(self) -> None:
        """Cancel the futures of everything not sent yet."""
