"""One timer for many deadlines: what is overdue fails in time, what is cancelled never."""

from __future__ import annotations

import asyncio

from syncer.deadlines import Deadlines


async def test_an_item_fails_after_its_wait_and_a_cancelled_one_never() -> None:
    failed: list[str] = []
    deadlines = Deadlines(0.1, failed.append)
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadlines.add("waits")
    taken = deadlines.add("taken")
    taken.cancel()
    while not failed:
        await asyncio.sleep(0.005)
    assert failed == ["waits"]
    assert 0.1 <= loop.time() - started < 0.15
    await asyncio.sleep(0.05)
    assert failed == ["waits"]  # the cancelled one stays quiet
    assert len(deadlines) == 0  # and its place left the heap
    deadlines.close()


async def test_a_cancelled_deadline_lets_go_of_its_item_at_once() -> None:
    deadlines: Deadlines[bytes] = Deadlines(60.0, lambda item: None)
    deadline = deadlines.add(b"x" * 1_000_000)  # e.g. a fetch whose answer holds records
    deadline.cancel()
    assert deadline.item is None  # the heap keeps the place for a minute, not the bytes
    deadlines.close()


async def test_items_added_over_time_fail_in_order_each_within_a_twentieth_of_the_wait() -> None:
    """Late by at most a twentieth of the wait beyond what the loop itself is late: a timer
    of its own per item, due at the item's deadline, shows that (on a loaded machine a
    timer fires tens of ms late, and this test failed on a fixed bound)."""
    loop = asyncio.get_running_loop()
    failed: list[tuple[int, float]] = []
    deadlines = Deadlines(0.2, lambda n: failed.append((n, loop.time())))
    added: dict[int, float] = {}
    due: dict[int, float] = {}  # when the loop ran a plain timer at each item's deadline
    for n in range(5):
        added[n] = loop.time()
        deadlines.add(n)
        loop.call_at(added[n] + 0.2, lambda n=n: due.setdefault(n, loop.time()))
        await asyncio.sleep(0.02)
    while len(failed) < 5 or len(due) < 5:
        await asyncio.sleep(0.05)
    assert [n for n, _ in failed] == [0, 1, 2, 3, 4]
    latest = 0.0
    for n, at in failed:
        assert at - added[n] >= 0.2  # never early
        # no later than the loop's own timer, or a twentieth after the last firing
        assert at <= max(due[n], latest + 0.2 / 20) + 0.2 / 20 + 0.005, (n, at - due[n])
        latest = at
    deadlines.close()


async def test_close_stops_the_timer() -> None:
    failed: list[int] = []
    deadlines = Deadlines(0.05, failed.append)
    deadlines.add(1)
    deadlines.close()
    await asyncio.sleep(0.1)
    assert failed == []
