"""How big the chunks of a partition's gap are, over plain values: records per chunk, the bytes
a chunk's fetch asks for, and the fetch size that lets every lane of a remote keep its
requests in flight inside the process's byte budget."""

from __future__ import annotations

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
