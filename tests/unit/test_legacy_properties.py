"""Random legacy message sets (v0 and v1, plain and compressed, compacted wrappers, LogAppendTime
wrappers, v2 batches between them, a cut at the end): the v2 batches they become hold exactly
the records a reader of the legacy set sees, at the same offsets."""

from __future__ import annotations

import itertools
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from syncer.batches import split_batches
from tests.unit.test_legacy import GZIP, LZ4, NONE, SNAPPY, Row, _v2, log_append_time, plain, seen
from tests.unit.test_legacy import wrapper as wrap

VALUES = st.none() | st.binary(max_size=40)
ENTRY = st.tuples(
    st.sampled_from(["plain", "wrapped", "v2"]),
    st.sampled_from([0, 1]),
    st.sampled_from([GZIP, SNAPPY, LZ4]),
    st.lists(st.tuples(st.integers(0, 2), VALUES, VALUES), min_size=1, max_size=6),  # gap, k, v
    st.booleans(),  # a LogAppendTime wrapper (v1)
)


def message_set(
    start: int, entries: list[tuple[str, int, int, list, bool]]
) -> tuple[bytes, list[Row]]:
    """The bytes of ``entries`` from offset ``start`` on, and what a reader sees of them."""
    payload, seen_rows, offset = b"", [], start
    for kind, magic, codec, messages, append_time in entries:
        if kind == "wrapped" and magic == 0 and codec == LZ4:
            codec = GZIP  # v0 lz4 is refused (Kafka 0.8/0.9's framing), tested on its own
        rows: list[Row] = []
        for i, (gap, key, value) in enumerate(messages):
            offset += gap if i or kind != "wrapped" else 0  # a wrapper's gaps are inside it
            rows.append((offset, 1_600_000_000_000 + offset, key, value))
            offset += 1
        if kind == "v2":
            payload += _v2(rows[0][0], rows)
            seen_rows += rows
        elif kind == "plain":
            payload += plain(magic, rows)
            seen_rows += [(o, ts if magic else -1, k, v) for o, ts, k, v in rows]
        else:
            last = rows[-1][0]
            inner = [(o - rows[0][0] if magic else o, ts, k, v) for o, ts, k, v in rows]
            raw = wrap(magic, codec, inner, last)
            if magic and append_time:
                raw = log_append_time(raw, 42 + last)
                rows = [(o, 42 + last, k, v) for o, _ts, k, v in rows]
            seen_rows += [(o, ts if magic else -1, k, v) for o, ts, k, v in rows]
            payload += raw
    return payload, seen_rows


@settings(max_examples=int(os.environ.get("SYNCER_EXAMPLES", "300")), deadline=None)
@given(
    start=st.integers(0, 2**40),
    entries=st.lists(ENTRY, min_size=1, max_size=8),
    cut=st.integers(1, 60),
)
def test_any_legacy_set_becomes_v2_batches_holding_what_a_reader_sees(
    start: int, entries: list[tuple[str, int, int, list, bool]], cut: int
) -> None:
    payload, expected = message_set(start, entries)
    batches = split_batches(payload)
    assert seen(batches) == expected
    assert all(b.base_offset >= a.next_offset for a, b in itertools.pairwise(batches))
    for batch in batches:
        assert batch.converted_from in (None, 0, 1)
        assert batch.attributes & 0x07 in (NONE, GZIP, SNAPPY, LZ4)
    # cut inside the last entry: what is whole is read the same, the rest is left
    partial = split_batches(payload[: max(0, len(payload) - cut)])
    assert seen(partial) == expected[: len(seen(partial))]
