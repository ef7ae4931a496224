"""Where a record's hop goes (#23): reads what ``bench-steady --timeline`` kept (the readers'
arrivals, syncer's own notes: ``syncer.hop_trace``, or the floor's: ``floor.py --notes``) and
sets each record counted beside the steps of its copy, all on one wall clock. Prints each
step's p50 / p90 / p99 in ms.

    python -m tests.bench.hop_timeline [results] [2]   # 2: the second round (abba)
    python -m tests.bench.hop_timeline results --copier floor
"""

from __future__ import annotations

import argparse
import bisect
import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# what each step is, in the order a record meets them
STEPS = (
    ("poll sent - remote arrival", "the poll that brought it was written after the reader had it"),
    ("answer whole - remote arrival", "syncer's answer whole on the socket, after the reader's"),
    ("decoded - whole", "aiokafka decodes the fetch answer"),
    ("handed - decoded", "to the fetcher's task, which hands it back"),
    ("taken - handed", "to the copier"),
    ("written - taken", "checks, rewrite, produce request written"),
    ("written - remote arrival", "its produce request written, before (-) the reader had it"),
    ("answered - written", "the local broker's produce"),
    ("local arrival - answered", "the reader's arrival from local after the answer"),
    ("local arrival - written", "from the write to the reader's arrival from local"),
    ("re-armed - answer whole", "its partition's next poll written after the answer"),
    ("hop", "local arrival - remote arrival (the benchmark's)"),
)
# the floor's (tests/bench/floor.py): its answer is decoded and written in one read callback
FLOOR_STEPS = (
    ("answer decoded - remote arrival", "the floor's answer decoded, after the reader had it"),
    ("written - answer decoded", "split, rewrite, produce request written"),
    ("written - remote arrival", "its produce request written, before (-) the reader had it"),
    ("answered - written", "the local broker's produce"),
    ("local arrival - answered", "the reader's arrival from local after the answer"),
    ("local arrival - written", "from the write to the reader's arrival from local"),
    ("hop", "local arrival - remote arrival (the benchmark's)"),
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _index(rows: list[list[Any]], kind: str) -> dict[tuple[str, int], list[list[Any]]]:
    """Rows of ``kind`` by (topic, partition), sorted by offset."""
    out: dict[tuple[str, int], list[list[Any]]] = defaultdict(list)
    for row in rows:
        if row[0] == kind:
            out[(row[1], row[2])].append(row)
    for found in out.values():
        found.sort(key=lambda r: (r[3], r[4]))
    return out


def _at_or_below(found: list[list[Any]], offset: int) -> list[Any] | None:
    """The last row at or below ``offset`` (the latest noted of those at that offset)."""
    i = bisect.bisect_right([r[3] for r in found], offset)
    return found[i - 1] if i else None


def _counted(readers: dict[str, Any]) -> Iterator[tuple[int, int, float, float]]:
    """(partition, offset, local arrival ms, remote arrival ms) of every record counted that
    both readers had."""
    remote = {(p, o): at for p, o, at, _c in readers["remote"]}
    for p, o, local_ms, created in readers["local"]:
        if created >= readers["counted_from_ms"] and (p, o) in remote:
            yield p, o, local_ms, remote[(p, o)]


def _answers(notes: list[list[Any]]) -> dict[tuple[str, int], dict[int, float]]:
    """When each write (by partition and offset) was answered."""
    return {k: {r[3]: r[4] for r in v} for k, v in _index(notes, "answered").items()}


def _after_write(
    ms: dict[str, float], wrote_s: float, done_s: float | None, local_ms: float
) -> None:
    """The steps between a record's write and its arrival from local, where it was answered."""
    if done_s is not None:
        ms["answered - written"] = (done_s - wrote_s) * 1000
        ms["local arrival - answered"] = local_ms - done_s * 1000


def steps(readers: dict[str, Any], notes: list[list[Any]], topic: str) -> dict[str, list[float]]:
    """Each step's ms for every record counted that syncer's notes explain."""
    fetches = {k: [r for r in v if r[10] > 0] for k, v in _index(notes, "fetch").items()}
    sends = _index(notes, "fetch")
    taken, written = _index(notes, "taken"), _index(notes, "written")
    answered = _answers(notes)
    out: dict[str, list[float]] = defaultdict(list)
    for p, o, local_ms, r_ms in _counted(readers):
        key = (topic, p)
        fetch = _at_or_below(fetches.get(key, []), o)
        take = _at_or_below(taken.get(key, []), o)
        write = _at_or_below(written.get(key, []), o)
        if fetch is None or take is None or write is None:
            continue
        _k, _t, _p, _o, handed, sent, whole, decoded, _kind, _n, _size, _first = fetch
        done = answered.get(key, {}).get(write[3])
        rearm = [s for s in sends.get(key, []) if s[3] == take[5] and s[5] >= whole]
        ms = {
            "poll sent - remote arrival": sent * 1000 - r_ms,
            "answer whole - remote arrival": whole * 1000 - r_ms,
            "decoded - whole": (decoded - whole) * 1000,
            "handed - decoded": (handed - decoded) * 1000,
            "taken - handed": (take[4] - handed) * 1000,
            "written - taken": (write[4] - take[4]) * 1000,
            "written - remote arrival": write[4] * 1000 - r_ms,
            "local arrival - written": local_ms - write[4] * 1000,
            "hop": local_ms - r_ms,
        }
        _after_write(ms, write[4], done, local_ms)
        if rearm:
            ms["re-armed - answer whole"] = (min(s[5] for s in rearm) - whole) * 1000
        for name, value in ms.items():
            out[name].append(value)
    return out


def floor_steps(
    readers: dict[str, Any], notes: list[list[Any]], topic: str
) -> dict[str, list[float]]:
    """Each of the floor's steps in ms for every record counted that its notes explain."""
    fetched, written = _index(notes, "fetch"), _index(notes, "written")
    answered = _answers(notes)
    out: dict[str, list[float]] = defaultdict(list)
    for p, o, local_ms, r_ms in _counted(readers):
        key = (topic, p)
        fetch = _at_or_below(fetched.get(key, []), o)
        write = _at_or_below(written.get(key, []), o)
        if fetch is None or write is None:
            continue
        decoded, wrote = fetch[4] * 1000, write[4] * 1000
        ms = {
            "answer decoded - remote arrival": decoded - r_ms,
            "written - answer decoded": wrote - decoded,
            "written - remote arrival": wrote - r_ms,
            "local arrival - written": local_ms - wrote,
            "hop": local_ms - r_ms,
        }
        _after_write(ms, write[4], answered.get(key, {}).get(write[3]), local_ms)
        for name, value in ms.items():
            out[name].append(value)
    return out


def fetch_shapes(notes: list[list[Any]]) -> dict[str, float]:
    """How the polls went: partitions per request, and the share that brought records."""
    polls = [r for r in notes if r[0] == "fetch" and r[8] == "poll"]
    if not polls:
        return {}
    return {
        "poll answers (partition x request)": len(polls),
        "partitions per poll, mean": sum(r[9] for r in polls) / len(polls),
        "share with records": sum(1 for r in polls if r[10] > 0) / len(polls),
        "bytes per answer with records, mean": sum(r[10] for r in polls if r[10] > 0)
        / max(1, sum(1 for r in polls if r[10] > 0)),
    }


def produce_by_depth(notes: list[list[Any]]) -> dict[str, list[float]]:
    """Each batch's produce seconds (written to answered, ms) by how many batches were out
    unanswered as it was written: what a batch waits behind the ones ahead of it."""
    done = {(r[1], r[2], r[3]): r[4] for r in notes if r[0] == "answered"}
    events: list[tuple[float, int]] = []
    writes = []
    for r in notes:
        if r[0] == "written" and (r[1], r[2], r[3]) in done:
            end = done[(r[1], r[2], r[3])]
            writes.append((r[4], end))
            events += [(r[4], 1), (end, -1)]
    events.sort()
    starts = sorted(writes)
    out: dict[str, list[float]] = defaultdict(list)
    depth, i = 0, 0
    for at, step in events:
        if step == 1:
            _start, end = starts[i]
            i += 1
            out[f"{min(depth, 3)}{'+' if depth >= 3 else ''} ahead"].append((end - at) * 1000)
        depth += step
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("results", nargs="?", type=Path, default=Path("results"))
    parser.add_argument("round", nargs="?", choices=("1", "2"), default="1")
    parser.add_argument("--copier", choices=("syncer", "floor"), default="syncer")
    args = parser.parse_args()
    copier, where = args.copier, args.results
    second = args.round == "2"
    stem, topic = (f"{copier}-2", f"steady.{copier}.2") if second else (copier, f"steady.{copier}")
    readers = json.loads((where / f"steady-timeline-{stem}-readers.json").read_text())
    notes = json.loads((where / f"steady-timeline-{stem}.json").read_text())["rows"]
    floor = copier == "floor"
    found = floor_steps(readers, notes, topic) if floor else steps(readers, notes, topic)
    print(f"{'step':32} {'records':>8} {'p50':>8} {'p90':>8} {'p99':>8}  ms")
    for name, meaning in FLOOR_STEPS if floor else STEPS:
        values = found.get(name, [])
        if not values:
            continue
        qs = " ".join(f"{percentile(values, q):8.3f}" for q in (0.5, 0.9, 0.99))
        print(f"{name:32} {len(values):8d} {qs}  {meaning}")
    for name, values in sorted(produce_by_depth(notes).items()):
        qs = " ".join(f"{percentile(values, q):8.3f}" for q in (0.5, 0.9, 0.99))
        print(f"{'produce, ' + name:32} {len(values):8d} {qs}  batches out as it was written")
    for name, value in ({} if floor else fetch_shapes(notes)).items():  # syncer's fetch rows
        print(f"{name}: {value:.3f}" if isinstance(value, float) else f"{name}: {value}")


if __name__ == "__main__":
    main()
