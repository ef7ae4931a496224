"""How big the chunks of a partition's gap are, over plain values: records per chunk, the bytes
a chunk's fetch asks for, and the fetch size that lets every lane of a remote keep its
requests in flight inside the process's byte budget."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_RECORD_BYTES = 1024
DEFAULT_BATCH_BYTES = 16384  # a producer's default batch.size
# the last chunks of a gap shrink down to this fraction of a full fetch
TAIL_SPLIT_FLOOR = 16
# a chunk asks for its records' expected bytes and this much more (records vary in size)
ASK_MARGIN = 1.05
# chunks of one remote at once that the byte budget should hold per lane: the two requests
# each lane keeps in flight, and one fetched and waiting to be written in order
BUDGETED_PER_LANE = 3
# a chunk fitted to the budget is never cut below this: smaller requests would cost more in
# round trips and per-request work than the link could gain
MIN_FITTED_BYTES = 65536


def chunk_size(remaining: int, holders: int, full: int, least: int = 1) -> int:
    """Records in the next chunk: a ``full`` fetch, but near the end of the gap a share of
    what is left, halving down to a floor, so every remote finishes at about the same time
    instead of the others waiting for one that took a big last chunk. The floor is at least
    ``least`` records (a batch's worth: a smaller chunk still brings its whole batch, and the
    next chunk brings that batch again)."""
    floor = min(full, max(1, full // TAIL_SPLIT_FLOOR, least))
    return min(full, remaining, max(floor, -(-remaining // (2 * holders))))


def ask_bytes(records: int, record_bytes: float, batch_bytes: float) -> int:
    """What a fetch of ``records`` records asks for: their expected bytes with a margin, and
    one batch more, since the answer starts at the batch holding the chunk's first offset
    (often before it), so without it the answer falls short of the chunk's end and what is
    left must be fetched again, a round trip the in-order writes wait for."""
    return int(records * record_bytes * ASK_MARGIN + batch_bytes) + 1


def full_chunk_records(fetch_bytes: int, record_bytes: float, batch_bytes: float) -> int:
    """Records in a full chunk: as many as one fetch of ``fetch_bytes`` brings whole, the
    margin and the leading batch of ``ask_bytes`` included (a chunk that asks for more than
    a fetch may bring is cut short by the fetch, and its rest fetched again)."""
    room = fetch_bytes - batch_bytes - 1
    return max(1, int(room / (record_bytes * ASK_MARGIN)))


def fitted_fetch_bytes(fetch_bytes: int, budget_bytes: int, lanes: int) -> int:
    """The bytes one chunk of a remote read over ``lanes`` lanes may bring: its fetch size,
    but no more than lets every lane hold ``BUDGETED_PER_LANE`` chunks in the process's byte
    budget. Otherwise the budget, not the link, sets the pace: 64 lanes of 512 KiB chunks
    want 96 MiB, a 16 MiB budget holds 32 of them, and half the lanes idle."""
    fitted = budget_bytes // (BUDGETED_PER_LANE * max(1, lanes))
    return max(min(fetch_bytes, MIN_FITTED_BYTES), min(fetch_bytes, fitted))


# a chunk cut to whole batches asks for their bytes and this much more: batches of one
# producer differ by a few bytes (varints, headers); short by one byte, the answer drops its
# last batch and that batch is fetched again, a round trip the in-order writes wait for
BATCH_ASK_SLACK = 0.01
BATCH_ASK_EXTRA = 256
# batches remembered to learn a partition's batch shape from
SHAPE_WINDOW = 32
# before the shape is known, one chunk of about this many bytes goes out alone to learn it
PROBE_BYTES = 131072
# a chunk whose fetch brings the batch below its start too (``Chunk.lead``) has at least this
# many batches: that batch is carried for the agreement check, not written, so a chunk of one
# batch with a lead costs two (3 remotes: the tail's one-batch chunks, 1.30x the backlog)
LEAD_FLOOR_BATCHES = 4


@dataclass(frozen=True, slots=True)
class BatchShape:
    """What a partition's recent batches look like: the offsets one spans, and the most bytes
    one of that span took. A producer that fills its batches writes them alike, so a chunk of
    whole batches' offsets ends where a batch ends, and its answer, asked for those batches'
    bytes, ends there too: it brings no batch the next chunk brings again (cut anywhere, each
    chunk's answer carries the batch its start falls in a second time: 1.6x the backlog at
    16 lanes, 64 KiB batches)."""

    records: int
    size: int


def learned_shape(batches: Sequence[tuple[int, int]]) -> BatchShape | None:
    """The shape of recent ``batches`` (offsets spanned, bytes): the median span, and the
    largest of the batches no longer than it (a larger one is the odd one out)."""
    if not batches:
        return None
    spans = sorted(span for span, _ in batches)
    records = max(1, spans[len(spans) // 2])
    return BatchShape(records, max(size for span, size in batches if span <= records))


def batches_ask(batches: int, shape: BatchShape) -> int:
    """The bytes to ask for ``batches`` whole batches of ``shape``."""
    return int(batches * shape.size * (1 + BATCH_ASK_SLACK)) + BATCH_ASK_EXTRA


def shaped_ask(records: int, shape: BatchShape) -> int:
    """What a fetch of ``records`` records asks for when the batches' shape is known: their
    whole batches' bytes. The answer starts at the batch holding the chunk's first offset;
    when that is not the chunk's start, it ends as far short of the chunk's end, where the
    next chunk's answer begins (its first batch too starts that far before it)."""
    return batches_ask(max(1, -(-records // shape.records)), shape)


def shaped_full_records(fetch_bytes: int, shape: BatchShape) -> int:
    """Records in a full chunk of whole batches: as many batches as one fetch of
    ``fetch_bytes`` brings, at least one."""
    batches = max(1, int((fetch_bytes - BATCH_ASK_EXTRA) / (shape.size * (1 + BATCH_ASK_SLACK))))
    return batches * shape.records


def shaped_chunk_size(
    remaining: int, holders: int, full: int, shape: BatchShape, lead: bool = False
) -> int:
    """``chunk_size`` in whole batches: the chunk ends where a batch ends (a multiple of the
    batch's span), unless it takes all that remains. With ``lead`` (its answer carries the
    batch below its start as well) it has ``LEAD_FLOOR_BATCHES`` at least; and it leaves no
    rest smaller than its floor behind (that rest would go out as a chunk of its own, with a
    lead of its own when another remote takes it): it takes that rest too where a full
    chunk holds it, else leaves a rest of its floor where it can."""
    least = min(full, shape.records * (LEAD_FLOOR_BATCHES if lead else 1))
    size = chunk_size(remaining, holders, full, least)
    if size >= remaining:
        return remaining
    size = max(shape.records, size // shape.records * shape.records)
    if remaining - size >= least:
        return size
    if remaining <= full:
        return remaining
    return max(least, (remaining - least) // shape.records * shape.records)


class Sizes:
    """One partition's chunk sizes, learned from its answers: a record's and a batch's bytes
    on average (for the first chunk), and the batches' shape once an answer shows it."""

    def __init__(self) -> None:
        self.record_bytes = float(DEFAULT_RECORD_BYTES)
        self.batch_bytes = float(DEFAULT_BATCH_BYTES)
        self._batches: deque[tuple[int, int]] = deque(maxlen=SHAPE_WINDOW)  # span, bytes
        self._shape: BatchShape | None = None
        self._learned = True  # ``_shape`` is learned from ``_batches`` as they are now

    @property
    def shape(self) -> BatchShape | None:
        """The batches' shape, learned when it is asked for (a caught-up partition's polls
        seldom ask, and each answer would sort the window again)."""
        if not self._learned:
            self._shape = learned_shape(self._batches) or self._shape
            self._learned = True
        return self._shape

    @shape.setter
    def shape(self, shape: BatchShape | None) -> None:
        self._shape, self._learned = shape, True

    def learn(self, size: int, records: int, batches: Sequence[tuple[int, int]]) -> None:
        """An answer of ``size`` bytes brought ``records`` records in ``batches`` (offsets
        spanned, bytes; transaction markers left out)."""
        if records:
            self.record_bytes = 0.7 * self.record_bytes + 0.3 * (size / records)
            self.batch_bytes = 0.7 * self.batch_bytes + 0.3 * (size / len(batches or [0]))
        if batches:
            self._batches.extend(batches)
            self._learned = False

    def lead_bytes(self) -> int:
        """What the batch below a chunk's start takes in its answer (a chunk with a lead)."""
        if self.shape is not None:
            return batches_ask(1, self.shape) - BATCH_ASK_EXTRA
        return int(self.batch_bytes) + 1

    def ask(self, records: int, lead: bool = False) -> int:
        """The bytes a fetch of ``records`` records asks for; with ``lead``, the batch below
        its start too."""
        extra = self.lead_bytes() if lead else 0
        if self.shape is not None:
            return shaped_ask(records, self.shape) + extra
        return ask_bytes(records, self.record_bytes, self.batch_bytes) + extra

    def full(self, fetch_bytes: int, lead: bool = False) -> int:
        """Records in a full chunk of a fetch of ``fetch_bytes`` (with ``lead``, one that
        brings the batch below its start too); before the shape is known, of the smaller one
        that learns it."""
        extra = self.lead_bytes() if lead else 0
        if self.shape is not None:
            return shaped_full_records(fetch_bytes - extra, self.shape)
        room = min(fetch_bytes, PROBE_BYTES) - extra
        return full_chunk_records(room, self.record_bytes, self.batch_bytes)

    def next_chunk(self, remaining: int, holders: int, full: int, lead: bool = False) -> int:
        """Records in the next chunk (with ``lead``: one that carries the batch below its
        start too): whole batches once their shape is known; before, the one chunk that
        learns it."""
        if self.shape is not None:
            return shaped_chunk_size(remaining, holders, full, self.shape, lead)
        return min(full, remaining)
