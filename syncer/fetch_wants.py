"""What a ``Fetcher`` queues for each partition: one fetch (``Want``) waiting for a request
or in flight, which kind of request it joins (``RequestKind``), the request it went out in
(``SentRequest``), and the pure decisions on its answer."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from syncer.clusters import TP, FetchedPartition
from syncer.deadlines import Deadline
from syncer.wire import FetchOutcome


class RequestKind(Enum):
    """Which request a partition's fetch joins on its leader."""

    DATA = "data"  # offsets known to hold records: no wait, on the data connection
    POLL = "poll"  # caught up: long-polled on a poll connection
    QUIET = "quiet"  # brought nothing for QUIET_S: polled apart, with QUIET_WAIT_MS


# a caught-up partition's step on a poll's answer that brought records (``Want.take``): the
# offset the same fetch polls on from (the step wrote the records), and what the step still
# does once that poll is out (its bookkeeping, after the poll: ``Fetcher._poll_on``)
Taken = tuple[int, Callable[[], None]]
Take = Callable[[FetchedPartition], Taken | None]


def hold_always() -> bool:
    return True


@dataclass(order=True, slots=True)
class Want:
    """One partition's fetch, waiting or in flight; the lowest offset goes first."""

    offset: int
    order: int
    limit: int = field(compare=False)
    poll: bool = field(compare=False)
    future: asyncio.Future[FetchedPartition] = field(compare=False)
    since: float = field(compare=False)
    hold: Callable[[], bool] = field(compare=False)  # may an empty poll answer be held?
    hold_s: float = field(compare=False)  # for up to this long
    empty: FetchedPartition | None = field(default=None, compare=False)  # the last one held
    expiry: Deadline[tuple[TP, Want]] | None = field(default=None, compare=False)  # queued
    # called as its answer is handed back, in the same loop turn (see ``ChunkScheduler``)
    answered: Callable[[], bool | None] = field(default=lambda: None, compare=False)
    # a caught-up partition's step on an answer that brought records, taken before its
    # future is set (``Taken``), or None (nothing done: the answer is handed back as any other)
    take: Take | None = field(default=None, compare=False)

    @property
    def ask(self) -> tuple[int, int]:
        """What a request carries for it: (offset, max bytes)."""
        return self.offset, self.limit

    def dequeued(self) -> Want:
        """Sent, or done: its wait in the queue is over."""
        if self.expiry is not None:
            self.expiry.cancel()
            self.expiry = None
        return self


def holds(want: Want, got: FetchedPartition, now: float) -> bool:
    """Keep an empty answer to a poll from its copier and poll again (at ``now``)?"""
    nothing_new = (
        got.outcome is FetchOutcome.OK and not got.records and got.stable_end == want.offset
    )
    return want.poll and nothing_new and now - want.since < want.hold_s and want.hold()


def unknown_id(remote: str, topic_ids: Mapping[str, uuid.UUID], tp: TP) -> str:
    """Why a fetch of ``tp`` from ``remote`` answered that its topic id is unknown."""
    topic_id = topic_ids.get(tp.topic)
    if topic_id is None:
        return f"{tp.topic}[{tp.partition}]: remote {remote}: topic id not known"
    return (
        f"{tp.topic}[{tp.partition}]: remote {remote} no longer holds topic id"
        f" {topic_id} (the topic was deleted, or recreated under its name)"
    )


@dataclass(eq=False, slots=True)
class SentRequest:
    """One fetch request as it went out: where, for which fetches, what it asked, and
    whether its outcome was dealt with (once: by its answer, its timeout, or its task). One
    written at once has no task: ``give_up`` ends it (its timeout and the connection's),
    ``timer`` is its chunk timeout."""

    node: int
    connection: int
    out: Mapping[TP, Want]  # the fetches it is for (a quiet poll's: all parked at ``node``)
    offsets: dict[TP, tuple[int, int]]
    wait_ms: int
    sent: float
    seen: int  # the metadata generation it was routed by
    concluded: bool = False
    give_up: Callable[[], None] | None = None
    timer: asyncio.Handle | None = None


async def failed_answer(exc: Exception) -> dict[TP, FetchedPartition]:
    """The answer of a request that failed as it was written."""
    raise exc
