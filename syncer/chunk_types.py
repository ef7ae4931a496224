"""The two values a partition's chunked fetch passes around: a ``Chunk`` of the gap, launched
on one remote, and what its fetch brought (``Fetched``). Kept apart from the plan that makes
them (``chunk_plan.ChunkPlan``) so that the plan's decisions read on their own."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from syncer.batches import Batch
from syncer.budget import Ticket
from syncer.wire import FetchedPartition


@dataclass(frozen=True, slots=True)
class Chunk:
    start: int
    end: int | None  # None: the open tail, long-polled when caught up
    remote: str
    launched: float = field(default=0.0, compare=False)
    # the bytes it holds in the process's budget: reserved at launch, settled on its answer
    ticket: Ticket = field(default_factory=Ticket.empty, compare=False)
    number: int = field(default=0, compare=False)  # which launch of the plan it is
    lead: int = 0  # offsets below ``start`` its fetch begins at (``lead_for``)

    @property
    def fetch_offset(self) -> int:
        return self.start - self.lead


class Fetched(NamedTuple):
    chunk: Chunk
    fetched: FetchedPartition
    batches: list[Batch]
    covered_end: int  # one past the last offset the batches hold (chunk.start if none)
    first_offset: int  # where its first batch begins: often before the chunk's start

    @property
    def remote(self) -> str:
        return self.chunk.remote

    @property
    def size(self) -> int:
        return len(self.fetched.records)

    @property
    def usable_end(self) -> int:
        """Where what it brought may be written up to: its covered end, or the stable end
        its answer told where the records run past that (the broker takes the ends before
        it reads, ``Partition.readRecords``, and its high watermark may move in between: a
        real broker's answer did so once in 15,000). The rest is fetched again from there:
        the remote holds it by now, where a poll from past it would wait for more."""
        return min(self.covered_end, max(self.chunk.start, self.fetched.stable_end))

    @property
    def ticket(self) -> Ticket:
        """Its bytes in the budget: the copier releases them when its writes are answered."""
        return self.chunk.ticket
