"""Ending a task we own: it has ended when the helper returns, its own outcome stays its own,
and the caller's cancellation is never swallowed."""

from __future__ import annotations

import asyncio
import gc

import pytest

from syncer.tasks import cancel_and_wait, map_at_most, once_set, unless_stopped, waiting_at


async def forever() -> None:
    await asyncio.Event().wait()


async def test_a_running_task_has_ended_cancelled_when_the_helper_returns() -> None:
    task = asyncio.create_task(forever())
    await asyncio.sleep(0)
    await cancel_and_wait(task, msg="stopping")
    assert task.cancelled()


async def test_every_task_given_is_ended() -> None:
    tasks = [asyncio.create_task(forever()) for _ in range(3)]
    await cancel_and_wait(*tasks)
    assert all(t.cancelled() for t in tasks)


async def test_a_task_that_already_failed_does_not_raise_out_of_the_helper() -> None:
    async def fail() -> None:
        raise KeyError("a bug in the task")

    task = asyncio.create_task(fail())
    await asyncio.sleep(0)
    assert task.done()
    await cancel_and_wait(task)  # its outcome is its owner's (done-callbacks), not ours
    assert isinstance(task.exception(), KeyError)


async def test_a_failed_task_ended_here_is_not_reported_as_never_retrieved() -> None:
    reported: list[object] = []
    loop = asyncio.get_running_loop()
    before = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:

        async def fail_on_cancel() -> None:
            try:
                await forever()
            except asyncio.CancelledError:
                raise RuntimeError("failed while cancelled") from None

        task = asyncio.create_task(fail_on_cancel())
        await asyncio.sleep(0)
        await cancel_and_wait(task)
        await asyncio.sleep(0)  # the retrieving callback runs
        del task
        gc.collect()
    finally:
        loop.set_exception_handler(before)
    assert reported == []


async def test_a_finished_task_keeps_its_result() -> None:
    async def answer() -> int:
        return 42

    task = asyncio.create_task(answer())
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert task.result() == 42


async def test_the_callers_own_cancellation_while_it_waits_is_raised() -> None:
    draining = asyncio.Event()

    async def slow_drain() -> None:
        try:
            await forever()
        except asyncio.CancelledError:
            draining.set()
            await asyncio.sleep(0.5)  # drains, still inside the helper's first wait
            raise

    task = asyncio.create_task(slow_drain())
    await asyncio.sleep(0)
    stopping = asyncio.create_task(cancel_and_wait(task))
    await draining.wait()
    stopping.cancel()  # e.g. a second Ctrl-C: the stopping code itself must stop
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert stopping.cancelled()
    await asyncio.wait([task])  # the task still ends on its own
    assert task.cancelled()


async def test_a_caller_cancelled_just_before_it_waits_is_not_swallowed() -> None:
    task = asyncio.create_task(forever())

    async def stop_it() -> str:
        this = asyncio.current_task()
        assert this is not None
        this.cancel()  # pending: delivered at the helper's first await
        await cancel_and_wait(task)
        return "went on as if not cancelled"

    stopping = asyncio.create_task(stop_it())
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(stopping, 5)
    await asyncio.wait_for(asyncio.wait([task]), 5)
    assert task.cancelled()  # the helper cancelled it before it waited


async def test_a_task_that_ignores_its_cancellation_once_is_cancelled_again() -> None:
    ignored = 0

    async def stubborn() -> None:
        nonlocal ignored
        while True:
            try:
                await forever()
            except asyncio.CancelledError:
                ignored += 1
                if ignored > 1:
                    raise

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task, again_after_s=0.05), 5)
    assert ignored == 2
    assert task.cancelled()


async def test_a_task_that_swallows_cancellation_and_returns_has_ended() -> None:
    async def swallow() -> str:
        try:
            await forever()
        except asyncio.CancelledError:
            return "drained"
        return "never"

    task = asyncio.create_task(swallow())
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert task.result() == "drained"


async def test_no_task_is_nothing_to_do() -> None:
    await cancel_and_wait()


async def test_unless_stopped_hands_back_what_work_returns_or_raises() -> None:
    stop = asyncio.Event()

    async def answer() -> int:
        return 7

    async def refused() -> int:
        raise ValueError("refused")

    assert await unless_stopped(answer(), stop, "answer") == 7
    with pytest.raises(ValueError, match="refused"):
        await unless_stopped(refused(), stop, "refused")


async def test_a_stop_cancels_work_that_would_retry_forever() -> None:
    stop, began = asyncio.Event(), asyncio.Event()
    cancelled = []

    async def retrying() -> int:
        began.set()
        try:
            await asyncio.Event().wait()  # a cluster that never comes back
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return 0

    waiting = asyncio.create_task(unless_stopped(retrying(), stop, "retrying"))
    await began.wait()
    stop.set()
    assert await asyncio.wait_for(waiting, 1) is None
    assert cancelled == [True]


async def test_once_set_starts_the_work_only_when_the_event_is_set() -> None:
    event = asyncio.Event()
    started: list[float] = []

    async def work() -> str:
        started.append(asyncio.get_running_loop().time())
        return "done"

    task = asyncio.create_task(once_set(event, 60.0, work))
    await asyncio.sleep(0.05)
    assert started == []  # the copy's first plan is not made yet: nothing runs
    event.set()
    assert await task == "done"
    assert len(started) == 1


async def test_once_set_starts_the_work_after_at_most_its_wait() -> None:
    """A plan that never comes (a local cluster away) does not keep the check from running."""
    loop = asyncio.get_running_loop()
    since = loop.time()
    called: list[bool] = []

    async def work() -> None:
        called.append(True)

    await once_set(asyncio.Event(), 0.1, work)
    assert called == [True]
    assert 0.1 <= loop.time() - since < 1.0


async def test_once_set_cancelled_while_waiting_never_starts_the_work() -> None:
    called: list[bool] = []

    async def work() -> None:
        called.append(True)

    task = asyncio.create_task(once_set(asyncio.Event(), 60.0, work))
    await asyncio.sleep(0.01)
    await cancel_and_wait(task)
    assert task.cancelled() and called == []


async def test_map_at_most_keeps_order_and_never_runs_more_than_it_may() -> None:
    running = 0
    most = 0
    tasks_seen: set[asyncio.Task[object] | None] = set()

    async def work(item: int) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        tasks_seen.add(asyncio.current_task())
        await asyncio.sleep(0.001 * (item % 3))
        running -= 1
        return item * 10

    assert await map_at_most(4, work, list(range(50))) == [i * 10 for i in range(50)]
    assert most == 4
    assert len(tasks_seen) == 4  # four tasks take the items in turn, not one task per item
    assert await map_at_most(4, work, []) == []


async def test_waiting_at_names_each_coroutine_down_to_the_one_that_waits() -> None:
    async def inner() -> None:
        await asyncio.Event().wait()

    async def outer() -> None:
        await inner()

    task = asyncio.create_task(outer())
    await asyncio.sleep(0)
    try:
        chain = [step.split(":")[0] for step in waiting_at(task).split(" > ")]
        assert chain[:3] == ["outer", "inner", "wait"]
    finally:
        await cancel_and_wait(task)
    assert waiting_at(task) == "not waiting"
