"""What a running Syncer tells its host as it happens, without polling ``/status``.

    async with Syncer(config) as syncer:
        async with syncer.events() as events:
            async for event in events:
                match event:
                    case Halted(tp=tp, reason=reason): ...

Events are frozen values, published where a state changes: a partition's ``State``
(``PartitionStatus`` calls back on every change of ``state``) and a remote's health
(``SourceHealth`` calls back when it starts backing off and when a fetch succeeds again).
Each subscriber has its own bounded queue: a slow one loses its oldest events (counted in
``Subscription.dropped``), and publishing never waits, so no subscriber can slow the copy.
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass, field

from syncer.clusters import TP
from syncer.status import PartitionStatus, State

DEFAULT_MAX_QUEUED = 1000


@dataclass(frozen=True)
class Event:
    """Base of every event; ``at`` is the wall-clock time it was published (not compared)."""

    at: float = field(default_factory=time.time, compare=False, kw_only=True)


@dataclass(frozen=True)
class Halted(Event):
    """A partition stopped on an error (``reason``); the others go on. The exception kind is
    ``syncer.PartitionHalted`` or a subclass; the reason is its message."""

    tp: TP
    reason: str


@dataclass(frozen=True)
class CaughtUp(Event):
    """A partition's local end reached what the remotes held when it was last read (``end``:
    the local end the copier knew then). In ``run()`` a partition tailing a busy remote goes
    ``CaughtUp`` → ``Resumed`` → ``CaughtUp`` as records arrive."""

    tp: TP
    end: int


@dataclass(frozen=True)
class Resumed(Event):
    """A partition copies again after being caught up, retrying a transient error, or halted
    (``after``: the state it left)."""

    tp: TP
    after: State


@dataclass(frozen=True)
class RemoteDropped(Event):
    """A remote's fetches failed (``reason``: the last error): it backs off and serves no
    partition of this process until a fetch from it succeeds again."""

    remote: str
    reason: str


@dataclass(frozen=True)
class RemoteRecovered(Event):
    """A fetch from a remote that was backing off succeeded: it serves partitions again."""

    remote: str


RESUMES_AFTER = frozenset({State.CAUGHT_UP, State.RETRYING, State.HALTED})


def partition_event(status: PartitionStatus, before: State) -> Event | None:
    """The event a partition's change of state from ``before`` to ``status.state`` means,
    if any (starting, stopping and retrying are not announced: a retry that gets the
    partition copying again is, as ``Resumed``)."""
    now = status.state
    if now is before:
        return None
    if now is State.HALTED:
        return Halted(status.tp, status.error or "halted")
    if now is State.CAUGHT_UP:
        return CaughtUp(status.tp, status.local_end)
    if now is State.COPYING and before in RESUMES_AFTER:
        return Resumed(status.tp, before)
    return None


def remote_event(remote: str, reason: str | None) -> Event:
    """A remote's change of health: ``reason`` is why it was dropped, None when it is back."""
    if reason is None:
        return RemoteRecovered(remote)
    return RemoteDropped(remote, reason)


class Subscription:
    """One subscriber's events, oldest first: an async iterator that ends when the hub
    closes (``Syncer.stop``) or ``close()`` is called, once the queued events are read.
    Holds at most ``max_queued`` events; older ones are dropped and counted in ``dropped``."""

    def __init__(self, hub: EventHub, max_queued: int) -> None:
        if max_queued < 1:
            raise ValueError("max_queued must be at least 1")
        self._hub = hub
        self._queue: collections.deque[Event] = collections.deque(maxlen=max_queued)
        self._ready = asyncio.Event()
        self.closed = False
        self.dropped = 0  # events lost because this subscriber read too slowly

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Subscription {state} [queued: {len(self._queue)}, dropped: {self.dropped}]>"

    def put(self, event: Event) -> None:
        """Queue ``event`` without waiting, dropping the oldest one if the queue is full."""
        if self.closed:
            return
        if len(self._queue) == self._queue.maxlen:
            self.dropped += 1
        self._queue.append(event)
        self._ready.set()

    def pending(self) -> list[Event]:
        """The queued events, taken without waiting."""
        events = list(self._queue)
        self._queue.clear()
        return events

    def close(self) -> None:
        """Stop receiving (idempotent); events already queued can still be read."""
        self.closed = True
        self._hub.unsubscribe(self)
        self._ready.set()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        while not self._queue:
            if self.closed:
                raise StopAsyncIteration
            self._ready.clear()
            await self._ready.wait()
        return self._queue.popleft()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class EventHub:
    """Hands every published event to each open subscription; never waits."""

    def __init__(self) -> None:
        self._subscriptions: list[Subscription] = []
        self.published = 0

    def __repr__(self) -> str:
        return (
            f"<EventHub [subscriptions: {len(self._subscriptions)}, published: {self.published}]>"
        )

    def subscribe(self, max_queued: int = DEFAULT_MAX_QUEUED) -> Subscription:
        subscription = Subscription(self, max_queued)
        self._subscriptions.append(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        if subscription in self._subscriptions:
            self._subscriptions.remove(subscription)

    def publish(self, event: Event) -> None:
        self.published += 1
        for subscription in self._subscriptions:
            subscription.put(event)

    def close(self) -> None:
        """End every current subscription (the Syncer stopped); later ones start afresh."""
        for subscription in list(self._subscriptions):
            subscription.close()

    def partition_changed(self, status: PartitionStatus, before: State) -> None:
        """``PartitionStatus``'s watcher: publish what the change of state means."""
        event = partition_event(status, before)
        if event is not None:
            self.publish(event)

    def remote_changed(self, remote: str, reason: str | None) -> None:
        """``SourceHealth``'s watcher."""
        self.publish(remote_event(remote, reason))
