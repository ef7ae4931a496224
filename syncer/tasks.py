"""Ending a task we own: cancel it and wait until it has ended, without losing our own
cancellation.

Awaiting a cancelled task by hand (``task.cancel(); await task`` under a ``suppress``) mixes
two outcomes: the task's own ``CancelledError`` (expected: we asked for it) and the caller's
(someone cancels the stopping code itself, e.g. a second Ctrl-C or a shutdown timeout).
Swallowing the second leaves the caller running when it was told to stop. Here the task is
waited for with ``asyncio.wait``, which never raises the task's outcome, so a
``CancelledError`` out of it can only be the caller's, and it is raised.

What the task ended with (cancelled, a result, or an exception it raised before or while
being cancelled) is its own business and is not raised: whoever wanted the outcome watches
the task otherwise (the request loops' done-callbacks log a death and fail what waits). It is
retrieved all the same, so asyncio never logs "exception was never retrieved" for it.

A task that ignores the cancellation (it catches ``CancelledError`` and goes on; an
``asyncio.wait_for`` of Python 3.11 can lose a cancellation that arrives as its inner future
completes, gh-86296) is cancelled again every ``again_after_s`` until it ends: a stop must
end, and a drain on cancellation is meant to be short."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

log = logging.getLogger(__name__)

AGAIN_AFTER_S = 1.0
T = TypeVar("T")
A = TypeVar("A")


async def cancel_and_wait(
    *tasks: asyncio.Future[Any], msg: str | None = None, again_after_s: float = AGAIN_AFTER_S
) -> None:
    """Cancel ``tasks`` and return once every one has ended; raise only the caller's own
    cancellation (the tasks then end on their own, their outcomes retrieved)."""
    pending = {task for task in tasks if not task.done()}
    for task in pending:
        task.cancel(msg)
    try:
        while pending:
            _done, pending = await asyncio.wait(pending, timeout=again_after_s)
            for task in pending:
                log.warning("%s did not end when cancelled: cancelling it again", _name(task))
                task.cancel(msg)
    finally:
        for task in tasks:
            task.add_done_callback(_retrieve)  # soon, if it is done already


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _name(task: asyncio.Future[Any]) -> str:
    return task.get_name() if isinstance(task, asyncio.Task) else repr(task)


def waiting_at(task: asyncio.Future[Any]) -> str:
    """Where ``task`` waits now: the chain of coroutines it awaits through, innermost last
    (function and line of each), for a log line about a task that did not end in time."""
    if not isinstance(task, asyncio.Task):
        return repr(task)
    where: list[str] = []
    awaited: Any = task.get_coro()
    while awaited is not None and len(where) < 30:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if frame is None:
            break
        where.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return " > ".join(where) or "not waiting"


async def unless_stopped(work: Awaitable[T], stop: asyncio.Event, name: str) -> T | None:
    """``work``'s result, or None if ``stop`` is set first: then ``work`` is cancelled and
    waited for. A daemon asked to stop must not wait for work that may retry for as long as
    a cluster is away (a topic refresh retrying a local broker a cut link left unanswered
    held a SIGTERM past 30 s)."""
    task = asyncio.ensure_future(work)
    if isinstance(task, asyncio.Task):
        task.set_name(name)
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await cancel_and_wait(stopped)
        if not task.done():
            await cancel_and_wait(task, msg="stopping")
    return None if task.cancelled() else task.result()


async def once_set(event: asyncio.Event, at_most_s: float, work: Callable[[], Awaitable[T]]) -> T:
    """``work()``, started once ``event`` is set or ``at_most_s`` has passed, whichever is
    first (``syncer run``'s check waits for the copy's first plan so)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), at_most_s)
    return await work()


async def map_at_most(
    at_once: int, work: Callable[[A], Awaitable[T]], items: Sequence[A]
) -> list[T]:
    """``work(item)`` for each item, in order, with at most ``at_once`` running: that many
    tasks, each taking the next item, rather than a task per item (the check's hole scan
    had one per partition with a gap: 10,000 tasks alive at once, beside the copy)."""
    results: list[T | None] = [None] * len(items)
    indexes = iter(range(len(items)))

    async def worker() -> None:
        for i in indexes:
            results[i] = await work(items[i])

    await asyncio.gather(*(worker() for _ in range(min(at_once, len(items)))))
    return results  # type: ignore[return-value]
