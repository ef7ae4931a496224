"""What a ``Fetcher`` queues for each partition: one fetch (``Want``) waiting for a request
or in flight, and which kind of request it joins (``RequestKind``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from syncer.clusters import TP, FetchedPartition
from syncer.deadlines import Deadline


class RequestKind(Enum):
    """Which request a partition's fetch joins on its leader."""

    DATA = "data"  # offsets known to hold records: no wait, on the data connection
    POLL = "poll"  # caught up: long-polled on a poll connection
    QUIET = "quiet"  # brought nothing for QUIET_S: polled apart, with QUIET_WAIT_MS


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

    def dequeued(self) -> Want:
        """Sent, or done: its wait in the queue is over."""
        if self.expiry is not None:
            self.expiry.cancel()
            self.expiry = None
        return self
