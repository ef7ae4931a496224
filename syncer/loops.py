"""The shape Fetcher and Writer share: one background task that gathers what copiers want
into requests, and the request tasks it starts. ``async with loop:`` runs it for the block
(or ``start()``, idempotent, and ``stop()``, which cancels them all, waits for them and
cancels what still waits; idempotent too). Should the background task die of a bug,
everything waiting fails at once with the reason (and so does whatever is asked later): no
caller awaits forever."""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Coroutine, Iterable
from typing import Any, Protocol, Self

from syncer.errors import TransientClusterError
from syncer.tasks import cancel_and_wait

log = logging.getLogger(__name__)


class Answering(Protocol):
    """A request written at once, with no task: its answer, its timeout (``timer``), a
    failure or the loop's stop concludes it, whichever comes first."""

    concluded: bool
    timer: asyncio.Handle | None


class RequestLoop(abc.ABC):
    def __init__(self, name: str) -> None:
        self.name = name
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._requests: set[asyncio.Task[None]] = set()
        # requests written at once, concluded by their answers as they are read (no task)
        self._answering: set[Any] = set()
        self.dead: TransientClusterError | None = None  # why the background task died

    async def __aenter__(self) -> Self:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def start(self) -> None:
        """Start the background task (once; a dead loop is not restarted)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self.name)
            self._task.add_done_callback(self._died)

    def _died(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("%s stopped: %r", self.name, exc, exc_info=exc)
            self.dead = self._stopped_by(exc)
            self._fail_waiting(self.dead)

    def _stopped_by(self, exc: BaseException) -> TransientClusterError:
        """What the fetches of a loop that died of ``exc`` fail with."""
        return TransientClusterError(f"{self.name} stopped: {exc!r}")

    def _fail_all(self, futures: Iterable[asyncio.Future[Any]], exc: BaseException) -> None:
        """A bug ``exc`` met with ``futures`` taken from the queue, neither queued nor in
        flight (or in flight on a loop that dies of it): each not done yet fails with it."""
        error = self._stopped_by(exc)
        for future in futures:
            if not future.done():
                future.set_exception(error)

    async def stop(self) -> None:
        """Cancel the background task and the requests in flight, wait for them, and cancel
        what still waits (even if this stop is itself cancelled); idempotent."""
        tasks = [t for t in (self._task, *self._requests) if t is not None]
        self._task = None
        try:
            await cancel_and_wait(*tasks, msg=f"{self.name} stopped")
        finally:
            self._cancel_waiting()

    def _first_outcome(self, request: Answering) -> bool:
        """Is this ``request``'s first outcome? Then it is concluded: no longer answering,
        its timer cancelled; a later one (a late answer, the stop) is not."""
        if request.concluded:
            return False
        request.concluded = True
        self._answering.discard(request)
        if request.timer is not None:
            request.timer.cancel()
        return True

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

    @abc.abstractmethod
    def _fail_waiting(self, error: Exception) -> None:
        """Fail the futures of everything not sent yet with ``error``."""
