"""syncer.events: which state changes are announced, and the subscribers' bounded queues."""

from __future__ import annotations

import asyncio

import pytest

from syncer.clusters import TP
from syncer.events import (
    CaughtUp,
    EventHub,
    Halted,
    RemoteDropped,
    RemoteRecovered,
    Resumed,
    partition_event,
    remote_event,
)
from syncer.sources import SourceHealth
from syncer.status import PartitionStatus, State

TP0 = TP("orders", 0)


def status(state: State, local_end: int = 10, error: str | None = None) -> PartitionStatus:
    return PartitionStatus(TP0, local_end=local_end, state=state, error=error)


@pytest.mark.parametrize(
    ("before", "now", "expected"),
    [
        (State.STARTING, State.CAUGHT_UP, CaughtUp(TP0, 10)),
        (State.COPYING, State.CAUGHT_UP, CaughtUp(TP0, 10)),
        (State.RETRYING, State.CAUGHT_UP, CaughtUp(TP0, 10)),
        (State.COPYING, State.HALTED, Halted(TP0, "misaligned")),
        (State.STARTING, State.HALTED, Halted(TP0, "misaligned")),
        (State.CAUGHT_UP, State.COPYING, Resumed(TP0, State.CAUGHT_UP)),
        (State.RETRYING, State.COPYING, Resumed(TP0, State.RETRYING)),
        (State.HALTED, State.COPYING, Resumed(TP0, State.HALTED)),
        (State.STARTING, State.COPYING, None),  # the first copy is no resumption
        (State.COPYING, State.RETRYING, None),
        (State.CAUGHT_UP, State.STOPPED, None),
        (State.CAUGHT_UP, State.CAUGHT_UP, None),
        (State.HALTED, State.HALTED, None),
    ],
)
def test_partition_event_per_change(before: State, now: State, expected: object) -> None:
    assert partition_event(status(now, error="misaligned"), before) == expected


def test_halted_without_a_message_still_says_halted() -> None:
    assert partition_event(status(State.HALTED), State.COPYING) == Halted(TP0, "halted")


def test_remote_event() -> None:
    assert remote_event("east", "connection refused") == RemoteDropped("east", "connection refused")
    assert remote_event("east", None) == RemoteRecovered("east")


def test_status_calls_its_watcher_on_each_change_of_state_only() -> None:
    seen: list[tuple[State, State]] = []
    live = PartitionStatus(TP0, watcher=lambda s, before: seen.append((before, s.state)))
    live.state = State.COPYING
    live.local_end = 5  # not a state: not told
    live.state = State.COPYING  # no change
    live.error = "x"
    live.state = State.HALTED
    assert seen == [(State.STARTING, State.COPYING), (State.COPYING, State.HALTED)]


def test_a_snapshot_copy_tells_nobody() -> None:
    seen: list[State] = []
    live = PartitionStatus(TP0, watcher=lambda s, before: seen.append(s.state))
    frozen = live.copy()
    frozen.state = State.HALTED
    assert seen == []
    assert frozen.watcher is None


def test_status_feeds_the_hub_with_the_reason_of_a_halt() -> None:
    hub = EventHub()
    events = hub.subscribe()
    live = PartitionStatus(TP0, watcher=hub.partition_changed)
    live.state = State.COPYING
    live.local_end = 42
    live.state = State.CAUGHT_UP
    live.state = State.COPYING
    live.error = "HoleFound: offset 7"  # the copier sets the error before the state
    live.state = State.HALTED
    assert events.pending() == [
        CaughtUp(TP0, 42),
        Resumed(TP0, State.CAUGHT_UP),
        Halted(TP0, "HoleFound: offset 7"),
    ]


def test_source_health_tells_when_it_starts_backing_off_and_when_it_is_back() -> None:
    told: list[tuple[str, str | None]] = []
    health = SourceHealth("east", 0, watcher=lambda name, why: told.append((name, why)))
    health.succeeded(100, 0.1)  # healthy already: nothing to tell
    health.failed(1.0, "refused")
    health.failed(2.0, "refused again")  # still backing off: told once
    health.leader_moved("not leader")  # no back-off
    health.succeeded(100, 0.1)
    health.succeeded(100, 0.1)
    assert told == [("east", "refused"), ("east", None)]


async def test_a_subscriber_reads_events_in_order_and_ends_when_the_hub_closes() -> None:
    hub = EventHub()
    subscription = hub.subscribe()
    received: list[object] = []

    async def read() -> None:
        async for event in subscription:
            received.append(event)

    reader = asyncio.create_task(read())
    await asyncio.sleep(0)
    hub.publish(RemoteDropped("east", "refused"))
    await asyncio.sleep(0)
    hub.publish(RemoteRecovered("east"))
    hub.close()
    await asyncio.wait_for(reader, 1)
    assert received == [RemoteDropped("east", "refused"), RemoteRecovered("east")]


def test_a_slow_subscriber_loses_its_oldest_events_counted_and_others_lose_none() -> None:
    hub = EventHub()
    slow = hub.subscribe(max_queued=2)
    fast = hub.subscribe(max_queued=10)
    for end in range(5):
        hub.publish(CaughtUp(TP0, end))
    assert slow.pending() == [CaughtUp(TP0, 3), CaughtUp(TP0, 4)]
    assert slow.dropped == 3
    assert len(fast.pending()) == 5 and fast.dropped == 0
    assert repr(slow) == "<Subscription open [queued: 0, dropped: 3]>"


async def test_a_closed_subscription_gets_nothing_more() -> None:
    hub = EventHub()
    async with hub.subscribe() as subscription:
        hub.publish(RemoteRecovered("east"))
    hub.publish(RemoteRecovered("west"))
    assert [e async for e in subscription] == [RemoteRecovered("east")]
    assert repr(hub) == "<EventHub [subscriptions: 0, published: 2]>"


def test_events_are_frozen_values() -> None:
    event = Halted(TP0, "x")
    with pytest.raises(AttributeError):
        event.reason = "y"  # type: ignore[misc]
    assert Halted(TP0, "x") == event  # ``at`` is not compared


def test_a_queue_holds_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        EventHub().subscribe(max_queued=0)
